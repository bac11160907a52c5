"""The aggregation settings of the frecency and FedAvg strategies: which aggregator each
builds, the refused combinations, and the next iteration's empty aggregate (the adaptive
norm bound) in the strategy and in the in-process frecency study."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fedrank.aggregators import (
    CoordinateMedian,
    GatedMean,
    NormBounded,
    SignVote,
    TrimmedMean,
    WeightedMean,
)
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.experiments.frecency.study import InProcessServer
from fedrank.federation.round import Round
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy


def test_frecency_builds_the_configured_aggregator() -> None:
    assert isinstance(FrecencyStrategy(FrecencyConfig()).aggregator, GatedMean)
    assert isinstance(FrecencyStrategy(FrecencyConfig(message="sign")).aggregator, SignVote)
    median = FrecencyStrategy(FrecencyConfig(aggregator="median", max_rows=50)).aggregator
    assert isinstance(median, CoordinateMedian) and median.max_rows == 50
    trimmed = FrecencyStrategy(FrecencyConfig(aggregator="trimmed-mean", trim=0.2)).aggregator
    assert isinstance(trimmed, TrimmedMean) and trimmed.trim == 0.2
    bounded = FrecencyStrategy(FrecencyConfig(norm_bound=2.0)).aggregator
    assert isinstance(bounded, NormBounded) and isinstance(bounded.inner, GatedMean)
    assert bounded.bound == 2.0 and not bounded.adaptive
    adaptive = FrecencyStrategy(
        FrecencyConfig(aggregator="trimmed-mean", norm_bound=2.0, norm_quantile=0.3)
    ).aggregator
    assert isinstance(adaptive, NormBounded) and isinstance(adaptive.inner, TrimmedMean)
    assert adaptive.quantile == 0.3


def test_fedavg_builds_the_configured_aggregator() -> None:
    assert isinstance(FedAvgStrategy(FedAvgConfig(dim=3)).aggregator, WeightedMean)
    median = FedAvgStrategy(FedAvgConfig(dim=3, aggregator="median")).aggregator
    assert isinstance(median, CoordinateMedian) and median.dim == 3
    bounded = FedAvgStrategy(
        FedAvgConfig(dim=3, aggregator="trimmed-mean", norm_bound=1.0, norm_quantile=0.5)
    ).aggregator
    assert isinstance(bounded, NormBounded) and isinstance(bounded.inner, TrimmedMean)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: FrecencyConfig(aggregator="mean"), "aggregator must be one of gated-mean"),
        (lambda: FrecencyConfig(message="sign", aggregator="median"), "needs full gradients"),
        (lambda: FrecencyConfig(message="sign", norm_bound=1.0), "norm_bound applies to full"),
        (lambda: FrecencyConfig(norm_quantile=0.5), "set norm_bound > 0"),
        (lambda: FrecencyConfig(norm_bound=1.0, norm_quantile=1.0), r"must be in \(0, 1\)"),
        (
            lambda: FrecencyConfig(norm_bound=-1.0),
            r"norm_bound .* must be >= 0 \(a finite number\)",
        ),
        (lambda: FrecencyConfig(trim=0.5), r"trim .* must be in \[0, 0\.5\)"),
        (lambda: FrecencyConfig(max_rows=0), r"max_rows .* must be >= 1 \(an integer\)"),
        (lambda: FedAvgConfig(aggregator="gated-mean"), "aggregator must be one of mean"),
        (lambda: FedAvgConfig(norm_bound=float("nan")), "norm_bound"),
    ],
)
def test_bad_aggregation_settings_are_refused_with_the_reason(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build()


def test_next_zero_carries_the_adaptive_bound_only() -> None:
    rows = np.full((4, 3), 10.0)  # every delta above the bound
    batch = MessageBatch.of_vectors(rows, np.ones(4))
    plain = FedAvgStrategy(FedAvgConfig(dim=3))
    assert not plain.carries_over and plain.capacity(plain.zero()) is None
    state = plain.accumulate(plain.zero(), batch)
    assert plain.next_zero(state).count == 0
    adaptive = FedAvgStrategy(
        FedAvgConfig(dim=3, aggregator="median", norm_bound=1.0, norm_quantile=0.5, max_rows=9)
    )
    assert adaptive.carries_over
    state = adaptive.accumulate(adaptive.zero(), batch)
    assert adaptive.capacity(state) == 5
    assert adaptive.next_zero(state).bound == pytest.approx(math.exp(0.1), rel=1e-15)


def test_the_in_process_study_server_adapts_the_bound_between_iterations() -> None:
    """``InProcessServer.close`` starts the next iteration with ``next_zero``: the bound
    of a simulated study moves like the server's."""
    strategy = FrecencyStrategy(
        FrecencyConfig(aggregator="median", norm_bound=1.0, norm_quantile=0.5)
    )
    server = InProcessServer(Round(strategy))
    rng = np.random.default_rng(0)
    bounds = []
    for _ in range(3):
        bounds.append(server.round.aggregate.bound)
        grads = rng.normal(size=(20, strategy.dim))
        grads *= 3.0 / np.linalg.norm(grads, axis=1, keepdims=True)  # all above the bound
        server.report(None, None, None, SimpleNamespace(updates=grads, n=np.ones(20)))  # type: ignore[arg-type]
        server.close()
    np.testing.assert_allclose(bounds, [1.0, math.exp(0.1), math.exp(0.2)], rtol=1e-14)
