"""Browsing worlds: users' pages and the visits Firefox stores for them (Mozilla paper,
Sections 4 and 6.1).

A world is what a URL-bar study needs from its users, whatever produced it (the calibrated
synthetic generator of :mod:`fedrank.data.synthetic_history`, or the real AOL click log of
:mod:`fedrank.data.aol_browsing`):

* :class:`Pages`: every page of every user, with the words the URL bar matches -- the URL
  words first (the host's name label, then path words), then the title words -- its host
  (Firefox's *origin*) and whether it is the host's root page (what autofill completes to);
* :class:`VisitStream`: visits as Firefox records them in ``moz_historyvisits``: page, time,
  transition type and ``from_visit`` (a redirect visit points at the visit it came from);
* :class:`BrowsingWorld`: the pages, the visits before the study, bookmarks, and for worlds
  with real future behaviour, the visits during the study with what the user typed.

Times are in days relative to the study's start (negative: before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fedrank.core.group_sort import group_key_order
from fedrank.errors import DataFormatError
from fedrank.models.frecency.history import VisitType

__all__ = [
    "ENGLISH_LETTER_FREQUENCIES",
    "BrowsingWorld",
    "Pages",
    "VisitStream",
    "Vocabulary",
    "browsing_shapes",
]

#: Relative frequencies of the letters a..z in English text (percent). Random words use
#: them so that words share prefixes about as often as real ones do, which is what makes
#: the URL bar's prefix matching return more than one page.
ENGLISH_LETTER_FREQUENCIES: tuple[float, ...] = (
    8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.15, 0.77, 4.0, 2.4,
    6.7, 7.5, 1.9, 0.095, 6.0, 6.3, 9.1, 2.8, 0.98, 2.4, 0.15, 2.0, 0.074,
)  # fmt: skip


def _lcp_matrix(chars: np.ndarray) -> np.ndarray:
    """int8 ``(V, V)``: longest common prefix length of every pair of 0-padded words.

    One vectorized pass per character position: ``still[a, b]`` says the words agree on
    every position so far, and each position where they still agree adds one."""
    n, width = chars.shape
    lcp = np.zeros((n, n), dtype=np.int8)
    still = np.ones((n, n), dtype=bool)
    for pos in range(width):
        col = chars[:, pos]
        same = col[:, None] == col[None, :]
        same &= (col != 0)[:, None]
        still &= same
        if not still.any():
            break
        lcp += still
    return lcp


#: Vocabularies up to this size keep the full ``(V, V)`` common-prefix table.
LCP_TABLE_MAX_WORDS = 6000


@dataclass(frozen=True)
class Vocabulary:
    """The words of URLs and titles, with their pairwise common-prefix lengths.

    Attributes:
        chars: uint8 ``(V, Lmax)``: ASCII codes of each word, padded with 0.
        lengths: int64 ``(V,)``: word lengths.

    :meth:`lcp_pairs` gives ``lcp(a, b)``, the length of the longest common prefix of words
    ``a`` and ``b``: a typed prefix of ``p`` characters of word ``a`` is a prefix of word
    ``b`` iff ``lcp(a, b) >= p``. Small vocabularies (synthetic worlds) precompute the
    whole table (:attr:`lcp`); large ones (the AOL world's) compare characters on demand.
    """

    chars: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        n = self.chars.shape[0] if self.chars.ndim == 2 else -1
        if n < 0 or self.lengths.shape != (n,):
            raise DataFormatError(
                f"Vocabulary needs chars (V, L) and lengths (V,); got {self.chars.shape}, "
                f"{self.lengths.shape}"
            )
        if n and not np.array_equal(self.lengths, (self.chars != 0).sum(axis=1)):
            raise DataFormatError("Vocabulary.lengths must be the words' character counts")

    @property
    def n_words(self) -> int:
        return int(self.chars.shape[0])

    @cached_property
    def lcp(self) -> np.ndarray:
        """int8 ``(V, V)`` table of ``lcp(a, b)`` (small vocabularies only)."""
        if self.n_words > LCP_TABLE_MAX_WORDS:
            raise DataFormatError(
                f"a {self.n_words}-word vocabulary has no full lcp table; use lcp_pairs"
            )
        return _lcp_matrix(self.chars)

    @cached_property
    def _lcp_flat(self) -> np.ndarray | None:
        """The table with a zero last row and column (index ``-1``: no word), flattened."""
        if self.n_words > LCP_TABLE_MAX_WORDS:
            return None
        n = self.n_words
        out = np.zeros((n + 1, n + 1), dtype=np.int8)
        out[:n, :n] = self.lcp
        return out.ravel()

    def lcp_pairs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """int64 ``lcp(a[i], b[i])`` elementwise; ``0`` where either id is ``-1``."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        flat = self._lcp_flat
        if flat is not None:
            n1 = self.n_words + 1
            return flat[np.where(a < 0, n1 - 1, a) * n1 + np.where(b < 0, n1 - 1, b)].astype(
                np.int64
            )
        out = np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
        a, b = np.broadcast_to(a, out.shape).ravel(), np.broadcast_to(b, out.shape).ravel()
        flat_out = out.ravel()
        ok = np.flatnonzero((a >= 0) & (b >= 0))
        step = max(1, (1 << 22) // max(self.chars.shape[1], 1))
        for lo in range(0, ok.size, step):
            sel = ok[lo : lo + step]
            ca, cb = self.chars[a[sel]], self.chars[b[sel]]
            eq = (ca == cb) & (ca != 0)
            flat_out[sel] = np.where(eq.all(axis=1), eq.shape[1], eq.argmin(axis=1))
        return out

    @cached_property
    def words(self) -> tuple[str, ...]:
        """The words as Python strings (for inspection and tests)."""
        return tuple(
            bytes(row[: int(n)]).decode("ascii")
            for row, n in zip(self.chars, self.lengths, strict=True)
        )

    @classmethod
    def from_words(cls, words: Sequence[str]) -> Vocabulary:
        """A vocabulary of the given distinct, non-empty, lowercase ASCII words (in order)."""
        words = list(words)
        if len(set(words)) != len(words):
            raise DataFormatError("vocabulary words must be distinct")
        for word in words:
            if not word or not word.isascii() or " " in word or len(word) > 127:
                raise DataFormatError(
                    f"vocabulary word {word!r} must be 1..127 ASCII characters without spaces"
                )
        width = max((len(w) for w in words), default=1)
        chars = np.zeros((len(words), width), dtype=np.uint8)
        for i, word in enumerate(words):
            chars[i, : len(word)] = np.frombuffer(word.encode("ascii"), dtype=np.uint8)
        lengths = np.array([len(w) for w in words], dtype=np.int64)
        return cls(chars=chars, lengths=lengths)

    @classmethod
    def random(
        cls, n_words: int, rng: np.random.Generator, min_length: int = 3, max_length: int = 10
    ) -> Vocabulary:
        """``n_words`` distinct random lowercase words of length ``min_length..max_length``
        with English letter frequencies."""
        letters = np.asarray(ENGLISH_LETTER_FREQUENCIES)
        letters = letters / letters.sum()
        chars = np.zeros((0, max_length), dtype=np.uint8)
        while chars.shape[0] < n_words:  # a few rounds at most: drop duplicates, redraw
            need = int((n_words - chars.shape[0]) * 1.2) + 16
            lengths = rng.integers(min_length, max_length + 1, size=need)
            new = (rng.choice(26, size=(need, max_length), p=letters) + ord("a")).astype(np.uint8)
            new[np.arange(max_length)[None, :] >= lengths[:, None]] = 0
            both = np.concatenate([chars, new])
            _, first = np.unique(both, axis=0, return_index=True)
            chars = both[np.sort(first)][:n_words]
        lengths = (chars != 0).sum(axis=1).astype(np.int64)
        return cls(chars=chars, lengths=lengths)


@dataclass(frozen=True)
class Pages:
    """Every page of every user (users' pages are contiguous, in user order).

    Attributes:
        user_offsets: int64 ``(U + 1,)``: user ``u`` owns pages ``[user_offsets[u],
            user_offsets[u + 1])``.
        host: int64 ``(N,)``: the page's host (origin), a global id; hosts are never
            shared between users.
        is_root: bool ``(N,)``: the host's root page (``https://host/``).
        words: signed integer ``(N, W)`` (int32, or int16 for a small vocabulary: the
            largest array of a big world): word ids, left-aligned, ``-1`` padded: the URL
            words first (``words[:, 0]`` is the host's name label), then the title words.
        n_url_words: int64 ``(N,)``: how many of ``words`` come from the URL (>= 1).
        vocabulary: the words (with every pairwise common-prefix length).
    """

    user_offsets: np.ndarray
    host: np.ndarray
    is_root: np.ndarray
    words: np.ndarray
    n_url_words: np.ndarray
    vocabulary: Vocabulary

    def __post_init__(self) -> None:
        n = int(self.user_offsets[-1]) if self.user_offsets.size else -1
        off = self.user_offsets
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or np.any(np.diff(off) < 0):
            raise DataFormatError("user_offsets must be 1-D, non-decreasing and start at 0")
        for name in ("host", "is_root", "n_url_words"):
            if getattr(self, name).shape != (n,):
                raise DataFormatError(
                    f"Pages.{name} has shape {getattr(self, name).shape}, expected ({n},)"
                )
        if self.words.ndim != 2 or self.words.shape[0] != n:
            raise DataFormatError(f"Pages.words has shape {self.words.shape}, expected ({n}, W)")
        if self.words.dtype.kind != "i":
            raise DataFormatError(
                f"Pages.words must hold signed integer word ids (-1: none), got {self.words.dtype}"
            )
        if n and ((self.words[:, 0] < 0).any() or (self.n_url_words < 1).any()):
            raise DataFormatError("every page needs its host's name as its first word")
        if n and self.words.max() >= self.vocabulary.n_words:
            raise DataFormatError("Pages.words refers to words outside the vocabulary")
        owner = self.owner
        # a host belongs to one user
        host_owner = np.full(int(self.host.max(initial=-1)) + 1, -1, dtype=np.int64)
        host_owner[self.host] = owner
        if n and np.any(host_owner[self.host] != owner):
            raise DataFormatError("a host is shared by two users; hosts must be per user")

    @property
    def n_pages(self) -> int:
        return int(self.host.size)

    @property
    def n_users(self) -> int:
        return int(self.user_offsets.size - 1)

    @cached_property
    def owner(self) -> np.ndarray:
        """int64 ``(N,)``: the user of every page."""
        return np.repeat(np.arange(self.n_users, dtype=np.int64), np.diff(self.user_offsets))

    def first_chars(self, rows: np.ndarray) -> np.ndarray:
        """uint8 ``(len(rows), W)``: the first character of every word of the pages at
        ``rows`` (0 for padding); computed when asked, not kept for every page."""
        words = self.words[rows]
        first = self.vocabulary.chars[np.maximum(words, 0), 0]
        return np.where(words >= 0, first, 0).astype(np.uint8)

    @cached_property
    def words_by_first_char(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(offsets, page, column)``: every word of every page (``words[page, column]``)
        grouped by the key ``owner * 256 + first character``, then by page, then column
        (``page`` int32, ``column`` uint8, ``offsets`` int64 of size ``n_users * 256 + 1``).
        The words of user ``u``'s pages that start with character ``c`` are the entries
        ``offsets[k]`` to ``offsets[k + 1]`` for ``k = u * 256 + c``, page by page: what the
        URL bar compares a first typed word with, without reading the pages' other
        words."""
        return first_char_index(self.words, self.user_offsets, self.vocabulary.chars)

    @property
    def host_word(self) -> np.ndarray:
        """``(N,)`` (the dtype of :attr:`words`): the host's name label (the word autofill
        completes)."""
        return self.words[:, 0]

    @cached_property
    def root_of_host(self) -> np.ndarray:
        """int64 ``(H,)``: the root page of every host id (``-1`` for ids without one)."""
        out = np.full(int(self.host.max(initial=-1)) + 1, -1, dtype=np.int64)
        roots = np.flatnonzero(self.is_root)
        out[self.host[roots]] = roots
        return out

    def text(self, page: int) -> str:
        """The page's words as the URL bar sees them: ``"host path ... | title ..."``."""
        words = self.vocabulary.words
        row = [words[w] for w in self.words[page] if w >= 0]
        k = int(self.n_url_words[page])
        return " ".join(row[:k]) + " | " + " ".join(row[k:])


#: Pages per block when :func:`first_char_index` builds its index (bounds the temporaries).
FIRST_CHAR_BLOCK_PAGES = 1 << 17


def first_char_index(
    words: np.ndarray,
    user_offsets: np.ndarray,
    chars: np.ndarray,
    block_pages: int = FIRST_CHAR_BLOCK_PAGES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:attr:`Pages.words_by_first_char` of pages with ``words`` (int, ``-1`` padded), the
    pages of user ``u`` at ``user_offsets[u]:user_offsets[u + 1]``, and the vocabulary's
    ``chars``. Built over blocks of whole users of about ``block_pages`` pages: a user's
    keys are below the next user's, so the blocks' sorted entries follow each other."""
    n_users = int(user_offsets.size - 1)
    if n_users >= 2**23 or words.shape[0] >= 2**31 or words.shape[1] > 256:
        raise DataFormatError(
            "the first-character index holds at most 2**23 users, 2**31 pages and 256 words "
            f"per page, got {n_users} users, {words.shape[0]} pages and {words.shape[1]} words"
        )
    counts = np.zeros(n_users * 256 + 1, dtype=np.int64)
    pages_parts: list[np.ndarray] = []
    cols_parts: list[np.ndarray] = []
    bounds = np.unique(np.searchsorted(user_offsets, np.arange(0, words.shape[0], block_pages)))
    users = np.r_[bounds[bounds < n_users], n_users]
    for u_lo, u_hi in zip(users[:-1], users[1:], strict=True):
        lo, hi = int(user_offsets[u_lo]), int(user_offsets[u_hi])
        rows, cols = np.nonzero(words[lo:hi] >= 0)  # row-major: page, then column
        ids = words[lo + rows, cols]
        owner = np.searchsorted(user_offsets, lo + rows, side="right") - 1
        key = owner * 256 + chars[ids, 0]
        order = np.argsort(key, kind="stable")  # pages and columns stay in order per key
        first = int(u_lo) * 256  # this block's keys: first .. u_hi * 256 - 1
        counts[1 + first : 1 + int(u_hi) * 256] += np.bincount(
            key - first, minlength=(int(u_hi) - int(u_lo)) * 256
        )
        pages_parts.append((lo + rows[order]).astype(np.int32))
        cols_parts.append(cols[order].astype(np.uint8))
    return (
        np.cumsum(counts),
        np.concatenate(pages_parts) if pages_parts else np.zeros(0, np.int32),
        np.concatenate(cols_parts) if cols_parts else np.zeros(0, np.uint8),
    )


@dataclass(frozen=True)
class VisitStream:
    """Visits in time order (``moz_historyvisits``).

    Attributes:
        page: int64 ``(V,)``: the visited page.
        time: float64 ``(V,)``: days relative to the study start, non-decreasing.
        visit_type: int8 ``(V,)``: :class:`~fedrank.models.frecency.history.VisitType`.
        from_visit: int64 ``(V,)``: for a redirect visit (type 5/6), the index (in this
            stream) of the visit it came from; ``-1`` otherwise.
    """

    page: np.ndarray
    time: np.ndarray
    visit_type: np.ndarray
    from_visit: np.ndarray

    def __post_init__(self) -> None:
        n = self.page.shape
        for name in ("time", "visit_type", "from_visit"):
            if getattr(self, name).shape != n:
                raise DataFormatError(
                    f"VisitStream.{name} has shape {getattr(self, name).shape}, expected {n}"
                )
        if self.time.size and np.any(np.diff(self.time) < 0):
            raise DataFormatError("VisitStream.time must be non-decreasing (visits in order)")
        bad = (self.from_visit >= np.arange(self.page.size)) & (self.from_visit >= 0)
        if bad.any():
            raise DataFormatError("a redirect's from_visit must point at an earlier visit")

    @property
    def n_visits(self) -> int:
        return int(self.page.size)

    def origin_type(self) -> np.ndarray:
        """int8 ``(V,)``: the type of the visit a redirect visit came from (0 if none)."""
        redirect = np.isin(self.visit_type, (VisitType.REDIRECT_PERMANENT,
                                             VisitType.REDIRECT_TEMPORARY))  # fmt: skip
        has = redirect & (self.from_visit >= 0)
        out = np.zeros(self.n_visits, dtype=np.int8)
        out[has] = self.visit_type[self.from_visit[has]]
        return out

    def redirect_target(self) -> np.ndarray:
        """int8 ``(V,)``: the type (5/6) of the redirect visit that came from this visit
        (0 if none; a visit redirects at most once in the worlds built here)."""
        redirect = np.isin(self.visit_type, (VisitType.REDIRECT_PERMANENT,
                                             VisitType.REDIRECT_TEMPORARY))  # fmt: skip
        out = np.zeros(self.n_visits, dtype=np.int8)
        src = redirect & (self.from_visit >= 0)
        out[self.from_visit[src]] = self.visit_type[src]
        return out

    def select(self, mask: np.ndarray) -> VisitStream:
        """The visits where ``mask`` holds, ``from_visit`` re-indexed (``-1`` when the
        source visit is not selected)."""
        keep = np.flatnonzero(mask)
        new_index = np.full(self.n_visits, -1, dtype=np.int64)
        new_index[keep] = np.arange(keep.size)
        src = self.from_visit[keep]
        return VisitStream(
            page=self.page[keep],
            time=self.time[keep],
            visit_type=self.visit_type[keep],
            from_visit=np.where(src >= 0, new_index[np.maximum(src, 0)], -1),
        )


@dataclass(frozen=True)
class BrowsingWorld:
    """A world of users for a URL-bar study.

    Attributes:
        name: ``"synthetic"`` or ``"aol"`` (reports).
        pages: every page.
        history: the visits before the study (``time < 0``).
        bookmark_page, bookmark_time: bookmarks (``moz_bookmarks``), one row each.
        future: visits during the study (``time >= 0``) that the world knows in advance --
            real behaviour (AOL). Empty for worlds whose searches are drawn from a hidden
            preference (synthetic).
        future_search: bool ``(F,)``: the future visit is a revisit the user makes through
            the URL bar (a search with a real target); otherwise a plain visit (LINK).
        future_typed: int32 ``(F, T)``: the words the user types for a search (``-1``
            padded; ``future_typed[i, 0] < 0``: type the host's name).
        stats: measured shapes of the world (see :func:`browsing_shapes`).
    """

    name: str
    pages: Pages
    history: VisitStream
    bookmark_page: np.ndarray
    bookmark_time: np.ndarray
    future: VisitStream
    future_search: np.ndarray
    future_typed: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        f = self.future.n_visits
        if self.future_search.shape != (f,) or self.future_typed.shape[:1] != (f,):
            raise DataFormatError("future_search and future_typed need one row per future visit")
        if self.history.n_visits and self.history.time.max() >= 0:
            raise DataFormatError("history visits must lie before the study start (time < 0)")
        if self.future.n_visits and self.future.time.min() < 0:
            raise DataFormatError("future visits must lie in the study (time >= 0)")
        if self.bookmark_page.shape != self.bookmark_time.shape:
            raise DataFormatError("bookmark_page and bookmark_time must have one shape")

    @property
    def n_users(self) -> int:
        return self.pages.n_users


def browsing_shapes(
    user: np.ndarray, host: np.ndarray, time: np.ndarray, n_users: int | None = None
) -> dict[str, float]:
    """The shapes a browsing world is calibrated on, from its clicks (one row per click;
    ``time`` in days). Every statistic is a mean over users unless it says "pooled":

    * ``clicks_per_user``, ``hosts_per_user``;
    * ``once_share``: pooled share of (user, host) pairs clicked exactly once;
    * ``revisit_rate``: pooled share of clicks to a host the user clicked before;
    * ``top10_share``: share of a user's clicks that go to their 10 most clicked hosts;
    * ``gap_median_minutes`` and ``gap_30min_share``: pooled gaps between a user's
      consecutive clicks (bursty timing: most gaps are short, some are days);
    * ``revisit_within_day``: pooled share of revisits that come within a day of the
      previous click on the same host.
    """
    user = np.asarray(user, dtype=np.int64)
    host = np.asarray(host, dtype=np.int64)
    time = np.asarray(time, dtype=np.float64)
    if not (user.shape == host.shape == time.shape) or user.ndim != 1:
        raise DataFormatError("user, host and time must be 1-D arrays of one length")
    n_users = int(user.max(initial=-1)) + 1 if n_users is None else int(n_users)
    order = group_key_order(time, user)
    user, host, time = user[order], host[order], time[order]
    clicks = np.bincount(user, minlength=n_users)
    pair, pair_index, pair_counts = np.unique(
        user * (int(host.max(initial=0)) + 1) + host, return_inverse=True, return_counts=True
    )
    pair_user = pair // (int(host.max(initial=0)) + 1)
    hosts = np.bincount(pair_user, minlength=n_users)
    # revisits: not the first click of the pair (the stream is in time order per user)
    first_of_pair = np.zeros(user.size, dtype=bool)
    first_pos = np.full(pair.size, -1, dtype=np.int64)
    first_pos[pair_index[::-1]] = np.arange(user.size)[::-1]
    first_of_pair[first_pos] = True
    # top-10 share per user: the user's pairs by count, descending
    by_count = group_key_order(-pair_counts, pair_user)
    start = np.cumsum(hosts) - hosts
    rank_in_user = np.arange(pair.size) - start[pair_user[by_count]]
    top = np.bincount(
        pair_user[by_count], weights=pair_counts[by_count] * (rank_in_user < 10),
        minlength=n_users,
    )  # fmt: skip
    active = clicks > 0
    same_user = user[1:] == user[:-1]
    gaps = np.diff(time)[same_user] * 24 * 60
    # previous click on the same pair, for revisits
    by_pair = group_key_order(time, pair_index)
    same_pair = pair_index[by_pair][1:] == pair_index[by_pair][:-1]
    pair_gaps = np.diff(time[by_pair])[same_pair]
    return {
        "users": float(active.sum()),
        "clicks_per_user": float(clicks[active].mean()) if active.any() else 0.0,
        "hosts_per_user": float(hosts[active].mean()) if active.any() else 0.0,
        "once_share": float(np.mean(pair_counts == 1)) if pair.size else 0.0,
        "revisit_rate": float(np.mean(~first_of_pair)) if user.size else 0.0,
        "top10_share": float(np.mean(top[active] / clicks[active])) if active.any() else 0.0,
        "gap_median_minutes": float(np.median(gaps)) if gaps.size else 0.0,
        "gap_30min_share": float(np.mean(gaps <= 30)) if gaps.size else 0.0,
        "revisit_within_day": float(np.mean(pair_gaps <= 1.0)) if pair_gaps.size else 0.0,
    }
