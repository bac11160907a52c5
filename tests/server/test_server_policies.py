"""Iteration policies end to end on real servers with short timings (Mozilla paper, Sec. 6.4):
a minimum count, a fixed time (never closing an empty iteration), and the adaptive rule that
waits until the aggregate's sign has been stable for ``stable_ticks`` ticks. Plus the policy
objects and the study-branch assignment in-process."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from fedrank.core.iteration_policy import AllOf, FixedTime, MinUpdates, OpenIteration, SignStable
from fedrank.server.branches import branch_of
from fedrank.server.config import load_config
from fedrank.server.scheduler import make_policy
from tests.server.serverkit import (
    Live,
    closed_iteration,
    es_message,
    live_server,
    status,
    wait_until,
)

TICK = 0.05
TOML = f"""
[server]
workload = "foltr-es"
[iteration]
tick_seconds = {TICK}
"""


def _send_es(live: Live, tag: str, n: int) -> None:
    version = live.version()
    messages = [es_message(f"{tag}-{i}", version, i, 0.5, 0.25) for i in range(n)]
    body = live.client.post("/v1/updates:batch", json={"messages": messages}).json()
    assert body["accepted"] == n, body


def _ticks_pass(live: Live, ticks: int) -> None:
    """Let the scheduler look ``ticks`` times (waiting on the clock, not on the server)."""
    end = time.monotonic() + ticks * TICK
    wait_until(lambda: time.monotonic() > end, what=f"{ticks} ticks")


def test_make_policy_combines_the_configured_rules() -> None:
    assert make_policy(load_config(seconds=0, min_updates=7)) == MinUpdates(7)
    both = make_policy(load_config(seconds=90, min_updates=3))
    assert both == AllOf((MinUpdates(3), FixedTime(1.5)))
    assert both.name == "min-updates(3) and fixed-time(1.5 min)"
    adaptive = make_policy(load_config(seconds=0, min_updates=2, stable_ticks=4))
    assert adaptive == AllOf((MinUpdates(2), SignStable(4, 2)))
    assert adaptive.should_close(OpenIteration(0.0, 2, 4))
    assert not adaptive.should_close(OpenIteration(0.0, 2, 3))
    assert not adaptive.should_close(OpenIteration(0.0, 1, 10))
    fixed = FixedTime(1.0)
    assert not fixed.should_close(OpenIteration(5.0, 0, 0))  # nothing arrived: never close
    assert fixed.should_close(OpenIteration(1.0, 1, 0))


def test_branch_assignment_is_stable_and_follows_the_shares() -> None:
    shares = [("treatment", 0.6), ("control", 0.2), ("control-no-decay", 0.2)]
    ids = [f"enrollment-{i}" for i in range(6000)]
    first = [branch_of(e, shares) for e in ids]
    assert first == [branch_of(e, shares) for e in ids]
    counts = {name: first.count(name) / len(ids) for name, _ in shares}
    for name, share in shares:
        assert counts[name] == pytest.approx(share, abs=0.025)
    assert branch_of(None, shares) == branch_of("", shares) == "treatment"
    assert branch_of("x", [("only", 1.0)]) == "only"


def test_min_updates_policy(tmp_path: Path) -> None:
    with live_server(tmp_path, TOML, iteration_seconds=0, iteration_min_updates=5) as live:
        assert status(live.client)["policy"] == "min-updates(5)"
        _send_es(live, "mu-a", 4)
        _ticks_pass(live, 4)
        assert status(live.client)["model_version"] == 0  # 4 < 5: still collecting
        _send_es(live, "mu-b", 1)
        wait_until(lambda: live.version() == 1, what="the close at 5 updates")
        record = closed_iteration(live.store, 0)
        assert record["n_updates"] == 5 and record["reason"] == "min-updates(5)"
        _send_es(live, "mu-c", 12)  # more than enough at once: one close takes them all
        wait_until(lambda: live.version() == 2, what="the second close")
        assert closed_iteration(live.store, 1)["n_updates"] == 12
        assert status(live.client)["updates_in_iteration"] == 0


def test_fixed_time_policy(tmp_path: Path) -> None:
    seconds = 1.0
    with live_server(tmp_path, TOML, iteration_seconds=seconds, iteration_min_updates=1) as live:
        opened = time.time()
        wait_until(lambda: time.time() > opened + seconds + 4 * TICK, what="the period to pass")
        assert live.version() == 0  # an empty iteration is never closed
        _send_es(live, "ft-a", 1)
        wait_until(lambda: live.version() == 1, what="the overdue close")
        _send_es(live, "ft-b", 2)
        sent = time.time()
        wait_until(lambda: live.version() == 2, what="the next period's close")
        iterations = live.client.get("/v1/summary").json()["iterations"]
        second = next(it for it in iterations if it["iteration"] == 1)
        assert second["closed_at"] - second["opened_at"] >= seconds
        assert second["closed_at"] >= sent
        assert "fixed-time(" in second["reason"] and second["n_updates"] == 2


FEDAVG = f"""
[server]
workload = "fedavg"
[fedavg]
dim = 4
[iteration]
tick_seconds = {TICK}
stable_ticks = 4
"""


def test_adaptive_sign_stable_policy(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    with live_server(tmp_path, FEDAVG, iteration_seconds=0, iteration_min_updates=3) as live:
        assert "sign-stable(4 ticks, >= 3)" in status(live.client)["policy"]

        def send(tag: str, count: int) -> None:
            version = live.version()
            messages = [
                {
                    "message_id": f"{tag}-{i}",
                    "model_version": version,
                    "payload": {"delta": (1.0 + rng.random(4)).tolist(), "n": 1},
                }
                for i in range(count)
            ]
            body = live.client.post("/v1/updates:batch", json={"messages": messages}).json()
            assert body["accepted"] == count

        send("ss-a", 2)
        _ticks_pass(live, 8)  # the sign is stable, but 2 < 3 updates
        assert live.version() == 0
        send("ss-b", 1)
        wait_until(lambda: live.version() == 1, what="the adaptive close")
        assert "sign-stable" in closed_iteration(live.store, 0)["reason"]
        # A fresh iteration: the sign must be seen unchanged for 4 ticks after it appears.
        sent = time.time()
        send("ss-c", 3)
        wait_until(lambda: live.version() == 2, what="the second adaptive close")
        second = next(
            it for it in live.client.get("/v1/summary").json()["iterations"] if it["iteration"] == 1
        )
        assert second["closed_at"] - sent >= 4 * TICK - 0.02  # timers may fire a bit early
