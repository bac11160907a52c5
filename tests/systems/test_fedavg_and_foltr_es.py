"""The FedAvg and FOLtR-ES strategies: their server steps on hand-computed cases and their
config sections."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.errors import ConfigError
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.foltr_es.config import FoltrEsConfig
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy


def test_fedavg_adds_eta_s_times_the_weighted_mean_delta() -> None:
    """FedPS Algorithm 1 with a server step size: M + eta_s sum n_j d_j / sum n_j."""
    strategy = FedAvgStrategy(FedAvgConfig(dim=3, server_learning_rate=2.0))
    agg = strategy.aggregator
    deltas = np.array([[1.0, 0.0, -4.0], [0.0, 3.0, 0.0]])
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(deltas, np.array([1.0, 3.0])))
    params = np.array([10.0, 10.0, 10.0])
    step = strategy.server_step(state, params, strategy.init(params))
    np.testing.assert_array_equal(step.params, [10.5, 14.5, 8.0])  # mean [.25, 2.25, -1]
    empty = strategy.server_step(agg.zero(), params, strategy.init(params))
    np.testing.assert_array_equal(empty.params, params)  # every update was late


def test_fedavg_keeps_a_float32_model_float32() -> None:
    """FedPS's models are float32: the step is computed in float64 and rounded once."""
    initial = np.zeros(2, dtype=np.float32)
    strategy = FedAvgStrategy(FedAvgConfig(dim=2, server_learning_rate=3.0), initial=initial)
    agg = strategy.aggregator
    state = agg.accumulate_batch(
        agg.zero(), MessageBatch.of_vectors(np.array([[0.1, -0.2]]), np.array([1.0]))
    )
    params = strategy.initial_params()
    step = strategy.server_step(state, params, strategy.init(params))
    assert step.params.dtype == np.float32
    np.testing.assert_array_equal(step.params, (3.0 * np.array([0.1, -0.2])).astype(np.float32))


def test_foltr_es_ascends_the_reported_metric() -> None:
    """Eq. 6 with antithetic variates: a client whose perturbation +v scored higher than -v
    moves the model along v (the metric is maximized), by Adam's first step (the learning
    rate per coordinate)."""
    config = FoltrEsConfig(n_features=5, learning_rate=0.01)
    strategy = FoltrEsStrategy(config)
    agg = strategy.aggregator
    seeds = np.array([17], dtype=np.uint64)
    state = agg.accumulate_batch(
        agg.zero(), MessageBatch.of_es(seeds, np.array([0.9]), np.array([0.1]))
    )
    params = strategy.initial_params()
    step = strategy.server_step(state, params, strategy.init(params))
    noise = gaussian_noise(seeds, 5)[0]
    np.testing.assert_allclose(step.params, 0.01 * np.sign(noise), rtol=1e-6)
    assert step.params.shape == (5,) and np.all(np.sign(step.params) == np.sign(noise))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: FedAvgConfig(dim=0), r"dim must be >= 1 \(an integer\)"),
        (lambda: FedAvgConfig(server_learning_rate=0.0), "server_learning_rate must be > 0"),
        (lambda: FoltrEsConfig(ranker="tree"), "ranker must be one of linear, two-layer"),
        (lambda: FoltrEsConfig(batch=3), "batch must be even with antithetic"),
        (
            lambda: FoltrEsConfig(p=0.05),
            r"p \(MaxRR at depth 10 has n = 11 values\) must be in \(1/11, 1\]",
        ),
        (lambda: FoltrEsConfig(sigma=float("nan")), "sigma must be > 0"),
        (lambda: FedAvgStrategy(FedAvgConfig(dim=2), initial=np.zeros(3)), r"shape \(2,\)"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build()
