"""The model-facing corpus built from the past only (FedPS Sec. 4.1): vocabulary, document
pool and texts, per-user logs, :func:`build_corpus`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedrank.data.aol.log import ClickRows
from fedrank.data.aol.split import (
    BACKGROUND,
    TimeSplit,
    indexed_documents,
    past_documents,
    past_events,
)
from fedrank.data.aol.text import WordSegmenter, document_words, segmenter_counts, tokenize
from fedrank.errors import ConfigError, DataFormatError

#: Reserved vocabulary ids.
PAD_ID, OOV_ID = 0, 1
_PAD_WORD, _OOV_WORD = "<pad>", "<oov>"


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Word ids: 0 = padding (``<pad>``), 1 = out-of-vocabulary (``<oov>``), then the words
    by decreasing count (ties alphabetically). Built by :meth:`build`.

    Attributes:
        words: the word of every id.
        counts: ``(len(words),)`` int64 count of every word in the text it was built from
            (0 for the two reserved ids).
    """

    words: tuple[str, ...]
    counts: np.ndarray
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.words[:2] != (_PAD_WORD, _OOV_WORD):
            raise DataFormatError(f"Vocabulary must start with {_PAD_WORD!r}, {_OOV_WORD!r}")
        if self.counts.shape != (len(self.words),):
            raise DataFormatError(
                f"Vocabulary counts must have shape ({len(self.words)},), got {self.counts.shape}"
            )
        index = {w: i for i, w in enumerate(self.words)}
        if len(index) != len(self.words):
            raise DataFormatError("Vocabulary words must be distinct")
        object.__setattr__(self, "_index", index)

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], min_count: int = 2) -> Vocabulary:
        """The words occurring at least ``min_count`` times in ``token_lists``."""
        if min_count < 1:
            raise ConfigError(f"min_count must be >= 1, got {min_count}")
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        kept = sorted(
            ((w, c) for w, c in counts.items() if c >= min_count), key=lambda x: (-x[1], x[0])
        )
        words = (_PAD_WORD, _OOV_WORD, *(w for w, _ in kept))
        return cls(words, np.array([0, 0, *(c for _, c in kept)], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self._index

    def id(self, word: str) -> int:
        """The id of ``word`` (:data:`OOV_ID` if unknown)."""
        return self._index.get(word, OOV_ID)

    def encode(self, tokens: Sequence[str], *, drop_unknown: bool = False) -> np.ndarray:
        """``(n,)`` int32 ids; unknown words are :data:`OOV_ID`, or left out with
        ``drop_unknown``."""
        index = self._index
        ids = [index.get(w, OOV_ID) for w in tokens if not drop_unknown or w in index]
        return np.array(ids, dtype=np.int32)

    def encode_batch(
        self, token_lists: Sequence[Sequence[str]], max_len: int, *, drop_unknown: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Padded ids ``(n, max_len)`` int32 (longer lists are truncated) and the number of
        ids kept per list ``(n,)`` int32. Unknown words become :data:`OOV_ID`; with
        ``drop_unknown`` they are left out before truncation (what the models use: an
        out-of-vocabulary id shared by every unknown word would make any two unknown words
        match)."""
        if max_len < 1:
            raise ConfigError(f"max_len must be >= 1, got {max_len}")
        index = self._index
        if drop_unknown:
            token_lists = [[w for w in t if w in index] for t in token_lists]
        lengths = np.fromiter(
            (min(len(t), max_len) for t in token_lists), dtype=np.int32, count=len(token_lists)
        )
        get = index.get
        flat = np.fromiter(
            (get(w, OOV_ID) for t in token_lists for w in t[:max_len]),
            dtype=np.int32,
            count=int(lengths.sum()),
        )
        out = np.zeros((len(token_lists), max_len), dtype=np.int32)
        out[np.arange(max_len) < lengths[:, None]] = flat
        return out, lengths


@dataclass(frozen=True, eq=False)
class DocumentPool:
    """The document collection: every distinct clicked URL (FedPS Sec. 4.1).

    Document ``d`` is ``urls[d]``; for a pool built from a :class:`QueryLog` these are the
    log's ``urls``, so the log's ``click_docs`` are document ids.

    Attributes:
        urls: ``(n_docs,)`` str.
        tokens: ``(n_docs, max_len)`` int32 word ids, padded with :data:`PAD_ID`.
        lengths: ``(n_docs,)`` int32 number of (non-padding) word ids of every document.
    """

    urls: np.ndarray
    tokens: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        n = self.urls.shape[0]
        if self.tokens.ndim != 2 or self.tokens.shape[0] != n or self.tokens.dtype != np.int32:
            raise DataFormatError(
                f"DocumentPool.tokens must be int32 of shape ({n}, max_len), got "
                f"{self.tokens.dtype} {self.tokens.shape}"
            )
        if self.lengths.shape != (n,) or self.lengths.dtype != np.int32:
            raise DataFormatError(
                f"DocumentPool.lengths must be int32 of shape ({n},), got "
                f"{self.lengths.dtype} {self.lengths.shape}"
            )

    @classmethod
    def build(
        cls, urls: np.ndarray, words: Sequence[Sequence[str]], vocab: Vocabulary, max_len: int = 12
    ) -> DocumentPool:
        """A pool from each document's words (:func:`document_texts` here; titles in a log
        that has them), unknown words dropped, truncated to ``max_len`` ids."""
        if len(words) != len(urls):
            raise DataFormatError(f"got {len(words)} word lists for {len(urls)} documents")
        tokens, lengths = vocab.encode_batch(words, max_len, drop_unknown=True)
        return cls(np.asarray(urls, dtype=str), tokens, lengths)

    @property
    def n_docs(self) -> int:
        return int(self.urls.shape[0])

    @property
    def max_len(self) -> int:
        return int(self.tokens.shape[1])


def default_segmenter(split: TimeSplit, **kwargs: int) -> WordSegmenter:
    """:class:`WordSegmenter` over :func:`segmenter_counts` of the URLs of the past documents
    and the words of the past queries (:func:`past_documents`, :func:`past_events`: the
    data a deployment has before the period it is tested on). ``kwargs`` go to
    :func:`segmenter_counts` (``min_sites``, ``min_word_length``) and
    :class:`WordSegmenter` (``min_length``)."""
    seg_kw = {k: kwargs.pop(k) for k in ("min_length",) if k in kwargs}
    lg = split.log
    tokens = [tokenize(q) for q in lg.queries]
    past = lg.query[past_events(split)]
    counts = segmenter_counts(lg.urls[past_documents(split)], (tokens[q] for q in past), **kwargs)
    return WordSegmenter(counts, **seg_kw)


def click_through_words(split: TimeSplit) -> list[Counter[str]]:
    """For every document, how often each word occurred in the queries that led to a click
    on it in the **background** period (each click counts its query's words once). This is
    the search engine's click-through text from before the experiment; later clicks never
    enter a document's text (they would carry the label of a training or test query into
    the document it points to)."""
    lg = split.log
    words: list[Counter[str]] = [Counter() for _ in range(lg.urls.size)]
    tokens: dict[int, list[str]] = {}
    background = split.split[lg.click_event] == BACKGROUND
    events = lg.click_event[background]
    for event, doc in zip(events.tolist(), lg.click_docs[background].tolist(), strict=True):
        q = int(lg.query[event])
        if q not in tokens:
            tokens[q] = tokenize(str(lg.queries[q]))
        words[doc].update(tokens[q])
    return words


def document_texts(
    split: TimeSplit, segmenter: WordSegmenter | None, max_len: int = 16
) -> list[list[str]]:
    """The text of every document of ``split.log.urls``: its URL words
    (:func:`document_words`), then the words of its background click-through queries
    (:func:`click_through_words`) that are not URL words, most frequent first (ties
    alphabetically), cut to ``max_len`` words. A document first clicked after the
    background period has its URL words only, as a search engine would have before anyone
    searched for it."""
    if max_len < 1:
        raise ConfigError(f"max_len must be >= 1, got {max_len}")
    texts = []
    for url, extra in zip(split.log.urls, click_through_words(split), strict=True):
        words = document_words(str(url), segmenter)[:max_len]
        have = set(words)
        ranked = sorted((w for w in extra if w not in have), key=lambda w: (-extra[w], w))
        texts.append(words + ranked[: max_len - len(words)])
    return texts


def build_vocabulary(
    split: TimeSplit, doc_words: Sequence[Sequence[str]], min_count: int = 2
) -> Vocabulary:
    """Vocabulary of the past: the words of the past documents' texts (each document once;
    ``doc_words`` has one word list per URL of ``split.log``) and of the background and
    training queries (each event once). Words first seen in a validation or test query or
    document are unknown, as they would be in deployment."""
    lg = split.log
    if len(doc_words) != lg.urls.size:
        raise DataFormatError(f"got {len(doc_words)} document texts for {lg.urls.size} URLs")
    tokens = [tokenize(q) for q in lg.queries]
    seen = lg.query[past_events(split)]
    past_docs = np.flatnonzero(past_documents(split))
    return Vocabulary.build(
        [*(doc_words[d] for d in past_docs), *(tokens[q] for q in seen)], min_count=min_count
    )


def normalized_query_keys(queries: np.ndarray) -> np.ndarray:
    """``(len(queries),)`` int64 ids equal for queries with the same token sequence
    (``"Peabody  Library"`` and ``"peabody library"``), so click history is matched on the
    normalised query."""
    keys: dict[tuple[str, ...], int] = {}
    return np.fromiter(
        (keys.setdefault(tuple(tokenize(q)), len(keys)) for q in queries),
        dtype=np.int64,
        count=len(queries),
    )


@dataclass(frozen=True, eq=False)
class UserLog(ClickRows):
    """One user's search log, as their client would store it (FedPS Sec. 3.1-3.2).

    Events are in time order. Attributes (``E`` events):
        user_id: the AnonID.
        event_id: ``(E,)`` int64 index of every event in the :class:`QueryLog` it came
            from (``-1`` for events that are not in it, such as cover queries); candidate
            lists are keyed by it, so a log rebuilt on the server (a group's, one with cover
            queries) gets exactly the lists of the events it holds.
        time: ``(E,)`` ``datetime64[s]``.
        session: ``(E,)`` int64 session ids (increasing).
        split: ``(E,)`` int8 part (:data:`BACKGROUND` ... :data:`TEST`).
        query_key: ``(E,)`` int64; equal for the same normalised query.
        queries: ``(E, Lq)`` int32 word ids, padded with :data:`PAD_ID`.
        click_ptr: ``(E + 1,)`` int64 CSR offsets into ``click_docs``.
        click_docs: ``(n_clicks,)`` int32 clicked document ids.
    """

    user_id: int
    event_id: np.ndarray
    time: np.ndarray
    session: np.ndarray
    split: np.ndarray
    query_key: np.ndarray
    queries: np.ndarray
    click_ptr: np.ndarray
    click_docs: np.ndarray

    def __post_init__(self) -> None:
        e = self.time.shape[0]
        for name in ("event_id", "session", "split", "query_key"):
            if getattr(self, name).shape != (e,):
                raise DataFormatError(f"UserLog {self.user_id}: {name} must have shape ({e},)")
        if self.queries.ndim != 2 or self.queries.shape[0] != e or self.queries.dtype != np.int32:
            raise DataFormatError(
                f"UserLog {self.user_id}: queries must be int32 of shape ({e}, Lq)"
            )
        if self.click_ptr.shape != (e + 1,) or int(self.click_ptr[-1]) != self.click_docs.size:
            raise DataFormatError(
                f"UserLog {self.user_id}: click_ptr must have shape ({e + 1},) and end at "
                f"{self.click_docs.size}"
            )
        if e > 1 and np.any(np.diff(self.time.astype(np.int64)) < 0):
            raise DataFormatError(f"UserLog {self.user_id}: events must be in time order")


def user_logs(split: TimeSplit, vocab: Vocabulary, max_query_len: int = 12) -> list[UserLog]:
    """One :class:`UserLog` per user of ``split.log``, queries encoded with ``vocab``
    (unknown words dropped) and truncated to ``max_query_len`` words. Document ids are
    indices into ``split.log.urls``."""
    lg = split.log
    enc, _ = vocab.encode_batch([tokenize(q) for q in lg.queries], max_query_len, drop_unknown=True)
    keys = normalized_query_keys(lg.queries)
    out = []
    for u in range(lg.n_users):
        lo, hi = int(lg.user_ptr[u]), int(lg.user_ptr[u + 1])
        clo, chi = int(lg.click_ptr[lo]), int(lg.click_ptr[hi])
        q = lg.query[lo:hi]
        out.append(
            UserLog(
                user_id=int(lg.user_ids[u]),
                event_id=np.arange(lo, hi, dtype=np.int64),
                time=lg.time[lo:hi],
                session=lg.session[lo:hi],
                split=split.split[lo:hi],
                query_key=keys[q],
                queries=enc[q],
                click_ptr=lg.click_ptr[lo : hi + 1] - clo,
                click_docs=lg.click_docs[clo:chi],
            )
        )
    return out


@dataclass(frozen=True, eq=False)
class AolCorpus:
    """Everything :func:`build_corpus` derives from a :class:`TimeSplit`.

    Attributes:
        split: the log and its parts.
        segmenter: the past segmenter (``None`` without segmentation).
        texts: the word list of every document (:func:`document_texts`), what the search
            engine indexes.
        vocab: the past vocabulary (:func:`build_vocabulary`).
        pool: the documents' texts encoded with ``vocab`` (unknown words dropped).
        users: the per-user logs, queries encoded with ``vocab`` (unknown words dropped).
        past_docs: ``(n_urls,)`` bool, :func:`past_documents`.
        indexed: ``(n_urls,)`` bool, :func:`indexed_documents`.
    """

    split: TimeSplit
    segmenter: WordSegmenter | None
    texts: tuple[tuple[str, ...], ...]
    vocab: Vocabulary
    pool: DocumentPool
    users: tuple[UserLog, ...]
    past_docs: np.ndarray
    indexed: np.ndarray


def build_corpus(
    split: TimeSplit,
    *,
    segment: bool = True,
    vocab_min_count: int = 2,
    doc_max_len: int = 16,
    query_max_len: int = 12,
) -> AolCorpus:
    """Past segmenter (:func:`default_segmenter`, unless ``segment=False``), document texts
    (:func:`document_texts`), past vocabulary (:func:`build_vocabulary`), the
    :class:`DocumentPool` over ``split.log.urls`` and the per-user logs."""
    segmenter = default_segmenter(split) if segment else None
    texts = document_texts(split, segmenter, max_len=doc_max_len)
    vocab = build_vocabulary(split, texts, min_count=vocab_min_count)
    pool = DocumentPool.build(split.log.urls, texts, vocab, max_len=doc_max_len)
    users = tuple(user_logs(split, vocab, max_query_len=query_max_len))
    return AolCorpus(
        split=split,
        segmenter=segmenter,
        texts=tuple(tuple(t) for t in texts),
        vocab=vocab,
        pool=pool,
        users=users,
        past_docs=past_documents(split),
        indexed=indexed_documents(split),
    )
