"""MAP / MRR / P@1 against direct loops, pessimistic ties, masking, excluded queries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.metrics.relevance import map_mrr_p1, per_query_map_mrr_p1, ranked_relevance


def _brute_force(
    scores: list[float], labels: list[int], valid: list[bool]
) -> tuple[float, float, float]:
    """AP, RR, P@1 of one list by explicit ranks: a relevant candidate's pessimistic rank
    counts every valid candidate scored higher, every irrelevant one scored equal, and the
    relevant ones scored equal that come before it."""
    idx = [i for i in range(len(scores)) if valid[i]]
    relevant = [i for i in idx if labels[i] > 0]
    if not relevant:
        return math.nan, math.nan, math.nan
    ranks = {}
    for i in relevant:
        above = sum(1 for j in idx if scores[j] > scores[i])
        tied_irrelevant = sum(1 for j in idx if scores[j] == scores[i] and labels[j] <= 0)
        tied_relevant_before = sum(1 for j in relevant if scores[j] == scores[i] and j < i)
        ranks[i] = above + tied_irrelevant + tied_relevant_before + 1
    ap = 0.0
    for i in relevant:
        ap += sum(1 for j in relevant if ranks[j] <= ranks[i]) / ranks[i]
    first = min(ranks.values())
    return ap / len(relevant), 1.0 / first, 1.0 if first == 1 else 0.0


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n_queries=st.integers(1, 6),
    width=st.integers(1, 7),
)
def test_matches_brute_force_with_ties_and_masks(
    data: st.DataObject, n_queries: int, width: int
) -> None:
    cells = n_queries * width
    scores = data.draw(st.lists(st.integers(-2, 2), min_size=cells, max_size=cells))
    labels = data.draw(st.lists(st.integers(0, 2), min_size=cells, max_size=cells))
    valid = data.draw(st.lists(st.booleans(), min_size=cells, max_size=cells))
    s = np.array(scores, dtype=np.float64).reshape(n_queries, width)
    y = np.array(labels).reshape(n_queries, width)
    m = np.array(valid).reshape(n_queries, width)
    s_masked = np.where(m, s, -np.inf)  # padded slots may hold anything
    got = per_query_map_mrr_p1(s_masked, y, m)
    want = [_brute_force(list(s[q]), list(y[q]), list(m[q])) for q in range(n_queries)]
    for q in range(n_queries):
        for name, value in zip(("map", "mrr", "p@1"), want[q], strict=True):
            if math.isnan(value):
                assert math.isnan(got[name][q])
            else:
                assert got[name][q] == pytest.approx(value, abs=1e-12)
    means = map_mrr_p1(s_masked, y, m)
    counted = [w for w in want if not math.isnan(w[0])]
    assert means["n_queries"] == len(counted)
    if counted:
        assert means["map"] == pytest.approx(np.mean([w[0] for w in counted]), abs=1e-12)
        assert means["mrr"] == pytest.approx(np.mean([w[1] for w in counted]), abs=1e-12)
        assert means["p@1"] == pytest.approx(np.mean([w[2] for w in counted]), abs=1e-12)
    else:
        assert math.isnan(means["map"])


def test_hand_computed_values() -> None:
    scores = np.array([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    labels = np.array([[0, 1, 0, 1], [1, 0, 0, 0]])
    mask = np.ones((2, 4), dtype=bool)
    values = per_query_map_mrr_p1(scores, labels, mask)
    # query 0: relevant at ranks 2 and 4 -> AP = (1/2 + 2/4) / 2; query 1: rank 4
    np.testing.assert_allclose(values["map"], [0.5, 0.25])
    np.testing.assert_allclose(values["mrr"], [0.5, 0.25])
    np.testing.assert_allclose(values["p@1"], [0.0, 0.0])


def test_ties_are_pessimistic() -> None:
    scores = np.zeros((1, 3))
    labels = np.array([[1, 0, 0]])
    out = map_mrr_p1(scores, labels, np.ones((1, 3), dtype=bool))
    assert out["map"] == pytest.approx(1 / 3)
    assert out["mrr"] == pytest.approx(1 / 3)
    assert out["p@1"] == 0.0


def test_padded_slots_never_rank_and_empty_queries_are_excluded() -> None:
    scores = np.array([[9.0, 1.0, 0.0], [1.0, 2.0, 3.0]])
    labels = np.array([[1, 1, 0], [0, 0, 0]])
    mask = np.array([[False, True, True], [True, True, True]])
    out = map_mrr_p1(scores, labels, mask)
    assert out["n_queries"] == 1
    assert out["map"] == 1.0 and out["mrr"] == 1.0 and out["p@1"] == 1.0
    assert ranked_relevance(scores, labels, mask)[0].tolist() == [True, False, False]


def test_no_query_counted_gives_nan_and_zero() -> None:
    out = map_mrr_p1(np.zeros((2, 3)), np.zeros((2, 3)), np.ones((2, 3), dtype=bool))
    assert out["n_queries"] == 0 and math.isnan(out["map"])
    empty = map_mrr_p1(np.zeros((3, 0)), np.zeros((3, 0)), np.ones((3, 0), dtype=bool))
    assert empty["n_queries"] == 0


def test_bad_shapes_and_nan_scores_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"expected scores, labels and mask of one shape"):
        map_mrr_p1(np.zeros((2, 3)), np.zeros((2, 4)), np.ones((2, 3), dtype=bool))
    with pytest.raises(ValueError, match="bool"):
        map_mrr_p1(np.zeros((1, 2)), np.zeros((1, 2)), np.ones((1, 2)))
    with pytest.raises(ValueError, match="NaN"):
        map_mrr_p1(np.array([[np.nan, 0.0]]), np.ones((1, 2)), np.ones((1, 2), dtype=bool))
