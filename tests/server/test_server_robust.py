"""Robust aggregation in the server (docs/service.md, "Robust aggregation"), in-process on
a real store directory: a ``[frecency]`` section with the median and an adaptive norm
bound builds, closes iterations with the same model as the strategy in process, moves the
bound by Andrew et al.'s rule, keeps it across a restart (recomputed from the stored final
aggregate of the last closed iteration), refuses a proxy state of another bound, and
refuses updates beyond ``max_rows`` before storing them."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from fedrank.aggregators import CoordinateMedian, NormBounded
from fedrank.core.message import MessageBatch
from fedrank.server.engine import Engine
from fedrank.server.messages import Incoming, Messages
from fedrank.systems.frecency.strategy import FrecencyStrategy
from tests.server.serverkit import offline_config

TOML = """
[server]
workload = "frecency"
[iteration]
seconds = 0.0
[frecency]
significance_z = 0.0
aggregator = "median"
norm_bound = 1.0
norm_quantile = 0.5
"""


def _update(engine: Engine, message_id: str, gradient: np.ndarray, version: int) -> Incoming:
    payload = {"gradient": gradient.tolist(), "n": 3}
    parsed = engine.workload.wire.parse(payload)
    text = orjson.dumps(payload).decode()
    return Incoming(message_id, version, "treatment", "update", text, {}, parsed=parsed)


def _gradients(seed: int, count: int, norm: float) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, 22))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * norm


def test_a_median_server_with_an_adaptive_bound_closes_and_keeps_the_bound(
    tmp_path: Path,
) -> None:
    config = offline_config(TOML, tmp_path, store=str(tmp_path / "store"))
    assert (
        config.sections["frecency"].aggregator == "median"
        and config.sections["frecency"].norm_quantile == 0.5
    )
    first = _gradients(1, 9, 3.0)  # all above the bound 1.0: b = 0, the bound grows
    second = _gradients(2, 5, 0.5)  # all within the grown bound

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        engine = Engine(config, asyncio.get_running_loop())
        try:
            agg = engine.aggregator
            assert isinstance(agg, NormBounded) and isinstance(agg.inner, CoordinateMedian)
            out["params0"] = engine.round.params.copy()
            items = [_update(engine, f"a{k}", g, 0) for k, g in enumerate(first)]
            out["accepted"] = [o.status for o in await engine.writer.submit(items)]
            out["state0"] = engine.round.aggregate
            out["close"] = await engine.writer.command("close", reason="test", force=True)
            out["params1"] = engine.round.params.copy()
            out["bound1"] = engine.round.aggregate.bound
            out["served_bound1"] = engine.snapshot().norm_bound  # GET /v1/model serves it
            # A proxy that folded from the configured zero (bound 1.0) is refused; one that
            # folded from the open iteration's empty state is merged.
            stale = agg.accumulate_batch(
                agg.zero(), MessageBatch.of_vectors(second[:2], np.ones(2))
            )
            fresh = agg.accumulate_batch(
                engine.round.aggregate, MessageBatch.of_vectors(second[:2], np.ones(2))
            )
            proxy = [
                Incoming(name, 1, "treatment", "aggregate",
                         orjson.dumps(agg.state_to_json(state)).decode(), {}, aggregate=state,
                         count=2)
                for name, state in (("proxy-stale", stale), ("proxy-fresh", fresh))
            ]  # fmt: skip
            out["proxy"] = await engine.writer.submit(proxy)
            items = [_update(engine, f"b{k}", g, 1) for k, g in enumerate(second[2:])]
            await engine.writer.submit(items)
            out["before_restart"] = agg.state_to_json(engine.round.aggregate)
        finally:
            engine.stop()
        restarted = Engine(config, asyncio.get_running_loop())
        try:
            out["after_restart"] = restarted.aggregator.state_to_json(restarted.round.aggregate)
            out["close2"] = await restarted.writer.command("close", reason="test", force=True)
            out["bound2"] = restarted.round.aggregate.bound
        finally:
            restarted.stop()
        again = Engine(config, asyncio.get_running_loop())  # a restart right after a close
        try:
            out["bound2_restart"] = again.round.aggregate.bound
            out["count2_restart"] = again.round.aggregate.count
        finally:
            again.stop()
        return out

    r = asyncio.run(scenario())
    assert r["accepted"] == [202] * 9 and r["close"].status == 200
    state0 = r["state0"]
    assert (state0.bound, state0.within, state0.count) == (1.0, 0, 9)
    # The server's close is the strategy's server step on the median of the clipped rows.
    strategy = FrecencyStrategy(config.sections["frecency"])
    expected = strategy.server_step(
        strategy.accumulate(strategy.zero(), MessageBatch.of_vectors(first, np.full(9, 3.0))),
        r["params0"],
        strategy.init(r["params0"]),
    )
    np.testing.assert_array_equal(r["params1"], expected.params)
    assert not np.array_equal(r["params1"], r["params0"])
    assert r["bound1"] == math.exp(-0.2 * (0.0 - 0.5))  # Andrew et al.: C exp(-eta (b - gamma))
    assert r["served_bound1"] == r["bound1"]
    stale_answer, fresh_answer = r["proxy"]
    assert stale_answer.status == 422 and stale_answer.body["error"] == "invalid_aggregate"
    assert "different norm bounds" in stale_answer.body["detail"]
    assert fresh_answer.status == 202
    # The restart replays the open iteration at the bound it had (not the configured 1.0).
    assert r["after_restart"] == r["before_restart"]
    assert r["after_restart"]["bound"] == r["bound1"]
    assert r["close2"].status == 200
    # Iteration 1: all 5 within the bound (b = 1): it shrinks by exp(-0.1).
    assert r["bound2"] == r["bound1"] * math.exp(-0.2 * (1.0 - 0.5))
    assert (r["bound2_restart"], r["count2_restart"]) == (r["bound2"], 0)


def test_updates_beyond_max_rows_wait_for_the_next_iteration(tmp_path: Path) -> None:
    """A median keeps every update: beyond ``max_rows`` the writer answers 503
    ``iteration_full`` before storing (a retry after the close is accepted), instead of
    failing the fold after the commit."""
    toml = TOML + "max_rows = 3\n"
    config = offline_config(toml, tmp_path, store=str(tmp_path / "store"))
    rows = _gradients(3, 5, 0.5)

    async def scenario() -> dict[str, Any]:
        engine = Engine(config, asyncio.get_running_loop())
        try:
            out: dict[str, Any] = {}
            items = [_update(engine, f"m{k}", g, 0) for k, g in enumerate(rows)]
            out["batch"] = await engine.writer.submit_columns(Messages.of(items, engine.workload))
            out["count"] = engine.round.aggregate.count
            out["rejected"] = engine.rejected()["iteration_full"]
            out["close"] = await engine.writer.command("close", reason="test", force=True)
            late = [_update(engine, f"m{k}", rows[k], 1) for k in (3, 4)]
            out["retry"] = [o.status for o in await engine.writer.submit(late)]
            return out
        finally:
            engine.stop()

    r = asyncio.run(scenario())
    assert r["batch"].statuses.tolist() == [202, 202, 202, 503, 503]
    assert r["batch"].bodies[3]["error"] == "iteration_full"
    assert "[frecency] max_rows" in r["batch"].bodies[3]["detail"]
    assert r["count"] == 3 and r["rejected"] == 2
    assert r["close"].status == 200 and r["retry"] == [202, 202]
