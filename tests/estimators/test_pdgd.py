"""PDGD (the FPDGD client): preference inference, debiasing weights against a brute-force
Plackett-Luce computation, ranking sampling, and learning."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fedrank.core.client_random import ClientRandom
from fedrank.data.query_bank import QueryBank
from fedrank.estimators.pdgd import (
    PDGDClients,
    document_weights,
    inferred_pairs,
    sample_plackett_luce,
)
from fedrank.metrics.evaluate import evaluate
from fedrank.models.click_models import click_model
from fedrank.models.linear import LinearRanker
from fedrank.models.mlp import TwoLayerRanker
from tests.conftest import synthetic_split


def test_preferences_inferred_from_clicks() -> None:
    clicks = np.array([[False, True, False, False, True, False, False]])
    present = np.ones_like(clicks)
    pairs = inferred_pairs(clicks, present)[0]
    assert sorted(zip(*np.nonzero(pairs), strict=True)) == [
        (i, j) for i in (1, 4) for j in (0, 2, 3, 5)
    ]
    assert not inferred_pairs(np.zeros((1, 4), bool), np.ones((1, 4), bool)).any()
    # the position after the last click must hold a document to count
    last_clicked = inferred_pairs(np.array([[True, False]]), np.array([[True, False]]))[0]
    assert not last_clicked.any()


def _pl_log_prob(scores: np.ndarray, ranking: list[int], k: int) -> float:
    """log P(ranking[:k]) under Plackett-Luce, position by position."""
    remaining = list(range(len(scores)))
    total = 0.0
    for doc in ranking[:k]:
        total += scores[doc] - np.log(np.sum(np.exp(scores[remaining])))
        remaining.remove(doc)
    return total


def test_debiasing_weights_equal_brute_force_plackett_luce() -> None:
    rng = np.random.default_rng(0)
    for _ in range(25):
        n_docs, k = int(rng.integers(3, 14)), 10
        scores = rng.normal(0, 2, n_docs)
        ranking = list(rng.permutation(n_docs))
        k = min(k, n_docs)
        clicks = np.zeros((1, k), bool)
        clicks[0, rng.choice(k, size=int(rng.integers(1, 3)), replace=False)] = True
        pairs = inferred_pairs(clicks, np.ones((1, k), bool))
        shifted = scores - scores.max()
        ranked = shifted[ranking]
        suffix = np.cumsum(np.exp(ranked)[::-1])[::-1]
        got = document_weights(ranked[None, :k], suffix[None, :k], pairs)[0]
        want = np.zeros(k)
        for i, j in zip(*np.nonzero(pairs[0]), strict=True):
            swapped = ranking.copy()
            swapped[i], swapped[j] = swapped[j], swapped[i]
            p_r = np.exp(_pl_log_prob(scores, ranking, k))
            p_star = np.exp(_pl_log_prob(scores, swapped, k))
            rho = p_star / (p_r + p_star)
            sk, sl = scores[ranking[i]], scores[ranking[j]]
            w = rho * np.exp(sk) * np.exp(sl) / (np.exp(sk) + np.exp(sl)) ** 2
            want[i] += w
            want[j] -= w
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_sampled_rankings_follow_plackett_luce() -> None:
    scores = np.log(np.array([[0.5, 0.3, 0.2]]))
    rng = np.random.default_rng(1)
    draws = sample_plackett_luce(
        np.repeat(scores, 60_000, axis=0), np.ones((60_000, 3), bool), rng.random((60_000, 3))
    )
    perms = list(itertools.permutations(range(3)))
    observed = np.array([np.all(draws == p, axis=1).sum() for p in perms])
    expected = np.array([np.exp(_pl_log_prob(scores[0], list(p), 3)) for p in perms]) * 60_000
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    padded = sample_plackett_luce(
        np.zeros((50, 4)), np.array([[True, True, False, False]] * 50), rng.random((50, 4))
    )
    assert set(map(tuple, padded[:, 2:].tolist())) == {(2, 3)}  # padding last, in order


def test_pdgd_clients_learn_a_learnable_split() -> None:
    split = synthetic_split(np.random.default_rng(3), n_queries=60, max_docs=20)
    bank = QueryBank(split)
    ranker = LinearRanker(split.n_features)
    model = click_model("navigational")
    clients = PDGDClients(ranker, model)
    theta = np.zeros(ranker.dim)
    for iteration in range(20):
        local, _ = clients.train(theta, bank, ClientRandom(4, iteration, np.arange(50)), 1, 0.1)
        theta = local.mean(axis=0)
    assert np.argmax(theta) == 0  # labels depend on feature 0
    before = evaluate(bank, lambda x: ranker.score(np.zeros(ranker.dim), x), {"m": model})["m"]
    after = evaluate(bank, lambda x: ranker.score(theta, x), {"m": model})["m"]
    assert after > before + 0.05


@pytest.mark.parametrize("model_name", ["navigational", "perfect"])
def test_a_client_trains_the_same_alone_or_among_others(model_name: str) -> None:
    """Interaction b of a client draws its query, Gumbel keys and click coins from its own
    numbers: a block of clients (here every client alone) ends exactly where it ends among
    all, which is what lets FPDGD's clients run on any worker."""
    split = synthetic_split(np.random.default_rng(5), n_queries=40, max_docs=15)
    bank = QueryBank(split)
    ranker = TwoLayerRanker(split.n_features, hidden=4)
    clients = PDGDClients(ranker, click_model(model_name))
    theta = ranker.init_params(np.random.default_rng(6))
    random = ClientRandom(9, 2, np.arange(12))
    together, maxrr = clients.train(theta, bank, random, 4, 0.1)
    assert np.any(together != theta) and maxrr.shape == (12, 4)
    for lo, hi in ((0, 1), (3, 4), (5, 12)):
        alone, alone_maxrr = clients.train(theta, bank, random.block(lo, hi), 4, 0.1)
        np.testing.assert_array_equal(alone, together[lo:hi])
        np.testing.assert_array_equal(alone_maxrr, maxrr[lo:hi])
    other, _ = clients.train(theta, bank, ClientRandom(9, 3, np.arange(12)), 4, 0.1)
    assert np.any(other != together)  # another round, other numbers
