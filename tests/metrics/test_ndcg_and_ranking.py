"""nDCG@k against a direct computation, and the ranking convention (stable ties)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.metrics.ndcg import mean_ndcg, ndcg_at_k
from fedrank.metrics.ranking import rank_order, ranked_labels


def _ndcg_direct(ranked: list[int], labels: list[int], k: int) -> float:
    def dcg(rels: list[int]) -> float:
        return sum((2**r - 1) / np.log2(i + 2) for i, r in enumerate(rels[:k]) if r > 0)

    ideal = dcg(sorted(labels, reverse=True))
    return dcg(ranked) / ideal if ideal > 0 else float("nan")


@settings(max_examples=60, deadline=None)
@given(labels=st.lists(st.integers(0, 4), min_size=1, max_size=25), seed=st.integers(0, 10**6))
def test_ndcg_matches_the_definition(labels: list[int], seed: int) -> None:
    perm = np.random.default_rng(seed).permutation(len(labels))
    ranked = [labels[i] for i in perm]
    width = len(labels) + 3
    lab = np.full((1, width), -1)
    lab[0, : len(labels)] = labels
    top = np.full((1, max(10, width)), -1)
    top[0, : len(ranked)] = ranked
    got = ndcg_at_k(top, lab, 10)[0]
    want = _ndcg_direct(ranked, labels, 10)
    if np.isnan(want):
        assert np.isnan(got)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_perfect_ranking_scores_one_and_empty_queries_are_left_out() -> None:
    labels = np.array([[0, 2, 1, -1], [0, 0, 0, -1]])
    ranked = ranked_labels(np.array([[0.0, 5.0, 1.0, 9.0], [1.0, 2.0, 3.0, 0.0]]), labels, 10)
    assert ranked[0, :4].tolist() == [2, 1, 0, -1]  # padding never ranks, even with a high score
    values = ndcg_at_k(ranked, labels, 10)
    assert values[0] == 1.0 and np.isnan(values[1])
    assert mean_ndcg(values) == 1.0


def test_ties_keep_document_order() -> None:
    scores = np.array([[0.0, 0.0, 1.0, 0.0]])
    valid = np.array([[True, True, True, True]])
    assert rank_order(scores, valid, 4).tolist() == [[2, 0, 1, 3]]
    assert rank_order(np.zeros((1, 3)), np.ones((1, 3), bool), 10).tolist() == [[0, 1, 2]]
