"""The server's state machine: one writer thread that owns all state, fed by a queue.

Request handlers (on the event loop) only validate and enqueue; the writer thread takes
everything queued so far, decides each message (accepted, duplicate, stale), stores the
accepted ones in *one* transaction (group commit), and only then folds them into the running
aggregate and answers. Closing an iteration goes through the same queue, so an update is
either committed and aggregated before a close or counted in the next iteration: never
acknowledged and lost, never counted twice. Readers (the model endpoint, status) read
immutable snapshots the writer publishes.

Data flow of one iteration (ARCHITECTURE.md, Section 1)::

    message -> workload.parse -> queue -> store (durable) -> aggregator.accumulate_batch
    close: aggregator.finalize -> optimizer.update -> constraints.project -> store -> publish
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from fedrank.aggregators.metrics import MetricMean
from fedrank.core.iteration_policy import (
    AllOf,
    FixedTime,
    IterationPolicy,
    MinUpdates,
    OpenIteration,
    SignStable,
)
from fedrank.errors import ConfigError, FedrankError
from fedrank.server.config import ServerConfig
from fedrank.server.store import Row, Store
from fedrank.server.workloads import EMPTY, Parsed, Workload, make_workload

log = logging.getLogger("fedrank.server")

#: Most messages decided and committed in one transaction.
MAX_GROUP = 4096


@dataclass(frozen=True)
class Incoming:
    """A validated message waiting for the writer.

    ``kind`` is ``update`` (``parsed`` set), ``ping`` (metrics only) or ``aggregate`` (a
    proxy's merged state in ``aggregate``, standing for ``count`` updates).
    """

    message_id: str
    model_version: int
    branch: str
    kind: str
    payload: str
    metrics: dict[str, float]
    parsed: Parsed = EMPTY
    aggregate: Any = None
    count: int = 1


@dataclass(frozen=True)
class Outcome:
    """The answer to one message: an HTTP status and a JSON body."""

    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class Snapshot:
    """What readers see; replaced (never mutated) by the writer."""

    version: int
    iteration: int
    params: np.ndarray
    opened_at: float
    updates_in_iteration: int
    paused: bool = False


@dataclass
class _Job:
    items: list[Incoming] | None
    command: str | None
    future: asyncio.Future[Any]
    args: dict[str, Any] = field(default_factory=dict)


def branch_of(enrollment_id: str | None, shares: list[tuple[str, float]]) -> str:
    """The study branch of a client: a stable function of its own random enrollment id
    (never of anything identifying); clients without one are in the first branch."""
    if not enrollment_id:
        return shares[0][0]
    digest = hashlib.blake2b(enrollment_id.encode("utf-8"), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2.0**64
    cumulative = 0.0
    for name, share in shares:
        cumulative += share
        if u < cumulative:
            return name
    return shares[-1][0]


def make_policy(config: ServerConfig) -> IterationPolicy:
    """The iteration policy of ``[iteration]``: fixed time and/or a minimum count, and the
    adaptive sign-stability rule when ``stable_ticks > 0``."""
    it = config.iteration
    parts: list[IterationPolicy] = [MinUpdates(it.min_updates)]
    if it.seconds > 0:
        parts.append(FixedTime(it.seconds / 60.0))
    if it.stable_ticks > 0:
        parts.append(SignStable(it.stable_ticks, it.min_updates))
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


class Engine:
    """Owns the store, the model and the running aggregate (see the module docstring)."""

    def __init__(self, config: ServerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.workload: Workload = make_workload(config)
        self.aggregator = self.workload.make_aggregator()
        self.optimizer = self.workload.make_optimizer()
        self.constraints = self.workload.constraints()
        self.metric_mean = MetricMean()
        self.policy = make_policy(config)
        self.shares = [(b.name, b.share) for b in config.branches]
        self.defaults = self.workload.initial_params()
        self.store = Store(config.server.store)
        # Rejections by reason: the writer's own (stale), and the event loop's (bad input);
        # each counter is written by one thread only.
        self.writer_rejected: Counter[str] = Counter()
        self.loop_rejected: Counter[str] = Counter()
        self.duplicates_total = 0
        self.commits_total = 0
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._resume()
        self._thread = threading.Thread(target=self._run, name="fedrank-writer", daemon=True)
        self._thread.start()

    # -- start-up: resume exactly where the store left off ------------------------------

    def _resume(self) -> None:
        identity = {"workload": self.workload.name, "dim": self.workload.dim}
        if self.store.check_identity(identity):
            params = self.workload.initial_params()
            opt_state = self.optimizer.state_to_json(self.optimizer.init(params))
            self.store.publish_first(params, opt_state)
        model = self.store.latest_model()
        iteration, version, opened_at = self.store.open_iteration()
        if version != model.version:
            raise ConfigError(
                f"the store's open iteration serves version {version}, not the latest"
            )
        self.params = model.params
        self.opt_state = self.optimizer.state_from_json(model.optimizer_state)
        self.iteration = iteration
        self.version = version
        self.opened_at = opened_at
        self.ids = self.store.message_ids()
        self.accepted_total, self.counted_total = self.store.counts()
        self.state = self.aggregator.zero()
        self.branch_stats: dict[str, dict[str, Any]] = {}
        self.updates_in_iteration = 0
        replayed = 0
        for row in self.store.iteration_rows(iteration):
            self._apply([row], [self._reparse(row)])
            replayed += 1
        self.paused = False
        self._publish()
        for path in self.store.export_missing_parquet():
            log.info("wrote missing Parquet partition %s", path)
        log.info(
            "resumed: iteration %d, model version %d, %d updates replayed, %d stored in all",
            iteration,
            version,
            replayed,
            self.accepted_total,
        )

    def _reparse(self, row: Row) -> Incoming:
        payload = json.loads(row.payload)
        metrics = json.loads(row.metrics)
        if row.kind == "update":
            parsed = self.workload.parse(payload)
            return Incoming(
                row.message_id,
                row.model_version,
                row.branch,
                row.kind,
                row.payload,
                metrics,
                parsed=parsed,
            )
        if row.kind == "aggregate":
            state = self.aggregator.state_from_json(payload)
            return Incoming(
                row.message_id,
                row.model_version,
                row.branch,
                row.kind,
                row.payload,
                metrics,
                aggregate=state,
                count=row.count,
            )
        return Incoming(
            row.message_id, row.model_version, row.branch, row.kind, row.payload, metrics
        )

    # -- the public, thread-safe interface (call from the event loop) -------------------

    def submit(self, items: list[Incoming]) -> asyncio.Future[list[Outcome]]:
        future: asyncio.Future[list[Outcome]] = self.loop.create_future()
        self._queue.put(_Job(items, None, future))
        return future

    def command(self, name: str, **args: Any) -> asyncio.Future[Outcome]:
        future: asyncio.Future[Outcome] = self.loop.create_future()
        self._queue.put(_Job(None, name, future, args))
        return future

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def policy_view(self, stable_ticks: int) -> OpenIteration:
        snap = self._snapshot
        return OpenIteration(
            (time.time() - snap.opened_at) / 60.0, snap.updates_in_iteration, stable_ticks
        )

    def aggregate_sign(self) -> np.ndarray:
        """Sign of the current aggregate (for the adaptive policy)."""
        return np.sign(self.aggregator.finalize(self.state))

    def served(self, branch: str) -> str:
        """``trained`` or ``defaults``: what ``branch`` is served."""
        return next(b.served for b in self.config.branches if b.name == branch)

    def branch(self, enrollment_id: str | None) -> str:
        return branch_of(enrollment_id, self.shares)

    def summary(self) -> list[dict[str, Any]]:
        """Per-branch, per-iteration metric summaries: the closed iterations (stored) and
        the open one (live)."""
        reader = Store(self.store.directory, read_only=True)
        try:
            closed = reader.closed_iterations()
        finally:
            reader.close()
        current = {
            "iteration": self.iteration,
            "model_version": self.version,
            "opened_at": self.opened_at,
            "closed_at": None,
            "n_updates": self.updates_in_iteration,
            "branches": self._branch_summary(),
        }
        return [*closed, current]

    def rejected(self) -> Counter[str]:
        """Refused messages by reason, over both threads."""
        return self.loop_rejected + self.writer_rejected

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)
        self.store.close()

    # -- the writer thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            n = len(job.items or ())
            while n < MAX_GROUP:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this group
                    break
                jobs.append(nxt)
                n += len(nxt.items or ())
            group: list[_Job] = []
            for j in jobs:
                if j.command is None:
                    group.append(j)
                    continue
                self._flush(group)
                group = []
                self._run_command(j)
            self._flush(group)

    def _resolve(self, future: asyncio.Future[Any], value: Any) -> None:
        self._resolve_all([(future, value)])

    def _resolve_all(self, results: list[tuple[asyncio.Future[Any], Any]]) -> None:
        """Answer many waiting requests with one wake-up of the event loop."""

        def set_results() -> None:
            for future, value in results:
                if not future.done():
                    future.set_result(value)

        self.loop.call_soon_threadsafe(set_results)

    def _flush(self, jobs: list[_Job]) -> None:
        if not jobs:
            return
        outcomes: list[list[Outcome]] = []
        accepted: list[Incoming] = []
        seen: set[str] = set()
        now = time.time()
        oldest = self.version - self.config.server.max_staleness
        for job in jobs:
            results = []
            for item in job.items or ():
                if item.message_id in self.ids or item.message_id in seen:
                    self.duplicates_total += 1
                    results.append(
                        Outcome(200, {"status": "duplicate", "message_id": item.message_id})
                    )
                elif item.kind != "ping" and item.model_version < oldest:
                    self.writer_rejected["stale"] += 1
                    results.append(self._stale(item.model_version, oldest))
                else:
                    seen.add(item.message_id)
                    accepted.append(item)
                    results.append(
                        Outcome(
                            202,
                            {
                                "status": "accepted",
                                "message_id": item.message_id,
                                "iteration": self.iteration,
                            },
                        )
                    )
            outcomes.append(results)
        rows = [
            Row(
                i.message_id,
                self.iteration,
                i.model_version,
                i.branch,
                i.kind,
                i.payload,
                orjson.dumps(i.metrics).decode(),
                i.count,
                now,
            )
            for i in accepted
        ]
        try:
            if rows:
                self.store.insert(rows)
        except Exception as exc:  # storage failed: nothing was stored or counted
            log.exception("storing %d updates failed", len(rows))
            failure = Outcome(
                503, {"error": "storage", "detail": f"the update store failed ({exc}); retry"}
            )
            self._resolve_all([(job.future, [failure] * len(job.items or ())) for job in jobs])
            return
        self.commits_total += 1
        self._apply(rows, accepted)
        self._publish()
        self._resolve_all(
            [(job.future, results) for job, results in zip(jobs, outcomes, strict=True)]
        )

    def _stale(self, version: int, oldest: int) -> Outcome:
        detail = (
            f"computed on model version {version}; the server accepts versions >= {oldest} "
            f"(current {self.version}); fetch the model and compute the update again"
        )
        return Outcome(409, {"error": "stale", "detail": detail, "current_version": self.version})

    def _apply(self, rows: list[Row], items: list[Incoming]) -> None:
        """Fold stored messages into the in-memory state (also used by the replay)."""
        updates = [i.parsed for i in items if i.kind == "update"]
        if updates:
            self.state = self.workload.accumulate(self.aggregator, self.state, updates)
        by_branch: dict[str, list[Incoming]] = {}
        for i in items:
            if i.kind == "aggregate":
                self.state = self.aggregator.merge(self.state, i.aggregate)
            by_branch.setdefault(i.branch, []).append(i)
            if i.kind != "ping":
                self.updates_in_iteration += i.count
            self.counted_total += i.count
        for branch, group in by_branch.items():
            stats = self.branch_stats.setdefault(
                branch, {"messages": 0, "updates": 0, "metrics": self.metric_mean.zero()}
            )
            stats["messages"] += len(group)
            stats["updates"] += sum(i.count for i in group if i.kind != "ping")
            names = {name for i in group for name in i.metrics}
            if names:
                columns = {
                    name: np.array([i.metrics.get(name, np.nan) for i in group]) for name in names
                }
                stats["metrics"] = self.metric_mean.accumulate_batch(
                    stats["metrics"], columns, np.ones(len(group))
                )
        self.ids.update(row.message_id for row in rows)
        self.accepted_total += len(rows)

    def _publish(self) -> None:
        self._snapshot = Snapshot(
            self.version,
            self.iteration,
            self.params,
            self.opened_at,
            self.updates_in_iteration,
            self.paused,
        )

    def _branch_summary(self) -> dict[str, Any]:
        return {
            name: {
                "messages": s["messages"],
                "updates": s["updates"],
                "metrics": self.metric_mean.finalize(s["metrics"]),
            }
            for name, s in self.branch_stats.items()
        }

    def _run_command(self, job: _Job) -> None:
        try:
            if job.command == "close":
                outcome = self._close(job.args.get("reason", "admin"), job.args.get("force", False))
            elif job.command in ("pause", "resume"):
                self.paused = job.command == "pause"
                self._publish()
                outcome = Outcome(200, {"paused": self.paused})
            else:
                outcome = Outcome(400, {"error": "unknown_command", "detail": job.command})
        except FedrankError as exc:
            outcome = Outcome(409, {"error": "close_failed", "detail": str(exc)})
        self._resolve(job.future, outcome)

    def _close(self, reason: str, force: bool) -> Outcome:
        n = self.updates_in_iteration
        if n == 0:
            return Outcome(409, {"error": "empty", "detail": "no updates in this iteration yet"})
        if not force and n < self.config.iteration.min_updates:
            return Outcome(
                409,
                {
                    "error": "too_few",
                    "detail": f"{n} updates; the policy needs "
                    f"{self.config.iteration.min_updates} before applying an aggregate",
                },
            )
        aggregate = self.aggregator.finalize(self.state)
        step, opt_state = self.optimizer.update(
            self.workload.optimizer_input(aggregate), self.opt_state, self.params
        )
        proposal = self.params + step
        new_params = proposal
        if self.constraints is not None:
            new_params = self.constraints.project(proposal, self.params)
            if not self.constraints.holds(new_params, self.params):
                raise FedrankError(
                    "the safeguards could not be satisfied; the model was not changed"
                )
        closed = self.iteration
        self.store.close_iteration(
            closed,
            n,
            self.aggregator.state_to_json(self.state),
            self._branch_summary(),
            reason,
            self.version + 1,
            new_params,
            self.optimizer.state_to_json(opt_state),
        )
        self.params, self.opt_state = new_params, opt_state
        self.version += 1
        self.iteration += 1
        self.opened_at = time.time()
        self.state = self.aggregator.zero()
        self.branch_stats = {}
        self.updates_in_iteration = 0
        self._publish()
        self.store.export_parquet(closed)
        log.info(
            "closed iteration %d (%s, %d updates); published version %d",
            closed,
            reason,
            n,
            self.version,
        )
        return Outcome(
            200, {"closed_iteration": closed, "model_version": self.version, "updates": n}
        )
