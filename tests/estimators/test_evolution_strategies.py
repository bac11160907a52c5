"""FOLtR-ES clients: the sort-free first click equals sorting, the vectorized simulation
has the exact click-model law, and messages carry what the paper says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrank.core.client_random import ClientRandom
from fedrank.core.codec import decode_es_message, encode_es_message
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError
from fedrank.estimators.evolution_strategies import ESEstimator, first_clickable_rank
from fedrank.metrics.evaluate import per_query_quality
from fedrank.metrics.maxrr import maxrr_values
from fedrank.metrics.ranking import rank_order
from fedrank.models.click_models import PositionBasedModel, click_model
from fedrank.models.linear import LinearRanker
from fedrank.models.mlp import TwoLayerRanker
from fedrank.privacy.randomized_response import RandomizedResponse
from tests.conftest import synthetic_split


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 6),
    width=st.integers(1, 15),
    seed=st.integers(0, 2**32 - 1),
    levels=st.integers(1, 4),
)
def test_first_clickable_rank_equals_sorting(rows: int, width: int, seed: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, levels, size=(rows, width)).astype(np.float32)  # many ties
    n_valid = rng.integers(1, width + 1, size=rows)
    valid = np.arange(width)[None, :] < n_valid[:, None]
    clickable = valid & (rng.random((rows, width)) < 0.3)
    got = first_clickable_rank(np.where(valid, scores, 0.0), valid, clickable)
    order = rank_order(scores, valid, width)
    for i in range(rows):
        ranked_clickable = clickable[i, order[i]] & valid[i, order[i]]
        want = int(np.argmax(ranked_clickable)) if ranked_clickable.any() else -1
        assert got[i] == want


@pytest.fixture(scope="module")
def bank() -> QueryBank:
    return QueryBank(synthetic_split(np.random.default_rng(0), n_queries=40, max_docs=30))


def _clients(n: int, seed: int) -> ClientRandom:
    return ClientRandom(seed, 0, np.arange(n))


def _theta(ranker: LinearRanker) -> np.ndarray:
    return np.random.default_rng(2).normal(size=ranker.dim)


def test_reports_shapes_antithetic_means_and_messages(bank: QueryBank) -> None:
    ranker = LinearRanker(bank.n_features)
    est = ESEstimator(ranker, click_model("navigational"), sigma=0.5, batch=6)
    rep = est.interact(_theta(ranker), bank, _clients(50, 0))
    assert rep.maxrr.shape == (50, 6) and rep.metric.dtype == np.float32
    assert set(np.unique(rep.maxrr)) <= set(maxrr_values(10).tolist())
    np.testing.assert_allclose(rep.metric, rep.maxrr[:, :3].mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(rep.antithetic_metric, rep.maxrr[:, 3:].mean(axis=1), rtol=1e-6)
    message = rep.messages(model_version=4)[7]
    data = encode_es_message(message)
    assert len(data) == 12
    assert decode_es_message(data, model_version=4) == message
    plain = ESEstimator(ranker, click_model("navigational"), batch=3, antithetic=False)
    rep = plain.interact(_theta(ranker), bank, _clients(50, 0))
    assert rep.antithetic_metric is None and len(encode_es_message(rep.messages()[0])) == 8


def test_same_client_numbers_same_reports(bank: QueryBank) -> None:
    ranker = TwoLayerRanker(bank.n_features)
    est = ESEstimator(
        ranker, click_model("informational"), privatizer=RandomizedResponse(maxrr_values(), 0.5)
    )
    theta = np.random.default_rng(1).normal(size=ranker.dim)
    a = est.interact(theta, bank, _clients(30, 9))
    b = est.interact(theta, bank, _clients(30, 9))
    for x, y in (
        (a.metric, b.metric),
        (a.antithetic_metric, b.antithetic_metric),
        (a.maxrr, b.maxrr),
    ):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("model", ["navigational", "position-based"])
def test_a_clients_report_does_not_depend_on_the_other_clients(bank: QueryBank, model: str) -> None:
    """Client ``c``'s report is the same whether it runs with all clients, in a block, or
    alone (what lets a run spread its clients over workers, issue 14); both click paths
    (sort-free cascade, sorting position-based) and randomized response are covered."""
    ranker = TwoLayerRanker(bank.n_features)
    est = ESEstimator(
        ranker, click_model(model), batch=4, privatizer=RandomizedResponse(maxrr_values(), 0.5)
    )
    theta = np.random.default_rng(1).normal(size=ranker.dim)
    everyone = ClientRandom(7, 3, np.arange(60))
    whole = est.interact(theta, bank, everyone)
    parts = [est.interact(theta, bank, everyone.block(a, b)) for a, b in ((0, 25), (25, 60))]
    alone = est.interact(theta, bank, ClientRandom(7, 3, np.array([41])))
    for name in ("seeds", "metric", "antithetic_metric", "maxrr"):
        joined = np.concatenate([getattr(part, name) for part in parts])
        assert joined.tobytes() == getattr(whole, name).tobytes()
        assert getattr(alone, name).tobytes() == getattr(whole, name)[41:42].tobytes()
    other_round = est.interact(theta, bank, ClientRandom(7, 4, np.arange(60)))
    assert not np.array_equal(other_round.seeds, whole.seeds)


def test_simulated_maxrr_has_the_exact_expectation(bank: QueryBank) -> None:
    """Uniform queries, a (nearly) unperturbed model: the mean simulated MaxRR must equal
    the mean over queries of the exact expected MaxRR."""
    ranker = LinearRanker(bank.n_features)
    theta = _theta(ranker)
    model = click_model("navigational")
    est = ESEstimator(ranker, model, sigma=1e-6, batch=4)
    rep = est.interact(theta, bank, _clients(50_000, 3))
    exact = per_query_quality(bank, lambda x: ranker.score(theta, x), {"nav": model})["nav"].mean()
    assert abs(rep.maxrr.mean() - exact) < 4 * rep.maxrr.std() / np.sqrt(rep.maxrr.size)


def test_sort_free_and_sorting_paths_agree_in_law(bank: QueryBank) -> None:
    """A position-based model that examines every position has the cascade's first-click
    law but takes the sorting path: both paths must give the same MaxRR distribution."""
    ranker = LinearRanker(bank.n_features)
    cascade = click_model("informational")
    as_pbm = PositionBasedModel("pbm-all-examined", cascade.click_prob, np.ones(10))
    theta = _theta(ranker)
    counts = []
    for model in (cascade, as_pbm):
        est = ESEstimator(ranker, model, sigma=0.3, batch=4)
        rep = est.interact(theta, bank, _clients(30_000, 4))
        counts.append(np.unique(rep.maxrr, return_counts=True)[1])
    assert stats.chi2_contingency(np.array(counts)).pvalue > 1e-4


def test_privatized_metric_is_affine_in_the_true_one(bank: QueryBank) -> None:
    ranker = LinearRanker(bank.n_features)
    rr = RandomizedResponse(maxrr_values(), 0.4)
    est = ESEstimator(ranker, click_model("perfect"), batch=2, privatizer=rr)
    rep = est.interact(_theta(ranker), bank, _clients(40_000, 5))
    sent = np.concatenate([rep.metric, rep.antithetic_metric]).astype(np.float64)
    assert abs(sent.mean() - rr.expected(rep.maxrr.mean())) < 4 * sent.std() / np.sqrt(sent.size)


def test_bad_configurations_are_refused(bank: QueryBank) -> None:
    ranker = LinearRanker(bank.n_features)
    with pytest.raises(ConfigError, match="B must be even"):
        ESEstimator(ranker, click_model("perfect"), batch=3)
    with pytest.raises(ConfigError, match="sigma"):
        ESEstimator(ranker, click_model("perfect"), sigma=0.0)
    with pytest.raises(ConfigError, match="covers 6 values"):
        ESEstimator(
            ranker, click_model("perfect"), privatizer=RandomizedResponse(np.arange(6.0), 0.9)
        )
    est = ESEstimator(ranker, click_model("perfect"))
    with pytest.raises(ConfigError, match="parameters"):
        est.interact(np.zeros(3), bank, _clients(2, 0))
    with pytest.raises(ConfigError, match="features"):
        ESEstimator(LinearRanker(7), click_model("perfect")).interact(
            np.zeros(7), bank, _clients(2, 0)
        )


def test_estimate_is_one_clients_message(bank: QueryBank) -> None:
    ranker = LinearRanker(bank.n_features)
    est = ESEstimator(ranker, click_model("perfect"))
    m = est.estimate(_theta(ranker), bank, np.random.default_rng(0))
    assert 0 <= m.seed < 2**32 and m.antithetic_metric is not None
