"""When the open iteration closes: every ``[iteration] tick_seconds`` the scheduler looks at
it and closes it by the iteration policy (a minimum count, a fixed time, the adaptive rule
that waits for the aggregate's sign to settle: Mozilla paper, Sec. 6.4), or, with
``[rounds]``, when the round completes (it also draws a round's seats when its check-in
window ends); with ``[secagg]`` it also moves the round's secure
aggregation through its stages and folds the unmasked sum in before the close
(docs/service.md, docs/secagg.md). A close that fails is retried after a back-off, never in
a loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import numpy as np
import orjson

from fedrank.aggregators.mean import WeightedMeanState
from fedrank.core.iteration_policy import (
    AllOf,
    FixedTime,
    IterationPolicy,
    MinUpdates,
    OpenIteration,
    SignStable,
)
from fedrank.server.config import ServerConfig
from fedrank.server.engine import Engine
from fedrank.server.messages import Incoming
from fedrank.server.rounds import Rounds

log = logging.getLogger("fedrank.server")

#: What the scheduler remembers between ticks: how many ticks the aggregate's sign has not
#: changed, that sign, and the iteration it watched.
Memory = tuple[int, np.ndarray | None, int]


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


class Scheduler:
    """Closes the engine's iterations (module docstring).

    Args:
        config: the server's configuration (``[iteration]``).
        engine: the running engine.
        rounds: the open round with ``[rounds]``, else ``None`` (the policy decides).
        branch: the branch a secure round's sum is counted in.
    """

    def __init__(
        self, config: ServerConfig, engine: Engine, rounds: Rounds | None, branch: str
    ) -> None:
        self.config = config
        self.engine = engine
        self.rounds = rounds
        self.branch = branch
        self.policy = make_policy(config)
        #: Scheduled closes that failed (safeguards, a failing store): in a row, in all,
        #: the last error, and when the scheduler may try again (back-off, never a loop).
        self.close_failures = 0
        self.close_failures_total = 0
        self.last_close_error: dict[str, Any] | None = None
        self._close_retry_at = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        tick = self.config.iteration.tick_seconds
        memory: Memory = (0, None, -1)
        while True:
            await asyncio.sleep(tick)
            try:
                memory = await self.tick(*memory)
            except Exception:  # keep scheduling: a failed tick is logged, the next one runs
                log.exception("the iteration scheduler failed; continuing")

    async def tick(self, stable: int, last_sign: np.ndarray | None, last_iteration: int) -> Memory:
        """One look at the open iteration. ``stable`` counts ticks over which the
        aggregate's sign has not changed (the adaptive policy); returns the new memory."""
        engine = self.engine
        snap = engine.snapshot()
        if snap.paused or snap.budget_spent or time.monotonic() < self._close_retry_at:
            return stable, last_sign, last_iteration
        if snap.iteration != last_iteration:
            stable, last_sign, last_iteration = 0, None, snap.iteration
        if self.rounds is not None:
            await self._round(self.rounds, snap.updates_in_iteration)
            return stable, last_sign, last_iteration
        if self.config.iteration.stable_ticks and snap.updates_in_iteration:
            sign = np.sign(engine.round.running_update())
            same = last_sign is not None and np.array_equal(sign, last_sign)
            stable, last_sign = (stable + 1 if same else 0), sign
        minutes = (time.time() - snap.opened_at) / 60.0
        if self.policy.should_close(OpenIteration(minutes, snap.updates_in_iteration, stable)):
            await self.close(self.policy.name)
        return stable, last_sign, last_iteration

    async def close(self, reason: str) -> bool:
        """Close the iteration; returns whether it closed. A close that fails (a safeguard
        refuses the step, the store fails) is logged and retried after an exponential
        back-off of ``tick * 2**k`` seconds, at most 5 minutes, never in a loop;
        ``/v1/status`` shows the failures and the last error until a close succeeds. An
        operator's pause applied after the scheduler looked wins: no close."""
        outcome = await self.engine.writer.command("close", reason=reason, scheduled=True)
        if outcome.status == 200:
            self.close_failures, self.last_close_error = 0, None
            return True
        if outcome.body.get("error") in ("empty", "too_few", "paused"):
            return False  # nothing to close yet, or paused meanwhile: not a failure
        self.close_failures += 1
        self.close_failures_total += 1
        self.last_close_error = outcome.body
        delay = min(self.config.iteration.tick_seconds * 2.0**self.close_failures, 300.0)
        self._close_retry_at = time.monotonic() + delay
        log.error(
            "closing the iteration failed (%s: %s); next try in %.2g s",
            outcome.body.get("error"),
            outcome.body.get("detail"),
            delay,
        )
        return False

    async def _round(self, rounds: Rounds, n_updates: int) -> None:
        rounds.select(time.time())  # the window has ended: draw the seats
        if rounds.secagg is not None:
            await self._secure_round(rounds)
            return
        if not rounds.cohort.complete(time.time()):
            return
        if n_updates >= self.config.iteration.min_updates and not await self.close(
            f"round {rounds.cohort.number} complete"
        ):
            return  # the round stays open until its close succeeds
        rounds.next()

    async def _secure_round(self, rounds: Rounds) -> None:
        """Advance the round's secure aggregation; once it has the sum, fold it in as one
        aggregate of ``|U3|`` unit-weight updates and close the iteration; after a finished
        or aborted session the next round starts."""
        sa = rounds.secagg
        assert sa is not None
        sa.advance(time.time())
        if sa.ready and not sa.finished:
            await asyncio.get_running_loop().run_in_executor(None, sa.finish)
        if sa.aborted is not None:
            log.warning("secure aggregation of round %d aborted: %s", sa.number, sa.aborted)
        elif sa.result is not None:
            if not sa.stored:
                n = sa.result.contributors
                state = WeightedMeanState(sa.result.total, float(n), n)
                text = orjson.dumps(self.engine.aggregator.state_to_json(state)).decode()
                version = self.engine.snapshot().version
                item = Incoming(
                    f"secagg-{sa.session_id.hex()}", version, self.branch,
                    "aggregate", text, {}, aggregate=state, count=n,
                )  # fmt: skip
                (outcome,) = await self.engine.writer.submit([item])
                sa.stored = outcome.status == 202
                if not sa.stored:
                    log.error("the secure aggregate was refused: %s", outcome.body)
            if sa.stored:  # stored once; a failed close is retried, never the aggregate
                await self.close(f"round {sa.number} securely aggregated")
                if self.close_failures:
                    return  # the round stays until its close succeeds
        else:
            return
        rounds.next()
