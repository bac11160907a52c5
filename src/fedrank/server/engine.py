"""The server's state machine: one writer thread that owns all state, fed by a queue.

Request handlers (on the event loop) only validate and enqueue; the writer thread takes
everything queued so far, decides each message (accepted, duplicate, stale), stores the
accepted ones in *one* transaction (group commit), and only then folds them into the running
aggregate and answers. Closing an iteration goes through the same queue, so an update is
either committed and aggregated before a close or counted in the next iteration: never
acknowledged and lost, never counted twice. Readers (the model endpoint, status) read
immutable snapshots the writer publishes.

Data flow of one iteration (docs/architecture.md)::

    message -> wire.parse -> queue -> store (durable) -> Round.fold
    close: Round.close (the strategy's server step) -> store -> the next round's empty
           aggregate (an adaptive norm bound moves here; a restart recomputes it from the
           stored final aggregate) -> publish
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
import json
import logging
import operator
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
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
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError, FedrankError
from fedrank.federation.round import Closed, Round
from fedrank.server.config import ServerConfig
from fedrank.server.histogram import Histogram
from fedrank.server.log_limit import RateLimit
from fedrank.server.privacy import PrivacyLedger
from fedrank.server.recent_ids import RecentIds
from fedrank.server.store import Row, Store
from fedrank.server.workloads import Workload, make_workload
from fedrank.systems.wire import EMPTY, Parsed

log = logging.getLogger("fedrank.server")
log.addFilter(RateLimit())  # a failure that repeats per request logs once per 10 s

#: Most messages decided and committed in one transaction.
MAX_GROUP = 4096
#: Message kinds: a client update, a metrics-only ping, a proxy's merged aggregate.
UPDATE, PING, AGGREGATE = 0, 1, 2
_KIND_CODE = {"update": UPDATE, "ping": PING, "aggregate": AGGREGATE}


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
class BatchResult:
    """The compact answer to a batch: a status per message, and the bodies of the messages
    that were not accepted (by position)."""

    statuses: np.ndarray
    bodies: dict[int, dict[str, Any]]


@dataclass(frozen=True)
class Messages:
    """Validated messages column by column: what the writer decides, stores and folds in.

    ``columns`` holds the payloads of the ``update`` messages only, in their order;
    ``aggregates`` maps the position of each ``aggregate`` message to its state.
    """

    ids: list[str]
    versions: np.ndarray
    branches: list[str]
    kinds: list[str]
    payloads: list[str | dict[str, Any]]  # JSON text, or the payload itself
    metrics: list[dict[str, float]]
    counts: np.ndarray
    columns: MessageBatch
    aggregates: dict[int, Any]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def kind_codes(self) -> np.ndarray:
        """``(m,)`` int8: :data:`UPDATE`, :data:`PING` or :data:`AGGREGATE` per message."""
        kinds = self.kinds
        if len(set(kinds)) == 1:
            return np.full(len(kinds), _KIND_CODE[kinds[0]], dtype=np.int8)
        return np.array([_KIND_CODE[k] for k in kinds], dtype=np.int8)

    @staticmethod
    def of(items: list[Incoming], workload: Workload) -> Messages:
        updates = [i.parsed for i in items if i.kind == "update"]
        return Messages(
            ids=[i.message_id for i in items],
            versions=np.array([i.model_version for i in items], dtype=np.int64),
            branches=[i.branch for i in items],
            kinds=[i.kind for i in items],
            payloads=[i.payload for i in items],
            metrics=[i.metrics for i in items],
            counts=np.array([i.count for i in items], dtype=np.int64),
            columns=workload.wire.columns(updates) if updates else MessageBatch(0),
            aggregates={k: i.aggregate for k, i in enumerate(items) if i.kind == "aggregate"},
        )

    @staticmethod
    def concat(parts: list[Messages]) -> Messages:
        if len(parts) == 1:
            return parts[0]
        aggregates, offset = {}, 0
        for part in parts:
            aggregates.update({offset + k: v for k, v in part.aggregates.items()})
            offset += len(part)
        return Messages(
            ids=[x for m in parts for x in m.ids],
            versions=np.concatenate([m.versions for m in parts]),
            branches=[x for m in parts for x in m.branches],
            kinds=[x for m in parts for x in m.kinds],
            payloads=[x for m in parts for x in m.payloads],
            metrics=[x for m in parts for x in m.metrics],
            counts=np.concatenate([m.counts for m in parts]),
            columns=MessageBatch.concat([m.columns for m in parts]),
            aggregates=aggregates,
        )


@dataclass(frozen=True)
class Snapshot:
    """What readers see; replaced (never mutated) by the writer."""

    version: int
    iteration: int
    params: np.ndarray
    opened_at: float
    updates_in_iteration: int
    paused: bool = False
    #: The open iteration's norm bound (``[frecency]`` / ``[fedavg]`` ``norm_bound``, adapted
    #: at every close with ``norm_quantile``); ``None`` without one. A proxy folds its
    #: clients' messages from ``NormBounded`` states with this bound.
    norm_bound: float | None = None
    #: The ``[privacy]`` budget is spent: no more updates, check-ins or closes.
    budget_spent: bool = False


@dataclass
class _Job:
    """A request for the writer: messages (answered with a list of :class:`Outcome`, or
    compactly when ``compact``), or a command."""

    items: Messages | list[Incoming] | None  # a list: columns built by the writer, per group
    command: str | None
    future: asyncio.Future[Any]
    args: dict[str, Any] = field(default_factory=dict)
    compact: bool = False


def _pick(values: list[Any], index: list[int], everything: bool) -> list[Any]:
    """``values`` at ``index`` (the list itself when every position is taken)."""
    if everything:
        return values
    return list(operator.itemgetter(*index)(values)) if len(index) > 1 else [values[index[0]]]


def _group_json(msgs: Messages, accepted: np.ndarray) -> bytes:
    """The stored form of a group: ``[message_id, model_version, branch, kind, payload,
    metrics, count]`` per accepted message (see :mod:`fedrank.server.store`), built with
    C-level iteration (``zip``): this runs for every message at full ingestion speed.
    Payloads that are JSON text are embedded as they are."""
    index = accepted.tolist()
    everything = len(index) == len(msgs)
    payloads = _pick(msgs.payloads, index, everything)
    if any(type(p) is str for p in payloads):
        payloads = [orjson.Fragment(p) if type(p) is str else p for p in payloads]
    return orjson.dumps(
        list(
            zip(
                _pick(msgs.ids, index, everything),
                msgs.versions[accepted].tolist(),
                _pick(msgs.branches, index, everything),
                _pick(msgs.kinds, index, everything),
                payloads,
                _pick(msgs.metrics, index, everything),
                msgs.counts[accepted].tolist(),
                strict=True,
            )
        )
    )


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
        self.privacy = PrivacyLedger(config)
        self.workload: Workload = make_workload(config, self.privacy.wrap)
        self.strategy = self.workload.strategy
        self.aggregator = self.strategy.aggregator
        self.optimizer = self.strategy.optimizer
        self.metric_mean = MetricMean()
        self.policy = make_policy(config)
        self.shares = [(b.name, b.share) for b in config.branches]
        self.defaults = self.workload.initial_params()
        self.store = Store(config.server.store)
        self.privacy.attach(self.store)
        # Rejections by reason: the writer's own (stale), and the event loop's (bad input);
        # each counter is written by one thread only.
        self.writer_rejected: Counter[str] = Counter()
        self._stats_lock = threading.Lock()  # guards writer_rejected and branch_stats
        self.loop_rejected: Counter[str] = Counter()
        self.duplicates_total = 0
        self.commits_total = 0
        self.commit_seconds = Histogram()  # duration of each group commit (the fsync)
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._resume()
        # The cyclic garbage collector scans every tracked container on a full collection,
        # and ingestion allocates tens of thousands of them per batch: scanning the
        # remembered ids again and again would slow ingestion down as an iteration grows.
        # Freeze what start-up built (those ids included) out of the scans; the
        # per-message objects are freed by reference counting.
        gc.freeze()
        self._thread = threading.Thread(target=self._run, name="fedrank-writer", daemon=True)
        self._thread.start()

    # -- start-up: resume exactly where the store left off ------------------------------

    def _resume(self) -> None:
        identity: dict[str, Any] = {"workload": self.workload.name, "dim": self.workload.dim}
        if self.privacy.enabled:
            identity["privacy"] = self.privacy.identity()
        if self.store.check_identity(identity):
            params = self.workload.initial_params()
            opt_state = self.optimizer.state_to_json(self.strategy.init(params))
            self.store.publish_first(params, opt_state)
        model = self.store.latest_model()
        iteration, version, opened_at = self.store.open_iteration()
        if version != model.version:
            raise ConfigError(
                f"the store's open iteration serves version {version}, not the latest"
            )
        self.iteration = iteration
        self.opened_at = opened_at
        window = self.config.server.max_staleness + 1
        self.ids = RecentIds(window, self.store.message_ids(iteration - window + 1))
        self.ids.open(iteration)
        self.accepted_total = self.counted_total = 0  # set from the store after the replay
        self.round = Round.resume(
            self.strategy,
            model.params,
            self.optimizer.state_from_json(model.optimizer_state),
            version,
            self._closed_aggregate(iteration - 1),
        )
        self.privacy.track(self.round.aggregate)
        self.branch_stats: dict[str, dict[str, Any]] = {}
        self.updates_in_iteration = 0
        replayed = 0
        chunk: list[Incoming] = []
        for row in self.store.iteration_rows(iteration):
            chunk.append(self._reparse(row))
            replayed += 1
            if len(chunk) == MAX_GROUP:
                self._replay(chunk)
                chunk = []
        self._replay(chunk)
        self.accepted_total, self.counted_total = self.store.counts()
        self.paused = self.store.paused()  # an operator's pause survives restarts
        self.privacy.status(self.iteration)  # the accountant runs here, not in a request
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

    def recover_iteration(self, rows: list[Row]) -> None:
        """Recovery only (:mod:`fedrank.server.recovery`), before the server takes any
        request: store the audit log's messages of the open iteration (one group per
        original group commit, i.e. per time stamp), fold them as a restart replays them,
        and close the iteration with the strategy's server step."""
        if any(r.iteration != self.iteration for r in rows):
            raise ConfigError(f"recovery: rows of another iteration than {self.iteration}")
        for _, same_time in itertools.groupby(rows, key=lambda r: r.received_at):
            group = list(same_time)
            self.store.insert(group)
            self._replay([self._reparse(r) for r in group])
        outcome = self._close("recovered", force=True)
        if outcome.status != 200:
            raise ConfigError(
                f"recovery: iteration {self.iteration} could not be closed again: {outcome.body}"
            )

    def _replay(self, items: list[Incoming]) -> None:
        if items:
            self._apply(Messages.of(items, self.workload), np.arange(len(items)))

    def _reparse(self, row: Row) -> Incoming:
        payload = json.loads(row.payload)
        metrics = json.loads(row.metrics)
        if row.kind == "update":
            parsed = self.workload.wire.parse(payload)
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
        return np.sign(self.round.running_update())

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
            "model_version": self.round.version,
            "opened_at": self.opened_at,
            "closed_at": None,
            "n_updates": self.updates_in_iteration,
            "branches": self._branch_summary(),
        }
        return [*closed, current]

    def rejected(self) -> Counter[str]:
        """Refused messages by reason, over both threads."""
        with self._stats_lock:
            writer = Counter(self.writer_rejected)
        return Counter(dict(self.loop_rejected)) + writer

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
            try:
                self._resume()
            except Exception:
                log.exception("rebuilding the state failed; pausing the server")
                self.paused = True
                self._publish()

    def _resolve(self, future: asyncio.Future[Any], value: Any) -> None:
        self._resolve_all([(future, value)])

    def _resolve_all(self, results: list[tuple[asyncio.Future[Any], Any]]) -> None:
        """Answer many waiting requests with one wake-up of the event loop."""

        def set_results() -> None:
            for future, value in results:
                if not future.done():
                    future.set_result(value)

        self.loop.call_soon_threadsafe(set_results)

    def _failed(self, job: _Job, failure: Outcome) -> Any:
        """``failure`` in the form ``job`` is answered in."""
        if job.command is not None:
            return failure
        n = len(job.items) if job.items is not None else 0
        if job.compact:
            bodies = {k: failure.body for k in range(n)}
            return BatchResult(np.full(n, failure.status, dtype=np.int64), bodies)
        return [failure] * n

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

    def _flush(self, jobs: list[_Job]) -> None:
        """Decide, store (one transaction), fold in and answer every message of ``jobs``.

        While paused nothing is stored: requests that passed the front door's pause check
        before the pause command reached the writer are answered 503 here, so once
        ``pause`` has answered, the store no longer grows."""
        if self.paused:
            detail = "the server is paused by its operator; retry later"
            failure = Outcome(503, {"error": "paused", "detail": detail})
            self._resolve_all([(j.future, self._failed(j, failure)) for j in jobs])
            return
        msgs = self._columns(jobs)
        m = len(msgs)
        status = np.full(m, 202, dtype=np.int64)
        bodies: dict[int, dict[str, Any]] = {}
        distinct = set(msgs.ids)
        if len(distinct) < m or not self.ids.isdisjoint(distinct):  # some duplicates
            seen: set[str] = set()
            known = self.ids
            for k, mid in enumerate(msgs.ids):
                if mid in known or mid in seen:
                    status[k] = 200
                else:
                    seen.add(mid)
        self.duplicates_total += int(np.count_nonzero(status == 200))
        oldest = self.round.version - self.config.server.max_staleness
        # A ping is stale like an update: its metrics describe an older model, and counted
        # in this iteration's summary they would be credited to the new one.
        stale = (status == 202) & (msgs.versions < oldest)
        for k in np.flatnonzero(stale):
            status[k] = 409
            bodies[int(k)] = self._stale(int(msgs.versions[k]), oldest).body
        full = self._beyond_capacity(msgs, status)
        if full.size:
            status[full] = 503
            body = self._full_body()
            bodies.update({int(k): body for k in full})
        for k, aggregate in msgs.aggregates.items():
            problem = self._merge_problem(aggregate) if status[k] == 202 else None
            if problem is not None:
                status[k] = 422
                bodies[k] = {"error": "invalid_aggregate", "detail": problem}
        invalid = sum(1 for b in bodies.values() if b.get("error") == "invalid_aggregate")
        if stale.any() or full.size or invalid:
            with self._stats_lock:
                self.writer_rejected["stale"] += int(stale.sum())
                self.writer_rejected["iteration_full"] += int(full.size)
                self.writer_rejected["invalid_aggregate"] += invalid
        accepted = np.flatnonzero(status == 202)
        try:
            if accepted.size:
                group = _group_json(msgs, accepted)
                started = time.perf_counter()
                self.store.insert_group(self.iteration, time.time(), group, int(accepted.size))
                self.commit_seconds.observe(time.perf_counter() - started)
        except Exception as exc:  # storage failed: nothing was stored or counted
            log.exception("storing %d updates failed", accepted.size)
            detail = f"the update store failed ({exc}); nothing was stored, retry"
            failure = Outcome(503, {"error": "storage", "detail": detail})
            self._resolve_all([(j.future, self._failed(j, failure)) for j in jobs])
            return
        self.commits_total += 1
        self._apply(msgs, accepted)
        self._publish()
        self._answer(jobs, status, bodies, msgs)

    def _answer(
        self,
        jobs: list[_Job],
        status: np.ndarray,
        bodies: dict[int, dict[str, Any]],
        msgs: Messages,
    ) -> None:
        answers: list[tuple[asyncio.Future[Any], Any]] = []
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
                                int(code), mine.get(k) or self._body(int(code), msgs.ids[start + k])
                            )
                            for k, code in enumerate(part)
                        ],
                    )
                )
            start += n
        self._resolve_all(answers)

    def _body(self, status: int, message_id: str) -> dict[str, Any]:
        if status == 200:
            return {"status": "duplicate", "message_id": message_id}
        return {"status": "accepted", "message_id": message_id, "iteration": self.iteration}

    def _merge_problem(self, aggregate: Any) -> str | None:
        """Why a proxy's state cannot join the iteration's aggregate, or ``None``: a state
        of another iteration's norm bound (the merge refuses it), or a merge into an
        overflow or a zero weight (a state valid on its own can still do that)."""
        try:
            with np.errstate(all="ignore"):
                merged = self.aggregator.merge(self.round.aggregate, aggregate)
                finite = bool(np.all(np.isfinite(self.aggregator.finalize(merged))))
        except FedrankError as exc:
            return f"it does not merge with this iteration's aggregate: {exc}"
        if not finite:
            return "merged with this iteration's aggregate it gives non-finite values"
        return None

    def _beyond_capacity(self, msgs: Messages, status: np.ndarray) -> np.ndarray:
        """Positions of the messages still to accept (status 202) that the iteration's
        aggregate has no room for: a median or trimmed mean keeps every update, up to its
        ``max_rows`` (an update takes one row, a proxy's aggregate its ``count``, a ping
        none). Refused before they are stored, so the aggregate never overflows."""
        room = self.round.capacity()
        if room is None:
            return np.zeros(0, dtype=np.int64)
        candidates = np.flatnonzero(status == 202)
        kinds = msgs.kind_codes[candidates]
        rows = np.where(kinds == PING, 0, np.where(kinds == UPDATE, 1, msgs.counts[candidates]))
        return candidates[(rows > 0) & (np.cumsum(rows) > room)]

    def _full_body(self) -> dict[str, Any]:
        detail = (
            f"iteration {self.iteration} holds as many updates as its aggregator keeps "
            f"([{self.workload.name}] max_rows); retry after the iteration closes"
        )
        return {"error": "iteration_full", "detail": detail, "iteration": self.iteration}

    def _closed_aggregate(self, iteration: int) -> Any:
        """The final aggregate the store kept when ``iteration`` closed, where the next
        round carries something over from it (an adaptive norm bound:
        :class:`~fedrank.aggregators.norm_bounded.NormBounded`), so that a restarted server
        goes on with the bound it had; ``None`` otherwise: the round starts from the
        strategy's zero. A stored aggregate of another configuration (the aggregator was
        changed between runs) is set aside."""
        if not self.strategy.carries_over:
            return None
        stored = self.store.closed_aggregate(iteration)
        if stored is None:
            return None
        try:
            previous = self.aggregator.state_from_json(stored)
        except FedrankError as exc:
            log.warning(
                "iteration %d starts from the configured aggregate: the one stored at the close "
                "of iteration %d is of another configuration (%s)",
                iteration + 1,
                iteration,
                exc,
            )
            return None
        self.privacy.before_close(iteration)  # that close's count noise, not a new draw
        return previous

    def _stale(self, version: int, oldest: int) -> Outcome:
        detail = (
            f"computed on model version {version}; the server accepts versions >= {oldest} "
            f"(current {self.round.version}); fetch the model and compute the report again"
        )
        current = self.round.version
        return Outcome(409, {"error": "stale", "detail": detail, "current_version": current})

    def _apply(self, msgs: Messages, accepted: np.ndarray) -> None:
        """Fold the stored messages at positions ``accepted`` into the in-memory state
        (also used by the replay)."""
        if accepted.size == 0:
            return
        everything = accepted.size == len(msgs)
        taken = np.zeros(len(msgs), dtype=bool)
        taken[accepted] = True
        keep = taken[msgs.kind_codes == UPDATE]  # the accepted rows of the payload columns
        if keep.any():
            cols = msgs.columns if keep.all() else msgs.columns.take(np.flatnonzero(keep))
            self.round.fold(cols)
        for k, aggregate in msgs.aggregates.items():
            if taken[k]:
                self.round.merge(aggregate)
        counts = msgs.counts[accepted]
        not_ping = msgs.kind_codes[accepted] != PING
        self.updates_in_iteration += int(counts[not_ping].sum())
        self.counted_total += int(counts.sum())
        index = accepted.tolist()
        branches = _pick(msgs.branches, index, everything)
        metrics = _pick(msgs.metrics, index, everything)
        groups = set(branches)
        with self._stats_lock:
            if len(groups) == 1:  # the usual batch: one branch
                self._fold_branch_stats(branches[0], metrics, int(counts[not_ping].sum()))
            else:
                for branch in groups:
                    mine = np.array([b == branch for b in branches], dtype=bool)
                    self._fold_branch_stats(
                        branch,
                        [mt for mt, take in zip(metrics, mine, strict=True) if take],
                        int(counts[mine & not_ping].sum()),
                    )
        self.ids.add(self.iteration, _pick(msgs.ids, index, everything))
        self.accepted_total += int(accepted.size)

    def _fold_branch_stats(
        self, branch: str, metrics: list[dict[str, float]], updates: int
    ) -> None:
        stats = self.branch_stats.setdefault(
            branch, {"messages": 0, "updates": 0, "metrics": self.metric_mean.zero()}
        )
        stats["messages"] += len(metrics)
        stats["updates"] += updates
        if not any(metrics):
            return
        names = {name for mt in metrics for name in mt}
        columns = {name: np.array([mt.get(name, np.nan) for mt in metrics]) for name in names}
        stats["metrics"] = self.metric_mean.accumulate_batch(
            stats["metrics"], columns, np.ones(len(metrics))
        )

    def _publish(self) -> None:
        self._snapshot = Snapshot(
            self.round.version,
            self.iteration,
            self.round.model(),
            self.opened_at,
            self.updates_in_iteration,
            self.paused,
            getattr(self.round.aggregate, "bound", None),
            self.privacy.spent(self.iteration),
        )

    def _branch_summary(self) -> dict[str, Any]:
        with self._stats_lock:
            return self._branch_summary_unlocked()

    def _branch_summary_unlocked(self) -> dict[str, Any]:
        return {
            name: {
                "messages": s["messages"],
                "updates": s["updates"],
                "metrics": self.metric_mean.finalize(s["metrics"]),
            }
            for name, s in self.branch_stats.items()
        }

    def _run_command(self, jobs: list[_Job]) -> None:
        (job,) = jobs
        try:
            if job.command == "close" and job.args.get("scheduled") and self.paused:
                # the scheduler decided before an operator's pause was applied
                detail = "the server is paused by its operator; the scheduler does not close"
                outcome = Outcome(409, {"error": "paused", "detail": detail})
            elif job.command == "close":
                outcome = self._close(job.args.get("reason", "admin"), job.args.get("force", False))
            elif job.command in ("pause", "resume"):
                self.store.set_paused(job.command == "pause")
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
        if self.privacy.spent(self.iteration):
            return Outcome(403, {"error": "privacy_budget_spent", "detail": self.privacy.refusal()})
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
        self.privacy.before_close(self.iteration)  # this close's noise
        closed = self.iteration

        def store(close: Closed) -> None:
            self.store.close_iteration(
                closed,
                n,
                self.aggregator.state_to_json(close.aggregate),
                self._branch_summary(),
                reason,
                close.version,
                close.step.params,
                self.optimizer.state_to_json(close.step.opt_state),
            )

        self.round.close(store)
        self.iteration += 1
        self.opened_at = time.time()
        self.ids.open(self.iteration)
        self.privacy.track(self.round.aggregate)  # e.g. the adaptive clip's next bound
        with self._stats_lock:
            self.branch_stats = {}
        self.updates_in_iteration = 0
        self.privacy.status(self.iteration)  # the accountant runs here, not in a request
        # the partition before the snapshot: whoever sees the new version finds the closed
        # iteration's Parquet written (unless writing failed; the next start retries)
        try:
            self.store.export_parquet(closed)
        except OSError:
            log.exception(
                "writing the Parquet partition of iteration %d failed; the next start writes it",
                closed,
            )
        self._publish()
        log.info(
            "closed iteration %d (%s, %d updates); published version %d",
            closed,
            reason,
            n,
            self.round.version,
        )
        version = self.round.version
        return Outcome(200, {"closed_iteration": closed, "model_version": version, "updates": n})
