"""The privacy factory (:mod:`fedrank.federation.privacy`): one config, the same private
strategy for every runner and the server -- central DP's calibrated Gaussian wrapper,
distributed DP's Skellam emulation, or the strategy itself -- and every place that folds
updates (a round, a proxy, a cluster worker) applies the private strategy's rule."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.aggregators.hierarchy import Topology, hierarchical_aggregate
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.federation.privacy import PrivacyConfig, private, run_record
from fedrank.federation.round import Round
from fedrank.privacy.accounting import gaussian_epsilon
from fedrank.strategies.distributed_dp import DistributedDPStrategy
from fedrank.strategies.dp import DPStrategy
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.foltr_es.config import FoltrEsConfig
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy

BUDGET = PrivacyConfig(epsilon=2.0, delta=1e-6, clip=1.0)


def _fedavg(dim: int = 4) -> FedAvgStrategy:
    return FedAvgStrategy(FedAvgConfig(dim=dim))


def test_no_budget_is_the_strategy_itself() -> None:
    strategy = _fedavg()
    assert private(strategy, None, rounds=5, rng=0) is strategy


def test_central_dp_is_calibrated_to_the_budget_over_the_rounds() -> None:
    dp = private(_fedavg(), BUDGET, rounds=10, rng=0)
    assert isinstance(dp, DPStrategy) and dp.clip == 1.0
    assert gaussian_epsilon(dp.noise_multiplier, 1e-6, 10) <= 2.0
    assert gaussian_epsilon(dp.noise_multiplier * 0.98, 1e-6, 10) > 2.0  # the smallest noise
    sampled = private(_fedavg(), BUDGET, rounds=10, rng=0, sampling_rate=0.1)
    assert sampled.noise_multiplier < dp.noise_multiplier  # type: ignore[attr-defined]
    given = private(_fedavg(), BUDGET, rounds=10, rng=0, noise_multiplier=0.5)
    assert given.noise_multiplier == 0.5  # type: ignore[attr-defined]
    record = run_record(dp, BUDGET, 10, [5] * 10)
    assert record["target_epsilon"] == 2.0 and record["epsilon"] <= 2.0


def test_the_same_seed_gives_the_same_noise() -> None:
    def one_step(seed: int) -> np.ndarray:
        round_ = Round(private(_fedavg(), BUDGET, rounds=3, rng=seed))
        round_.fold(MessageBatch.of_vectors(np.ones((3, 4)), np.ones(3)))
        round_.close()
        return round_.params

    np.testing.assert_array_equal(one_step(7), one_step(7))
    assert not np.array_equal(one_step(7), one_step(8))


def test_distributed_dp_plans_for_the_reporting_clients() -> None:
    budget = PrivacyConfig(epsilon=4.0, delta=1e-6, clip=1.0, mode="distributed", threshold=0.75)
    dp = private(_fedavg(50), budget, rounds=2, rng=0, clients=4)
    assert isinstance(dp, DistributedDPStrategy)
    assert dp.plan == budget.skellam_plan(2, 50, 4) and dp.plan.threshold == 3
    with pytest.raises(ConfigError, match="clients who report"):
        private(_fedavg(50), budget, rounds=2, rng=0)
    with pytest.raises(ConfigError, match="at least 2 reporting clients"):
        budget.skellam_plan(2, 50, 1)
    assert run_record(dp, budget, 2)["mode"] == "distributed"


def test_seeds_and_metrics_cannot_take_central_dp() -> None:
    with pytest.raises(ConfigError, match="randomized response"):
        private(FoltrEsStrategy(FoltrEsConfig()), BUDGET, rounds=3, rng=0)
    with pytest.raises(ConfigError, match="not a private strategy"):
        run_record(_fedavg(), BUDGET, 3)


def test_proxies_fold_by_the_private_strategy_s_rule() -> None:
    """Under central DP a proxy clips every update and weighs it 1 whatever its claimed
    ``n`` (DP-FedAvg's unweighted mean): the round's mean is the same whether the updates
    came directly or through proxies, and it does not move with ``n``."""
    rows = np.array([[3.0, 4.0], [0.0, 0.5], [0.2, 0.0], [6.0, 8.0]])
    topology = Topology.build(4, np.random.default_rng(0), clients_per_proxy=2)

    def mean(n: list[float], proxied: bool) -> np.ndarray:
        dp = private(FedAvgStrategy(FedAvgConfig(dim=2)), BUDGET, rounds=3, rng=1)
        round_ = Round(dp)
        batch = MessageBatch.of_vectors(rows, np.array(n))
        if proxied:
            merged = hierarchical_aggregate(
                dp.aggregator,
                topology,
                np.arange(4),
                batch,
                empty=round_.empty(),
                fold=dp.accumulate,
            )
            round_.merge(merged.state)
        else:
            round_.fold(batch)
        return round_.running_update()

    clipped = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1.0)
    for proxied in (False, True):
        for n in ([1.0] * 4, [100.0, 1.0, 1.0, 1.0]):
            np.testing.assert_allclose(mean(n, proxied), clipped.mean(axis=0), atol=1e-15)
