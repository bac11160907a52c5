"""Federated OLTR runs (FOLtR-ES and FPDGD) on real MQ2008 data: they learn, the same
seed gives the same curve bit for bit, the vectorized simulator agrees with the plain
per-client loop, and the report has the documented fields."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError
from fedrank.experiments.foltr.run import FoltrConfig, run_foltr
from fedrank.models.click_models import click_model
from fedrank.models.linear import LinearRanker
from fedrank.privacy.accounting import gaussian_epsilon, gaussian_noise_multiplier
from fedrank.privacy.report import report_run
from fedrank.simulation.per_client_loop import loop_train

SMALL = dict(clients=500, batch=4, interactions=200_000)


def test_es_learns_and_reports_the_documented_fields(mq2008_fold1) -> None:  # noqa: ANN001
    result = run_foltr(FoltrConfig(**SMALL), mq2008_fold1)
    report = result.to_json()
    for key in (
        "batch_maxrr",
        "expected_maxrr",
        "ndcg10",
        "wall_seconds",
        "interactions_per_second",
        "epsilon",
        "iterations",
        "interactions",
    ):
        assert key in report
    assert report["iterations"] == 100 and report["interactions"] == 200_000
    assert set(report["expected_maxrr"]) == set(report["ndcg10"]) == {"train", "test"}
    assert report["epsilon"] == pytest.approx(np.log(0.9 * 10 / 0.1))
    curve = np.array(report["batch_maxrr"])
    assert curve[-20:].mean() > curve[:5].mean() + 0.05
    zero = run_foltr(FoltrConfig(**{**SMALL, "interactions": 2000}), mq2008_fold1)
    assert result.expected_maxrr["train"] > zero.expected_maxrr["train"] + 0.03


def test_two_layer_es_learns(mq2008_fold1) -> None:  # noqa: ANN001
    """The two-layer ranker learns at a small budget (its paper-scale acceptance cells are
    measured by ``fedrank foltr reproduce``, not on every CI run)."""
    config = {**SMALL, "ranker": "two-layer"}
    result = run_foltr(FoltrConfig(**config), mq2008_fold1)
    zero = run_foltr(FoltrConfig(**{**config, "interactions": 2000}), mq2008_fold1)
    assert result.expected_maxrr["train"] > zero.expected_maxrr["train"] + 0.03


@pytest.mark.parametrize("ranker", ["linear", "two-layer"])
def test_same_seed_same_curve_bit_for_bit(mq2008_fold1, ranker: str) -> None:  # noqa: ANN001
    config = FoltrConfig(ranker=ranker, clients=200, interactions=16_000, seed=7)
    a, b = run_foltr(config, mq2008_fold1), run_foltr(config, mq2008_fold1)
    assert np.array(a.batch_maxrr).tobytes() == np.array(b.batch_maxrr).tobytes()
    assert a.params.tobytes() == b.params.tobytes()
    c = run_foltr(
        FoltrConfig(ranker=ranker, clients=200, interactions=16_000, seed=8), mq2008_fold1
    )
    assert a.batch_maxrr != c.batch_maxrr


def test_fpdgd_learns_with_and_without_distributed_dp(mq2008_fold1) -> None:  # noqa: ANN001
    plain = run_foltr(FoltrConfig(algorithm="fpdgd", clients=10, interactions=20_000), mq2008_fold1)
    curve = np.array(plain.batch_maxrr)
    assert curve[-100:].mean() > curve[:20].mean() + 0.03
    assert plain.epsilon is None
    noisy = run_foltr(
        FoltrConfig(
            algorithm="fpdgd",
            clients=10,
            interactions=20_000,
            dp="distributed",
            dp_epsilon=4.5,
            dp_clip=1.0,
        ),
        mq2008_fold1,
    )
    assert noisy.epsilon == 4.5
    assert noisy.expected_maxrr["train"] > 0.38  # still far above a random ranking (~0.34)


def test_fpdgd_with_central_dp_accounts_each_client_over_the_training(mq2008_fold1) -> None:  # noqa: ANN001
    """``dp = "central"``: the FedAvg step wrapped in DPStrategy (the other systems'
    wrapper): the epsilon is dp_accounting's for the calibrated multiplier over every
    iteration, the noise changes the model, the same seed gives the same run, and the
    report and `fedrank privacy report --run` agree."""
    settings = dict(algorithm="fpdgd", clients=10, interactions=4_000, dp_clip=1.0)
    config = FoltrConfig(dp="central", dp_epsilon=4.0, **settings)  # type: ignore[arg-type]
    private = run_foltr(config, mq2008_fold1)
    again = run_foltr(config, mq2008_fold1)
    plain = run_foltr(FoltrConfig(**settings), mq2008_fold1)  # type: ignore[arg-type]
    z = gaussian_noise_multiplier(4.0, 1e-6, config.iterations)
    assert config.iterations == 100 and config.noise_multiplier() == pytest.approx(z)
    assert private.epsilon == pytest.approx(gaussian_epsilon(z, 1e-6, 100), rel=1e-9)
    assert 3.9 < private.epsilon <= 4.0
    privacy = private.to_json()["privacy"]
    assert privacy["mechanism"] == "gaussian (central)" and privacy["rounds"] == 100
    assert privacy["epsilon"] == pytest.approx(private.epsilon, rel=1e-9)
    assert not np.array_equal(private.params, plain.params)  # the noise is there
    assert np.array_equal(private.params, again.params)
    (row,) = report_run(private.to_json())
    assert row.system == "fpdgd" and row.per_user["epsilon"] == pytest.approx(private.epsilon)
    for bad in ({"dp_clip": 0.0}, {"dp_epsilon": 1e4}):
        with pytest.raises(ConfigError):
            FoltrConfig(dp="central", **{**settings, "dp_epsilon": 4.0, **bad})  # type: ignore[arg-type]


def test_vectorized_simulator_matches_the_per_client_loop(mq2008_fold1) -> None:  # noqa: ANN001
    """The plain loop shares no ranking or click code with the vectorized path: the MaxRR
    users experience in the first iteration (same zero model, same law) must agree."""
    ranker = LinearRanker(mq2008_fold1.train.n_features)
    model = click_model("navigational")
    _, loop_curve = loop_train(
        ranker,
        mq2008_fold1.train,
        model,
        clients=2000,
        batch=4,
        iterations=3,
        rng=np.random.default_rng(0),
    )
    fast = run_foltr(FoltrConfig(clients=2000, interactions=24_000, seed=1), mq2008_fold1)
    # each point is a mean of 8,000 interactions with sd ~0.35: se ~0.004
    np.testing.assert_allclose(fast.batch_maxrr[0], loop_curve[0], atol=0.02)
    t = stats.ttest_ind(fast.batch_maxrr, loop_curve)
    assert t.pvalue > 1e-3


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ConfigError, match="click_model must be one of"):
        FoltrConfig(click_model="greedy")
    with pytest.raises(ConfigError, match="at least one iteration"):
        FoltrConfig(clients=2000, batch=4, interactions=100)
    with pytest.raises(ConfigError, match="dp applies to FPDGD"):
        FoltrConfig(dp="local")
    with pytest.raises(ConfigError, match="learning_rate"):
        FoltrConfig(learning_rate=-1.0)
