"""The writer thread: one thread takes every request queued by the event loop, in arrival
order, and hands it to the engine (:class:`~fedrank.server.engine.Engine`), which owns all
state. Consecutive message requests are handed over as one group of at most
:data:`MAX_GROUP` messages, which the engine stores in one transaction (group commit); a
command (close, pause, resume) runs alone between groups, so an update is either in the
group before a close or in the next iteration. Each request is then answered in its form
(a list of :class:`~fedrank.server.messages.Outcome`, or a compact
:class:`~fedrank.server.messages.BatchResult`), with one wake-up of the event loop per group.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrank.server.admission import Admission
from fedrank.server.messages import BatchResult, Incoming, Messages, Outcome
from fedrank.server.workloads import Workload

log = logging.getLogger("fedrank.server")

#: Most messages decided and committed in one transaction.
MAX_GROUP = 4096


@dataclass
class _Job:
    """A request for the writer: messages (answered with a list of :class:`Outcome`, or
    compactly when ``compact``), or a command."""

    items: Messages | list[Incoming] | None  # a list: columns built by the writer, per group
    command: str | None
    future: asyncio.Future[Any]
    args: dict[str, Any] = field(default_factory=dict)
    compact: bool = False


class Writer:
    """The queue and the thread (module docstring).

    Args:
        loop: the event loop whose futures the answers resolve.
        workload: builds the columns of single messages (its wire format).
        ingest: decides, stores and folds in one group; returns the decision, or one
            failure for every message of the group (paused, the store failed).
        command: runs a command with its arguments.
        rebuild: called after a step failed unexpectedly: rebuild the state from the store.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        workload: Workload,
        ingest: Callable[[Messages], Admission | Outcome],
        command: Callable[[str, dict[str, Any]], Outcome],
        rebuild: Callable[[], None],
    ) -> None:
        self.loop = loop
        self.workload = workload
        self._ingest = ingest
        self._command = command
        self._rebuild = rebuild
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="fedrank-writer", daemon=True)

    # -- the public, thread-safe interface (call from the event loop) -------------------

    def submit(self, items: list[Incoming]) -> asyncio.Future[list[Outcome]]:
        """Queue messages; the future gives one :class:`Outcome` each."""
        future: asyncio.Future[list[Outcome]] = self.loop.create_future()
        # the writer builds the columns of a whole group at once (one array per column
        # instead of one per request)
        self._queue.put(_Job(list(items), None, future))
        return future

    def submit_columns(self, messages: Messages) -> asyncio.Future[BatchResult]:
        """Queue a batch already in columns; the future gives a :class:`BatchResult`."""
        future: asyncio.Future[BatchResult] = self.loop.create_future()
        self._queue.put(_Job(messages, None, future, compact=True))
        return future

    def command(self, name: str, **args: Any) -> asyncio.Future[Outcome]:
        """Queue a command (``close``, ``pause``, ``resume``); the future gives its
        :class:`Outcome`."""
        future: asyncio.Future[Outcome] = self.loop.create_future()
        self._queue.put(_Job(None, name, future, args))
        return future

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    # -- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            n = len(job.items) if job.items is not None else 0
            while n < MAX_GROUP:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this group
                    break
                jobs.append(nxt)
                n += len(nxt.items) if nxt.items is not None else 0
            group: list[_Job] = []
            for j in jobs:
                if j.command is None:
                    group.append(j)
                    continue
                self._guarded(self._flush, group)
                group = []
                self._guarded(self._run_command, [j])
            self._guarded(self._flush, group)

    def _guarded(self, step: Callable[[list[_Job]], None], jobs: list[_Job]) -> None:
        """Run a writer step; an unexpected error (a bug, or the disk) must not kill the
        writer. Its requests get 500 (clients retry: what was stored is then a duplicate),
        and the in-memory state is rebuilt from the store, the source of truth."""
        if not jobs or (step == self._flush and not any(j.items is not None for j in jobs)):
            return
        try:
            step(jobs)
        except Exception:
            log.exception("the writer failed; rebuilding the state from the store")
            failure = Outcome(500, {"error": "internal", "detail": "server error; retry"})
            self._resolve_all([(j.future, self._failed(j, failure)) for j in jobs])
            self._rebuild()

    def _run_command(self, jobs: list[_Job]) -> None:
        (job,) = jobs
        assert job.command is not None
        self._resolve_all([(job.future, self._command(job.command, job.args))])

    def _flush(self, jobs: list[_Job]) -> None:
        """Hand the messages of ``jobs`` to the engine as one group and answer them."""
        msgs = self._columns(jobs)
        decided = self._ingest(msgs)
        if isinstance(decided, Outcome):
            self._resolve_all([(j.future, self._failed(j, decided)) for j in jobs])
        else:
            self._answer(jobs, decided, msgs)

    def _columns(self, jobs: list[_Job]) -> Messages:
        """The messages of ``jobs`` in order, as columns: consecutive jobs of single
        messages (:meth:`submit`) become one :class:`Messages` each run."""
        parts: list[Messages] = []
        pending: list[Incoming] = []
        for job in jobs:
            if isinstance(job.items, list):
                pending.extend(job.items)
                continue
            if job.items is None:
                continue
            if pending:
                parts.append(Messages.of(pending, self.workload))
                pending = []
            parts.append(job.items)
        if pending:
            parts.append(Messages.of(pending, self.workload))
        return Messages.concat(parts) if parts else Messages.of([], self.workload)

    # -- answers ------------------------------------------------------------------------

    def _answer(self, jobs: list[_Job], decided: Admission, msgs: Messages) -> None:
        answers: list[tuple[asyncio.Future[Any], Any]] = []
        status, bodies = decided.status, decided.bodies
        start = 0
        for job in jobs:
            n = len(job.items) if job.items is not None else 0
            part = status[start : start + n]
            mine = {k - start: b for k, b in bodies.items() if start <= k < start + n}
            if job.compact:
                answers.append((job.future, BatchResult(part, mine)))
            else:
                answers.append(
                    (
                        job.future,
                        [
                            Outcome(
                                int(code),
                                mine.get(k)
                                or _body(int(code), msgs.ids[start + k], decided.iteration),
                            )
                            for k, code in enumerate(part)
                        ],
                    )
                )
            start += n
        self._resolve_all(answers)

    def _resolve_all(self, results: list[tuple[asyncio.Future[Any], Any]]) -> None:
        """Answer many waiting requests with one wake-up of the event loop."""

        def set_results() -> None:
            for future, value in results:
                if not future.done():
                    future.set_result(value)

        self.loop.call_soon_threadsafe(set_results)

    @staticmethod
    def _failed(job: _Job, failure: Outcome) -> Any:
        """``failure`` in the form ``job`` is answered in."""
        if job.command is not None:
            return failure
        n = len(job.items) if job.items is not None else 0
        if job.compact:
            bodies = {k: failure.body for k in range(n)}
            return BatchResult(np.full(n, failure.status, dtype=np.int64), bodies)
        return [failure] * n


def _body(status: int, message_id: str, iteration: int) -> dict[str, Any]:
    """The body of an accepted (202) or duplicate (200) message."""
    if status == 200:
        return {"status": "duplicate", "message_id": message_id}
    return {"status": "accepted", "message_id": message_id, "iteration": iteration}
