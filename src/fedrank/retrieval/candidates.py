"""Candidate documents and ranking samples with click-history features (FedPS Sec. 4.1).

For every query event of a user, FedPS re-ranks a short list of candidates: "we rank all
documents with BM25 and sample the top documents as the candidates. 50 documents are
selected for each test query, while 5 candidates per training/validation query" (Sec. 4.1);
the clicked documents are the relevant ones, the other candidates irrelevant. This module
provides

* :class:`CandidateGenerator`, the replaceable first stage, and :class:`BM25Candidates`, its
  BM25 implementation over the URL words of :class:`~fedrank.data.aol.DocumentPool`. A log
  with real document titles plugs in by building the pool from the titles (same generator)
  or by passing any other object with the two methods of the protocol;
* :func:`build_samples`, which turns one user's events of one split into padded arrays
  (:class:`RankingSamples`) with click-history features computed only from that user's
  earlier events -- the user profile that FedPS keeps on the client (Sec. 3.1-3.2);
* :class:`UserData` and :func:`build_users`: everything one simulated client holds.

Everything is vectorized per user (one loop over users in :func:`build_users`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from fedrank.data.aol import (
    BACKGROUND,
    OOV_ID,
    PAD_ID,
    SPLIT_NAMES,
    TRAIN,
    DocumentPool,
    TimeSplit,
    UserLog,
    Vocabulary,
    user_logs,
)
from fedrank.errors import ConfigError, DataFormatError
from fedrank.retrieval.bm25 import BM25Index, Ragged, RaggedLike, as_ragged

__all__ = [
    "DEFAULT_NEGATIVES",
    "FEATURE_NAMES",
    "BM25Candidates",
    "CandidateGenerator",
    "RankingSamples",
    "UserData",
    "build_samples",
    "build_users",
]

#: Non-clicked candidates per query event of each split. Train and test follow FedPS Sec.
#: 4.1 (5 and 50); validation uses test-like lists of 50 (the paper: 5) because it selects
#: the reported round: with 5 negatives the validation MAP kept rising while the test MAP
#: (50 negatives) fell, so it picked over-fitted models.
DEFAULT_NEGATIVES: Mapping[str, int] = {"train": 5, "valid": 50, "test": 50}

#: Columns of :attr:`RankingSamples.features`. Counts are ``log1p``-transformed; "earlier"
#: means strictly earlier in time, among the same user's events (background included).
FEATURE_NAMES: tuple[str, ...] = (
    "log_pclick",  # earlier clicks on this document for the same (normalised) query
    "log_doc_clicks",  # earlier clicks on this document, any query
    "session_clicked",  # 1 if clicked earlier in the same session
    "bm25",  # BM25 score of (query, document)
    "log_query_issues",  # earlier events with the same normalised query
)


@runtime_checkable
class CandidateGenerator(Protocol):
    """The first-stage ranker that chooses the documents to re-rank.

    ``queries`` are ``(Q, Lq)`` word ids (0 = padding); ``clicked`` gives each query's
    clicked document ids (:data:`~fedrank.retrieval.bm25.RaggedLike`).
    """

    def candidates(self, queries: np.ndarray, clicked: RaggedLike, n: int) -> np.ndarray:
        """``(Q, C)`` int32 document ids, padded with ``-1``: every clicked document of
        the query plus up to ``n`` documents that were not clicked. Order is free:
        :func:`build_samples` orders candidates by :meth:`score`."""
        ...

    def score(self, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """``(Q, C)`` first-stage score of ``docs[i, j]`` for query ``i`` (any value where
        ``docs`` is ``-1``); the original ranking."""
        ...


class BM25Candidates:
    """Clicked documents plus the top BM25 documents that were not clicked (FedPS Sec. 4.1).

    Negatives are the documents with the highest BM25 score (ties: smaller id first) among
    those sharing a word with the query. With URLs as the only document text many queries
    match fewer than ``n`` documents; the shortfall is then drawn uniformly at random from
    the remaining documents (not clicked, not matched) with ``rng``, or left empty (masked
    in the samples) when ``rng`` is ``None``. Pass an ``rng`` to get the paper's fixed
    candidate counts; filling with zero-score documents in id order instead (what
    :meth:`BM25Index.top_k` would do) would give every short query the same few negatives.
    On the AOL top-1000 log about 20% of the test and 8% of the training negatives are
    random fill.

    Args:
        index: BM25 over the document pool.
        rng: generator for the random fill, or ``None`` for no fill.
    """

    def __init__(self, index: BM25Index, *, rng: np.random.Generator | None = None) -> None:
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise ConfigError(
                f"rng must be a numpy.random.Generator (np.random.default_rng(seed)) or None, "
                f"got {type(rng).__name__}"
            )
        self.index = index
        self.rng = rng

    @classmethod
    def from_pool(
        cls,
        pool: DocumentPool,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        rng: np.random.Generator | None = None,
    ) -> BM25Candidates:
        """BM25 over ``pool.tokens``; the out-of-vocabulary id counts in document lengths
        but never matches."""
        index = BM25Index(pool.tokens, k1=k1, b=b, pad_id=PAD_ID, skip_ids=(OOV_ID,))
        return cls(index, rng=rng)

    def __repr__(self) -> str:
        return f"BM25Candidates({self.index!r}, random_fill={self.rng is not None})"

    def score(self, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
        return self.index.pair_scores(queries, docs)

    def candidates(self, queries: np.ndarray, clicked: RaggedLike, n: int) -> np.ndarray:
        if n < 0:
            raise ConfigError(f"n (negatives per query) must be >= 0, got {n}")
        q = np.asarray(queries)
        n_q, n_docs = q.shape[0], self.index.n_docs
        cl = _unique_rows(as_ragged(clicked, n_q))
        if cl.values.size and (cl.values.min() < 0 or cl.values.max() >= n_docs):
            raise DataFormatError(f"clicked document ids must be in 0..{n_docs - 1}")
        neg = self.index.top_k(q, n, exclude=cl, matched_only=True).docs.astype(np.int64)
        if self.rng is not None and n:
            neg = self._fill(neg, cl, self.rng)
        sizes = cl.sizes
        width = (int(sizes.max()) if n_q else 0) + n
        out = np.full((n_q, width), -1, dtype=np.int64)
        out[cl.row_of, np.arange(cl.values.size) - cl.ptr[cl.row_of]] = cl.values
        # Negatives go right after each row's clicked documents.
        r, c = np.nonzero(neg >= 0)
        out[r, sizes[r] + c] = neg[r, c]
        return out.astype(np.int32)

    def _fill(self, neg: np.ndarray, clicked: Ragged, rng: np.random.Generator) -> np.ndarray:
        """Replace the ``-1`` of ``neg`` by random documents not in the row (not clicked,
        not already a negative), by rejection sampling in rounds."""
        n = neg.shape[1]
        n_docs = self.index.n_docs
        neg = neg.copy()
        have = (neg >= 0).sum(axis=1)
        # A row can never hold more than the documents left after its clicked ones.
        target = np.minimum(n, n_docs - clicked.sizes)
        rows = np.flatnonzero(have < target)
        while rows.size:
            taken_r = np.concatenate([clicked.row_of, np.nonzero(neg >= 0)[0]])
            taken_d = np.concatenate([clicked.values, neg[neg >= 0]])
            taken = np.unique(taken_r * n_docs + taken_d)
            need = target[rows] - have[rows]
            width = int(need.max()) * 2 + 8
            draw = rng.integers(0, n_docs, size=(rows.size, width))
            keys = rows[:, None] * n_docs + draw
            ok = ~np.isin(keys, taken)
            # Keep the first occurrence of a document within a row's draws.
            order = np.argsort(keys, axis=1, kind="stable")
            sk = np.take_along_axis(keys, order, axis=1)
            first = np.ones_like(ok)
            first[:, 1:] = sk[:, 1:] != sk[:, :-1]
            dup = np.empty_like(ok)
            np.put_along_axis(dup, order, ~first, axis=1)
            ok &= ~dup
            pick = ok & (np.cumsum(ok, axis=1) <= need[:, None])
            rr, cc = np.nonzero(pick)
            slot = have[rows][rr] + np.cumsum(pick, axis=1)[rr, cc] - 1
            neg[rows[rr], slot] = draw[rr, cc]
            have = (neg >= 0).sum(axis=1)
            rows = np.flatnonzero(have < target)
        return neg


def _unique_rows(r: Ragged) -> Ragged:
    """Each row's values sorted and without repeats."""
    if not r.values.size:
        return r
    row = r.row_of
    order = np.lexsort((r.values, row))
    row, val = row[order], r.values[order]
    keep = np.ones(val.size, dtype=bool)
    keep[1:] = (row[1:] != row[:-1]) | (val[1:] != val[:-1])
    ptr = np.zeros(r.n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row[keep], minlength=r.n_rows), out=ptr[1:])
    return Ragged(ptr, val[keep])


@dataclass(frozen=True, eq=False)
class RankingSamples:
    """The ranking samples of one user and one split (FedPS Sec. 4.1).

    One row per query event of the split that has at least one click; candidates are ordered
    by the first-stage score (descending, ties by document id), so column order is the
    original (non-personalized) ranking.

    Attributes:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        events: ``(Q,)`` int64 event indices in the user's :class:`~fedrank.data.aol.UserLog`.
        query: ``(Q, Lq)`` int32 word ids (0 = padding).
        candidates: ``(Q, C)`` int32 document ids, ``-1`` where ``mask`` is False.
        mask: ``(Q, C)`` bool, True for real candidates.
        labels: ``(Q, C)`` float32, 1 for clicked documents, else 0.
        features: ``(Q, C, F)`` float32 click-history features (:data:`FEATURE_NAMES`), 0 at
            padding.
        bm25: ``(Q, C)`` float32 first-stage score (0 at padding).
        n_without_click: events of the split skipped because nothing was clicked.
    """

    split: str
    events: np.ndarray
    query: np.ndarray
    candidates: np.ndarray
    mask: np.ndarray
    labels: np.ndarray
    features: np.ndarray
    bm25: np.ndarray
    n_without_click: int = 0

    feature_names: ClassVar[tuple[str, ...]] = FEATURE_NAMES

    def __post_init__(self) -> None:
        q = self.events.shape[0]
        c = self.candidates.shape[1] if self.candidates.ndim == 2 else -1
        expect = {
            "query": (np.int32, None),
            "candidates": (np.int32, (q, c)),
            "mask": (np.bool_, (q, c)),
            "labels": (np.float32, (q, c)),
            "features": (np.float32, (q, c, len(FEATURE_NAMES))),
            "bm25": (np.float32, (q, c)),
        }
        for name, (dtype, shape) in expect.items():
            a = getattr(self, name)
            if a.dtype != dtype or (shape is not None and a.shape != shape):
                raise DataFormatError(
                    f"RankingSamples.{name} must be {np.dtype(dtype)} of shape {shape}, got "
                    f"{a.dtype} {a.shape}"
                )
        if self.query.ndim != 2 or self.query.shape[0] != q:
            raise DataFormatError(f"RankingSamples.query must have shape ({q}, Lq)")
        if not np.array_equal(self.mask, self.candidates >= 0):
            raise DataFormatError("RankingSamples.mask must be candidates >= 0")

    @property
    def n_queries(self) -> int:
        return int(self.events.shape[0])

    @property
    def n_candidates(self) -> np.ndarray:
        """``(Q,)`` int64 real candidates per query."""
        return self.mask.sum(axis=1)


def _gather(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> Ragged:
    """The CSR rows ``rows`` of ``(ptr, values)`` as a new :class:`Ragged`."""
    sizes = ptr[rows + 1] - ptr[rows]
    out_ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=out_ptr[1:])
    offset = np.arange(int(out_ptr[-1])) - np.repeat(out_ptr[:-1], sizes)
    return Ragged(out_ptr, values[np.repeat(ptr[rows], sizes) + offset].astype(np.int64))


def _compact(*columns: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Joint integer keys of history and query items from several id columns.

    Each column is ``(history_ids, query_ids)``; equal tuples get equal keys."""
    hist_key = np.zeros(columns[0][0].size, dtype=np.int64)
    query_key = np.zeros(columns[0][1].size, dtype=np.int64)
    for h, q in columns:
        values, inverse = np.unique(np.concatenate([h, q]).astype(np.int64), return_inverse=True)
        inverse = inverse.reshape(-1)
        hist_key = hist_key * values.size + inverse[: h.size]
        query_key = query_key * values.size + inverse[h.size :]
        # Re-compact so that the next multiplication cannot overflow.
        _, joint = np.unique(np.concatenate([hist_key, query_key]), return_inverse=True)
        joint = joint.reshape(-1)
        hist_key, query_key = joint[: h.size], joint[h.size :]
    return hist_key, query_key


def _count_earlier(
    hist_key: np.ndarray, hist_rank: np.ndarray, query_key: np.ndarray, query_rank: np.ndarray
) -> np.ndarray:
    """For every query item, the number of history items with the same key and a strictly
    smaller rank (time)."""
    if hist_key.size == 0:
        return np.zeros(query_key.size, dtype=np.int64)
    span = int(max(hist_rank.max(), query_rank.max(initial=0))) + 1
    combined = np.sort(hist_key * span + hist_rank)
    hi = np.searchsorted(combined, query_key * span + query_rank, side="left")
    lo = np.searchsorted(combined, query_key * span, side="left")
    return hi - lo


def build_samples(
    user_log: UserLog,
    pool: DocumentPool,
    generator: CandidateGenerator,
    split: str,
    n: int | None = None,
) -> RankingSamples:
    """The :class:`RankingSamples` of ``user_log``'s events in ``split``.

    Candidates: ``generator.candidates`` with ``n`` negatives (default
    :data:`DEFAULT_NEGATIVES`: 5 for train, 50 for valid and test). Features (:data:`FEATURE_NAMES`)
    use only this user's events that are strictly earlier in time than the event
    (background and earlier train/valid/test events alike), never later ones and never other
    users'. Events of the split without a click are skipped (counted in
    ``n_without_click``); they still count as history (``log_query_issues``).
    """
    if split not in DEFAULT_NEGATIVES:
        raise ConfigError(f"split must be one of {tuple(DEFAULT_NEGATIVES)}, got {split!r}")
    n = DEFAULT_NEGATIVES[split] if n is None else n
    code = SPLIT_NAMES.index(split)
    clicks = user_log.clicks_per_event
    in_split = user_log.split == code
    sel = np.flatnonzero(in_split & (clicks > 0))
    n_without = int(np.count_nonzero(in_split & (clicks == 0)))
    if user_log.click_docs.size and int(user_log.click_docs.max()) >= pool.n_docs:
        raise DataFormatError(
            f"user {user_log.user_id} clicked document {int(user_log.click_docs.max())}, but "
            f"the pool has {pool.n_docs} documents; build the pool from the same log"
        )
    queries = user_log.queries[sel]
    clicked = _gather(user_log.click_ptr, user_log.click_docs, sel)
    cand = np.asarray(generator.candidates(queries, clicked, n))
    if cand.ndim != 2 or cand.shape[0] != sel.size:
        raise DataFormatError(
            f"{type(generator).__name__}.candidates returned shape {cand.shape}, expected "
            f"({sel.size}, C)"
        )
    cand = cand.astype(np.int64)
    if cand.size and (cand.min() < -1 or cand.max() >= pool.n_docs):
        raise DataFormatError(
            f"{type(generator).__name__}.candidates returned ids outside -1..{pool.n_docs - 1}"
        )
    mask = cand >= 0
    score = np.where(mask, np.asarray(generator.score(queries, cand), dtype=np.float64), 0.0)
    # Original ranking: score descending, then document id; padding last.
    order = np.lexsort(
        (np.where(mask, cand, np.iinfo(np.int64).max), -np.where(mask, score, -np.inf))
    )
    cand = np.take_along_axis(cand, order, axis=1)
    score = np.take_along_axis(score, order, axis=1)
    mask = cand >= 0

    rows, cols = np.nonzero(mask)
    ev = sel[rows]
    doc = cand[rows, cols]
    clicked_keys = clicked.row_of * pool.n_docs + clicked.values
    labels = np.zeros(cand.shape, dtype=np.float32)
    labels[rows, cols] = np.isin(rows * pool.n_docs + doc, clicked_keys)

    # Click history of this user: time rank (ties share a rank, so they are not "earlier").
    _, t_rank = np.unique(user_log.time, return_inverse=True)
    t_rank = t_rank.reshape(-1).astype(np.int64)
    h_ev = user_log.click_event
    h_doc = user_log.click_docs.astype(np.int64)
    h_rank, q_rank = t_rank[h_ev], t_rank[ev]
    qk, ss = user_log.query_key, user_log.session
    f = np.zeros((*cand.shape, len(FEATURE_NAMES)), dtype=np.float32)
    hk, tk = _compact((qk[h_ev], qk[ev]), (h_doc, doc))
    f[rows, cols, 0] = np.log1p(_count_earlier(hk, h_rank, tk, q_rank))
    hk, tk = _compact((h_doc, doc))
    f[rows, cols, 1] = np.log1p(_count_earlier(hk, h_rank, tk, q_rank))
    hk, tk = _compact((ss[h_ev], ss[ev]), (h_doc, doc))
    f[rows, cols, 2] = _count_earlier(hk, h_rank, tk, q_rank) > 0
    f[rows, cols, 3] = score[rows, cols]
    hk, tk = _compact((qk, qk[sel]))
    issues = _count_earlier(hk, t_rank, tk, t_rank[sel])
    f[rows, cols, 4] = np.log1p(issues[rows])

    return RankingSamples(
        split=split,
        events=sel.astype(np.int64),
        query=queries.astype(np.int32),
        candidates=cand.astype(np.int32),
        mask=mask,
        labels=labels,
        features=f,
        bm25=score.astype(np.float32),
        n_without_click=n_without,
    )


@dataclass(frozen=True, eq=False)
class UserData:
    """Everything one simulated FedPS client holds (FedPS Sec. 3.1-3.3).

    Attributes:
        user_id: the AnonID.
        train, valid, test: the user's :class:`RankingSamples`.
        vocab_ids: ``(n,)`` int32 sorted word ids the user has used -- words of background
            and training queries and of documents clicked then (padding and
            out-of-vocabulary excluded). The model keeps personal word embeddings only for
            these (Sec. 3.3.1).
        query_term_counts: ``(n_q, 2)`` int64 rows ``(word id, count)`` of the words of the
            user's background and training queries (one count per occurrence), by id.
        click_term_counts: ``(n_c, 2)`` int64 the same for the words of clicked documents
            (one count per click). Together they are the term-distribution user profile of
            the KL-divergence privacy measure (Sec. 4.1).
    """

    user_id: int
    train: RankingSamples
    valid: RankingSamples
    test: RankingSamples
    vocab_ids: np.ndarray
    query_term_counts: np.ndarray
    click_term_counts: np.ndarray

    @property
    def term_counts(self) -> np.ndarray:
        """``(n, 2)`` int64 ``(word id, count)`` of queries and clicked documents together."""
        ids = np.concatenate([self.query_term_counts[:, 0], self.click_term_counts[:, 0]])
        counts = np.concatenate([self.query_term_counts[:, 1], self.click_term_counts[:, 1]])
        uniq, inverse = np.unique(ids, return_inverse=True)
        return np.stack(
            [uniq, np.bincount(inverse.reshape(-1), weights=counts).astype(np.int64)], axis=1
        )

    def samples(self, split: str) -> RankingSamples:
        if split not in DEFAULT_NEGATIVES:
            raise ConfigError(f"split must be one of {tuple(DEFAULT_NEGATIVES)}, got {split!r}")
        return getattr(self, split)


def _term_counts(ids: np.ndarray) -> np.ndarray:
    ids = ids[(ids != PAD_ID) & (ids != OOV_ID)].astype(np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    return np.stack([uniq, counts.astype(np.int64)], axis=1)


def build_users(
    log: TimeSplit | Sequence[UserLog],
    pool: DocumentPool,
    vocab: Vocabulary,
    generator: CandidateGenerator,
    *,
    max_query_len: int = 12,
    negatives: Mapping[str, int] | None = None,
) -> list[UserData]:
    """:class:`UserData` of every user: ``log`` is a :class:`~fedrank.data.aol.TimeSplit`
    (its queries are encoded with ``vocab`` and ``max_query_len``) or already-built
    :class:`~fedrank.data.aol.UserLog` objects. ``negatives`` overrides
    :data:`DEFAULT_NEGATIVES` per split."""
    neg = dict(DEFAULT_NEGATIVES)
    if negatives is not None:
        unknown = set(negatives) - set(neg)
        if unknown:
            raise ConfigError(f"negatives has unknown splits {sorted(unknown)}; use {tuple(neg)}")
        neg.update(negatives)
    if isinstance(log, TimeSplit):
        if pool.n_docs != log.log.urls.size or not np.array_equal(pool.urls, log.log.urls):
            raise DataFormatError(
                "the document pool does not match the log's URLs; build it from the same "
                "log (DocumentPool.build(split.log.urls, ...))"
            )
        logs: Sequence[UserLog] = user_logs(log, vocab, max_query_len=max_query_len)
    else:
        logs = log
    out = []
    for ul in logs:
        if ul.queries.size and int(ul.queries.max()) >= len(vocab):
            raise DataFormatError(
                f"user {ul.user_id}: word id {int(ul.queries.max())} is outside the vocabulary "
                f"({len(vocab)} words)"
            )
        parts = {
            s: build_samples(ul, pool, generator, s, n=neg[s]) for s in ("train", "valid", "test")
        }
        seen = np.isin(ul.split, (BACKGROUND, TRAIN))
        seen_clicks = ul.click_docs[np.repeat(seen, ul.clicks_per_event)]
        q_ids = ul.queries[seen].reshape(-1)
        d_ids = pool.tokens[seen_clicks].reshape(-1)
        q_counts, d_counts = _term_counts(q_ids), _term_counts(d_ids)
        vocab_ids = np.union1d(q_counts[:, 0], d_counts[:, 0]).astype(np.int32)
        out.append(
            UserData(
                user_id=ul.user_id,
                train=parts["train"],
                valid=parts["valid"],
                test=parts["test"],
                vocab_ids=vocab_ids,
                query_term_counts=q_counts,
                click_term_counts=d_counts,
            )
        )
    return out
