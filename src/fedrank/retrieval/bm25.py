"""Okapi BM25 over a padded token-id matrix, vectorized with scipy.sparse (FedPS Sec. 4.1).

FedPS, following Ahmad et al. [2, 3], ranks the document collection with BM25 (Robertson &
Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and Beyond") to choose each
query's candidate documents. For a query ``q`` (a list of term ids; a repeated term counts
each time) and a document ``d``::

    score(q, d) = sum_{t in q} idf(t) * tf(t, d) * (k1 + 1)
                                      / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = log(1 + (N - n(t) + 0.5) / (n(t) + 0.5))

with ``N`` documents, ``n(t)`` of them containing ``t``, ``|d|`` the number of non-padding
tokens of ``d`` and ``avgdl`` its mean. The ``1 +`` inside the logarithm (as in Lucene) keeps
every idf positive, so a matching term never lowers a score. ``N``, ``n(t)`` and ``avgdl``
can be taken from a subset of the documents (``stats_docs``): the ones known before the
period a ranking is evaluated on, so that no collection statistic comes from the future.

The per-(document, term) weights form a sparse matrix ``W``; scoring a batch of queries is
one sparse product ``Q @ W.T`` with ``Q`` the query-term count matrix, and
:meth:`BM25Index.top_k` selects the best documents of every query from the sparse result
without densifying it (ties broken by the smaller document id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import numpy as np
import scipy.sparse as sp

from fedrank.errors import ConfigError, DataFormatError

__all__ = ["BM25Index", "Ragged", "RaggedLike", "TopK", "as_ragged"]


class Ragged(NamedTuple):
    """Variable-length integer rows in CSR form: row ``i`` is ``values[ptr[i]:ptr[i + 1]]``."""

    ptr: np.ndarray
    values: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.ptr.size - 1)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)

    @property
    def row_of(self) -> np.ndarray:
        """``(len(values),)`` int64 row index of every value."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), self.sizes)


#: What :func:`as_ragged` accepts: a :class:`Ragged`, a ``(ptr, values)`` tuple, a scipy CSR
#: matrix (its column indices are the values) or a list of 1-D arrays (one per row).
RaggedLike: TypeAlias = (
    "Ragged | tuple[np.ndarray, np.ndarray] | sp.csr_array | sp.csr_matrix | Sequence[np.ndarray]"
)


def as_ragged(rows: RaggedLike, n_rows: int) -> Ragged:
    """Normalise ``rows`` (see :data:`RaggedLike`; a ``tuple`` is always ``(ptr, values)``,
    a ``list`` always one array per row) to :class:`Ragged` with int64 offsets and values,
    checking it has ``n_rows`` rows."""
    if isinstance(rows, (sp.csr_array, sp.csr_matrix)):
        out = Ragged(rows.indptr.astype(np.int64), rows.indices.astype(np.int64))
    elif isinstance(rows, tuple):
        if len(rows) != 2:
            raise DataFormatError(f"a tuple must be (ptr, values), got {len(rows)} items")
        out = Ragged(np.asarray(rows[0], dtype=np.int64), np.asarray(rows[1], dtype=np.int64))
    else:
        arrays = [np.asarray(r, dtype=np.int64).reshape(-1) for r in rows]
        sizes = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        ptr = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        out = Ragged(ptr, values)
    if out.ptr.ndim != 1 or out.values.ndim != 1:
        raise DataFormatError("CSR offsets and values must be 1-D arrays")
    if out.ptr.size != n_rows + 1 or out.ptr[0] != 0 or out.ptr[-1] != out.values.size:
        raise DataFormatError(
            f"expected CSR rows for {n_rows} queries (ptr of length {n_rows + 1} from 0 to "
            f"len(values)), got ptr of length {out.ptr.size} and {out.values.size} values"
        )
    if np.any(np.diff(out.ptr) < 0):
        raise DataFormatError("CSR row offsets must be non-decreasing")
    return out


#: Distinct queries scored at once by :meth:`BM25Index.top_k` (bounds its memory).
_TOP_K_BLOCK = 4096


class TopK(NamedTuple):
    """Best documents per query, best first: ``docs (Q, k)`` int32 (``-1`` where a query has
    fewer than ``k`` documents left) and their ``scores (Q, k)`` float64 (``-inf`` there)."""

    docs: np.ndarray
    scores: np.ndarray


class BM25Index:
    """BM25 over a document collection given as padded token ids (FedPS Sec. 4.1).

    Args:
        doc_tokens: ``(n_docs, max_len)`` integer term ids; ``pad_id`` marks padding.
        n_terms: size of the term-id space (default: largest id + 1).
        k1, b: BM25 parameters (defaults 1.2 and 0.75).
        pad_id: padding id; not a term and not counted in document lengths.
        skip_ids: ids that count in document lengths but are never matched (e.g. the
            out-of-vocabulary id, which stands for many different words).
        stats_docs: ``(n_docs,)`` bool, the documents whose statistics (``N``, ``n(t)``,
            ``avgdl``) define the idf and the length normalization; default all. Every
            document is scored; a term that occurs only outside ``stats_docs`` has
            ``n(t) = 0`` there (the largest idf).

    Attributes:
        idf: ``(n_terms,)`` float64 (0 for ids no document contains).
        doc_lengths: ``(n_docs,)`` float64 non-padding tokens per document.
        avgdl: mean document length.
        weights: ``(n_docs, n_terms)`` CSR matrix of per-(document, term) BM25 weights.
    """

    def __init__(
        self,
        doc_tokens: np.ndarray,
        *,
        n_terms: int | None = None,
        k1: float = 1.2,
        b: float = 0.75,
        pad_id: int = 0,
        skip_ids: Sequence[int] = (),
        stats_docs: np.ndarray | None = None,
    ) -> None:
        tokens = np.asarray(doc_tokens)
        if tokens.ndim != 2 or tokens.dtype.kind not in "iu":
            raise DataFormatError(
                f"doc_tokens must be a 2-D integer array (n_docs, max_len), got {tokens.dtype} "
                f"with shape {tokens.shape}"
            )
        if tokens.shape[0] == 0:
            raise DataFormatError("doc_tokens has no documents; BM25 needs at least one")
        if k1 < 0 or not 0 <= b <= 1:
            raise ConfigError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        if tokens.size and tokens.min() < 0:
            raise DataFormatError(f"doc_tokens must be non-negative ids, found {tokens.min()}")
        top = int(tokens.max()) + 1 if tokens.size else 1
        n_terms = top if n_terms is None else int(n_terms)
        if n_terms < top:
            raise ConfigError(f"n_terms={n_terms} is smaller than the largest token id + 1 ({top})")
        self.k1, self.b, self.pad_id = float(k1), float(b), int(pad_id)
        self.skip_ids = tuple(int(i) for i in skip_ids)
        self.n_docs, self.n_terms = int(tokens.shape[0]), n_terms

        if stats_docs is None:
            stats = np.ones(self.n_docs, dtype=bool)
        else:
            stats = np.asarray(stats_docs)
            if stats.dtype != np.bool_ or stats.shape != (self.n_docs,):
                raise DataFormatError(
                    f"stats_docs must be a bool mask of shape ({self.n_docs},), got "
                    f"{stats.dtype} {stats.shape}"
                )
            if not stats.any():
                raise DataFormatError("stats_docs selects no document; BM25 needs at least one")
        real = tokens != pad_id
        self.doc_lengths = real.sum(axis=1).astype(np.float64)
        self.avgdl = float(self.doc_lengths[stats].mean())
        terms = real & ~np.isin(tokens, self.skip_ids)
        rows = np.broadcast_to(np.arange(self.n_docs)[:, None], tokens.shape)[terms]
        tf = sp.csr_array(
            (np.ones(rows.size), (rows, tokens[terms].astype(np.int64))),
            shape=(self.n_docs, n_terms),
        )
        tf.sum_duplicates()
        n_stats = int(stats.sum())
        doc_of_entry = np.repeat(np.arange(self.n_docs), np.diff(tf.indptr))
        df = np.bincount(tf.indices[stats[doc_of_entry]], minlength=n_terms)
        anywhere = np.bincount(tf.indices, minlength=n_terms) > 0
        idf = np.log1p((n_stats - df + 0.5) / (df + 0.5))
        self.idf = np.where(anywhere, idf, 0.0)
        norm = (
            k1 * (1.0 - b + b * self.doc_lengths / self.avgdl)
            if self.avgdl > 0
            else np.full(self.n_docs, k1)
        )
        f = tf.data
        w = self.idf[tf.indices] * f * (k1 + 1.0) / (f + norm[doc_of_entry])
        self.weights = sp.csr_array((w, tf.indices, tf.indptr), shape=tf.shape)
        self._weights_t = self.weights.T.tocsr()

    def __repr__(self) -> str:
        return f"BM25Index(n_docs={self.n_docs}, n_terms={self.n_terms}, k1={self.k1}, b={self.b})"

    def _query_array(self, queries: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
        q = np.asarray(queries)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or (q.size and q.dtype.kind not in "iu"):
            raise DataFormatError(
                f"queries must be a 2-D integer array (Q, Lq), got {q.dtype} {q.shape}"
            )
        return q.astype(np.int64, copy=False)

    def query_matrix(self, queries: np.ndarray) -> sp.csr_array:
        """``(Q, n_terms)`` CSR matrix of query-term counts (padding and skipped ids and ids
        outside the term space are dropped: they match nothing)."""
        q = self._query_array(queries)
        keep = (q != self.pad_id) & (q >= 0) & (q < self.n_terms) & ~np.isin(q, self.skip_ids)
        rows = np.broadcast_to(np.arange(q.shape[0])[:, None], q.shape)[keep]
        m = sp.csr_array((np.ones(rows.size), (rows, q[keep])), shape=(q.shape[0], self.n_terms))
        m.sum_duplicates()
        return m

    def score_matrix(self, queries: np.ndarray) -> sp.csr_array:
        """``(Q, n_docs)`` CSR matrix of BM25 scores; absent entries are 0 (no match)."""
        s = (self.query_matrix(queries) @ self._weights_t).tocsr()
        s.sort_indices()
        return s

    def scores(self, query_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """``(n_docs,)`` float64 BM25 scores of one query (1-D term ids, padding allowed)."""
        q = np.asarray(query_ids)
        if q.ndim != 1:
            raise DataFormatError(f"scores() takes one query as a 1-D array, got shape {q.shape}")
        return self.score_matrix(q[None, :]).toarray()[0]

    def pair_scores(self, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """``(Q, C)`` float64 score of query ``i`` for document ``docs[i, j]`` (0 where
        ``docs`` is negative, i.e. padding)."""
        q = self._query_array(queries)
        d = np.asarray(docs, dtype=np.int64)
        if d.ndim != 2 or d.shape[0] != q.shape[0]:
            raise DataFormatError(f"docs must have shape ({q.shape[0]}, C), got {d.shape}")
        if d.size and d.max() >= self.n_docs:
            raise DataFormatError(f"document id {d.max()} is out of range (n_docs={self.n_docs})")
        qm = self.query_matrix(q)
        valid = d >= 0
        rows, cols = np.nonzero(valid)
        out = np.zeros(d.shape, dtype=np.float64)
        if rows.size:
            # sum_t count(q, t) * W[d, t], for all (q, d) pairs at once.
            pair_q = qm[rows]
            pair_w = self.weights[d[rows, cols]]
            out[rows, cols] = np.asarray(pair_q.multiply(pair_w).sum(axis=1)).ravel()
        return out

    def top_k(
        self,
        queries: np.ndarray,
        k: int,
        exclude: RaggedLike | None = None,
        *,
        matched_only: bool = False,
    ) -> TopK:
        """The ``k`` best documents of every query, best first.

        Documents are ordered by score (descending), then id (ascending); documents with
        score 0 (no query term) come last, in id order, so every row has
        ``min(k, n_docs - excluded)`` documents. ``exclude`` lists, per query, documents
        that must not be returned (e.g. the clicked ones).

        With ``matched_only`` only documents with a positive score (that contain a query
        term) are returned and rows may have fewer than ``k``.

        Identical queries (same multiset of term ids) are scored once, so a log that repeats
        queries costs little.
        """
        if k < 0:
            raise ConfigError(f"k must be >= 0, got {k}")
        q = self._query_array(queries)
        n_q = q.shape[0]
        ex = as_ragged(exclude, n_q) if exclude is not None else None
        if (
            ex is not None
            and ex.values.size
            and (ex.values.min() < 0 or ex.values.max() >= self.n_docs)
        ):
            raise DataFormatError(f"excluded document ids must be in 0..{self.n_docs - 1}")
        if n_q == 0 or k == 0:
            return TopK(np.full((n_q, k), -1, np.int32), np.full((n_q, k), -np.inf))
        max_ex = int(ex.sizes.max()) if ex is not None and ex.values.size else 0
        wide = min(k + max_ex, self.n_docs)

        canon = np.sort(q, axis=1)
        uniq, inverse = np.unique(canon, axis=0, return_inverse=True)
        # Score the distinct queries in blocks: a block's sparse score matrix holds every
        # (query, matching document) pair, which for common words is large.
        parts = [
            self._top_sparse(uniq[i : i + _TOP_K_BLOCK], wide, fill=not matched_only)
            for i in range(0, uniq.shape[0], _TOP_K_BLOCK)
        ]
        docs_u = np.concatenate([p[0] for p in parts])
        scores_u = np.concatenate([p[1] for p in parts])
        docs, scores = docs_u[inverse.reshape(-1)], scores_u[inverse.reshape(-1)]
        if ex is not None and ex.values.size:
            keys = ex.row_of * self.n_docs + ex.values
            cand = np.arange(n_q, dtype=np.int64)[:, None] * self.n_docs + docs
            drop = np.isin(cand, keys) | (docs < 0)
            order = np.argsort(drop, axis=1, kind="stable")
            docs = np.take_along_axis(docs, order, axis=1)
            scores = np.take_along_axis(scores, order, axis=1)
            dropped = np.take_along_axis(drop, order, axis=1)
            docs[dropped] = -1
            scores[dropped] = -np.inf
        if docs.shape[1] < k:
            pad = k - docs.shape[1]
            docs = np.pad(docs, ((0, 0), (0, pad)), constant_values=-1)
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        return TopK(docs[:, :k].astype(np.int32), scores[:, :k])

    def _top_sparse(
        self, queries: np.ndarray, k: int, *, fill: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (``<= n_docs``) of every query row, best first; with ``fill``,
        zero-score documents fill rows with fewer than ``k`` matches, else ``-1``."""
        n_q = queries.shape[0]
        s = self.score_matrix(queries)
        row = np.repeat(np.arange(n_q, dtype=np.int64), np.diff(s.indptr))
        # CSR entries are in (row, document id) order and lexsort is stable, so sorting by
        # (row, -score) leaves tied scores in document-id order.
        order = np.lexsort((-s.data, row))
        rank = np.arange(order.size) - s.indptr[row[order]]
        take = order[rank < k]
        docs = np.full((n_q, k), -1, dtype=np.int64)
        scores = np.full((n_q, k), 0.0 if fill else -np.inf)
        r, c = row[take], rank[rank < k]
        docs[r, c] = s.indices[take]
        scores[r, c] = s.data[take]
        n_match = np.minimum(np.diff(s.indptr), k)
        short = np.flatnonzero(n_match < k)
        if fill and short.size:
            # Zero-score documents in id order: the first (k - matches) ids not matched.
            # They lie in 0 .. k + matches - 1, so a window of 2k ids suffices.
            width = min(2 * k, self.n_docs)
            window = np.broadcast_to(np.arange(width, dtype=np.int64), (short.size, width))
            keys = (short[:, None] * self.n_docs + docs[short]).ravel()
            keys = keys[docs[short].ravel() >= 0]
            free = ~np.isin(short[:, None] * self.n_docs + window, keys)
            need = k - n_match[short]
            pick = free & (np.cumsum(free, axis=1) <= need[:, None])
            rr, cc = np.nonzero(pick)
            slot = n_match[short][rr] + (np.cumsum(pick, axis=1)[rr, cc] - 1)
            docs[short[rr], slot] = window[rr, cc]
        return docs, scores
