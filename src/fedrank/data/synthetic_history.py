"""Synthetic browsing histories: the mock data set of the Mozilla simulation (paper Sec. 6.1).

The paper's simulation could not use real user data, so it generated histories "designed
to resemble the data we expected users to generate":

* how recently pages were visited follows "a made-up distribution that was skewed towards
  more recent visits";
* the share of bookmarked pages comes from "existing statistics";
* the number of visits per page is "modeled using an exponential distribution with
  lambda = 7" (many pages visited a few times, a few pages visited a lot);
* "recency, type, and frequency were assumed to be independent of each other".

This module draws such a population for many users at once (fully vectorized: no Python
loop over users, pages or visits), and gives every page a title made of words from a random
vocabulary so that the URL bar (:mod:`fedrank.simulation.urlbar`, paper Sec. 4) can match
typed text against it.

Every page's sampled visits are the ``NUM_SAMPLED_VISITS`` (10) most recent ones, newest
first, as Firefox's classic frecency samples them. They are drawn exactly without drawing
the older visits: the ages of a page's ``n`` visits are i.i.d. exponential, so their order
statistics follow the Renyi representation ``age_(i) = mean * sum_{j<=i} E_j / (n - j + 1)``
with i.i.d. standard exponential ``E_j``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.history import (
    NOT_COUNTED_TYPES,
    NUM_SAMPLED_VISITS,
    REDIRECT_TYPES,
    PageHistories,
    VisitType,
)

#: Relative frequencies of the letters a..z in English text (percent). Random words use
#: them so that words share prefixes about as often as real ones do, which is what makes
#: the URL bar's prefix matching return more than one page.
ENGLISH_LETTER_FREQUENCIES: tuple[float, ...] = (
    8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.15, 0.77, 4.0, 2.4,
    6.7, 7.5, 1.9, 0.095, 6.0, 6.3, 9.1, 2.8, 0.98, 2.4, 0.15, 2.0, 0.074,
)  # fmt: skip

#: Default shares of the visit types among all visits (see :class:`HistoryConfig`).
DEFAULT_VISIT_TYPE_SHARES: tuple[tuple[VisitType, float], ...] = (
    (VisitType.LINK, 0.70),
    (VisitType.TYPED, 0.12),
    (VisitType.BOOKMARK, 0.05),
    (VisitType.REDIRECT_PERMANENT, 0.02),
    (VisitType.REDIRECT_TEMPORARY, 0.03),
    (VisitType.DOWNLOAD, 0.02),
    (VisitType.RELOAD, 0.03),
    (VisitType.FRAMED_LINK, 0.01),
    (VisitType.EMBED, 0.02),
)


@dataclass(frozen=True)
class HistoryConfig:
    """Parameters of the synthetic histories (paper Sec. 6.1), with the reason for each default.

    Attributes:
        mean_extra_pages: pages per user are ``1 + Poisson(mean_extra_pages)`` (default 60):
            every user has at least one page, and a URL bar search typically ranks among a
            few dozen to a hundred history entries per user, which keeps one iteration of
            10,000 users cheap while leaving enough competitors for ranking to matter.
        visit_count_scale: visits per visited page are ``1 + floor(Exponential(scale))``
            (default 7). The paper says "an exponential distribution with lambda = 7"; read
            as a *rate* that would mean 1/7 visit per page on average, so 7 is read as the
            mean (scale). The mean visit count is ``1 + 1 / (exp(1/7) - 1) ~ 7.5``.
        age_mean_days: every visit's age in days is ``Exponential(age_mean_days)`` (default
            25), the paper's "made-up distribution skewed towards more recent visits": about
            15% of visits fall within 4 days, 43% within 14 days, 71% within 31 days and 97%
            within 90 days, so all of frecency's recency buckets are populated.
        max_age_days: ages are capped at this many days (default 365, roughly how long
            Firefox keeps history on an average profile).
        bookmarked_share: probability that a visited page is bookmarked (default 0.15). The
            paper took this share from "existing statistics" it does not quote; 0.15 is an
            assumption of the same order, to be replaced when better numbers are known.
        unvisited_bookmark_share: share of all pages that are bookmarks never visited
            (``visit_count == 0``, default 0.02): imported or synced bookmarks.
        visit_type_shares: ``(VisitType, share)`` pairs, the probability of each transition
            type for every visit (defaults: LINK 0.70, TYPED 0.12, BOOKMARK 0.05,
            REDIRECT_PERMANENT 0.02, REDIRECT_TEMPORARY 0.03, DOWNLOAD 0.02, RELOAD 0.03,
            FRAMED_LINK 0.01, EMBED 0.02): most navigation follows links, a good part is
            typed, the rest is small. Shares must sum to 1. Types are independent of recency
            and frequency (paper).
        redirect_source_share: probability that a visit redirected to another page
            (default 0.03), independent of its type.
        n_words: vocabulary size of the page titles (default 3000).
        min_word_length, max_word_length: word lengths are uniform in this range (3..10).
        title_length_shares: probability of a title having 1, 2, ... words (default
            0.15/0.35/0.30/0.20 for 1..4 words: titles like "news", "rust docs", ...).
        word_zipf_exponent: title words are drawn with probability ``~ 1 / (r + 1 +
            word_zipf_offset) ** s`` for the word of rank ``r`` (default ``s = 1``, Zipf's
            law), so titles share common words and typed prefixes match several pages.
        word_zipf_offset: Zipf-Mandelbrot offset (default 10) that flattens the head of the
            distribution: without it the most common word would be in ~10% of all titles,
            and a one-word title made of it could never be told apart from the other pages
            by typing (real titles carry rarer words too, e.g. the site's name).
    """

    mean_extra_pages: float = 60.0
    visit_count_scale: float = 7.0
    age_mean_days: float = 25.0
    max_age_days: float = 365.0
    bookmarked_share: float = 0.15
    unvisited_bookmark_share: float = 0.02
    visit_type_shares: tuple[tuple[VisitType, float], ...] = DEFAULT_VISIT_TYPE_SHARES
    redirect_source_share: float = 0.03
    n_words: int = 3000
    min_word_length: int = 3
    max_word_length: int = 10
    title_length_shares: tuple[float, ...] = (0.15, 0.35, 0.30, 0.20)
    word_zipf_exponent: float = 1.0
    word_zipf_offset: float = 10.0

    def __post_init__(self) -> None:
        positive = ("visit_count_scale", "age_mean_days", "max_age_days")
        for name in positive:
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise ConfigError(f"HistoryConfig.{name} must be a positive number, got {value}")
        if not np.isfinite(self.mean_extra_pages) or self.mean_extra_pages < 0:
            raise ConfigError(
                f"HistoryConfig.mean_extra_pages must be >= 0, got {self.mean_extra_pages}"
            )
        for name in ("bookmarked_share", "redirect_source_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"HistoryConfig.{name} must be in [0, 1], got {value}")
        if not 0.0 <= self.unvisited_bookmark_share < 1.0:
            raise ConfigError(
                "HistoryConfig.unvisited_bookmark_share must be in [0, 1) (some pages must be "
                f"visited), got {self.unvisited_bookmark_share}"
            )
        _check_shares("visit_type_shares", [s for _, s in self.visit_type_shares])
        types = [t for t, _ in self.visit_type_shares]
        valid = {int(t) for t in VisitType}
        bad = [t for t in types if int(t) not in valid]
        if bad:
            raise ConfigError(
                f"HistoryConfig.visit_type_shares has unknown visit types {bad}; use "
                "fedrank.models.frecency.history.VisitType values"
            )
        if len(set(int(t) for t in types)) != len(types):
            raise ConfigError(f"HistoryConfig.visit_type_shares lists a type twice: {types}")
        if not 1 <= self.min_word_length <= self.max_word_length <= 100:
            raise ConfigError(
                "HistoryConfig word lengths need 1 <= min_word_length <= max_word_length <= "
                f"100, got {self.min_word_length}..{self.max_word_length}"
            )
        if self.n_words < 1:
            raise ConfigError(f"HistoryConfig.n_words must be >= 1, got {self.n_words}")
        capacity = sum(26**n for n in range(self.min_word_length, self.max_word_length + 1))
        if self.n_words > capacity // 4:
            raise ConfigError(
                f"HistoryConfig.n_words = {self.n_words} is too many distinct words of length "
                f"{self.min_word_length}..{self.max_word_length}; allow longer words"
            )
        _check_shares("title_length_shares", self.title_length_shares)
        if self.word_zipf_exponent < 0 or self.word_zipf_offset < 0:
            raise ConfigError(
                "HistoryConfig.word_zipf_exponent and word_zipf_offset must be >= 0, got "
                f"{self.word_zipf_exponent} and {self.word_zipf_offset}"
            )


def _check_shares(name: str, shares: Sequence[float]) -> None:
    values = np.asarray(shares, dtype=np.float64)
    if values.size == 0 or np.any(values < 0) or not np.isclose(values.sum(), 1.0):
        raise ConfigError(
            f"HistoryConfig.{name} must be non-negative shares summing to 1, got "
            f"{list(shares)} (sum {values.sum():.6g})"
        )


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


@dataclass(frozen=True)
class Vocabulary:
    """The words page titles are made of, with all pairwise common-prefix lengths.

    Attributes:
        chars: uint8 ``(V, Lmax)``: ASCII codes of each word, padded with 0.
        lengths: int64 ``(V,)``: word lengths.
        lcp: int8 ``(V, V)``: ``lcp[a, b]`` is the length of the longest common prefix of
            words ``a`` and ``b`` (``lcp[a, a] == lengths[a]``). The URL bar uses it: a typed
            prefix of ``p`` characters of word ``a`` is a prefix of word ``b`` iff
            ``lcp[a, b] >= p``.

    Word ids are frequency ranks in :func:`generate_population` (word 0 is the most common).
    """

    chars: np.ndarray
    lengths: np.ndarray
    lcp: np.ndarray

    def __post_init__(self) -> None:
        n = self.chars.shape[0] if self.chars.ndim == 2 else -1
        if n < 0 or self.lengths.shape != (n,) or self.lcp.shape != (n, n):
            raise DataFormatError(
                f"Vocabulary needs chars (V, L), lengths (V,), lcp (V, V); got "
                f"{self.chars.shape}, {self.lengths.shape}, {self.lcp.shape}"
            )

    @property
    def n_words(self) -> int:
        return int(self.chars.shape[0])

    @cached_property
    def lcp_padded(self) -> np.ndarray:
        """int8 ``(V + 1, V + 1)``: :attr:`lcp` with a zero last row and column, so that the
        padding word id ``-1`` indexes a zero (also in ``ravel()`` order: flat index
        ``a * (V + 1) - 1`` is the last column of row ``a - 1``, or the corner for
        ``a = 0``)."""
        n = self.n_words
        out = np.zeros((n + 1, n + 1), dtype=np.int8)
        out[:n, :n] = self.lcp
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
        return cls(chars=chars, lengths=lengths, lcp=_lcp_matrix(chars))

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
        return cls(chars=chars, lengths=lengths, lcp=_lcp_matrix(chars))


class UserPages(NamedTuple):
    """The pages of several users, flattened (see :meth:`Population.pages_of_users`)."""

    owner: np.ndarray  # int64 (T,): index into the ``users`` argument
    page: np.ndarray  # int64 (T,): global page id
    start: np.ndarray  # int64 (S,): where each entry's pages start in the flat arrays
    count: np.ndarray  # int64 (S,): number of pages of each entry


@dataclass(frozen=True)
class Population:
    """All users' pages (paper Sec. 6.1): histories, owners and titles.

    Attributes:
        pages: the histories of all pages, users' pages concatenated in user order. Sampled
            visits are the 10 most recent, newest first; ``visit_count`` >= sampled visits.
        user_offsets: int64 ``(U + 1,)``: user ``u`` owns pages
            ``user_offsets[u]:user_offsets[u + 1]``.
        page_user: int64 ``(N,)``: the owner of every page.
        title_words: int32 ``(N, Wmax)``: word ids of every page's title, left-aligned,
            padded with -1 (at least one word per title).
        vocabulary: the words of the titles.
    """

    pages: PageHistories
    user_offsets: np.ndarray
    page_user: np.ndarray
    title_words: np.ndarray
    vocabulary: Vocabulary

    def __post_init__(self) -> None:
        n = self.pages.n_pages
        off = self.user_offsets
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != n:
            raise DataFormatError(
                f"user_offsets must be 1-D, start at 0 and end at the page count {n}"
            )
        if np.any(np.diff(off) < 0):
            raise DataFormatError("user_offsets must be non-decreasing")
        if self.page_user.shape != (n,):
            raise DataFormatError(f"page_user has shape {self.page_user.shape}, expected ({n},)")
        if self.title_words.ndim != 2 or self.title_words.shape[0] != n:
            raise DataFormatError(
                f"title_words has shape {self.title_words.shape}, expected ({n}, Wmax)"
            )
        if n and (self.title_words[:, 0] < 0).any():
            raise DataFormatError("every page title needs at least one word")

    @property
    def n_users(self) -> int:
        return int(self.user_offsets.size - 1)

    @property
    def n_pages(self) -> int:
        return self.pages.n_pages

    @property
    def pages_per_user(self) -> np.ndarray:
        """int64 ``(U,)``: number of pages of every user."""
        return np.diff(self.user_offsets)

    def pages_of(self, user: int) -> np.ndarray:
        """Global ids of the pages of ``user``."""
        if not 0 <= user < self.n_users:
            raise DataFormatError(f"user {user} out of range 0..{self.n_users - 1}")
        return np.arange(self.user_offsets[user], self.user_offsets[user + 1], dtype=np.int64)

    def title(self, page: int) -> str:
        """The title of a page as typed in the URL bar: its words joined by single spaces."""
        words = self.vocabulary.words
        return " ".join(words[w] for w in self.title_words[page] if w >= 0)

    def check_users(self, users: np.ndarray, name: str = "users") -> np.ndarray:
        """``users`` as a 1-D int64 array, after checking every id is a user."""
        arr = np.asarray(users)
        if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
            raise DataFormatError(
                f"{name} must be a 1-D integer array, got {arr.dtype} {arr.shape}"
            )
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_users):
            raise DataFormatError(
                f"{name} holds ids outside 0..{self.n_users - 1}: {arr.min()}..{arr.max()}"
            )
        return arr

    def pages_of_users(self, users: np.ndarray) -> UserPages:
        """The pages of every entry of ``users`` (repeats allowed), flattened: entry ``s`` owns
        flat positions ``start[s]:start[s] + count[s]``, in ascending page id."""
        users = self.check_users(users)
        first = self.user_offsets[users]
        count = self.user_offsets[users + 1] - first
        end = np.cumsum(count)
        start = end - count
        total = int(end[-1]) if end.size else 0
        owner = np.repeat(np.arange(users.size, dtype=np.int64), count)
        page = np.arange(total, dtype=np.int64) + np.repeat(first - start, count)
        return UserPages(owner=owner, page=page, start=start, count=count)


def generate_population(
    n_users: int, rng: np.random.Generator, config: HistoryConfig | None = None
) -> Population:
    """Draw ``n_users`` synthetic histories (paper Sec. 6.1); see :class:`HistoryConfig`.

    The vocabulary is drawn first, so it does not depend on ``n_users``. The same generator
    state gives the identical population.
    """
    cfg = config if config is not None else HistoryConfig()
    if int(n_users) != n_users or n_users < 1:
        raise ConfigError(f"n_users must be a positive integer, got {n_users}")
    if not isinstance(rng, np.random.Generator):
        raise ConfigError("rng must be a numpy.random.Generator (np.random.default_rng(seed))")
    vocab = Vocabulary.random(cfg.n_words, rng, cfg.min_word_length, cfg.max_word_length)

    counts = 1 + rng.poisson(cfg.mean_extra_pages, size=int(n_users))
    user_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(user_offsets[-1])
    page_user = np.repeat(np.arange(n_users, dtype=np.int64), counts)
    pages = _draw_histories(n, rng, cfg)
    titles = _draw_titles(n, rng, cfg)
    return Population(
        pages=pages,
        user_offsets=user_offsets,
        page_user=page_user,
        title_words=titles,
        vocabulary=vocab,
    )


def _draw_histories(n: int, rng: np.random.Generator, cfg: HistoryConfig) -> PageHistories:
    """Visit histories of ``n`` pages (type, recency and frequency independent), in the
    form Firefox stores them (:class:`PageHistories`): whole-day ages, redirect visits with
    the type of the visit they came from, visits that led to a redirect with the redirect's
    type, and ``visit_count`` counting only the types Firefox counts."""
    width = NUM_SAMPLED_VISITS
    unvisited = rng.random(n) < cfg.unvisited_bookmark_share
    n_visits = 1 + np.floor(rng.exponential(cfg.visit_count_scale, size=n)).astype(np.int64)
    n_visits[unvisited] = 0
    bookmarked = unvisited | (rng.random(n) < cfg.bookmarked_share)

    n_sampled = np.minimum(n_visits, width)
    mask = np.arange(width)[None, :] < n_sampled[:, None]
    # Renyi: the i-th smallest of n i.i.d. Exp(mean) ages is mean * sum_{j<=i} E_j / (n-j+1).
    remaining = np.maximum(n_visits[:, None] - np.arange(width)[None, :], 1)
    spacings = rng.standard_exponential((n, width)) / remaining
    ages = np.minimum(cfg.age_mean_days * np.cumsum(spacings, axis=1), cfg.max_age_days)
    ages = np.where(mask, np.floor(ages), 0.0)  # Firefox's ages are whole days

    type_values = np.array([int(t) for t, _ in cfg.visit_type_shares], dtype=np.int8)
    type_p = np.array([s for _, s in cfg.visit_type_shares], dtype=np.float64)
    visit_type = _draw_types(rng, (n, width), type_values, type_p)
    visit_type[~mask] = 0
    # A redirect visit came from a visit of a non-redirect type (IFNULL(origin.visit_type)).
    redirect = np.isin(type_values, REDIRECT_TYPES)
    origin = np.zeros((n, width), dtype=np.int8)
    if (~redirect).any() and type_p[~redirect].sum() > 0:
        origin = _draw_types(rng, (n, width), type_values[~redirect], type_p[~redirect])
    origin[~np.isin(visit_type, REDIRECT_TYPES)] = 0
    # A visit that led to a redirect: the redirect's type, in the types' proportions.
    leads = (rng.random((n, width)) < cfg.redirect_source_share) & mask
    target = np.zeros((n, width), dtype=np.int8)
    if redirect.any() and type_p[redirect].sum() > 0:
        target = _draw_types(rng, (n, width), type_values[redirect], type_p[redirect])
    else:
        target[:] = VisitType.REDIRECT_TEMPORARY
    target[~leads] = 0

    # moz_places.visit_count counts visits of every type but EMBED, DOWNLOAD, FRAMED_LINK
    # and RELOAD; the unsampled (older) visits are drawn at once.
    counted_p = float(type_p[~np.isin(type_values, NOT_COUNTED_TYPES)].sum())
    unsampled = n_visits - n_sampled
    counted = (mask & ~np.isin(visit_type, NOT_COUNTED_TYPES)).sum(axis=1)
    visit_count = counted + rng.binomial(unsampled, min(max(counted_p, 0.0), 1.0))
    # moz_places.typed: some visit was typed, sampled or not.
    p_typed = sum(s for t, s in cfg.visit_type_shares if t == VisitType.TYPED)
    typed = (visit_type == VisitType.TYPED).any(axis=1) | (
        rng.random(n) < 1.0 - (1.0 - p_typed) ** unsampled
    )
    bookmark_age = np.where(bookmarked, np.floor(rng.uniform(0.0, 1.0, n) * cfg.max_age_days), 0.0)
    return PageHistories.build(
        ages,
        visit_type,
        visit_count.astype(np.int64),
        visit_origin_type=origin,
        visit_redirect_target=target,
        bookmarked=bookmarked,
        typed=typed,
        bookmark_age_days=bookmark_age,
    )


def _draw_types(
    rng: np.random.Generator, shape: tuple[int, int], values: np.ndarray, shares: np.ndarray
) -> np.ndarray:
    """int8 visit types drawn i.i.d. with probabilities ``shares / shares.sum()``."""
    cdf = np.cumsum(shares)
    cdf /= cdf[-1]
    pick = np.searchsorted(cdf, rng.random(shape), side="right")
    return values[np.minimum(pick, values.size - 1)].astype(np.int8)


def _draw_titles(n: int, rng: np.random.Generator, cfg: HistoryConfig) -> np.ndarray:
    """int32 ``(n, Wmax)`` titles: Zipf-Mandelbrot words, distinct within a title."""
    w_max = len(cfg.title_length_shares)
    n_words = cfg.n_words
    length_cdf = np.cumsum(cfg.title_length_shares)
    n_title = 1 + np.searchsorted(length_cdf / length_cdf[-1], rng.random(n), side="right")
    n_title = np.minimum(n_title, w_max)
    word_p = 1.0 / (np.arange(n_words) + 1.0 + cfg.word_zipf_offset) ** cfg.word_zipf_exponent
    word_cdf = np.cumsum(word_p / word_p.sum())

    def draw(size: int | tuple[int, int]) -> np.ndarray:
        ids = np.searchsorted(word_cdf, rng.random(size), side="right")
        return np.minimum(ids, n_words - 1).astype(np.int32)

    slots = np.arange(w_max)[None, :] < n_title[:, None]
    words = np.where(slots, draw((n, w_max)), -1).astype(np.int32)
    if n_words >= w_max:  # redraw repeated words until titles have distinct words
        for _ in range(1000):
            dup = np.zeros_like(slots)
            for a in range(1, w_max):
                for b in range(a):
                    dup[:, a] |= (words[:, a] == words[:, b]) & slots[:, a]
            n_dup = int(dup.sum())
            if n_dup == 0:
                break
            words[dup] = draw(n_dup)
    return words


def population_from_titles(
    titles: Sequence[Sequence[str]], pages: PageHistories | None = None
) -> Population:
    """A small population with the given page titles, one list of titles per user (for tests
    and examples). Titles are split at spaces; the vocabulary is their distinct words in
    order of first appearance. ``pages`` defaults to one link visit today per page."""
    flat = [t for user in titles for t in user]
    split = [t.split() for t in flat]
    if any(not words for words in split):
        raise DataFormatError("every title needs at least one word")
    vocab_words: dict[str, int] = {}
    for words in split:
        for w in words:
            vocab_words.setdefault(w, len(vocab_words))
    vocab = Vocabulary.from_words(list(vocab_words))
    w_max = max((len(w) for w in split), default=1)
    title_words = np.full((len(flat), w_max), -1, dtype=np.int32)
    for i, words in enumerate(split):
        title_words[i, : len(words)] = [vocab_words[w] for w in words]
    counts = np.array([len(u) for u in titles], dtype=np.int64)
    n = len(flat)
    if pages is None:
        visit_type = np.zeros((n, NUM_SAMPLED_VISITS), dtype=np.int8)
        visit_type[:, 0] = VisitType.LINK
        pages = PageHistories.build(
            np.zeros((n, NUM_SAMPLED_VISITS)), visit_type, np.ones(n, dtype=np.int64)
        )
    elif pages.n_pages != n:
        raise DataFormatError(f"pages has {pages.n_pages} pages but {n} titles were given")
    return Population(
        pages=pages,
        user_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        page_user=np.repeat(np.arange(counts.size, dtype=np.int64), counts),
        title_words=title_words,
        vocabulary=vocab,
    )


__all__ = [
    "DEFAULT_VISIT_TYPE_SHARES",
    "HistoryConfig",
    "Population",
    "UserPages",
    "Vocabulary",
    "generate_population",
    "population_from_titles",
]
