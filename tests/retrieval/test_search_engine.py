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


def test_a_word_of_a_non_indexed_document_matches_nothing(engine: SearchEngine) -> None:
    q = engine.encode_queries([["secret"], ["secret", "library"]])
    assert q[0].tolist() == [0] * 12  # the engine never saw "secret"
    top = engine.top_k(q, 6)
    assert top.docs[0].tolist() == [-1] * 6 and np.isneginf(top.scores[0]).all()
    assert top.docs[1].tolist() == [1, -1, -1, -1, -1, -1]  # only "library" counts
    # doc 4 has "secret" and "boston", but it is not indexed: never scored
    assert engine.score(engine.encode_queries([["boston", "secret"]]), np.array([[4]]))[0, 0] == 0


def test_repeated_query_words_count_each_time(engine: SearchEngine) -> None:
    once = engine.score(engine.encode_queries([["red"]]), np.array([[0, 2]]))[0]
    twice = engine.score(engine.encode_queries([["red", "red"]]), np.array([[0, 2]]))[0]
    np.testing.assert_allclose(twice, 2 * once)
    np.testing.assert_allclose(twice, [bm25(["red", "red"], 0), bm25(["red", "red"], 2)])


def test_idf_ignores_documents_outside_stats_docs() -> None:
    """Adding indexed documents that are not stats docs changes no score of the others:
    N, df and avgdl come from the stats docs only."""
    base = SearchEngine(TEXTS, INDEXED, PAST)
    extra = [["boston", "boston", "red"], ["sox"] * 9]
    more = SearchEngine(
        TEXTS + extra, np.concatenate([INDEXED, [True, True]]), np.concatenate([PAST, [False] * 2])
    )
    docs = np.flatnonzero(INDEXED)[None, :].repeat(3, axis=0)
    for eng in (base, more):
        q = eng.encode_queries([["boston"], ["red", "sox"], ["zoo", "city"]])
        np.testing.assert_allclose(eng.score(q, docs), base.score(q, docs), rtol=1e-12)
    # ... and the new documents are scored with those statistics
    q = more.encode_queries([["boston"]])
    past = [TEXTS[d] for d in np.flatnonzero(PAST)]
    n, avgdl, df = len(past), np.mean([len(t) for t in past]), sum("boston" in t for t in past)
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    want = idf * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 3 / avgdl))
    assert more.score(q, np.array([[6]]))[0, 0] == pytest.approx(want, rel=1e-12)
    assert df == 3 and n == 4 and avgdl == 3.0  # docs 0, 1, 2, 5


def hand_bm25(texts: list[list[str]], stats: np.ndarray, query: list[str], doc: int) -> float:
    past = [texts[d] for d in np.flatnonzero(stats)]
    n, avgdl = len(past), float(np.mean([len(t) for t in past]))
    score = 0.0
    for w in query:
        tf = texts[doc].count(w)
        if tf:
            df = sum(w in t for t in past)
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            norm = 1.2 * (1 - 0.75 + 0.75 * len(texts[doc]) / avgdl)
            score += idf * tf * 2.2 / (tf + norm)
    return score


def test_top_k_and_score_agree_with_brute_force_on_random_collections() -> None:
    rng = np.random.default_rng(4)
    words = [f"w{i}" for i in range(10)]
    checked = 0
    for _ in range(40):
        n = int(rng.integers(3, 14))
        texts = [[words[j] for j in rng.integers(0, 10, rng.integers(1, 7))] for _ in range(n)]
        indexed = rng.random(n) < 0.8
        stats = indexed & (rng.random(n) < 0.7)
        if not stats.any():
            continue
        eng = SearchEngine(texts, indexed, stats)
        queries = [[words[j] for j in rng.integers(0, 10, rng.integers(1, 4))] for _ in range(6)]
        q = eng.encode_queries(queries)
        top = eng.top_k(q, n)
        all_docs = np.broadcast_to(np.arange(n), (len(queries), n))
        pair = eng.score(q, all_docs)
        for i, query in enumerate(queries):
            ref = np.array(
                [hand_bm25(texts, stats, query, d) if indexed[d] else 0.0 for d in range(n)]
            )
            np.testing.assert_allclose(pair[i], ref, rtol=1e-9, atol=1e-12)
            match = [d for d in range(n) if indexed[d] and set(query) & set(texts[d])]
            got = top.docs[i][top.docs[i] >= 0]
            assert sorted(got.tolist()) == match  # exactly the matching indexed documents
            s = top.scores[i, : got.size]
            assert np.all(s > 0) and np.isneginf(top.scores[i, got.size :]).all()
            np.testing.assert_allclose(s, ref[got], rtol=1e-9)
            # score descending, then the smaller id
            for x, y in zip(got[:-1], got[1:], strict=True):
                assert ref[x] > ref[y] + 1e-12 or (abs(ref[x] - ref[y]) <= 1e-12 and x < y)
            checked += got.size
    assert checked > 200


def test_score_equals_top_k_for_every_returned_pair(engine: SearchEngine) -> None:
    queries = [["boston"], ["red", "sox"], ["zoo", "boston", "city"], ["library", "quokka"]]
    q = engine.encode_queries(queries)
    top = engine.top_k(q, 6)
    docs = top.docs.astype(np.int64)
    got = engine.score(q, docs)
    real = docs >= 0
    np.testing.assert_allclose(got[real], top.scores[real], rtol=1e-12)
    assert (got[~real] == 0).all()
    assert real.sum(axis=1).tolist() == [3, 2, 4, 2]  # boston: 0 1 5; ...; library: 1, quokka: 3


def test_encode_queries_shape_and_truncation(engine: SearchEngine) -> None:
    d = engine.dictionary
    q = engine.encode_queries(
        [["violin", "red", "secret", "sox", "zoo", "city"], ["boston"] * 20, []], max_len=3
    )
    assert q.dtype == np.int64 and q.shape == (3, 3)
    assert q.tolist() == [[d["red"], d["sox"], d["zoo"]], [d["boston"]] * 3, [0, 0, 0]]
    assert sorted(d.values()) == list(range(1, len(d) + 1))  # ids from 1; 0 is padding
    assert set(d) == {w for t, i in zip(TEXTS, INDEXED, strict=True) if i for w in t}
    assert engine.encode_queries([["zoo"]]).shape == (1, 12)  # default max_len


def test_more_bad_masks() -> None:
    with pytest.raises(DataFormatError, match="indexed"):
        SearchEngine(TEXTS, INDEXED[:-1], PAST)
    with pytest.raises(DataFormatError, match="stats_docs"):
        SearchEngine(TEXTS, INDEXED, PAST.astype(np.int8))
    with pytest.raises(DataFormatError, match="stats_docs"):
        SearchEngine(TEXTS, INDEXED, PAST[None, :])
    with pytest.raises(DataFormatError, match="also be indexed"):
        SearchEngine(TEXTS, PAST & ~np.eye(6, dtype=bool)[0], PAST)  # doc 0 past, not indexed
