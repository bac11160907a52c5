"""The one round loop (:mod:`fedrank.federation.round`), for every system of the registry:
a round starts from the strategy's first model and zero, folds batches and merged partial
aggregates, closes with the strategy's server step (the model moves the way the clients'
messages point, within the safeguards), opens the next round from ``next_zero`` (an
adaptive norm bound carries over), counts versions, and leaves itself unchanged when a
close fails."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.errors import FedrankError
from fedrank.federation.registry import SYSTEMS
from fedrank.federation.round import Round, RoundState
from fedrank.strategies.base import SafeguardError, Strategy
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy

#: Each system's settings for these tests (small where a model has a size).
CONFIGS: dict[str, dict[str, Any]] = {
    "frecency": {"significance_z": 0.0},
    "foltr-es": {"n_features": 5, "learning_rate": 0.05},
    "fedavg": {"dim": 6, "server_learning_rate": 0.5},
    "fpdgd": {"n_features": 5, "server_learning_rate": 0.5},
}
#: Systems whose aggregation can bound update norms adaptively (``norm_quantile``).
BOUNDED = ("frecency", "fedavg", "fpdgd")


def _strategy(name: str, **extra: Any) -> Strategy:
    system = SYSTEMS[name]
    return system.strategy(system.config(**CONFIGS[name], **extra))


def _uphill(strategy: Strategy, direction: np.ndarray, m: int = 8) -> MessageBatch:
    """``m`` messages that all say the model should move along ``direction``: gradients
    that point the other way (frecency), deltas along it (FedAvg, FPDGD), seeds whose noise
    the clients found better along it (FOLtR-ES)."""
    if strategy.name == "frecency":
        return MessageBatch.of_vectors(np.tile(-direction, (m, 1)), np.ones(m))
    if strategy.name == "foltr-es":
        seeds = np.arange(m, dtype=np.uint64) * 7919 + 1
        better = np.array([gaussian_noise(int(s), strategy.dim) @ direction > 0 for s in seeds])
        return MessageBatch.of_es(seeds, np.where(better, 0.9, 0.1), np.where(better, 0.1, 0.9))
    return MessageBatch.of_vectors(np.tile(0.1 * direction, (m, 1)), np.full(m, 2.0))


def test_every_system_of_the_registry_is_tested_here() -> None:
    assert set(CONFIGS) == set(SYSTEMS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_round_starts_from_the_strategy_and_steps_where_the_messages_point(name: str) -> None:
    """Flipping the step's direction anywhere in the chain (the optimizer, ``Scale(-1)``, the
    aggregator's sign) fails here for every system."""
    strategy = _strategy(name)
    round_ = Round(strategy)
    start = strategy.initial_params()
    np.testing.assert_array_equal(round_.params, start)
    assert round_.version == 0
    np.testing.assert_array_equal(round_.model(), strategy.publish(start))
    direction = np.where(np.arange(strategy.dim) % 2 == 0, 1.0, -1.0)
    round_.fold(_uphill(strategy, direction))
    closed = round_.close()
    assert closed.version == round_.version == 1
    moved = round_.params - start
    np.testing.assert_array_equal(closed.step.params, round_.params)
    if name == "frecency":  # Rprop's first step of 1 on every weight, where the safeguards let it
        free = start + direction >= 0
        np.testing.assert_array_equal(moved[free], direction[free])
    else:
        assert moved @ direction > 0.5 * np.linalg.norm(moved) * np.linalg.norm(direction)


def test_the_frecency_step_is_projected_onto_the_safeguards() -> None:
    """Gradients that push every weight down by far more than a step: Rprop steps by 1, the
    safeguards (Sec. 5.6) hold the weights at or above 0 and in order; skipping the
    projection fails here."""
    strategy = FrecencyStrategy(FrecencyConfig(significance_z=0.0, step_init=3.0))
    round_ = Round(strategy)
    round_.fold(MessageBatch.of_vectors(np.full((4, strategy.dim), 1e3), np.ones(4)))
    round_.close()
    assert strategy.constraints is not None
    assert strategy.constraints.holds(round_.params, strategy.initial_params())
    assert (round_.params >= 0).all() and (round_.params == 0).any()


@pytest.mark.parametrize("name", BOUNDED)
def test_an_adaptive_norm_bound_carries_from_round_to_round(name: str) -> None:
    """Andrew et al.'s rule: with every update above the bound the bound grows by
    ``exp(eta (1 - gamma))`` per round, from the round before's, never from the configured
    start; skipping ``next_zero`` (starting every round from ``zero``) fails here."""
    strategy = _strategy(name, norm_bound=0.01, norm_quantile=0.5)
    round_ = Round(strategy)
    bounds = []
    for _ in range(3):
        bounds.append(round_.aggregate.bound)
        assert round_.empty().bound == round_.aggregate.bound
        rows = np.full((5, strategy.dim), 1.0)
        round_.fold(MessageBatch.of_vectors(rows, np.ones(5)))
        round_.close()
    growth = math.exp(0.2 * 0.5)
    np.testing.assert_allclose(bounds, [0.01, 0.01 * growth, 0.01 * growth**2], rtol=1e-14)


def test_partial_aggregates_from_the_empty_state_merge_as_folding() -> None:
    """A proxy or a cluster worker folds from :meth:`Round.empty`; merging its state equals
    folding the same messages into the round."""
    strategy = FedAvgStrategy(FedAvgConfig(dim=3, norm_bound=1.0, norm_quantile=0.5))
    direct, merged = Round(strategy), Round(strategy)
    rows = np.random.default_rng(1).normal(size=(6, 3))
    batch = MessageBatch.of_vectors(rows, np.arange(1.0, 7.0))
    direct.fold(batch)
    merged.merge(strategy.accumulate(merged.empty(), batch.take(np.arange(3))))
    merged.merge(strategy.accumulate(merged.empty(), batch.take(np.arange(3, 6))))
    np.testing.assert_allclose(direct.running_update(), merged.running_update(), atol=1e-15)
    direct.close()
    merged.close()
    np.testing.assert_allclose(direct.params, merged.params, atol=1e-15)


def test_a_failed_close_leaves_the_round_open_and_unchanged() -> None:
    """A store that fails to record the close (``publish`` raises) or a step the safeguards
    refuse: the round keeps its model, aggregate and version, and closes later."""
    strategy = FedAvgStrategy(FedAvgConfig(dim=2))
    round_ = Round(strategy)
    round_.fold(MessageBatch.of_vectors(np.ones((2, 2)), np.ones(2)))
    before = round_.state

    def failing(_: object) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        round_.close(failing)
    assert round_.state is before
    published = []
    closed = round_.close(published.append)
    assert published == [closed] and round_.version == 1
    np.testing.assert_array_equal(round_.params, [1.0, 1.0])

    frecency = FrecencyStrategy(FrecencyConfig())

    class Impossible(FrecencyStrategy):
        def step_from(self, aggregate: np.ndarray, params: np.ndarray, opt_state: Any) -> Any:
            raise SafeguardError("the safeguards could not be satisfied")

    stuck = Round(Impossible(frecency.config))
    stuck.fold(MessageBatch.of_vectors(np.ones((1, frecency.dim)), np.ones(1)))
    state = stuck.state
    with pytest.raises(FedrankError, match="safeguards"):
        stuck.close()
    assert stuck.state is state and stuck.version == 0


def test_resume_goes_on_from_a_stored_model_and_the_closed_aggregate() -> None:
    """A restarted server: the stored parameters, optimizer state and version, and the next
    round's empty aggregate recomputed from the closed round's final one."""
    strategy = FedAvgStrategy(FedAvgConfig(dim=2, norm_bound=1.0, norm_quantile=0.5))
    live = Round(strategy)
    live.fold(MessageBatch.of_vectors(np.full((3, 2), 5.0), np.ones(3)))
    closed = live.close()
    again = Round.resume(
        strategy, closed.step.params, closed.step.opt_state, closed.version, closed.aggregate
    )
    assert again.state.version == live.version
    for state in (again.aggregate, again.empty()):
        assert state.bound == live.aggregate.bound and state.count == 0
    np.testing.assert_array_equal(again.params, live.params)
    fresh = Round.resume(strategy, np.zeros(2), strategy.init(np.zeros(2)), 4)
    assert fresh.aggregate.bound == 1.0 and fresh.version == 4


def test_restart_from_keeps_the_version_and_starts_a_fresh_optimizer() -> None:
    strategy = FedAvgStrategy(FedAvgConfig(dim=2, server_learning_rate=1.0))
    round_ = Round(
        strategy, RoundState(np.zeros(2), strategy.init(np.zeros(2)), strategy.zero(), 3)
    )
    round_.restart_from(np.array([4.0, 5.0]))
    assert round_.version == 3
    round_.fold(MessageBatch.of_vectors(np.array([[1.0, -1.0]]), np.ones(1)))
    round_.close()
    np.testing.assert_array_equal(round_.params, [5.0, 4.0])
    assert round_.version == 4
