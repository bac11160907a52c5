"""fedrank.baselines.list_rankers: the no-text rankers every FedPS model is reported beside."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.baselines.list_rankers import RULES, GBDTRanker, lexicographic_scores, rule_scores
from fedrank.errors import ConfigError, DataFormatError
from fedrank.metrics.relevance import per_query_table
from fedrank.retrieval.candidates import FEATURE_NAMES, RankingSamples

F = {name: i for i, name in enumerate(FEATURE_NAMES)}


def samples(
    features: np.ndarray, bm25: np.ndarray, labels: np.ndarray, mask: np.ndarray | None = None
) -> RankingSamples:
    q, c = bm25.shape
    mask = np.ones((q, c), dtype=bool) if mask is None else mask
    return RankingSamples(
        split="test",
        events=np.arange(q, dtype=np.int64),
        event_ids=np.arange(q, dtype=np.int64),
        query=np.ones((q, 2), dtype=np.int32),
        candidates=np.where(mask, np.arange(c, dtype=np.int32), -1).astype(np.int32),
        mask=mask,
        labels=np.where(mask, labels, 0).astype(np.float32),
        features=np.where(mask[..., None], features, 0).astype(np.float32),
        bm25=np.where(mask, bm25, 0).astype(np.float32),
        ranks=np.where(mask, np.arange(1, c + 1), 0).astype(np.int32),
    )


def order(scores: np.ndarray) -> list[int]:
    """Columns of row 0, best first (scores never tie)."""
    return np.argsort(-scores[0], kind="stable").tolist()


def one_list(width: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """One list in engine order: BM25 falling along the row."""
    f = np.zeros((1, width, len(FEATURE_NAMES)))
    bm25 = np.linspace(10.0, 1.0, width)[None, :]
    return f, bm25


def test_pclick_puts_a_document_clicked_before_above_every_unclicked_one() -> None:
    """The fixed bug: ``log1p(pclick) * width - position`` let unclicked documents at
    positions 1-15 outrank a document clicked before at position 15."""
    f, bm25 = one_list()
    f[0, 14, F["log_pclick"]] = np.log1p(1)  # position 15, clicked once for this query
    f[0, 17, F["log_pclick"]] = np.log1p(3)  # position 18, three times
    s = samples(f, bm25, np.zeros((1, 20)))
    ranked = order(rule_scores(s, "pclick"))
    assert ranked[:2] == [17, 14]
    assert ranked[2:] == [c for c in range(20) if c not in (14, 17)]  # then engine order


def test_every_rule_orders_as_documented() -> None:
    f, bm25 = one_list(6)
    bm25[0, 4:] = 0.0  # the last two match no query word
    f[0, :, F["log_global_clicks"]] = np.log1p([0, 5, 1, 0, 9, 0])
    f[0, :, F["log_doc_clicks"]] = np.log1p([0, 0, 2, 0, 0, 1])
    f[0, :, F["log_pclick"]] = np.log1p([0, 0, 0, 0, 0, 1])
    s = samples(f, bm25, np.zeros((1, 6)))
    expected = {
        "original": [0, 1, 2, 3, 4, 5],
        "ascending": [5, 4, 3, 2, 1, 0],
        "popularity": [4, 1, 2, 0, 3, 5],
        "user_prior": [2, 5, 0, 1, 3, 4],
        "pclick": [5, 0, 1, 2, 3, 4],
        # clicked before (2, 5), then BM25 = 0 (4, 5), then popularity, then engine order
        "rule": [5, 2, 4, 1, 0, 3],
    }
    assert set(expected) == set(RULES)
    for rule, want in expected.items():
        assert order(rule_scores(s, rule)) == want, rule
    with pytest.raises(ConfigError, match="unknown rule"):
        rule_scores(s, "random")


def test_padding_never_outranks_a_candidate() -> None:
    f, bm25 = one_list(5)
    mask = np.array([[True, True, True, False, False]])
    f[0, 3:, F["log_global_clicks"]] = 10.0  # values under padding must not matter
    s = samples(f, bm25, np.zeros((1, 5)), mask)
    for rule in RULES:
        scores = rule_scores(s, rule)
        assert np.all(np.isneginf(scores[0, 3:])) and np.all(np.isfinite(scores[0, :3]))


def test_lexicographic_keys() -> None:
    a = np.array([[1, 1, 0, 1]])
    b = np.array([[0, 2, 5, 2]])
    scores = lexicographic_scores([a, b], np.ones((1, 4), dtype=bool))
    assert order(scores) == [1, 3, 0, 2]  # a first, b next, then column


def synthetic(rng: np.random.Generator, n: int) -> RankingSamples:
    """Relevance follows the user's prior clicks (plus noise), not BM25."""
    width = 10
    f = np.zeros((n, width, len(FEATURE_NAMES)))
    prior = rng.poisson(0.4, size=(n, width))
    f[..., F["log_doc_clicks"]] = np.log1p(prior)
    f[..., F["log_global_clicks"]] = np.log1p(rng.poisson(3.0, size=(n, width)))
    bm25 = np.sort(rng.uniform(1, 10, size=(n, width)), axis=1)[:, ::-1]
    f[..., F["bm25"]] = bm25
    logit = 2.0 * prior - 2.5 + rng.normal(0, 0.5, size=(n, width))
    labels = (logit > 0).astype(float)
    labels[np.arange(n), rng.integers(0, width, n)] = 1.0  # every list has a relevant one
    return samples(f, bm25, labels)


def test_gbdt_learns_the_features_and_is_deterministic() -> None:
    rng = np.random.default_rng(0)
    train, valid, test = synthetic(rng, 600), synthetic(rng, 200), synthetic(rng, 300)
    kwargs = {"num_leaves": (7,), "learning_rate": (0.1, 0.3), "min_data_in_leaf": (20,)}
    ranker = GBDTRanker(max_rounds=60, seed=3, n_jobs=1, **kwargs).fit([train], [valid])
    gbdt = np.nanmean(ranker.per_query([test])[:, 0])
    bm25 = np.nanmean(per_query_table(rule_scores(test, "original"), test.labels, test.mask)[:, 0])
    assert gbdt > bm25 + 0.15
    assert len(ranker.grid_) == 2 and ranker.choice_ in ranker.grid_
    assert ranker.choice_.valid_map == max(g.valid_map for g in ranker.grid_)
    again = GBDTRanker(max_rounds=60, seed=3, n_jobs=1, **kwargs).fit([train], [valid])
    assert np.array_equal(ranker.scores(test), again.scores(test))


def test_gbdt_refuses_bad_use() -> None:
    with pytest.raises(ConfigError, match="not fitted"):
        GBDTRanker().scores(synthetic(np.random.default_rng(1), 2))
    with pytest.raises(DataFormatError, match="no samples"):
        GBDTRanker().fit([], [])
    with pytest.raises(ConfigError, match="max_rounds"):
        GBDTRanker(max_rounds=0)


# ------------------------------------------------------------- every rule vs a brute-force sort


def random_lists(rng: np.random.Generator, n: int = 40, width: int = 12) -> RankingSamples:
    """Ragged lists in engine order with small integer counts (many ties) and some BM25 = 0
    candidates at the end of a row, padding after the last real candidate."""
    f = np.zeros((n, width, len(FEATURE_NAMES)))
    f[..., F["log_pclick"]] = np.log1p(
        rng.integers(0, 3, (n, width)) * (rng.random((n, width)) < 0.3)
    )
    f[..., F["log_doc_clicks"]] = np.maximum(
        f[..., F["log_pclick"]], np.log1p(rng.integers(0, 3, (n, width)))
    )
    f[..., F["log_global_clicks"]] = np.log1p(rng.integers(0, 4, (n, width)))
    bm25 = np.sort(rng.integers(0, 5, (n, width)).astype(float), axis=1)[:, ::-1]
    f[..., F["bm25"]] = bm25
    sizes = rng.integers(1, width + 1, n)
    mask = np.arange(width)[None, :] < sizes[:, None]
    return samples(f, bm25, np.zeros((n, width)), mask)


def brute_force_order(s: RankingSamples, rule: str, row: int) -> list[int]:
    """The documented order of ``rule`` on one row, by Python's sort on explicit keys."""
    f = s.features[row]
    pclick, user, glob = (
        f[:, F["log_pclick"]],
        f[:, F["log_doc_clicks"]],
        f[:, F["log_global_clicks"]],
    )
    keys = {
        "original": lambda c: (c,),
        "ascending": lambda c: (-c,),
        "popularity": lambda c: (-glob[c], c),
        "user_prior": lambda c: (-user[c], c),
        "pclick": lambda c: (-pclick[c], c),
        "rule": lambda c: (-int(user[c] > 0), -int(s.bm25[row, c] == 0), -glob[c], c),
    }
    return sorted(np.flatnonzero(s.mask[row]).tolist(), key=keys[rule])


def test_every_rule_matches_a_brute_force_sort_with_ties_and_padding() -> None:
    s = random_lists(np.random.default_rng(11))
    assert (s.mask.sum(axis=1) < s.mask.shape[1]).any()  # some rows are padded
    for rule in RULES:
        scores = rule_scores(s, rule)
        assert scores.shape == s.mask.shape
        for row in range(s.n_queries):
            n_real = int(s.mask[row].sum())
            got = np.argsort(-scores[row], kind="stable")[:n_real].tolist()
            assert got == brute_force_order(s, rule, row), (rule, row)
            real = scores[row, s.mask[row]]
            assert np.isfinite(real).all() and np.unique(real).size == n_real  # never tie
            assert np.isneginf(scores[row, ~s.mask[row]]).all()
            assert real.min() > scores[row, ~s.mask[row]].max(initial=-np.inf)


def test_equal_keys_fall_back_to_the_engine_order() -> None:
    f, bm25 = one_list(7)
    f[0, :, F["log_global_clicks"]] = np.log1p(4)
    f[0, :, F["log_doc_clicks"]] = np.log1p(2)
    f[0, :, F["log_pclick"]] = np.log1p(1)
    s = samples(f, bm25, np.zeros((1, 7)))
    for rule in ("original", "popularity", "user_prior", "pclick", "rule"):
        assert order(rule_scores(s, rule)) == list(range(7)), rule


def test_ascending_is_the_exact_reverse_of_original() -> None:
    rng = np.random.default_rng(5)
    n, width = 30, 15
    bm25 = -np.sort(-rng.permuted(np.tile(np.arange(1.0, width + 1), (n, 1)), axis=1), axis=1)
    sizes = rng.integers(2, width + 1, n)
    mask = np.arange(width)[None, :] < sizes[:, None]
    f = np.zeros((n, width, len(FEATURE_NAMES)))
    f[..., F["log_global_clicks"]] = rng.random((n, width))  # must not matter
    s = samples(f, bm25, np.zeros((n, width)), mask)
    up, down = rule_scores(s, "original"), rule_scores(s, "ascending")
    for row in range(n):
        k = int(sizes[row])
        original = np.argsort(-up[row], kind="stable")[:k]
        ascending = np.argsort(-down[row], kind="stable")[:k]
        assert ascending.tolist() == original[::-1].tolist()
        # original is BM25 descending (distinct values here)
        assert np.all(np.diff(s.bm25[row, original]) < 0)


def test_pclick_beats_bm25_popularity_and_any_query_clicks_in_every_row() -> None:
    """Documents clicked before for the same query come first, however high the unclicked
    ones score on BM25, popularity or the user's clicks for other queries."""
    rng = np.random.default_rng(8)
    n, width = 50, 20
    f = np.zeros((n, width, len(FEATURE_NAMES)))
    pclick = rng.integers(1, 6, (n, width)) * (rng.random((n, width)) < 0.15)
    f[..., F["log_pclick"]] = np.log1p(pclick)
    f[..., F["log_doc_clicks"]] = np.log1p(pclick + 50 * (pclick == 0))  # other queries
    f[..., F["log_global_clicks"]] = np.log1p(1000 * (pclick == 0))
    bm25 = np.linspace(100.0, 0.1, width)[None, :].repeat(n, axis=0)
    s = samples(f, bm25, np.zeros((n, width)))
    scores = rule_scores(s, "pclick")
    for row in range(n):
        ranked = np.argsort(-scores[row], kind="stable")
        clicked = np.flatnonzero(pclick[row] > 0)
        assert sorted(ranked[: clicked.size].tolist()) == clicked.tolist()
        counts = pclick[row, ranked[: clicked.size]]
        assert np.all(np.diff(counts) <= 0)  # more same-query clicks first
        for c in range(clicked.size - 1):  # equal counts: engine order
            if counts[c] == counts[c + 1]:
                assert ranked[c] < ranked[c + 1]
        assert ranked[clicked.size :].tolist() == np.flatnonzero(pclick[row] == 0).tolist()


def test_pclick_at_position_15_over_positions_1_to_14() -> None:
    """The exact case of the fixed bug, whatever the list width."""
    for width in (15, 16, 50):
        f, bm25 = one_list(width)
        f[0, 14, F["log_pclick"]] = np.log1p(1)
        s = samples(f, bm25, np.zeros((1, width)))
        scores = rule_scores(s, "pclick")[0]
        assert np.all(scores[14] > scores[:14]), width
        assert order(rule_scores(s, "pclick"))[0] == 14


@pytest.mark.parametrize("rule", ["", "Original", "bm25", "random", "pclick "])
def test_unknown_rule_names(rule: str) -> None:
    f, bm25 = one_list(3)
    with pytest.raises(ConfigError, match="unknown rule"):
        rule_scores(samples(f, bm25, np.zeros((1, 3))), rule)


def test_lexicographic_scores_keys_bools_and_padding() -> None:
    mask = np.array(
        [[True, True, True, True, True, False], [True, True, False, False, False, False]]
    )
    a = np.array([[True, False, True, False, True, True], [False, True, True, True, True, True]])
    b = np.array([[1.0, 9.0, 1.0, 3.0, 2.0, 99.0], [5.0, 0.0, 9.0, 9.0, 9.0, 9.0]])
    c = np.array([[0.0, 0.0, 7.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    scores = lexicographic_scores([a, b, c], mask)
    # row 0: a=True {0, 2, 4}: by b: 4 (2.0), then 0 and 2 tie on b=1 -> c: 2 (7) before 0;
    # then a=False {1, 3}: by b: 1 (9), 3 (3); padding (5) last
    assert np.argsort(-scores[0], kind="stable")[:5].tolist() == [4, 2, 0, 1, 3]
    assert np.argsort(-scores[1], kind="stable")[:2].tolist() == [1, 0]
    # ranks: 0, -1, -2, ... in order; -inf at padding
    assert sorted(scores[0, :5].tolist()) == [-4.0, -3.0, -2.0, -1.0, 0.0]
    assert np.isneginf(scores[0, 5]) and np.isneginf(scores[1, 2:]).all()
    # no keys: the column order
    assert np.argsort(-lexicographic_scores([], mask)[0], kind="stable")[:5].tolist() == [
        0, 1, 2, 3, 4,
    ]  # fmt: skip


# ------------------------------------------------------------------ GBDT on a known signal


def noisy_feature0(rng: np.random.Generator, n: int, width: int = 10) -> RankingSamples:
    """Label = (feature 0 > 0), 10% of labels flipped; BM25 (engine order) is unrelated."""
    f = rng.normal(0.0, 1.0, (n, width, len(FEATURE_NAMES)))
    f[..., 0] = rng.normal(0.0, 1.0, (n, width))
    labels = (f[..., 0] > 0) ^ (rng.random((n, width)) < 0.1)
    empty = ~labels.any(axis=1)
    labels[empty, rng.integers(0, width, int(empty.sum()))] = True
    bm25 = np.sort(rng.uniform(1, 10, (n, width)), axis=1)[:, ::-1]
    f[..., F["bm25"]] = bm25
    sizes = rng.integers(width // 2, width + 1, n)
    mask = np.arange(width)[None, :] < sizes[:, None]
    labels &= mask
    labels[~labels.any(axis=1), 0] = True
    return samples(f, bm25, labels.astype(float), mask)


def test_gbdt_learns_feature_zero_and_beats_the_engine_order() -> None:
    rng = np.random.default_rng(21)
    train, valid, test = (noisy_feature0(rng, n) for n in (400, 150, 200))
    grid = {"num_leaves": (4, 8), "learning_rate": (0.1,), "min_data_in_leaf": (10, 40)}
    ranker = GBDTRanker(max_rounds=40, early_stopping_rounds=10, seed=7, n_jobs=1, **grid)
    ranker.fit([train], [valid])
    test_ap = ranker.per_query([test])[:, 0]
    original = per_query_table(rule_scores(test, "original"), test.labels, test.mask)[:, 0]
    assert test_ap.shape == (test.n_queries,) and not np.isnan(test_ap).any()
    assert test_ap.mean() > original.mean() + 0.2
    assert test_ap.mean() > 0.8
    # the grid: 2 x 1 x 2 points, the chosen one has the best validation MAP
    assert len(ranker.grid_) == 4
    assert {(g.num_leaves, g.min_data_in_leaf) for g in ranker.grid_} == {
        (4, 10), (4, 40), (8, 10), (8, 40),
    }  # fmt: skip
    assert ranker.choice_.valid_map == max(g.valid_map for g in ranker.grid_)
    assert 1 <= ranker.choice_.best_iteration <= 40
    assert ranker.choice_.valid_map == pytest.approx(np.mean(ranker.per_query([valid])[:, 0]))
    scores = ranker.scores(test)
    assert np.isneginf(scores[~test.mask]).all() and np.isfinite(scores[test.mask]).all()
    again = GBDTRanker(max_rounds=40, early_stopping_rounds=10, seed=7, n_jobs=1, **grid)
    np.testing.assert_array_equal(again.fit([train], [valid]).scores(test), scores)
    assert again.choice_ == ranker.choice_
