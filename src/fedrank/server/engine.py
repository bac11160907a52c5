"""The server's state machine: the store, the round (:class:`~fedrank.federation.round.Round`)
and the open iteration, driven by one writer thread (:mod:`fedrank.server.writer`).

Request handlers (on the event loop) only validate and enqueue; the writer hands the engine
everything queued so far as one group, which it decides (:mod:`fedrank.server.admission`),
stores in *one* transaction (group commit), and only then folds into the round's aggregate
and the iteration's bookkeeping (:mod:`fedrank.server.iteration`). Closing an iteration goes
through the same queue, so an update is either committed and aggregated before a close or
counted in the next iteration: never acknowledged and lost, never counted twice. Readers (the
model endpoint, status) read immutable snapshots the engine publishes.

Data flow of one iteration (docs/architecture.md)::

    message -> wire.parse -> queue -> store (durable) -> Round.fold
    close: Round.close (the strategy's server step) -> store -> the next round's empty
           aggregate (an adaptive norm bound moves here; a restart recomputes it from the
           stored final aggregate) -> publish
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

from fedrank.errors import ConfigError, FedrankError
from fedrank.federation.round import Closed, Round
from fedrank.server.admission import Admission, admit
from fedrank.server.config import ServerConfig
from fedrank.server.histogram import Histogram
from fedrank.server.iteration import Iteration, Snapshot
from fedrank.server.log_limit import RateLimit
from fedrank.server.messages import UPDATE, Incoming, Messages, Outcome, reparse, stored_group
from fedrank.server.privacy import PrivacyLedger
from fedrank.server.recent_ids import RecentIds
from fedrank.server.store import Row, Store, check_not_behind
from fedrank.server.workloads import Workload, make_workload
from fedrank.server.writer import MAX_GROUP, Writer

log = logging.getLogger("fedrank.server")
log.addFilter(RateLimit())  # a failure that repeats per request logs once per 10 s


class Engine:
    """Owns the store, the model and the running aggregate (module docstring); requests
    reach it through :attr:`writer`."""

    def __init__(
        self, config: ServerConfig, loop: asyncio.AbstractEventLoop, recovering: bool = False
    ) -> None:
        self.config = config
        #: Rebuilding the database from its audit log (:meth:`recover_iteration`): the log
        #: is ahead of the database by design, and its partitions are kept as they are.
        self.recovering = recovering
        self.privacy = PrivacyLedger(config)
        self.workload: Workload = make_workload(config, self.privacy.wrap)
        self.strategy = self.workload.strategy
        self.aggregator = self.strategy.aggregator
        self.optimizer = self.strategy.optimizer
        self.store = Store(config.server.store, recovering=recovering)
        self.privacy.attach(self.store)
        # The writer's counts; the front door counts the messages it refuses itself.
        self._rejected: Counter[str] = Counter()  # by reason (stale, iteration_full, ...)
        self._rejected_lock = threading.Lock()
        self.duplicates_total = 0
        self.commits_total = 0
        self.commit_seconds = Histogram()  # duration of each group commit (the fsync)
        self.writer = Writer(loop, self.workload, self._ingest, self._command, self._rebuild)
        self._resume()
        # The cyclic garbage collector scans every tracked container on a full collection,
        # and ingestion allocates tens of thousands of them per batch: scanning the
        # remembered ids again and again would slow ingestion down as an iteration grows.
        # Freeze what start-up built (those ids included) out of the scans; the
        # per-message objects are freed by reference counting.
        gc.freeze()
        self.writer.start()

    # -- start-up: resume exactly where the store left off ------------------------------

    def _resume(self) -> None:
        identity: dict[str, Any] = {"workload": self.workload.name, "dim": self.workload.dim}
        if self.privacy.enabled:
            identity["privacy"] = self.privacy.identity()
        fresh = self.store.check_identity(identity)
        if fresh:
            params = self.workload.initial_params()
            opt_state = self.optimizer.state_to_json(self.strategy.init(params))
            self.store.publish_first(params, opt_state)
        model = self.store.latest_model()
        iteration, version, opened_at = self.store.open_iteration()
        if version != model.version:
            raise ConfigError(
                f"the store's open iteration serves version {version}, not the latest"
            )
        if not self.recovering:
            check_not_behind(self.store.directory, iteration)
        window = self.config.server.max_staleness + 1
        ids = RecentIds(window, self.store.message_ids(iteration - window + 1))
        self.current = Iteration(iteration, opened_at, ids)
        self.accepted_total = self.counted_total = 0  # set from the store after the replay
        self.privacy.load(self.store, iteration)
        self.round = Round.resume(
            self.strategy,
            model.params,
            self.optimizer.state_from_json(model.optimizer_state),
            version,
            self._closed_aggregate(iteration - 1),
        )
        self.privacy.track(self.round.aggregate)
        replayed = 0
        chunk: list[Incoming] = []
        for row in self.store.iteration_rows(iteration):
            chunk.append(reparse(row, self.workload))
            replayed += 1
            if len(chunk) == MAX_GROUP:
                self._replay(chunk)
                chunk = []
        self._replay(chunk)
        self.accepted_total, self.counted_total = self.store.counts()
        self.paused = self.store.paused()  # an operator's pause survives restarts
        self.privacy.status(iteration)  # the accountant runs here, not in a request
        self._publish()
        for path in self.store.export_missing_parquet():
            log.info("wrote missing Parquet partition %s", path)
        if fresh:
            log.info(
                "new store at %s: iteration %d, model version %d",
                self.store.directory,
                iteration,
                version,
            )
        else:
            log.info(
                "resumed: iteration %d, model version %d, %d updates replayed, %d stored in all",
                iteration,
                version,
                replayed,
                self.accepted_total,
            )

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

    def _replay(self, items: list[Incoming]) -> None:
        if items:
            self._fold(Messages.of(items, self.workload), np.arange(len(items)))

    def _rebuild(self) -> None:
        """After a failed writer step: the in-memory state again from the store, the source
        of truth; if even that fails, the server pauses."""
        try:
            self._resume()
        except Exception:
            log.exception("rebuilding the state failed; pausing the server")
            self.paused = True
            self._publish()

    def recover_iteration(self, rows: list[Row]) -> None:
        """Recovery only (:mod:`fedrank.server.recovery`), before the server takes any
        request: store the audit log's messages of the open iteration (one group per
        original group commit, i.e. per time stamp), fold them as a restart replays them,
        and close the iteration with the strategy's server step."""
        number = self.current.number
        if any(r.iteration != number for r in rows):
            raise ConfigError(f"recovery: rows of another iteration than {number}")
        for _, same_time in itertools.groupby(rows, key=lambda r: r.received_at):
            group = list(same_time)
            self.store.insert(group)
            self._replay([reparse(r, self.workload) for r in group])
        outcome = self._close("recovered", force=True)
        if outcome.status != 200:
            raise ConfigError(
                f"recovery: iteration {number} could not be closed again: {outcome.body}"
            )

    # -- what readers see (any thread) --------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def rejected(self) -> Counter[str]:
        """Messages the writer refused, by reason."""
        with self._rejected_lock:
            return Counter(self._rejected)

    def stop(self) -> None:
        self.writer.stop()
        self.store.close()

    # -- the writer's steps -------------------------------------------------------------

    def _ingest(self, msgs: Messages) -> Admission | Outcome:
        """Decide, store (one transaction) and fold in one group's messages.

        While paused nothing is stored: requests that passed the front door's pause check
        before the pause command reached the writer are answered 503 here, so once
        ``pause`` has answered, the store no longer grows."""
        if self.paused:
            detail = "the server is paused by its operator; retry later"
            return Outcome(503, {"error": "paused", "detail": detail})
        number = self.current.number
        decided = admit(
            msgs,
            self.current.ids,
            self.round,
            self.config.server.max_staleness,
            number,
            self.workload.name,
        )
        self.duplicates_total += decided.duplicates
        refused = decided.refused + self.privacy.screen(msgs, decided.status, decided.bodies)
        if refused:
            with self._rejected_lock:
                self._rejected.update(refused)
        accepted = decided.accepted
        try:
            if accepted.size:
                group = stored_group(msgs, accepted, self.privacy.enabled)
                started = time.perf_counter()
                self.store.insert_group(number, time.time(), group, int(accepted.size))
                self.commit_seconds.observe(time.perf_counter() - started)
        except Exception as exc:  # storage failed: nothing was stored or counted
            log.exception("storing %d updates failed", accepted.size)
            detail = f"the update store failed ({exc}); nothing was stored, retry"
            return Outcome(503, {"error": "storage", "detail": detail})
        self.commits_total += 1
        self._fold(msgs, accepted)
        self._publish()
        return decided

    def _fold(self, msgs: Messages, accepted: np.ndarray) -> None:
        """Fold the stored messages at positions ``accepted`` into the round and the
        iteration (also used by the replay)."""
        if accepted.size == 0:
            return
        taken = np.zeros(len(msgs), dtype=bool)
        taken[accepted] = True
        keep = taken[msgs.kind_codes == UPDATE]  # the accepted rows of the payload columns
        if keep.any():
            cols = msgs.columns if keep.all() else msgs.columns.take(np.flatnonzero(keep))
            self.round.fold(cols)
        for k, aggregate in msgs.aggregates.items():
            if taken[k]:
                self.round.merge(aggregate)
        self.current.fold(msgs, accepted)
        self.privacy.note(msgs, accepted)
        self.counted_total += int(msgs.counts[accepted].sum())
        self.accepted_total += int(accepted.size)

    def _publish(self) -> None:
        self._snapshot = Snapshot(
            self.round.version,
            self.current.number,
            self.round.model(),
            self.current.opened_at,
            self.current.updates,
            self.paused,
            getattr(self.round.aggregate, "bound", None),
            self.privacy.spent(self.current.number),
        )

    def _command(self, name: str, args: dict[str, Any]) -> Outcome:
        try:
            if name == "close" and args.get("scheduled") and self.paused:
                # the scheduler decided before an operator's pause was applied
                detail = "the server is paused by its operator; the scheduler does not close"
                return Outcome(409, {"error": "paused", "detail": detail})
            if name == "close":
                return self._close(args.get("reason", "admin"), args.get("force", False))
            if name in ("pause", "resume"):
                self.store.set_paused(name == "pause")
                self.paused = name == "pause"
                self._publish()
                return Outcome(200, {"paused": self.paused})
            return Outcome(400, {"error": "unknown_command", "detail": name})
        except FedrankError as exc:
            return Outcome(409, {"error": "close_failed", "detail": str(exc)})

    def _close(self, reason: str, force: bool) -> Outcome:
        n = self.current.updates
        if self.privacy.spent(self.current.number):
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
        closed = self.current.number
        self.privacy.before_close(closed)  # this close's noise

        def store(close: Closed) -> None:
            self.store.close_iteration(
                closed,
                n,
                self.aggregator.state_to_json(close.aggregate),
                self.current.branch_summary(),
                reason,
                close.version,
                close.step.params,
                self.optimizer.state_to_json(close.step.opt_state),
            )

        self.round.close(store)
        self.current.advance(time.time())
        self.privacy.track(self.round.aggregate)  # e.g. the adaptive clip's next bound
        self.privacy.status(self.current.number)  # the accountant runs here, not in a request
        self.privacy.closed_iteration()  # each device's spend, after the accountant ran
        # the partition before the snapshot: whoever sees the new version finds the closed
        # iteration's Parquet written (unless writing failed; the next start retries)
        try:
            self.store.export_parquet(closed)
        except FileExistsError:
            if not self.recovering:  # recovery keeps the log it rebuilds from
                log.error(
                    "the audit log already holds iteration %d: the database is behind it "
                    "(restored from a backup while the server ran?); the partition is kept. "
                    "Stop the server and run `fedrank store recover`",
                    closed,
                )
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
