"""Rounds visit every client once, in N/K steps (FedPS Algorithm 1, Sec. 3.4)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.aggregators.hierarchy import Topology
from fedrank.errors import ConfigError
from fedrank.experiments.fedps.client_sampling import (
    flat_schedule,
    poisson_schedule,
    proxy_schedule,
)
from fedrank.experiments.fedps.communication import RoundTime, flat_round_time, proxy_round_time


def test_flat_round_visits_every_client_once() -> None:
    steps = flat_schedule(1_003, 10, np.random.default_rng(0))
    assert len(steps) == 101 and all(s.size == 10 for s in steps[:-1]) and steps[-1].size == 3
    assert sorted(np.concatenate(steps).tolist()) == list(range(1_003))
    again = flat_schedule(1_003, 10, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(steps, again, strict=True))


def test_poisson_steps_take_each_client_with_probability_k_over_n() -> None:
    """ceil(N / K) steps a round; over 400 rounds every client trains about once a round
    (K / N per step), step sizes vary (some may be empty), and a seed fixes everything."""
    n, k = 95, 10
    rounds = [poisson_schedule(n, k, np.random.default_rng(r)) for r in range(400)]
    assert {len(steps) for steps in rounds} == {10}
    counts = np.zeros(n)
    sizes = []
    for steps in rounds:
        for step in steps:
            assert (
                np.all(np.diff(step) > 0) and step.min(initial=0) >= 0 and step.max(initial=0) < n
            )
            counts[step] += 1
            sizes.append(step.size)
    per_round = counts / 400  # expected 10 steps x 10/95 = 1.05
    assert per_round.mean() == pytest.approx(100 / 95, rel=0.02)
    assert per_round.min() > 0.8 and per_round.max() < 1.3
    assert np.std(sizes) > 1.0  # Binomial(95, 10/95): sd 2.9
    again = poisson_schedule(n, k, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(rounds[3], again, strict=True))
    assert len(poisson_schedule(5, 10, np.random.default_rng(0))) == 1  # K capped at N
    with pytest.raises(ConfigError, match="K"):
        poisson_schedule(5, 0, np.random.default_rng(0))


def test_proxy_round_samples_k_over_10_proxies_of_10_clients() -> None:
    topology = Topology.build(1_000, np.random.default_rng(1), clients_per_proxy=100)
    steps = proxy_schedule(topology, 30, np.random.default_rng(2))
    assert sorted(np.concatenate(steps).tolist()) == list(range(1_000))
    for step in steps:
        # distinct proxies, 10 clients from each
        per_proxy = np.bincount(topology.proxy_of[step])
        assert set(per_proxy[per_proxy > 0].tolist()) == {10}
    sizes = [s.size for s in steps]
    assert sizes.count(30) >= 30 and len(steps) <= 40  # 100 chunks, 3 proxies per step
    with pytest.raises(ConfigError, match="multiple of"):
        proxy_schedule(topology, 25, np.random.default_rng(0))


def test_round_time_model() -> None:
    n = 2_000
    topology = Topology.build(n, np.random.default_rng(0), clients_per_proxy=100)
    straggler = np.zeros(n, dtype=bool)
    straggler[:200] = True

    def late(steps: list[np.ndarray], slow: np.ndarray) -> list[np.ndarray]:
        return [slow[s] for s in steps]

    flat_steps = flat_schedule(n, 100, np.random.default_rng(1))
    flat = flat_round_time(flat_steps, late(flat_steps, straggler))
    assert flat == RoundTime(2.0 * n, 200.0)  # the paper's 2NT + (late responses) d
    steps = proxy_schedule(topology, 100, np.random.default_rng(1))
    proxy = proxy_round_time(steps, late(steps, straggler), topology)
    # one group server; per step 2 x (1 group server + 10 proxies + at most 10 clients)
    assert proxy.d_units == 0 and proxy.t_units <= len(steps) * 2 * (1 + 10 + 10)
    none = proxy_round_time(steps, late(steps, np.zeros(n, dtype=bool)), topology)
    assert none.t_units == len(steps) * 2 * (1 + 10 + 10)
    # stragglers offload to their proxy: their exchange is not counted
    everyone = proxy_round_time(steps, late(steps, np.ones(n, dtype=bool)), topology)
    assert everyone.t_units == len(steps) * 2 * (1 + 10) < none.t_units
    assert str(flat) == "4000T + 200d"
    with pytest.raises(ConfigError, match="one bool mask per step"):
        flat_round_time(flat_steps, late(flat_steps, straggler)[:-1])
