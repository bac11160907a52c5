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
