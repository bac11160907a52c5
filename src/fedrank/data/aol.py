"""The AOL query log as per-user search logs: the data set of FedPS (paper Sec. 4.1).

FedPS keeps every user's search history on the user's own client (paper Sec. 3.1-3.2); its
AOL experiments simulate those clients by cutting the public three-month AOL log into one log
per anonymous user id. This module does that and the preprocessing the paper describes
(Sec. 4.1, following Ahmad et al. [2, 3]):

1. :func:`load_aol` reads the click log (one row per click, ``AnonID Query QueryTime
   ClickURL``) and groups rows into **query events** ``(user, query, time)`` with their
   clicked URLs in CSR form (``click_ptr``, ``click_docs``); :class:`QueryLog`.
2. :func:`assign_sessions` splits each user's events into **sessions** at more than 30
   minutes of inactivity (done by :func:`load_aol`).
3. :func:`split_by_time` cuts the log into the **background** set (first five weeks, used to
   build interest profiles) and the experimental set, which it splits per user, in time
   order, **6:1:1 into train / valid / test**, and drops users without enough data in some
   part (counted and explained in a :class:`FilterReport`, never silently); :class:`TimeSplit`.
4. Text: :func:`tokenize` for queries; :func:`url_words` and the unigram
   :class:`WordSegmenter` for documents, whose only own text in this log is their URL (mostly
   a bare host such as ``http://www.peabodylibrary.org/`` -> ``peabody library``). The paper
   crawled titles for the clicked URLs; those pages are long gone, so a document's text
   (:func:`document_texts`) is its URL words followed by the words of the queries that led
   to it in the **background** period (click-through text, the search engine's own log from
   before the experiment). A log with real titles plugs in by building the
   :class:`DocumentPool` from the titles' words instead (:meth:`DocumentPool.build` takes any
   word lists).
5. :class:`Vocabulary` (id 0 = padding, 1 = reserved for out-of-vocabulary),
   :class:`DocumentPool` (every distinct clicked URL is a document; padded token-id matrix)
   and :class:`UserLog` (one user's events with encoded queries), tied together by
   :func:`build_corpus`.

**Fit only on the past.** Everything learned from the log -- the segmenter's dictionary,
the vocabulary -- comes from the *past*: background and training events
(:func:`past_events`) and the documents clicked in them (:func:`past_documents`). A
validation or test document never clicked before has the text a real system would give it
(its URL words, segmented with the past segmenter) and words unknown to the past vocabulary
are **dropped** when encoding (:meth:`Vocabulary.encode_batch` with ``drop_unknown``), so
two different unknown words can never look identical to a model.

Candidate generation (BM25) and the ranking samples are in :mod:`fedrank.retrieval`.

Loading is strict: a malformed line raises :class:`~fedrank.errors.DataFormatError` starting
with ``"{file}:{line}: "``. Rows with an empty ``ClickURL`` are kept as query events without
a click (the real file has none); the sample builder skips such events as ranking samples
because they have no relevant document, but they stay in the history. A repeated row (same
user, query, time and URL) is one click.
"""

from __future__ import annotations

import gzip
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

__all__ = [
    "BACKGROUND",
    "DEFAULT_BACKGROUND_END",
    "HEADER",
    "LOG_START",
    "OOV_ID",
    "PAD_ID",
    "SESSION_GAP_SECONDS",
    "SPLIT_NAMES",
    "TEST",
    "TRAIN",
    "VALID",
    "AolCorpus",
    "DocumentPool",
    "FilterReport",
    "QueryLog",
    "TimeSplit",
    "UserLog",
    "Vocabulary",
    "WordSegmenter",
    "assign_sessions",
    "build_corpus",
    "build_vocabulary",
    "click_through_words",
    "default_segmenter",
    "document_texts",
    "document_words",
    "indexed_documents",
    "load_aol",
    "normalized_query_keys",
    "past_documents",
    "past_events",
    "segmenter_counts",
    "split_by_time",
    "tokenize",
    "url_site",
    "url_words",
    "user_logs",
]

_logger = logging.getLogger(__name__)

#: Columns of the click log, in order (the file's first line).
HEADER: tuple[str, ...] = ("AnonID", "Query", "QueryTime", "ClickURL")

#: First day of the AOL log (2006-03-01 00:00:00); the background period starts here.
LOG_START = np.datetime64("2006-03-01T00:00:00", "s")

#: End of the background period: the log's first five weeks (paper Sec. 4.1).
DEFAULT_BACKGROUND_END = LOG_START + np.timedelta64(35, "D")

#: A gap of more than this many seconds between two events of a user starts a new session.
SESSION_GAP_SECONDS = 30 * 60

#: Split codes stored in :attr:`TimeSplit.split` and :attr:`UserLog.split`.
BACKGROUND, TRAIN, VALID, TEST = 0, 1, 2, 3
SPLIT_NAMES: tuple[str, ...] = ("background", "train", "valid", "test")

#: Reserved vocabulary ids.
PAD_ID, OOV_ID = 0, 1
_PAD_WORD, _OOV_WORD = "<pad>", "<oov>"

_TIME_LENGTH = len("2006-03-01 07:33:28")
_TOKEN = re.compile(r"[^\W_]+")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_WWW = re.compile(r"^(www\d*|ww)$")

#: Generic top-level domains dropped from host names (every two-letter final label is a
#: country code and is dropped too).
GENERIC_TLDS = frozenset({
    "com", "org", "net", "edu", "gov", "mil", "int", "info", "biz", "name", "pro", "aero",
    "coop", "museum", "mobi", "asia", "tel", "travel", "jobs", "cat", "arpa", "post", "xxx",
})  # fmt: skip
#: Registry labels that sit under a country code (``co.uk``, ``com.au``, ``ac.jp``, ...).
COUNTRY_SECOND_LEVEL = frozenset({
    "ac", "co", "com", "ed", "edu", "gen", "go", "gob", "gouv", "gov", "govt", "gv", "lg",
    "ltd", "mil", "ne", "net", "nhs", "nic", "nom", "or", "org", "plc", "police", "sch",
})  # fmt: skip
#: Labels between a US state and ``us`` in the locality domains (``k12.ca.us``).
_US_LOCALITY = frozenset({"k12", "lib", "cc", "tec", "pvt", "gen"})
#: Country codes whose two-letter second level is a state or province (``tx.us``, ``on.ca``).
_STATE_COUNTRIES = frozenset({"us", "ca"})
#: Generic TLDs under which a two-letter label is a registry or state label (``uk.com``,
#: ``gb.net``, ``ca.gov``) when a name remains in front of it.
_TWO_LETTER_UNDER = frozenset({"com", "net", "gov"})
#: Words dropped from URL paths: scheme names, ``www`` and web file extensions.
URL_STOP_WORDS = frozenset(
    {"http", "https", "www", "html", "htm", "shtml", "php", "asp", "aspx", "jsp", "cgi", "cfm"}
)


# ----------------------------------------------------------------------------------------
# Text
# ----------------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it on every non-alphanumeric character (``_`` included).

    >>> tokenize("Marblehead, Massachusetts LIBRARY")
    ['marblehead', 'massachusetts', 'library']
    """
    return _TOKEN.findall(text.lower())


def _host_and_path(url: str) -> tuple[str, str]:
    rest = _SCHEME.sub("", url.strip(), count=1)
    cut = len(rest)
    for sep in "/?#":
        i = rest.find(sep)
        if 0 <= i < cut:
            cut = i
    host, path = rest[:cut], rest[cut:]
    host = host.rsplit("@", 1)[-1].split(":", 1)[0].lower().strip(".")
    return host, path


def _split_host(host: str) -> tuple[list[str], list[str]]:
    """Host labels without ``www`` and without the public suffix, and the suffix labels."""
    labels = [x for x in host.split(".") if x]
    while labels and _WWW.match(labels[0]):
        labels.pop(0)
    suffix: list[str] = []
    if not labels:
        return labels, suffix
    tld = labels[-1]
    is_country = len(tld) == 2 and tld.isascii() and tld.isalpha()
    if tld in GENERIC_TLDS or is_country:
        suffix.insert(0, labels.pop())
        if len(labels) > 1:
            second = labels[-1]
            two_letter = len(second) == 2 and second.isalpha()
            if (is_country and second in COUNTRY_SECOND_LEVEL) or (
                two_letter and (tld in _STATE_COUNTRIES or tld in _TWO_LETTER_UNDER)
            ):
                suffix.insert(0, labels.pop())
                if tld == "us" and len(labels) > 1 and labels[-1] in _US_LOCALITY:
                    suffix.insert(0, labels.pop())
    return labels, suffix


def url_site(url: str) -> str:
    """The registrable domain of ``url``: its last name label plus the public suffix.

    ``http://library.harvard.edu/x`` -> ``"harvard.edu"``; ``http://www.bbc.co.uk/`` ->
    ``"bbc.co.uk"``. Used to count in how many different sites a word occurs
    (:func:`segmenter_counts`).
    """
    labels, suffix = _split_host(_host_and_path(url)[0])
    return ".".join(labels[-1:] + suffix)


def url_words(url: str) -> list[str]:
    """The words of a URL before segmentation: host labels, then path words.

    Drops the scheme, ``www`` (``www2``, ...), the public suffix (generic TLDs such as
    ``com``/``org``/``edu``, every two-letter country code, and registry second levels such
    as ``co.uk``, ``com.au``, ``k12.ca.us``), and in the path the words of
    :data:`URL_STOP_WORDS`. Each remaining label or path part is split with
    :func:`tokenize` (so ``paladin-press`` gives two words).

    >>> url_words("http://www.peabodylibrary.org/")
    ['peabodylibrary']
    >>> url_words("http://www.bbc.co.uk/news/world.html")
    ['bbc', 'news', 'world']
    """
    host, path = _host_and_path(url)
    labels, _ = _split_host(host)
    words = [w for label in labels for w in tokenize(label)]
    words.extend(w for w in tokenize(path) if w not in URL_STOP_WORDS)
    return words


class WordSegmenter:
    """Unigram Viterbi word segmentation, for compound host names (paper Sec. 4.1 text).

    The AOL log gives documents only as URLs, and hosts glue words together
    (``peabodylibrary``). :meth:`segment` returns the most probable split of a token under a
    unigram model: a dictionary word ``w`` has probability ``count(w) / N`` (``N`` = sum of
    counts); a run of ``L`` characters not covered by dictionary words is one unknown word of
    probability ``10 / (N * 10**L)`` (so unknown text is expensive, more so when long). A
    token found in the dictionary is kept whole when that is the most probable reading.
    Tokens shorter than ``min_length`` are never split (short names such as ``okemo`` are
    more often a name than two words). Results are memoised per token.

    Args:
        counts: word -> positive count (e.g. :func:`segmenter_counts`).
        min_length: tokens with fewer characters are returned unchanged.

    Raises:
        ConfigError: an empty dictionary, a non-positive count, or ``min_length < 2``.
    """

    __slots__ = (
        "_cache",
        "_cost",
        "_max_len",
        "_prefixes",
        "_unk_char",
        "_unk_start",
        "min_length",
    )

    def __init__(self, counts: Mapping[str, int], *, min_length: int = 6) -> None:
        if min_length < 2:
            raise ConfigError(
                f"min_length must be >= 2 (a 1-character token has no split), got {min_length}"
            )
        if not counts:
            raise ConfigError(
                "the segmentation dictionary is empty; give at least one word -> count"
            )
        bad = [(w, c) for w, c in counts.items() if not w or c <= 0]
        if bad:
            raise ConfigError(
                f"segmentation dictionary entries must be non-empty words with positive counts, "
                f"got {bad[:3]}; drop those entries"
            )
        total = float(sum(counts.values()))
        log_total = math.log(total)
        self._cost = {w: log_total - math.log(c) for w, c in counts.items()}
        self._prefixes = frozenset(w[:i] for w in counts for i in range(1, len(w) + 1))
        self._max_len = max(map(len, counts))
        self._unk_start = log_total - math.log(10.0)
        self._unk_char = math.log(10.0)
        self._cache: dict[str, tuple[str, ...]] = {}
        self.min_length = min_length

    def __repr__(self) -> str:
        return f"WordSegmenter({len(self._cost)} words, min_length={self.min_length})"

    def __contains__(self, word: str) -> bool:
        return word in self._cost

    def segment(self, token: str) -> list[str]:
        """The most probable split of ``token`` into words (``[token]`` if not split)."""
        if len(token) < self.min_length:
            return [token]
        hit = self._cache.get(token)
        if hit is None:
            hit = self._cache[token] = tuple(self._viterbi(token))
        return list(hit)

    def __call__(self, words: Iterable[str]) -> list[str]:
        """Segment every word of ``words`` and concatenate the pieces."""
        return [piece for w in words for piece in self.segment(w)]

    def _viterbi(self, s: str) -> list[str]:
        n = len(s)
        inf = math.inf
        best = [inf] * (n + 1)
        back = [0] * (n + 1)
        best[0] = 0.0
        unk, unk_from = inf, 0  # best unknown run ending at the current position
        cost, prefixes, u0, u1 = self._cost, self._prefixes, self._unk_start, self._unk_char
        for i in range(n + 1):
            if i > 0:
                start_here = best[i - 1] + u0 + u1
                if unk + u1 < start_here:
                    unk += u1
                else:
                    unk, unk_from = start_here, i - 1
                if unk < best[i]:
                    best[i], back[i] = unk, unk_from
            if i == n:
                break
            base = best[i]
            for j in range(i + 1, min(n, i + self._max_len) + 1):
                piece = s[i:j]
                if piece not in prefixes:
                    break
                c = cost.get(piece)
                if c is not None and base + c < best[j]:
                    best[j], back[j] = base + c, i
        pieces: list[str] = []
        j = n
        while j > 0:
            i = back[j]
            pieces.append(s[i:j])
            j = i
        pieces.reverse()
        return pieces


def document_words(url: str, segmenter: WordSegmenter | None = None) -> list[str]:
    """The words of a document given by its URL: :func:`url_words`, each segmented with
    ``segmenter`` when one is given (``http://www.peabodylibrary.org/`` -> ``peabody``,
    ``library``)."""
    words = url_words(url)
    return segmenter(words) if segmenter is not None else words


def segmenter_counts(
    urls: Iterable[str],
    query_tokens: Iterable[Sequence[str]],
    *,
    min_sites: int = 2,
    min_word_length: int = 2,
) -> dict[str, int]:
    """A segmentation dictionary from a document collection and a set of queries.

    Stand-in for a public word list (none is bundled with fedrank): the count of a word is
    the number of times it occurs in ``query_tokens`` (one token list per query event; by
    default the background-period queries, see :func:`default_segmenter`) plus the number of
    distinct sites (:func:`url_site`) whose URL contains it as a word, counted only when that
    number is at least ``min_sites``. The site rule keeps compound host names such as
    ``peabodylibrary`` (one site) out of the dictionary -- they are what must be segmented --
    while words that recur across sites (``library`` in ``library.harvard.edu`` and
    ``library.yale.edu``) are kept. Words shorter than ``min_word_length`` are dropped (single
    letters would otherwise split unknown names into letters).
    """
    if min_sites < 1 or min_word_length < 1:
        raise ConfigError(
            f"min_sites and min_word_length must be >= 1, got {min_sites}, {min_word_length}"
        )
    counts: Counter[str] = Counter()
    for tokens in query_tokens:
        counts.update(tokens)
    sites: dict[str, set[str]] = {}
    for url in urls:
        site = url_site(url)
        for w in url_words(url):
            sites.setdefault(w, set()).add(site)
    for w, s in sites.items():
        if len(s) >= min_sites:
            counts[w] += len(s)
    return {w: c for w, c in counts.items() if len(w) >= min_word_length}


# ----------------------------------------------------------------------------------------
# The query log
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QueryLog:
    """Query events of an AOL-style click log, grouped per user (FedPS Sec. 3.1, 4.1).

    An event is one ``(user, query, time)``; events are sorted by user index, then time,
    then the file position of their first row. Users are sorted by AnonID.

    Attributes:
        source: the file the log was read from.
        user_ids: ``(n_users,)`` int64 AnonIDs, ascending.
        user_rows: ``(n_users,)`` int64 rows of the file of every user.
        user_ptr: ``(n_users + 1,)`` int64; user ``u`` owns events
            ``[user_ptr[u], user_ptr[u + 1])``.
        event_user: ``(n_events,)`` int32 user index of every event.
        time: ``(n_events,)`` ``datetime64[s]`` query times.
        query: ``(n_events,)`` int32 index into ``queries``.
        queries: ``(n_queries,)`` str array of distinct raw query strings, sorted.
        click_ptr: ``(n_events + 1,)`` int64; event ``e`` clicked
            ``click_docs[click_ptr[e]:click_ptr[e + 1]]`` (empty for an event without click).
        click_docs: ``(n_clicks,)`` int32 index into ``urls``, ascending within an event.
        urls: ``(n_urls,)`` str array of distinct clicked URLs, sorted; the document ids of
            :class:`DocumentPool` built from this log are indices into it.
        session: ``(n_events,)`` int64 session id (0, 1, ... in event order), see
            :func:`assign_sessions`.
    """

    source: str
    user_ids: np.ndarray
    user_rows: np.ndarray
    user_ptr: np.ndarray
    event_user: np.ndarray
    time: np.ndarray
    query: np.ndarray
    queries: np.ndarray
    click_ptr: np.ndarray
    click_docs: np.ndarray
    urls: np.ndarray
    session: np.ndarray

    def __post_init__(self) -> None:
        n_users, n_events = self.user_ids.size, self.time.size
        expect = {
            "user_rows": (n_users,),
            "user_ptr": (n_users + 1,),
            "event_user": (n_events,),
            "query": (n_events,),
            "click_ptr": (n_events + 1,),
            "session": (n_events,),
        }
        for name, shape in expect.items():
            if getattr(self, name).shape != shape:
                raise DataFormatError(
                    f"QueryLog {self.source!r}: {name} must have shape {shape} "
                    f"(n_users={n_users}, n_events={n_events}), got {getattr(self, name).shape}"
                )
        if self.time.dtype != np.dtype("datetime64[s]"):
            raise DataFormatError(
                f"QueryLog {self.source!r}: time must be datetime64[s], got {self.time.dtype}"
            )
        if int(self.click_ptr[-1]) != self.click_docs.size or int(self.user_ptr[-1]) != n_events:
            raise DataFormatError(
                f"QueryLog {self.source!r}: click_ptr must end at n_clicks={self.click_docs.size} "
                f"and user_ptr at n_events={n_events}"
            )

    @property
    def n_users(self) -> int:
        return int(self.user_ids.size)

    @property
    def n_events(self) -> int:
        return int(self.time.size)

    @property
    def n_clicks(self) -> int:
        return int(self.click_docs.size)

    @property
    def n_rows(self) -> int:
        """Rows of the file these users had (one per click, plus rows without a click)."""
        return int(self.user_rows.sum())

    @property
    def n_sessions(self) -> int:
        return int(self.session[-1]) + 1 if self.session.size else 0

    @property
    def clicks_per_event(self) -> np.ndarray:
        """``(n_events,)`` int64 number of clicked URLs of every event."""
        return np.diff(self.click_ptr)

    @property
    def click_event(self) -> np.ndarray:
        """``(n_clicks,)`` int64 event index of every click."""
        return np.repeat(np.arange(self.n_events, dtype=np.int64), self.clicks_per_event)

    def select_users(self, users: np.ndarray | Sequence[int]) -> QueryLog:
        """The log of the users with the given indices (not AnonIDs), in ascending order.

        ``queries`` and ``urls`` are reduced to the ones these users have, so document ids
        change; sessions are renumbered.
        """
        idx = np.unique(np.asarray(users, dtype=np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= self.n_users):
            raise ConfigError(
                f"user indices must be in 0..{self.n_users - 1}, got {idx[0]}..{idx[-1]}"
            )
        keep = np.zeros(self.n_users, dtype=bool)
        keep[idx] = True
        events = keep[self.event_user]
        sizes = np.diff(self.user_ptr)[idx]
        counts = self.clicks_per_event[events]
        docs = self.click_docs[np.repeat(events, self.clicks_per_event)]
        urls_used, docs = np.unique(docs, return_inverse=True)
        queries_used, query = np.unique(self.query[events], return_inverse=True)
        remap = np.full(self.n_users, -1, dtype=np.int32)
        remap[idx] = np.arange(idx.size, dtype=np.int32)
        user = remap[self.event_user[events]]
        time = self.time[events]
        return QueryLog(
            source=self.source,
            user_ids=self.user_ids[idx],
            user_rows=self.user_rows[idx],
            user_ptr=csr_offsets(sizes),
            event_user=user,
            time=time,
            query=query.astype(np.int32),
            queries=self.queries[queries_used],
            click_ptr=csr_offsets(counts),
            click_docs=docs.astype(np.int32),
            urls=self.urls[urls_used],
            session=assign_sessions(user, time),
        )


def csr_offsets(sizes: np.ndarray) -> np.ndarray:
    """``(n + 1,)`` int64 CSR offsets of rows with ``sizes`` items: ``[0, cumsum(sizes)]``."""
    ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return ptr


def assign_sessions(
    event_user: np.ndarray, time: np.ndarray, gap_seconds: int = SESSION_GAP_SECONDS
) -> np.ndarray:
    """Session id of every event: a new session starts at a user's first event and after
    more than ``gap_seconds`` (30 minutes) without an event (FedPS Sec. 4.1).

    Events must be sorted by user, then time (as in :class:`QueryLog`). A gap of exactly
    ``gap_seconds`` stays in the session. Returns ``(n_events,)`` int64 ids 0, 1, ...
    """
    if gap_seconds <= 0:
        raise ConfigError(f"gap_seconds must be positive, got {gap_seconds}")
    user = np.asarray(event_user)
    t = np.asarray(time).astype("datetime64[s]").astype(np.int64)
    if user.shape != t.shape or user.ndim != 1:
        raise DataFormatError(
            f"event_user and time must be 1-D of equal length, got {user.shape} and {t.shape}"
        )
    if t.size == 0:
        return np.zeros(0, dtype=np.int64)
    new_user = np.diff(user) != 0
    if np.any(np.diff(user) < 0) or np.any((np.diff(t) < 0) & ~new_user):
        raise DataFormatError("events must be sorted by user, then time, to be split into sessions")
    start = np.empty(t.size, dtype=bool)
    start[0] = True
    start[1:] = new_user | (np.diff(t) > gap_seconds)
    return np.cumsum(start, dtype=np.int64) - 1


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataFormatError(
                f"{path}: corrupt gzip stream ({exc}); re-download the file"
            ) from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(
            f"{path}:{line}: not valid UTF-8 (byte {raw[exc.start]:#04x}); the log must be "
            "UTF-8 text"
        ) from exc


def _first_bad_time(values: Sequence[str]) -> int:
    """Index of the first value numpy cannot parse as a time (-1 if none)."""
    for i, v in enumerate(values):
        try:
            np.datetime64(v, "s")
        except ValueError:
            return i
    return -1


def load_aol(
    path: str | os.PathLike[str],
    users: int | None = None,
    rng: np.random.Generator | None = None,
) -> QueryLog:
    """Read an AOL click log (TSV, optionally gzipped) into a :class:`QueryLog`.

    The file starts with the header ``AnonID\\tQuery\\tQueryTime\\tClickURL`` and has one
    row per click; rows with the same AnonID, Query and QueryTime are one query event.
    ``QueryTime`` is ``YYYY-MM-DD HH:MM:SS``. An empty ``ClickURL`` gives an event without
    click (kept); blank lines are skipped; CRLF line endings are accepted.

    Args:
        path: the ``.tsv`` or ``.tsv.gz`` file.
        users: keep only this many users; ``None`` keeps all. Without ``rng`` these are the
            ``users`` smallest AnonIDs (deterministic, and a prefix of the full ordering);
            with ``rng`` they are drawn uniformly without replacement.
        rng: random generator for drawing the users (only used with ``users``).

    Raises:
        DataFormatError: ``"{file}:{line}: ..."`` for a wrong header, a line without exactly
            four tab-separated fields, an AnonID that is not a non-negative integer (ASCII
            digits), an empty Query, or a QueryTime not of the form above; or a file that is
            not gzip/UTF-8 text or has no rows.
        ConfigError: ``users`` is not positive, or more than the log has.
    """
    path = Path(path)
    if users is not None and users <= 0:
        raise ConfigError(f"users must be a positive number of users or None (all), got {users}")
    text = _read_text(path)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0].split("\t") != list(HEADER):
        got = lines[0][:80] if lines else "an empty file"
        raise DataFormatError(
            f"{path}:1: expected the header {chr(9).join(HEADER)!r} (tab-separated), got {got!r}"
        )
    line_no = np.arange(2, len(lines) + 1, dtype=np.int64)
    body = lines[1:]
    if "" in body:
        keep = np.fromiter((bool(x) for x in body), dtype=bool, count=len(body))
        line_no = line_no[keep]
        body = [x for x in body if x]
    if not body:
        raise DataFormatError(f"{path}: no rows after the header; the log is empty")
    tabs = np.fromiter((x.count("\t") for x in body), dtype=np.int64, count=len(body))
    bad = np.flatnonzero(tabs != 3)
    if bad.size:
        i = int(bad[0])
        raise DataFormatError(
            f"{path}:{line_no[i]}: expected 4 tab-separated fields (AnonID, Query, QueryTime, "
            f"ClickURL), found {tabs[i] + 1}: {body[i][:80]!r}"
        )
    flat = "\t".join(body).split("\t")
    anon_s, query_s, time_s, url_s = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
    del flat
    i = next((i for i, a in enumerate(anon_s) if not (a.isascii() and a.isdigit())), -1)
    if i < 0:
        i = next((i for i, a in enumerate(anon_s) if len(a) > 18), -1)
    if i >= 0:
        raise DataFormatError(
            f"{path}:{line_no[i]}: AnonID {anon_s[i]!r} is not a non-negative integer of at "
            "most 18 digits"
        )
    anon = np.array(anon_s, dtype=np.int64)

    all_ids, all_rows = np.unique(anon, return_counts=True)
    if users is not None and users > all_ids.size:
        raise ConfigError(
            f"{path} has {all_ids.size} users, fewer than the {users} asked for: ask for at "
            f"most {all_ids.size}, or for all of them"
        )
    chosen = all_ids
    if users is not None and users < all_ids.size:
        if rng is None:
            chosen = all_ids[:users]
        else:
            chosen = np.sort(rng.choice(all_ids, size=users, replace=False))
        rows = np.flatnonzero(np.isin(anon, chosen))
        anon = anon[rows]
        line_no = line_no[rows]
        query_s = [query_s[i] for i in rows]
        time_s = [time_s[i] for i in rows]
        url_s = [url_s[i] for i in rows]

    empty_query = [i for i, q in enumerate(query_s) if not q]
    if empty_query:
        i = empty_query[0]
        raise DataFormatError(f"{path}:{line_no[i]}: Query is empty; every row needs query text")
    lengths = np.fromiter(map(len, time_s), dtype=np.int64, count=len(time_s))
    bad = np.flatnonzero(lengths != _TIME_LENGTH)
    i = -1
    if bad.size:
        i = int(bad[0])
    else:
        try:
            time = np.array(time_s, dtype="datetime64[s]")
        except ValueError:
            i = _first_bad_time(time_s)
    if i >= 0:
        raise DataFormatError(
            f"{path}:{line_no[i]}: QueryTime {time_s[i]!r} is not a time of the form "
            "'YYYY-MM-DD HH:MM:SS'"
        )

    user_ids, user = np.unique(anon, return_inverse=True)
    qid, queries = _intern(query_s)
    uid, urls = _intern(url_s)
    has_click = np.array([bool(u) for u in url_s], dtype=bool)
    if not has_click.all():
        # The empty string sorts first among the interned URLs: drop it from the table.
        uid = uid - 1
        urls = urls[1:]
    t = time.astype(np.int64)

    # Group rows into events, then order events by (user, time, first row in the file).
    order = np.lexsort((np.arange(anon.size), qid, t, user))
    su, st, sq = user[order], t[order], qid[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = (np.diff(su) != 0) | (np.diff(st) != 0) | (np.diff(sq) != 0)
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ev_order = np.lexsort((order[starts], st[starts], su[starts]))
    rank = np.empty(ev_order.size, dtype=np.int64)
    rank[ev_order] = np.arange(ev_order.size)
    row_event = np.empty(order.size, dtype=np.int64)
    row_event[order] = rank[group]
    ev_rows = starts[ev_order]
    event_user = su[ev_rows].astype(np.int32)
    event_time = st[ev_rows].astype("datetime64[s]")
    event_query = sq[ev_rows].astype(np.int32)

    ce, cd = row_event[has_click], uid[has_click]
    corder = np.lexsort((cd, ce))
    ce, cd = ce[corder], cd[corder]
    distinct = np.ones(ce.size, dtype=bool)
    distinct[1:] = (np.diff(ce) != 0) | (np.diff(cd) != 0)
    ce, cd = ce[distinct], cd[distinct]
    n_events = ev_rows.size
    user_rows = all_rows[np.searchsorted(all_ids, user_ids)]
    result = QueryLog(
        source=str(path),
        user_ids=user_ids.astype(np.int64),
        user_rows=user_rows.astype(np.int64),
        user_ptr=csr_offsets(np.bincount(event_user, minlength=user_ids.size)),
        event_user=event_user,
        time=event_time,
        query=event_query,
        queries=queries,
        click_ptr=csr_offsets(np.bincount(ce, minlength=n_events)),
        click_docs=cd.astype(np.int32),
        urls=urls,
        session=assign_sessions(event_user, event_time),
    )
    n_no_click = int(np.count_nonzero(result.clicks_per_event == 0))
    if n_no_click:
        _logger.info("%s: %d query events have no click (empty ClickURL); kept", path, n_no_click)
    return result


def _intern(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Ids of ``values`` in the sorted table of their distinct values, and that table."""
    ids: dict[str, int] = {}
    first = np.fromiter(
        (ids.setdefault(v, len(ids)) for v in values), dtype=np.int64, count=len(values)
    )
    table = np.array(list(ids), dtype=str)
    order = np.argsort(table, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank[first], table[order]


# ----------------------------------------------------------------------------------------
# Background / train / valid / test
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FilterReport:
    """Which users :func:`split_by_time` kept and which it dropped, and why.

    Attributes:
        minimums: the required number of events per part, e.g. ``{"background": 1, ...}``.
        kept: ``(n_kept,)`` AnonIDs of the kept users.
        dropped: ``(n_dropped,)`` AnonIDs of the dropped users.
        dropped_counts: ``(n_dropped, 4)`` int64 events of every dropped user per part
            (columns as :data:`SPLIT_NAMES`).
    """

    minimums: Mapping[str, int]
    kept: np.ndarray
    dropped: np.ndarray
    dropped_counts: np.ndarray

    @property
    def n_kept(self) -> int:
        return int(self.kept.size)

    @property
    def n_dropped(self) -> int:
        return int(self.dropped.size)

    @property
    def _short(self) -> np.ndarray:
        need = np.array([self.minimums[p] for p in SPLIT_NAMES], dtype=np.int64)
        return self.dropped_counts < need

    @property
    def reasons(self) -> tuple[str, ...]:
        """One text per dropped user, e.g. ``"0 background events (< 1)"``."""
        short = self._short
        return tuple(
            ", ".join(
                f"{self.dropped_counts[u, p]} {SPLIT_NAMES[p]} events "
                f"(< {self.minimums[SPLIT_NAMES[p]]})"
                for p in np.flatnonzero(short[u])
            )
            for u in range(self.n_dropped)
        )

    def reason_counts(self) -> dict[str, int]:
        """Number of dropped users lacking each part (a user can lack several)."""
        per_part = self._short.sum(axis=0)
        return {p: int(n) for p, n in zip(SPLIT_NAMES, per_part, strict=True) if n}

    def __str__(self) -> str:
        total = self.n_kept + self.n_dropped
        text = f"kept {self.n_kept} of {total} users"
        if self.n_dropped:
            why = ", ".join(
                f"{n} with too few {part} events" for part, n in self.reason_counts().items()
            )
            text += f"; dropped {self.n_dropped} ({why}; minimums {dict(self.minimums)})"
        return text


@dataclass(frozen=True, eq=False)
class TimeSplit:
    """A :class:`QueryLog` cut into background / train / valid / test (FedPS Sec. 4.1).

    Attributes:
        log: the log of the kept users.
        split: ``(log.n_events,)`` int8 part of every event (:data:`BACKGROUND`,
            :data:`TRAIN`, :data:`VALID`, :data:`TEST`).
        background_end: events before this time are background.
        report: the users kept and dropped.
    """

    log: QueryLog
    split: np.ndarray
    background_end: np.datetime64
    report: FilterReport

    def __post_init__(self) -> None:
        if self.split.shape != (self.log.n_events,) or self.split.dtype != np.int8:
            raise DataFormatError(
                f"TimeSplit.split must be int8 of shape ({self.log.n_events},), got "
                f"{self.split.dtype} {self.split.shape}"
            )

    def mask(self, part: str) -> np.ndarray:
        """Boolean mask of the events of ``part`` (one of :data:`SPLIT_NAMES`)."""
        return self.split == _split_code(part)

    def counts(self) -> np.ndarray:
        """``(n_users, 4)`` int64 events per user and part (columns as :data:`SPLIT_NAMES`)."""
        return _part_counts(self.log.event_user, self.split, self.log.n_users)


def _split_code(part: str) -> int:
    try:
        return SPLIT_NAMES.index(part)
    except ValueError:
        raise ConfigError(f"unknown split {part!r}; use one of {SPLIT_NAMES}") from None


def _part_counts(event_user: np.ndarray, split: np.ndarray, n_users: int) -> np.ndarray:
    flat = event_user.astype(np.int64) * 4 + split
    return np.bincount(flat, minlength=n_users * 4).reshape(n_users, 4)


def split_by_time(
    log: QueryLog,
    *,
    background_end: np.datetime64 = DEFAULT_BACKGROUND_END,
    ratios: tuple[int, int, int] = (6, 1, 1),
    min_background: int = 1,
    min_train: int = 1,
    min_valid: int = 1,
    min_test: int = 1,
) -> TimeSplit:
    """Background = events before ``background_end``; each user's later events are split in
    time order by ``ratios`` into train / valid / test (FedPS Sec. 4.1: five weeks of
    background, then 6:1:1).

    With ``n`` later events a user gets the first ``floor(n * 6/8 + 1/2)`` as train, up to
    ``floor(n * 7/8 + 1/2)`` as valid and the rest as test, except that an event with the
    same time as the event before it takes that event's part, so every train event is
    strictly earlier than every valid event, and valid than test. Users with fewer than
    ``min_*`` events in some part are dropped; the :class:`FilterReport` lists them (and the
    count is logged).

    Raises:
        ConfigError: non-positive ratios or negative minimums.
    """
    if len(ratios) != 3 or min(ratios) <= 0:
        raise ConfigError(
            f"ratios must be three positive numbers (train, valid, test), got {ratios}"
        )
    minimums = {
        "background": min_background,
        "train": min_train,
        "valid": min_valid,
        "test": min_test,
    }
    if min(minimums.values()) < 0:
        raise ConfigError(f"minimum event counts must be >= 0, got {minimums}")
    end = np.datetime64(background_end, "s")
    split = np.zeros(log.n_events, dtype=np.int8)
    later = log.time >= end
    user = log.event_user.astype(np.int64)
    n_later = np.bincount(user[later], minlength=log.n_users)
    # Rank of every later event among its user's later events (events are time-sorted).
    later_idx = np.flatnonzero(later)
    first_later = np.searchsorted(later_idx, log.user_ptr[:-1])
    rank = np.arange(later_idx.size) - first_later[user[later_idx]]
    total = float(sum(ratios))
    b1 = np.floor(n_later * (ratios[0] / total) + 0.5).astype(np.int64)
    b2 = np.floor(n_later * ((ratios[0] + ratios[1]) / total) + 0.5).astype(np.int64)
    u_later = user[later_idx]
    part = np.where(rank < b1[u_later], TRAIN, np.where(rank < b2[u_later], VALID, TEST))
    # Events tied in time with their predecessor take its part.
    t = log.time[later_idx].astype(np.int64)
    run_start = np.ones(later_idx.size, dtype=bool)
    run_start[1:] = (np.diff(t) != 0) | (np.diff(u_later) != 0)
    run_first = np.flatnonzero(run_start)[np.cumsum(run_start) - 1]
    split[later_idx] = part[run_first]

    counts = _part_counts(log.event_user, split, log.n_users)
    need = np.array(list(minimums.values()), dtype=np.int64)
    short = counts < need
    keep = ~short.any(axis=1)
    report = FilterReport(
        minimums=minimums,
        kept=log.user_ids[keep],
        dropped=log.user_ids[~keep],
        dropped_counts=counts[~keep],
    )
    if report.n_dropped:
        _logger.info("%s: %s", log.source, report)
    if keep.all():
        return TimeSplit(log, split, end, report)
    kept = np.flatnonzero(keep)
    events = keep[log.event_user]
    return TimeSplit(log.select_users(kept), split[events], end, report)


# ----------------------------------------------------------------------------------------
# Vocabulary and documents
# ----------------------------------------------------------------------------------------


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


def past_events(split: TimeSplit) -> np.ndarray:
    """``(n_events,)`` bool: the background and training events, the only part of the log
    that anything learned from it (segmenter, vocabulary, word vectors, topic model, BM25
    statistics) may be fitted on."""
    return split.split <= TRAIN


def past_documents(split: TimeSplit) -> np.ndarray:
    """``(n_urls,)`` bool: the documents clicked in a background or training event."""
    lg = split.log
    past = np.zeros(lg.urls.size, dtype=bool)
    past[lg.click_docs[past_events(split)[lg.click_event]]] = True
    return past


def indexed_documents(split: TimeSplit) -> np.ndarray:
    """``(n_urls,)`` bool: the documents clicked in any event of ``split.log`` -- the search
    engine's index (FedPS Sec. 4.1 ranks "all documents" of the log). A URL of the table
    whose clicks were all removed (a later stage of the continuous simulation) is not in it."""
    lg = split.log
    indexed = np.zeros(lg.urls.size, dtype=bool)
    indexed[lg.click_docs] = True
    return indexed


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


# ----------------------------------------------------------------------------------------
# Per-user logs
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class UserLog:
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

    @property
    def n_events(self) -> int:
        return int(self.time.shape[0])

    @property
    def clicks_per_event(self) -> np.ndarray:
        return np.diff(self.click_ptr)

    @property
    def click_event(self) -> np.ndarray:
        """``(n_clicks,)`` int64 event index of every click."""
        return np.repeat(np.arange(self.n_events, dtype=np.int64), self.clicks_per_event)


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
