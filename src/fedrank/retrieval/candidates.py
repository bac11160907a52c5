"""Candidate lists and ranking samples with click-history features (FedPS Sec. 4.1).

For every query event of a user, FedPS re-ranks a short list of candidates: "we rank all
documents with BM25 and sample the top documents as the candidates. 50 documents are
selected for each test query, while 5 candidates per training/validation query" (Sec. 4.1);
the clicked documents are the relevant ones, the other candidates irrelevant.

**One process for positives and negatives.** :func:`build_lists` asks the search engine
(:class:`~fedrank.retrieval.search_engine.SearchEngine`, BM25 over the indexed documents)
for the top ``depth`` (50) documents of every query event, over the whole index, the
clicked documents included and *not* inserted. An event keeps its list only when a clicked
document was retrieved and at least one retrieved document was not clicked; other events
are counted (:attr:`CandidateLists.report`) and stay in the history. Validation and test
lists are the retrieved lists; a training list is the retrieved clicked documents plus
``train_negatives`` (5) of the retrieved non-clicked ones drawn uniformly at random, so a
training list is a random sub-list of the list the model meets at test time. A clicked
document the engine does not retrieve is never in a list, so relevant and irrelevant
candidates match the query by the same rule (the bug this replaces: negatives were the top
BM25 matches while the clicked document was inserted whether it matched or not, and
"least matching first" beat every personalized signal).

Lists are keyed by the event's index in the log (:attr:`UserLog.event_id`), so a log the
server rebuilds (GroupUser's pooled logs, CoverQuery's logs with covers) gets exactly the
lists every other mode uses. :func:`build_samples` turns one user's events of one split
into padded arrays (:class:`RankingSamples`) with click-history features computed only from
that user's earlier events -- the user profile that FedPS keeps on the client (Sec.
3.1-3.2) -- and the document's background popularity; :class:`UserData` and
:func:`build_users` hold everything one simulated client has.

Everything is vectorized (one loop over users in :func:`build_users`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedrank.core.arrays import unique_values
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
    tokenize,
)
from fedrank.errors import ConfigError, DataFormatError
from fedrank.retrieval.bm25 import Ragged
from fedrank.retrieval.search_engine import SearchEngine

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_TRAIN_NEGATIVES",
    "FEATURE_EDGES",
    "FEATURE_NAMES",
    "SAMPLE_SPLITS",
    "CandidateLists",
    "RankingSamples",
    "UserData",
    "build_lists",
    "build_samples",
    "build_users",
]

#: Documents the search engine retrieves per query (FedPS Sec. 4.1: 50 per test query);
#: validation lists are test-like (validation picks the reported model).
DEFAULT_DEPTH = 50
#: Non-clicked candidates of a training list, drawn from the retrieved ones (Sec. 4.1: 5).
DEFAULT_TRAIN_NEGATIVES = 5
#: The splits that have ranking samples.
SAMPLE_SPLITS: tuple[str, ...] = ("train", "valid", "test")

#: Columns of :attr:`RankingSamples.features`. Counts are ``log1p``-transformed; "earlier"
#: means strictly earlier in time, among the same user's events (background included).
FEATURE_NAMES: tuple[str, ...] = (
    "log_pclick",  # earlier clicks on this document for the same (normalised) query
    "log_doc_clicks",  # earlier clicks on this document, any query
    "session_clicked",  # 1 if clicked earlier in the same session
    "bm25",  # the search engine's BM25 score of (query, document)
    "log_query_issues",  # earlier events with the same normalised query
    "log_global_clicks",  # all users' clicks on the document in the background period
)

#: Counts whose ``log1p`` bounds the bins of a count feature in :data:`FEATURE_EDGES`.
_COUNT_BINS = (0, 1, 2, 3, 4, 6, 10, 20, 40, 100, 250, 650, 1800)
_LOG_COUNT_EDGES = tuple(float(x) for x in np.log1p(_COUNT_BINS))
#: Fixed bin edges of each feature (in :data:`FEATURE_NAMES` order) for the model's
#: piecewise-linear feature encoding
#: (:class:`fedrank.models.peps.layers.PiecewiseLinearEncoding`): whole counts up to 4,
#: then roughly doubling; BM25 scores in steps of about one over their usual range (3 to
#: 25 on the AOL engine). Constants of the model, the same for every client, not fitted on
#: anyone's data.
FEATURE_EDGES: tuple[tuple[float, ...], ...] = (
    _LOG_COUNT_EDGES,
    _LOG_COUNT_EDGES,
    (0.0, 1.0),
    (0.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 14.0, 16.0, 19.0, 23.0, 30.0, 45.0),
    _LOG_COUNT_EDGES,
    _LOG_COUNT_EDGES,
)


@dataclass(frozen=True, eq=False)
class CandidateLists:
    """The candidate list of every listed query event (see the module docstring).

    Attributes:
        event_ids: ``(n,)`` int64 ascending event indices (into the log's events).
        docs: ``(n, W)`` int32 document ids in the engine's order, ``-1`` = padding.
        scores: ``(n, W)`` float32 BM25 scores (0 at padding).
        ranks: ``(n, W)`` int32 1-based rank in the engine's retrieved list (a training
            list is a sub-list, so its ranks can skip), 0 at padding.
        labels: ``(n, W)`` bool, clicked.
        background_clicks: ``(n_docs,)`` int64 clicks of all users on every document in the
            background period (the engine's popularity, known before the experiment).
        depth: documents retrieved per query.
        train_negatives: non-clicked candidates kept in a training list.
        report: per split (``train``, ``valid``, ``test``): ``clicked`` events with a click,
            ``listed`` events with a list, ``click_not_retrieved`` (no clicked document in
            the top ``depth``) and ``no_negative`` (every retrieved document was clicked).
    """

    event_ids: np.ndarray
    docs: np.ndarray
    scores: np.ndarray
    ranks: np.ndarray
    labels: np.ndarray
    background_clicks: np.ndarray
    depth: int
    train_negatives: int
    report: Mapping[str, Mapping[str, int]]

    def __post_init__(self) -> None:
        n, w = self.docs.shape
        for name in ("scores", "ranks", "labels"):
            if getattr(self, name).shape != (n, w):
                raise DataFormatError(f"CandidateLists.{name} must have shape ({n}, {w})")
        if self.event_ids.shape != (n,) or np.any(np.diff(self.event_ids) <= 0):
            raise DataFormatError(f"CandidateLists.event_ids must be ({n},) strictly ascending")

    @property
    def n_lists(self) -> int:
        return int(self.event_ids.size)

    @property
    def n_docs(self) -> int:
        return int(self.background_clicks.size)

    def rows(self, event_ids: np.ndarray) -> np.ndarray:
        """``(len(event_ids),)`` int64 row of every event's list, ``-1`` where it has none
        (no click, click not retrieved, no negative, or not an event of the log)."""
        ids = np.asarray(event_ids, dtype=np.int64)
        if self.n_lists == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.event_ids, ids), self.n_lists - 1)
        return np.where(self.event_ids[pos] == ids, pos, -1).astype(np.int64)


def _clicked_keys(split: TimeSplit, events: np.ndarray, n_docs: int) -> np.ndarray:
    """Sorted keys ``row * n_docs + doc`` of the clicked documents of ``events``."""
    lg = split.log
    clicked = _gather(lg.click_ptr, lg.click_docs, events)
    return unique_values(clicked.row_of * n_docs + clicked.values)


def build_lists(
    split: TimeSplit,
    engine: SearchEngine,
    rng: np.random.Generator,
    *,
    depth: int = DEFAULT_DEPTH,
    train_negatives: int = DEFAULT_TRAIN_NEGATIVES,
) -> CandidateLists:
    """The candidate lists of every train / valid / test event of ``split`` with a click
    (see the module docstring). ``rng`` draws the training lists' negatives."""
    if depth < 2:
        raise ConfigError(f"depth must be >= 2 (a clicked and a non-clicked document), got {depth}")
    if train_negatives < 1:
        raise ConfigError(f"train_negatives must be >= 1, got {train_negatives}")
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got "
            f"{type(rng).__name__}"
        )
    lg = split.log
    if engine.n_docs != lg.urls.size:
        raise DataFormatError(
            f"the search engine indexes {engine.n_docs} documents but the log has "
            f"{lg.urls.size} URLs; build it from the same log's texts"
        )
    n_docs = engine.n_docs
    events = np.flatnonzero((split.split >= TRAIN) & (lg.clicks_per_event > 0))
    query_ids = engine.encode_queries([tokenize(str(q)) for q in lg.queries])
    top = engine.top_k(query_ids[lg.query[events]], depth)
    docs = top.docs.astype(np.int64)
    retrieved = docs >= 0
    rows = np.arange(events.size, dtype=np.int64)[:, None]
    labels = retrieved & np.isin(rows * n_docs + docs, _clicked_keys(split, events, n_docs))
    negative = retrieved & ~labels
    keep = labels.any(axis=1) & negative.any(axis=1)

    # Training lists: the clicked documents and a uniform draw of the retrieved others.
    is_train = split.split[events] == TRAIN
    key = rng.random(docs.shape)
    key[~negative] = np.inf
    drawn = np.zeros(docs.shape, dtype=bool)
    np.put_along_axis(
        drawn, np.argsort(key, axis=1, kind="stable")[:, :train_negatives], True, axis=1
    )
    column = np.where(is_train[:, None], labels | (drawn & negative), retrieved)
    order = np.argsort(~column, axis=1, kind="stable")  # kept columns first, in engine order
    column = np.take_along_axis(column, order, axis=1)
    width = max(int(column.sum(axis=1).max(initial=0)), 1)
    take = order[:, :width]
    column = column[:, :width]
    ranks = np.broadcast_to(np.arange(1, depth + 1, dtype=np.int32), docs.shape)

    def pick(values: np.ndarray, fill: object) -> np.ndarray:
        return np.where(column, np.take_along_axis(values, take, axis=1), fill)[keep]

    report = {}
    for name in SAMPLE_SPLITS:
        in_split = split.split[events] == SPLIT_NAMES.index(name)
        hit = labels.any(axis=1)
        report[name] = {
            "clicked": int(in_split.sum()),
            "listed": int((in_split & keep).sum()),
            "click_not_retrieved": int((in_split & ~hit).sum()),
            "no_negative": int((in_split & hit & ~keep).sum()),
        }
    background = split.split[lg.click_event] == BACKGROUND
    return CandidateLists(
        event_ids=events[keep].astype(np.int64),
        docs=pick(docs, -1).astype(np.int32),
        scores=pick(np.where(retrieved, top.scores, 0.0), 0.0).astype(np.float32),
        ranks=pick(ranks, 0).astype(np.int32),
        labels=pick(labels, False).astype(bool),
        background_clicks=np.bincount(lg.click_docs[background], minlength=n_docs).astype(np.int64),
        depth=int(depth),
        train_negatives=int(train_negatives),
        report=report,
    )


@dataclass(frozen=True, eq=False)
class RankingSamples:
    """The ranking samples of one user and one split (FedPS Sec. 4.1).

    One row per query event of the split that has a candidate list
    (:class:`CandidateLists`); candidates are in the search engine's order (BM25 descending,
    ties by document id), so column order is the original (non-personalized) ranking.

    Attributes:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        events: ``(Q,)`` int64 event indices in the user's :class:`~fedrank.data.aol.UserLog`.
        event_ids: ``(Q,)`` int64 the same events' indices in the log (their list keys; equal
            across every mode's samples of the same query).
        query: ``(Q, Lq)`` int32 word ids (0 = padding).
        candidates: ``(Q, C)`` int32 document ids, ``-1`` where ``mask`` is False.
        mask: ``(Q, C)`` bool, True for real candidates.
        labels: ``(Q, C)`` float32, 1 for clicked documents, else 0.
        features: ``(Q, C, F)`` float32 click-history features (:data:`FEATURE_NAMES`), 0 at
            padding.
        bm25: ``(Q, C)`` float32 first-stage score (0 at padding).
        ranks: ``(Q, C)`` int32 1-based rank in the engine's retrieved list (0 at padding).
        n_without_click: events of the split skipped because nothing was clicked.
        n_unlisted: clicked events of the split without a list (no clicked document
            retrieved, or nothing else retrieved); they stay in the history.
    """

    split: str
    events: np.ndarray
    event_ids: np.ndarray
    query: np.ndarray
    candidates: np.ndarray
    mask: np.ndarray
    labels: np.ndarray
    features: np.ndarray
    bm25: np.ndarray
    ranks: np.ndarray
    n_without_click: int = 0
    n_unlisted: int = 0

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
            "ranks": (np.int32, (q, c)),
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
        if self.event_ids.shape != (q,):
            raise DataFormatError(f"RankingSamples.event_ids must have shape ({q},)")
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
    user_log: UserLog, pool: DocumentPool, lists: CandidateLists, split: str
) -> RankingSamples:
    """The :class:`RankingSamples` of ``user_log``'s events in ``split`` that have a list in
    ``lists``. Features (:data:`FEATURE_NAMES`) use only this user's events that are strictly
    earlier in time than the event (background and earlier train/valid/test events alike),
    never later ones and never other users', and the background popularity of the document.
    Events of the split without a click are counted in ``n_without_click``, clicked events
    without a list in ``n_unlisted``; both still count as history."""
    if split not in SAMPLE_SPLITS:
        raise ConfigError(f"split must be one of {SAMPLE_SPLITS}, got {split!r}")
    if lists.n_docs != pool.n_docs:
        raise DataFormatError(
            f"the candidate lists cover {lists.n_docs} documents but the pool has "
            f"{pool.n_docs}; build both from the same log"
        )
    if user_log.click_docs.size and int(user_log.click_docs.max()) >= pool.n_docs:
        raise DataFormatError(
            f"user {user_log.user_id} clicked document {int(user_log.click_docs.max())}, but "
            f"the pool has {pool.n_docs} documents; build the pool from the same log"
        )
    code = SPLIT_NAMES.index(split)
    clicks = user_log.clicks_per_event
    in_split = user_log.split == code
    row = lists.rows(user_log.event_id)
    sel = np.flatnonzero(in_split & (row >= 0))
    r = row[sel]
    width = max(int((lists.docs[r] >= 0).sum(axis=1).max(initial=0)), 1)
    cand = lists.docs[r, :width].astype(np.int64)
    mask = cand >= 0
    labels = lists.labels[r, :width].astype(np.float32)
    score = lists.scores[r, :width]

    rows, cols = np.nonzero(mask)
    ev = sel[rows]
    doc = cand[rows, cols]
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
    f[rows, cols, 5] = np.log1p(lists.background_clicks[doc])

    return RankingSamples(
        split=split,
        events=sel.astype(np.int64),
        event_ids=user_log.event_id[sel].astype(np.int64),
        query=user_log.queries[sel].astype(np.int32),
        candidates=cand.astype(np.int32),
        mask=mask,
        labels=labels,
        features=f,
        bm25=np.where(mask, score, 0.0).astype(np.float32),
        ranks=lists.ranks[r, :width].astype(np.int32),
        n_without_click=int(np.count_nonzero(in_split & (clicks == 0))),
        n_unlisted=int(np.count_nonzero(in_split & (clicks > 0) & (row < 0))),
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
        if split not in SAMPLE_SPLITS:
            raise ConfigError(f"split must be one of {SAMPLE_SPLITS}, got {split!r}")
        return getattr(self, split)


def _term_counts(ids: np.ndarray) -> np.ndarray:
    ids = ids[(ids != PAD_ID) & (ids != OOV_ID)].astype(np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    return np.stack([uniq, counts.astype(np.int64)], axis=1)


def build_users(
    logs: Sequence[UserLog], pool: DocumentPool, vocab: Vocabulary, lists: CandidateLists
) -> list[UserData]:
    """:class:`UserData` of every log (the users' own logs, or logs the server rebuilt):
    samples from ``lists``, the words the user has used and the term counts of the
    KL-divergence profile (background and training period)."""
    out = []
    for ul in logs:
        if ul.queries.size and int(ul.queries.max()) >= len(vocab):
            raise DataFormatError(
                f"user {ul.user_id}: word id {int(ul.queries.max())} is outside the vocabulary "
                f"({len(vocab)} words)"
            )
        parts = {s: build_samples(ul, pool, lists, s) for s in SAMPLE_SPLITS}
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
