"""fedrank.retrieval.search_engine: the first-stage engine whose lists FedPS re-ranks."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import DataFormatError
from fedrank.retrieval.search_engine import SearchEngine

TEXTS = [
    ["red", "sox", "boston"],  # 0 past
    ["boston", "library"],  # 1 past
    ["red", "sox", "red"],  # 2 past
    ["quokka", "zoo"],  # 3 indexed, new (not a stats doc)
    ["secret", "boston"],  # 4 not indexed
    ["zoo", "weather", "boston", "city"],  # 5 past
]
INDEXED = np.array([True, True, True, True, False, True])
PAST = np.array([True, True, True, False, False, True])


def bm25(query: list[str], doc: int, k1: float = 1.2, b: float = 0.75) -> float:
    """Hand-computed BM25 with the past documents' statistics."""
    past = [TEXTS[d] for d in np.flatnonzero(PAST)]
    n = len(past)
    avgdl = np.mean([len(t) for t in past])
    text = TEXTS[doc]
    score = 0.0
    for w in query:
        tf = text.count(w)
        if tf == 0:
            continue
        df = sum(w in t for t in past)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(text) / avgdl))
    return score


@pytest.fixture(scope="module")
def engine() -> SearchEngine:
    return SearchEngine(TEXTS, INDEXED, PAST)


def test_scores_use_past_statistics(engine: SearchEngine) -> None:
    for query in (["boston"], ["red", "sox"], ["quokka", "zoo"], ["zoo", "boston"]):
        q = engine.encode_queries([query])
        docs = np.flatnonzero(INDEXED)[None, :]
        got = engine.score(q, docs)[0]
        want = [bm25(query, d) for d in docs[0]]
        np.testing.assert_allclose(got, want, rtol=1e-9)


def test_top_k_returns_only_matching_indexed_documents(engine: SearchEngine) -> None:
    q = engine.encode_queries([["boston"], ["secret"], ["violin"], ["zoo"]])
    top = engine.top_k(q, 4)
    # "boston": docs 0, 1, 5 (4 is not indexed), by score; then padding
    boston = sorted([0, 1, 5], key=lambda d: (-bm25(["boston"], d), d))
    assert top.docs[0].tolist() == [*boston, -1]
    assert np.isneginf(top.scores[0, 3])
    assert top.docs[1].tolist() == [-1] * 4  # "secret" is only in a document not indexed
    assert top.docs[2].tolist() == [-1] * 4  # unknown word: matches nothing
    assert sorted(top.docs[3][top.docs[3] >= 0].tolist()) == [3, 5]
    np.testing.assert_allclose(
        top.scores[0, :3], engine.score(q[:1], top.docs[:1, :3])[0], rtol=1e-6
    )


def test_ties_go_to_the_smaller_id() -> None:
    texts = [["a", "b"], ["b", "a"], ["a", "c"]]
    all_ = np.ones(3, dtype=bool)
    eng = SearchEngine(texts, all_, all_)
    top = eng.top_k(eng.encode_queries([["b"]]), 3)
    assert top.docs[0].tolist() == [0, 1, -1] and top.scores[0, 0] == top.scores[0, 1]


def test_encode_queries(engine: SearchEngine) -> None:
    q = engine.encode_queries([["red", "violin", "zoo"], []], max_len=2)
    d = engine.dictionary
    assert q.tolist() == [[d["red"], d["zoo"]], [0, 0]]
    assert "secret" not in d and "quokka" in d


def test_bad_masks() -> None:
    with pytest.raises(DataFormatError, match="indexed"):
        SearchEngine(TEXTS, INDEXED.astype(int), PAST)
    with pytest.raises(DataFormatError, match="stats_docs"):
        SearchEngine(TEXTS, INDEXED, PAST[:3])
    with pytest.raises(DataFormatError, match="also be indexed"):
        SearchEngine(TEXTS, INDEXED, INDEXED | np.array([0, 0, 0, 0, 1, 0], dtype=bool))
