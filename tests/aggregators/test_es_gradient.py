"""The FOLtR-ES server-side gradient estimate (Eq. 4-6)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.aggregators.es_gradient import ESGradient
from fedrank.core.client_random import ClientRandom
from fedrank.core.codec import decode_es_message, encode_es_message
from fedrank.core.message import MessageBatch
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError, DataFormatError
from fedrank.estimators.evolution_strategies import ESEstimator
from fedrank.models.click_models import click_model
from fedrank.models.linear import LinearRanker
from tests.conftest import synthetic_split


@pytest.mark.parametrize("antithetic", [True, False])
def test_unbiased_for_a_linear_objective(antithetic: bool) -> None:
    """For F(theta) = a . theta the ES gradient of Eq. (6) has expectation a."""
    dim, sigma = 6, 0.05
    a = np.array([1.0, -2.0, 0.5, 0.0, 3.0, -1.0])
    seeds = ClientRandom(0, 0, np.arange(200_000)).seeds()
    v = gaussian_noise(seeds, dim).astype(np.float64)
    agg = ESGradient(dim, sigma, antithetic)
    if antithetic:
        state = agg.accumulate_batch(
            agg.zero(), MessageBatch.of_es(seeds, v @ a * sigma, -(v @ a) * sigma)
        )
    else:
        state = agg.accumulate_batch(agg.zero(), MessageBatch.of_es(seeds, v @ a * sigma))
    g = agg.finalize(state)
    np.testing.assert_allclose(g, a, atol=0.05)


def test_messages_over_the_wire_give_the_simulators_gradient() -> None:
    bank = QueryBank(synthetic_split(np.random.default_rng(0)))
    ranker = LinearRanker(bank.n_features)
    est = ESEstimator(ranker, click_model("navigational"))
    rep = est.interact(np.ones(ranker.dim), bank, ClientRandom(2, 0, np.arange(300)))
    agg = ESGradient(ranker.dim)
    batch = agg.finalize(
        agg.accumulate_batch(
            agg.zero(), MessageBatch.of_es(rep.seeds, rep.metric, rep.antithetic_metric)
        )
    )
    state = agg.zero()
    for m in rep.messages():
        state = agg.accumulate(state, decode_es_message(encode_es_message(m)))
    np.testing.assert_allclose(agg.finalize(state), batch, rtol=1e-10, atol=1e-12)
    assert state.count == 300


def test_inconsistent_reports_are_refused() -> None:
    agg = ESGradient(3, antithetic=True)
    with pytest.raises(DataFormatError, match="antithetic"):
        agg.accumulate_batch(agg.zero(), MessageBatch.of_es(np.array([1]), np.array([0.5])))
    with pytest.raises(DataFormatError, match="plain"):
        ESGradient(3, antithetic=False).accumulate_batch(
            ESGradient(3, antithetic=False).zero(), MessageBatch.of_es(np.array([1]), [0.5], [0.2])
        )
    with pytest.raises(DataFormatError, match="column metric has 1 rows"):
        MessageBatch.of_es(np.array([1, 2]), [0.5], [0.1])
    with pytest.raises(DataFormatError, match="folds ES reports"):
        agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(np.ones((1, 3)), np.ones(1)))
    with pytest.raises(DataFormatError, match="finite"):
        agg.accumulate_batch(agg.zero(), MessageBatch.of_es(np.array([1]), [np.nan], [0.1]))
    with pytest.raises(ConfigError, match="sigma"):
        ESGradient(3, sigma=0.0)


def test_the_difference_bound_clips_each_report_before_the_sum() -> None:
    """With difference_bound b every report weighs at most b |v_s|: a report of difference
    1 counts as b, reports within the bound are unchanged, and the state is the sum of the
    clipped reports (so it still merges exactly)."""
    dim, sigma, bound = 5, 0.01, 0.25
    seeds = ClientRandom(3, 0, np.arange(6)).seeds()
    metric = np.array([1.0, 0.0, 0.6, 0.4, 0.5, 0.1])
    anti = np.array([0.0, 1.0, 0.5, 0.5, 0.5, 0.4])  # differences 1, -1, .1, -.1, 0, -.3
    bounded = ESGradient(dim, sigma, antithetic=True, difference_bound=bound)
    state = bounded.accumulate_batch(bounded.zero(), MessageBatch.of_es(seeds, metric, anti))
    v = gaussian_noise(seeds, dim).astype(np.float64)
    clipped = np.array([0.25, -0.25, 0.1, -0.1, 0.0, -0.25])
    np.testing.assert_allclose(state.weighted_noise, clipped @ v, rtol=1e-12, atol=1e-12)
    halves = [
        bounded.accumulate_batch(bounded.zero(), MessageBatch.of_es(seeds[k], metric[k], anti[k]))
        for k in (slice(0, 3), slice(3, 6))
    ]
    merged = bounded.merge(*halves)
    np.testing.assert_allclose(merged.weighted_noise, state.weighted_noise, rtol=1e-12)
    plain = ESGradient(dim, sigma, antithetic=True)
    free = plain.accumulate_batch(plain.zero(), MessageBatch.of_es(seeds, metric, anti))
    assert not np.allclose(free.weighted_noise, state.weighted_noise)


def test_a_difference_bound_needs_antithetic_reports_and_a_positive_value() -> None:
    with pytest.raises(ConfigError, match="antithetic"):
        ESGradient(3, antithetic=False, difference_bound=0.5)
    with pytest.raises(ConfigError, match="difference_bound"):
        ESGradient(3, difference_bound=-0.5)
    with pytest.raises(ConfigError, match="difference_bound"):
        ESGradient(3, difference_bound=float("nan"))
