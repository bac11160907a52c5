"""fedrank.retrieval.bm25: BM25 against a textbook computation; top_k against argsort."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError, DataFormatError
from fedrank.retrieval.bm25 import BM25Index, Ragged, as_ragged

# Term ids; 0 is padding.
DOCS = np.array(
    [
        [5, 6, 0, 0, 0],
        [5, 5, 7, 0, 0],
        [6, 7, 8, 9, 0],
        [9, 0, 0, 0, 0],
        [5, 6, 7, 8, 9],
    ],
    dtype=np.int32,
)


def textbook(
    docs: list[list[int]], query: list[int], k1: float = 1.2, b: float = 0.75
) -> list[float]:
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    out = []
    for d in docs:
        s = 0.0
        for t in query:  # a repeated query term counts each time
            df = sum(1 for x in docs if t in x)
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = d.count(t)
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def as_lists(tokens: np.ndarray) -> list[list[int]]:
    return [[int(t) for t in row if t != 0] for row in tokens]


@pytest.mark.parametrize("query", [[5], [7, 9], [5, 5, 8], [6, 2], [3], [9, 8, 7, 6, 5]])
@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (2.0, 0.3), (0.9, 1.0)])
def test_scores_match_textbook_bm25(query: list[int], k1: float, b: float) -> None:
    index = BM25Index(DOCS, k1=k1, b=b)
    expected = textbook(as_lists(DOCS), query, k1, b)
    np.testing.assert_allclose(index.scores(np.array(query)), expected, rtol=1e-12)
    padded = np.array([query + [0] * 3])
    np.testing.assert_allclose(index.score_matrix(padded).toarray()[0], expected, rtol=1e-12)
    docs = np.array([[4, 0, 2, -1, 1, 3]])
    want = [expected[d] if d >= 0 else 0.0 for d in docs[0]]
    np.testing.assert_allclose(index.pair_scores(padded, docs)[0], want, rtol=1e-12)


def test_idf_stays_positive_for_a_term_in_every_document() -> None:
    docs = np.array([[1, 2], [1, 0], [1, 3]])
    index = BM25Index(docs)
    assert index.idf[1] == pytest.approx(math.log(1 + 0.5 / 3.5))
    assert np.all(index.scores(np.array([1])) > 0)
    assert index.idf[0] == 0.0  # padding is not a term


def test_skipped_ids_count_in_length_but_never_match() -> None:
    docs = np.array([[5, 1, 1, 0], [5, 0, 0, 0], [1, 0, 0, 0]])
    index = BM25Index(docs, skip_ids=(1,))
    assert list(index.doc_lengths) == [3, 1, 1]
    assert np.all(index.scores(np.array([1, 1])) == 0)
    s = index.scores(np.array([5]))
    assert s[1] > s[0] > 0 and s[2] == 0


def test_top_k_orders_by_score_then_id_and_fills_with_zero_scores() -> None:
    index = BM25Index(DOCS)
    q = np.array([[9, 0], [3, 0]])
    top = index.top_k(q, 4)
    s = index.scores(np.array([9]))
    expected = np.lexsort((np.arange(5), -s))[:4]
    assert top.docs[0].tolist() == expected.tolist()
    np.testing.assert_allclose(top.scores[0], s[expected])
    assert top.docs[1].tolist() == [0, 1, 2, 3] and np.all(top.scores[1] == 0)
    matched = index.top_k(q, 4, matched_only=True)
    assert matched.docs[0].tolist() == expected[:3].tolist() + [-1]
    assert matched.docs[1].tolist() == [-1] * 4 and np.all(np.isneginf(matched.scores[1]))


def test_top_k_exclusion_forms_agree_and_rows_can_run_short() -> None:
    index = BM25Index(DOCS)
    q = np.array([[5, 6], [9, 0], [5, 6]])
    rows = [np.array([4, 0]), np.array([], dtype=np.int64), np.array([1])]
    ptr = np.array([0, 2, 2, 3])
    values = np.array([4, 0, 1])
    csr = sp.csr_array((np.ones(3), values, ptr), shape=(3, 5))
    a = index.top_k(q, 5, rows)
    for other in ((ptr, values), Ragged(ptr, values), csr):
        b = index.top_k(q, 5, other)
        assert np.array_equal(a.docs, b.docs)
    assert a.docs[0].tolist() == [1, 2, 3, -1, -1]  # 5 documents, 2 excluded
    assert not set(a.docs[2].tolist()) & {1}
    assert a.docs.dtype == np.int32 and a.docs.shape == (3, 5)
    with pytest.raises(DataFormatError, match="CSR rows for 3 queries"):
        index.top_k(q, 2, (np.array([0, 1]), np.array([1])))
    with pytest.raises(DataFormatError, match="excluded document ids"):
        index.top_k(q, 2, [np.array([7]), np.array([]), np.array([])])


@st.composite
def corpus_and_queries(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], int]:
    n_docs = draw(st.integers(1, 25))
    n_terms = draw(st.integers(2, 8))
    width = draw(st.integers(1, 5))
    docs = np.array(
        draw(
            st.lists(
                st.lists(st.integers(0, n_terms - 1), min_size=width, max_size=width),
                min_size=n_docs,
                max_size=n_docs,
            )
        )
    )
    n_q = draw(st.integers(1, 6))
    queries = np.array(
        draw(
            st.lists(
                st.lists(st.integers(0, n_terms - 1), min_size=3, max_size=3),
                min_size=n_q,
                max_size=n_q,
            )
        )
    )
    exclude = [
        np.array(draw(st.lists(st.integers(0, n_docs - 1), max_size=4)), dtype=np.int64)
        for _ in range(n_q)
    ]
    k = draw(st.integers(0, n_docs + 2))
    return docs, queries, exclude, k


@settings(max_examples=150, deadline=None)
@given(corpus_and_queries())
def test_top_k_equals_argsort_of_full_scores(
    case: tuple[np.ndarray, np.ndarray, list[np.ndarray], int],
) -> None:
    docs, queries, exclude, k = case
    index = BM25Index(docs, n_terms=8)
    top = index.top_k(queries, k, exclude)
    matched = index.top_k(queries, k, exclude, matched_only=True)
    assert top.docs.shape == (queries.shape[0], k)
    for i, q in enumerate(queries):
        s = index.scores(q)
        order = np.lexsort((np.arange(index.n_docs), -s))
        order = order[~np.isin(order, exclude[i])][:k]
        got = top.docs[i][top.docs[i] >= 0]
        assert got.tolist() == order.tolist()
        np.testing.assert_allclose(top.scores[i][: order.size], s[order])
        positive = order[s[order] > 0]
        assert matched.docs[i][matched.docs[i] >= 0].tolist() == positive.tolist()


def test_input_errors() -> None:
    with pytest.raises(DataFormatError, match="2-D integer"):
        BM25Index(np.zeros(3, dtype=np.int32))
    with pytest.raises(DataFormatError, match="no documents"):
        BM25Index(np.zeros((0, 3), dtype=np.int32))
    with pytest.raises(ConfigError, match="k1"):
        BM25Index(DOCS, b=1.5)
    with pytest.raises(ConfigError, match="n_terms"):
        BM25Index(DOCS, n_terms=3)
    index = BM25Index(DOCS)
    with pytest.raises(DataFormatError, match="out of range"):
        index.pair_scores(np.array([[5]]), np.array([[9]]))
    with pytest.raises(ConfigError, match="k must be"):
        index.top_k(np.array([[5]]), -1)
    assert as_ragged([np.array([1, 2]), np.array([3])], 2).ptr.tolist() == [0, 2, 3]


def test_determinism() -> None:
    rng = np.random.default_rng(3)
    docs = rng.integers(0, 30, size=(200, 6))
    queries = rng.integers(0, 30, size=(50, 4))
    a = BM25Index(docs).top_k(queries, 10)
    b = BM25Index(docs.copy()).top_k(queries.copy(), 10)
    assert np.array_equal(a.docs, b.docs) and np.array_equal(a.scores, b.scores)
