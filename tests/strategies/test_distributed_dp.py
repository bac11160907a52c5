"""Distributed DP in one process (fedrank.strategies.distributed_dp): the encoding equals
the service's encoder, a round's aggregate is the decoded sum of encoded updates and the
clients' Skellam noise over its contributors, a round below the threshold releases
nothing, and the guarantee is the plan's."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.federation.privacy import PrivacyConfig
from fedrank.privacy import skellam
from fedrank.secagg.field import FixedPointEncoder
from fedrank.strategies.distributed_dp import DistributedDPStrategy
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy

DIM, CLIP, K = 6, 1.0, 20


def _strategy(seed: int = 3, threshold: int = 10) -> DistributedDPStrategy:
    plan = skellam.plan(4.0, 1e-6, 5, CLIP, DIM, K, threshold)
    return DistributedDPStrategy(FedAvgStrategy(FedAvgConfig(dim=DIM)), plan, seed)


def _updates(m: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(m, DIM))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * rng.uniform(0.1, 3.0, (m, 1))


def _round(strategy: DistributedDPStrategy, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    state = strategy.accumulate(strategy.zero(), MessageBatch.of_vectors(rows, np.ones(len(rows))))
    params = strategy.initial_params()
    step = strategy.server_step(state, params, strategy.init(params))
    return step.aggregate, step.params


def test_encoding_equals_the_services_encoder_row_by_row() -> None:
    strategy, rows = _strategy(), _updates(K)
    encoder = FixedPointEncoder(strategy.plan.scale, K, l2_bound=CLIP)
    expected = np.stack(
        [np.rint(encoder.clip(r) * strategy.plan.scale).astype(np.int64) for r in rows]
    )
    np.testing.assert_array_equal(strategy.aggregator.encode(rows), expected)


def test_a_round_is_the_decoded_noisy_sum_over_its_contributors() -> None:
    strategy, rows = _strategy(), _updates(15)
    aggregate, _ = _round(strategy, rows)
    plan = strategy.plan
    noise = skellam.skellam_noise(np.random.default_rng(3), plan.client_variance * 15, DIM)
    total = strategy.aggregator.encode(rows).sum(axis=0) + noise
    np.testing.assert_allclose(aggregate, total / plan.scale / 15, rtol=0, atol=1e-12)
    clear = strategy.aggregator.encode(rows).sum(axis=0) / plan.scale / 15
    assert np.max(np.abs(aggregate - clear)) > 10 / plan.scale  # noised, well past rounding
    assert strategy.released == [15]


def test_a_round_below_the_threshold_releases_nothing() -> None:
    strategy = _strategy(threshold=10)
    params = strategy.initial_params()
    aggregate, after = _round(strategy, _updates(9))
    np.testing.assert_array_equal(after, params)
    np.testing.assert_array_equal(aggregate, np.zeros(DIM))
    _round(strategy, _updates(12))
    assert strategy.released == [0, 12]
    privacy = strategy.run_privacy(2)
    assert privacy["aborted_iterations"] == 1 and privacy["contributors_per_iteration"] == [0, 12]
    assert privacy["epsilon"] == pytest.approx(strategy.plan.epsilon_after(2), rel=1e-12)
    assert privacy["mechanism"] == "skellam (distributed, secure aggregation)"


def test_same_seed_same_noise_and_what_is_refused() -> None:
    rows = _updates(12)
    np.testing.assert_array_equal(_round(_strategy(5), rows)[0], _round(_strategy(5), rows)[0])
    assert not np.array_equal(_round(_strategy(5), rows)[0], _round(_strategy(6), rows)[0])
    plan = skellam.plan(4.0, 1e-6, 5, CLIP, DIM + 1, K, 10)
    with pytest.raises(ConfigError, match="plan is for 7 coordinates"):
        DistributedDPStrategy(FedAvgStrategy(FedAvgConfig(dim=DIM)), plan, 0)
    with pytest.raises(ConfigError, match="drop clip_quantile and denominator"):
        PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, mode="distributed", denominator=5.0)
    with pytest.raises(ConfigError, match="threshold must be in"):
        PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, mode="distributed", threshold=0.0)
