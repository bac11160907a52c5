"""The search engine: the non-personalized first stage whose lists FedPS re-ranks (FedPS
Sec. 3.2 and 4.1).

In FedPS the client sends the query to a search engine, which returns "the relevant
documents"; the personalized model re-ranks them on the device (Sec. 3.2). The AOL
experiments "rank all documents with BM25 and sample the top documents as the candidates"
(Sec. 4.1). :class:`SearchEngine` is that engine: BM25 (:class:`~fedrank.retrieval.bm25.
BM25Index`) over the texts of the indexed documents, with

* **its own term dictionary**: every word of an indexed text. The engine has crawled the
  documents, so a query word it has indexed matches whether or not the ranking model's
  (past) vocabulary knows it; a query word in no indexed text matches nothing;
* **statistics of the past**: ``N``, document frequencies and the mean length come from the
  past documents only (``stats_docs``), so no collection statistic is fitted on the period
  the rankings are evaluated on;
* an **index** limited to ``indexed`` documents (the others have an empty text and are never
  retrieved).

:meth:`SearchEngine.top_k` returns the matching documents best first (score, then smaller
id); documents without a query word are never returned.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedrank.errors import DataFormatError
from fedrank.retrieval.bm25 import BM25Index, TopK

__all__ = ["SearchEngine"]

_PAD = 0


class SearchEngine:
    """BM25 over indexed document texts with past statistics (see the module docstring).

    Args:
        texts: one word list per document (document ``d`` is ``texts[d]``).
        indexed: ``(n_docs,)`` bool, the documents in the index.
        stats_docs: ``(n_docs,)`` bool, the past documents whose statistics define idf and
            the length normalization; must be indexed.
        k1, b: BM25 parameters.

    Attributes:
        dictionary: word -> term id (ids from 1; 0 is padding).
        index: the :class:`~fedrank.retrieval.bm25.BM25Index`.
    """

    def __init__(
        self,
        texts: Sequence[Sequence[str]],
        indexed: np.ndarray,
        stats_docs: np.ndarray,
        *,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        n_docs = len(texts)
        for name, mask in (("indexed", indexed), ("stats_docs", stats_docs)):
            m = np.asarray(mask)
            if m.dtype != np.bool_ or m.shape != (n_docs,):
                raise DataFormatError(
                    f"{name} must be a bool mask of shape ({n_docs},) (one entry per text), "
                    f"got {m.dtype} {m.shape}"
                )
        indexed = np.asarray(indexed)
        stats_docs = np.asarray(stats_docs)
        if np.any(stats_docs & ~indexed):
            raise DataFormatError("every document of stats_docs must also be indexed")
        words = sorted({w for d in np.flatnonzero(indexed) for w in texts[d]})
        self.dictionary: dict[str, int] = {w: i + 1 for i, w in enumerate(words)}
        width = max((len(texts[d]) for d in np.flatnonzero(indexed)), default=1)
        tokens = np.zeros((n_docs, max(width, 1)), dtype=np.int64)
        for d in np.flatnonzero(indexed):
            ids = [self.dictionary[w] for w in texts[d]]
            tokens[d, : len(ids)] = ids
        self.indexed = indexed.copy()
        self.index = BM25Index(
            tokens,
            n_terms=len(self.dictionary) + 1,
            k1=k1,
            b=b,
            pad_id=_PAD,
            stats_docs=stats_docs,
        )

    def __repr__(self) -> str:
        return (
            f"SearchEngine({int(self.indexed.sum())} documents indexed, "
            f"{len(self.dictionary)} terms)"
        )

    @property
    def n_docs(self) -> int:
        return self.index.n_docs

    def encode_queries(self, token_lists: Sequence[Sequence[str]], max_len: int = 12) -> np.ndarray:
        """``(Q, max_len)`` int64 term ids of tokenized queries; words the index does not
        hold are dropped (they match nothing), longer queries are truncated."""
        out = np.zeros((len(token_lists), max_len), dtype=np.int64)
        get = self.dictionary.get
        for i, tokens in enumerate(token_lists):
            ids = [t for t in (get(w) for w in tokens) if t is not None][:max_len]
            out[i, : len(ids)] = ids
        return out

    def top_k(self, queries: np.ndarray, k: int) -> TopK:
        """The ``k`` best matching documents of every query (rows of
        :meth:`encode_queries`), best first; rows with fewer matches are padded with
        ``-1`` (score ``-inf``)."""
        return self.index.top_k(queries, k, matched_only=True)

    def score(self, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """``(Q, C)`` BM25 score of ``docs[i, j]`` for query ``i`` (0 where ``docs`` is -1)."""
        return self.index.pair_scores(queries, docs)
