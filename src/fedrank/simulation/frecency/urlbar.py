"""The Firefox 62-68 URL bar, simulated for many searches at once (Mozilla paper, Sec. 4 and
6.2; the truth is ``UnifiedComplete.jsm`` and the study add-on's ``awesomeBar`` API).

Suggestions (what the study counted)
    After every keystroke Firefox shows up to ``max_results`` (10) rows: one *heuristic*
    row, then search suggestions (``search_suggestions``, 4), then the *general* rows. The
    study's add-on kept only the rows of history style -- not the search, visit-URL,
    suggestion, switch-tab, remote-tab, keyword or extension rows -- and reported the
    selected row's index among them (``rank_selected``) and the typed text's length
    (``num_chars_typed``), only when a history row was picked. The history rows are:

    1. **autofill** (the heuristic row): while the typed text is one token without spaces
       and is a prefix of a host (www. ignored), the user's host with the highest origin
       frecency among those whose origin frecency reaches the threshold (the mean origin
       frecency of the user's origins with frecency > 0; 0 when there is none) or that
       hold a bookmark; the row is the host's root page. Origins are the hosts with a page
       in the history or a bookmark (``moz_origins``); origin frecency is the sum of
       ``max(frecency, 0)`` over the host's pages, without the daily decay (Firefox's
       triggers skip it);
    2. **adaptive history** (at most ``adaptive_rows``, 3): pages with a
       ``moz_inputhistory`` row whose input starts with the typed text, by
       ``ROUND(use_count * (1 + exact), 1)`` then frecency
       (:mod:`fedrank.simulation.frecency.input_history`);
    3. **history by frecency**: the pages that match the typed text, ``frecency <> 0``,
       visited or bookmarked, by frecency descending then id descending, filling the
       general rows (``max_results - 1 - search_suggestions``).

Matching (binary, at word boundaries)
    The typed text is split into tokens at spaces; a page matches when every token is a
    prefix of one of its words -- URL words (host name, path) or title words (Firefox
    matches title or URL at boundaries). With ``vocabulary.lcp``, token ``i`` typed to
    ``p`` characters matches page ``j`` iff ``max_{u in words(j)} lcp[token_i, u] >= p``.

Typing and attention (:class:`TypingModel`)
    The user types the chosen words character by character (spaces count). They type
    ``1 + Poisson(blind_chars)`` characters before looking at the list at all; from then on,
    after every keystroke, they read the rows from the top and go on to the next row with
    probability ``scan_continue``, so the target at row ``r`` is noticed with probability
    ``scan_continue ** r``; when the whole text is typed they read every row. They select
    the target when they notice it. A target never shown ends the search without a history
    selection (no ping, ``found`` False). :func:`fedrank.experiments.frecency.calibration` fits the
    two parameters to the paper's control branch.

Computation
    Every search's (search, candidate page) pairs, autofill candidates and adaptive rows
    are gathered once (vectorized, or compiled where a search reads a run of its user's
    words); then every search is typed character by character in compiled code
    (:mod:`fedrank.simulation.frecency.kernels.urlbar`). On two cores a large batch runs in
    two halves on two threads with the same results
    (:meth:`~fedrank.simulation.frecency.pipeline.Pipeline.search`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields
from numbers import Integral
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from fedrank.core.arrays import unique_values
from fedrank.core.validation import Interval, Rule, Validated
from fedrank.data.browsing import Pages
from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.frecency.input_history import InputHistory

if TYPE_CHECKING:
    from fedrank.simulation.frecency.kernels.urlbar import (
        PageWords,
        Pairs,
        Profile,
        TypedSearches,
        WordIndex,
    )

__all__ = ["SearchBatch", "TypingModel", "UrlbarConfig", "UrlbarState", "simulate_searches"]


@dataclass(frozen=True)
class UrlbarConfig(Validated):
    """The URL bar's result layout (Firefox 62-68 defaults).

    Attributes:
        max_results: ``browser.urlbar.maxRichResults`` (10).
        search_suggestions: rows taken by search suggestions (4; 0 when off).
        adaptive_rows: adaptive-history rows before the frecency rows (``ceil(10 / 4)``).
        autofill: ``browser.urlbar.autoFill``.
    """

    max_results: int = 10
    search_suggestions: int = 4
    adaptive_rows: int = 3
    autofill: bool = True

    ACCEPTS = {
        "max_results": Interval(Integral, 2, None),
        "search_suggestions": Interval(Integral, 0, None),
        "adaptive_rows": Interval(Integral, 0, None),
        "autofill": bool,
    }
    RULES = (
        Rule(
            lambda c: c.search_suggestions <= c.max_results - 2,
            "search_suggestions must be in 0..max_results - 2 (one heuristic row and at least "
            "one general row), got {search_suggestions} with max_results {max_results}",
        ),
    )

    @property
    def general_rows(self) -> int:
        """History rows after the heuristic row."""
        return self.max_results - 1 - self.search_suggestions

    @property
    def history_rows(self) -> int:
        """Most history rows at once (an autofill row plus the general rows)."""
        return self.general_rows + 1


@dataclass(frozen=True)
class TypingModel:
    """How a simulated user types and reads (see the module docstring). The defaults are
    fitted to the paper's control branch (:data:`fedrank.experiments.frecency.study.
    CALIBRATED_TYPING`).

    Attributes:
        blind_chars: mean of the Poisson number of characters typed, after the first, before
            the user first looks at the suggestions.
        scan_continue: probability of reading one more row.
    """

    blind_chars: float = 1.547
    scan_continue: float = 0.317

    def __post_init__(self) -> None:
        if not (np.isfinite(self.blind_chars) and self.blind_chars >= 0):
            raise ConfigError(f"blind_chars must be >= 0, got {self.blind_chars}")
        if not 0.0 <= self.scan_continue <= 1.0:
            raise ConfigError(f"scan_continue must be in [0, 1], got {self.scan_continue}")


@dataclass(frozen=True)
class UrlbarState:
    """What the URL bar reads from the profile when the searches happen.

    Attributes:
        stored: float64 ``(N,)`` the stored frecency of every page (the order of the
            history rows; the branch decides whether it is fresh or cached and decayed).
        origin: float64 ``(N,)`` the page's contribution to its origin's frecency (its
            frecency without the daily decay; negative values count as 0).
        listable: bool ``(N,)`` pages the history query may return (visited or bookmarked).
        host_bookmarked: bool ``(H,)`` hosts holding a bookmark (always autofilled).
        inputs: the adaptive history.
        host_known: optional bool ``(H,)``: Firefox's origins, the hosts with a listable
            page or a bookmark, when the caller keeps them (``None``: computed from
            ``listable`` and ``host_bookmarked``, which it must equal).
    """

    stored: np.ndarray
    origin: np.ndarray
    listable: np.ndarray
    host_bookmarked: np.ndarray
    inputs: InputHistory
    host_known: np.ndarray | None = None


@dataclass(frozen=True)
class SearchBatch:
    """The outcome of ``S`` simulated URL-bar searches (the study's ping, Sec. 6.2).

    Attributes:
        user, target: int64 ``(S,)`` who searched, and the wanted page.
        chars_typed: int64 ``(S,)`` characters typed at the selection (the whole text when
            not found).
        selected_rank: int64 ``(S,)`` the selected row's index among the history rows
            (``-1`` when not found).
        shown: int64 ``(S, R)`` the history rows at the selection, top first, ``-1``
            padded.
        n_shown: int64 ``(S,)`` history rows shown.
        found: bool ``(S,)`` a history row was selected (a ping was sent).
        autofilled: bool ``(S,)`` the selected row was the autofill row.
        first_word: int64 ``(S,)`` the first typed word; ``first_chars``: int64 ``(S,)``
            characters typed of it at the selection (the input recorded in adaptive history
            when the selection was made within the first word and not by autofill).
    """

    user: np.ndarray
    target: np.ndarray
    chars_typed: np.ndarray
    selected_rank: np.ndarray
    shown: np.ndarray
    n_shown: np.ndarray
    found: np.ndarray
    autofilled: np.ndarray
    first_word: np.ndarray
    first_chars: np.ndarray

    def __post_init__(self) -> None:
        s = self.user.shape
        for name in ("target", "chars_typed", "selected_rank", "n_shown", "found",
                     "autofilled", "first_word", "first_chars"):  # fmt: skip
            if getattr(self, name).shape != s:
                raise DataFormatError(
                    f"SearchBatch.{name} has shape {getattr(self, name).shape}, expected {s}"
                )
        if self.shown.ndim != 2 or self.shown.shape[0] != s[0]:
            raise DataFormatError(
                f"SearchBatch.shown has shape {self.shown.shape}, expected (S, R)"
            )

    @property
    def n_searches(self) -> int:
        return int(self.user.size)

    def __len__(self) -> int:
        return self.n_searches

    @classmethod
    def concatenate(cls, batches: Sequence[SearchBatch]) -> SearchBatch:
        """The searches of ``batches`` (at least one) in order, as one batch."""
        return cls(
            **{f.name: np.concatenate([getattr(b, f.name) for b in batches]) for f in fields(cls)}
        )

    @property
    def adaptive_input(self) -> np.ndarray:
        """bool ``(S,)``: the selection is recorded in adaptive history (a history row other
        than autofill, picked while typing the first word)."""
        return self.found & ~self.autofilled & (self.first_chars > 0)


@dataclass(frozen=True)
class PrefixIndex:
    """Every word of every page, per user in the vocabulary's lexicographic order: the
    words of user ``u``'s pages that start with a given prefix are one run of the user's
    entries ``offsets[u]:offsets[u + 1]`` (words with a common prefix are neighbours in
    lexicographic order), found by binary search instead of reading all the user's words.

    Attributes:
        entries: the index's arrays (:class:`~fedrank.simulation.frecency.kernels.urlbar.
            WordIndex`): ``word_at``, int64 ``(V,)`` the vocabulary's words in
            lexicographic order; ``rank``, int64 ``(V,)`` every word's position in
            ``word_at``; ``offsets``, int64 ``(U + 1,)`` the entries of user ``u``;
            ``entry_rank``, uint16 (int32 for more than 65,536 words) ``(E,)`` the rank of
            every entry's word, non-decreasing within a user (then by page);
            ``entry_page``, int32 ``(E,)`` the page of every entry.
        slots: free int64 ``(N,)`` scratch arrays over the pages, all -1 between uses
            (:func:`_matching_pairs` takes one, or makes one when every array is in use
            by another thread, and puts it back).
    """

    entries: WordIndex
    slots: queue.SimpleQueue[np.ndarray]


def _kernels() -> ModuleType:
    """:mod:`fedrank.simulation.frecency.kernels.urlbar`, imported on first use: numba
    loads only in processes that simulate searches (``fedrank serve`` starts without
    it)."""
    from fedrank.simulation.frecency.kernels import urlbar

    return urlbar


def prefix_index(pages: Pages) -> PrefixIndex:
    """The :class:`PrefixIndex` of ``pages``, built on first use and kept with them; a
    thread asking while another builds it waits for that one (one build at a time)."""
    index = pages.__dict__.get("_prefix_index")
    if index is None:
        with _INDEX_BUILD:
            index = pages.__dict__.get("_prefix_index")
            if index is None:
                index = _build_prefix_index(pages)
                pages.__dict__["_prefix_index"] = index  # like a cached_property of Pages
    return index


_INDEX_BUILD = threading.Lock()


def _build_prefix_index(pages: Pages) -> PrefixIndex:
    """Sorts the words of every user's pages by (user, lexicographic rank, page)
    (:func:`~fedrank.simulation.frecency.kernels.urlbar.word_entries`)."""
    chars = pages.vocabulary.chars
    n_words = pages.vocabulary.n_words
    word_at = (
        np.lexsort(chars.T[::-1]).astype(np.int64)
        if chars.shape[1]
        else np.arange(n_words, dtype=np.int64)
    )
    rank = np.empty(n_words, dtype=np.int64)
    rank[word_at] = np.arange(n_words)
    rank_dtype = np.uint16 if n_words <= 1 << 16 else np.int32
    words = pages.words
    offsets = pages.user_offsets
    per_page = np.zeros(words.shape[0] + 1, dtype=np.int64)
    np.cumsum((words >= 0).sum(axis=1), out=per_page[1:])
    entry_offsets = per_page[offsets]  # the users' first entries
    entry_rank = np.empty(int(entry_offsets[-1]), dtype=rank_dtype)
    entry_page = np.empty(int(entry_offsets[-1]), dtype=np.int32)
    _kernels().word_entries(words, offsets, rank, entry_offsets, entry_rank, entry_page)
    index = _kernels().WordIndex(word_at, rank, entry_offsets, entry_rank, entry_page)
    return PrefixIndex(index, queue.SimpleQueue())


def _origins(pages: Pages, state: UrlbarState, users: np.ndarray) -> tuple[np.ndarray, ...]:
    """Firefox's origins (``moz_origins``) of the searching ``users``' hosts, over all
    host ids: ``host_known`` (a page of the host is in the history, or it holds a
    bookmark), ``origin`` (origin frecency: the sum of ``max(origin, 0)`` over the host's
    pages, 0 for unknown hosts) and ``qualified`` (autofill may complete to the host: its
    origin frecency reaches the user's threshold, the mean over the user's hosts with
    positive origin frecency, or it holds a bookmark; with no positive origin frecency
    the threshold is 0 and every host qualifies, as in Firefox)."""
    n_hosts = int(pages.host.max(initial=-1)) + 1
    given = np.zeros(0, dtype=bool) if state.host_known is None else state.host_known
    return _kernels().origins(
        unique_values(users), pages.user_offsets, pages.host, state.origin, state.listable,
        state.host_bookmarked, given, n_hosts,
    )  # fmt: skip


def _matching_pairs(
    pages: Pages, searched: TypedSearches, words: PageWords, profile: Profile
) -> Pairs:
    """Every search's (search, page) pairs that may be rows once the user reads the list,
    at ``look_from`` characters typed or more (``ptr[s]:ptr[s + 1]``): the pages that
    match ``look_from`` characters (at most the first token), with their *drop step*, the
    first number of typed characters at which the page stops matching (int64 max when it
    matches the whole text; ``PENDING`` until the later tokens are compared), which is
    above ``look_from``. Pages that match fewer characters can only be rows before the
    user reads (:func:`~fedrank.simulation.frecency.kernels.urlbar.matching_pairs`)."""
    index = prefix_index(pages)
    try:
        slot = index.slots.get_nowait()
    except queue.Empty:  # every scratch array is in use (or none was made yet)
        slot = np.full(pages.n_pages, -1, dtype=np.int64)
    kernels = _kernels()
    pairs = kernels.Pairs(*kernels.matching_pairs(searched, words, index.entries, profile, slot))
    index.slots.put(slot)  # all -1 again (a failed run's array is not reused)
    return pairs


def simulate_searches(
    pages: Pages,
    state: UrlbarState,
    users: np.ndarray,
    targets: np.ndarray,
    typed: np.ndarray,
    rng: np.random.Generator,
    *,
    typing: TypingModel | None = None,
    config: UrlbarConfig | None = None,
    only: np.ndarray | None = None,
) -> SearchBatch:
    """Simulate one URL-bar search per entry of ``users`` (see the module docstring).

    Args:
        pages: the users' pages.
        state: stored frecencies, origin frecencies, adaptive history.
        users, targets: int ``(S,)`` who searches and the wanted page (one of their pages).
        typed: int ``(S, T)`` the words the user types in order (``-1`` padded, at least
            one); each should be a word of the target, else the target may never match.
        rng: the user's attention (blind characters, reading depth).
        typing, config: the typing model and the URL bar's layout.
        only: bool ``(S,)``: simulate only these searches and return their batch, each
            with the attention draws it gets in the whole batch, so with the result the
            whole batch gives it (``rng`` ends elsewhere); the state need only be current
            for their users.
    """
    typing = typing or TypingModel()
    config = config or UrlbarConfig()
    users = np.asarray(users, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    typed = np.atleast_2d(np.asarray(typed, dtype=np.int64))
    _check(pages, state, users, targets, typed)
    n_drawn = users.size  # the searches the attention draws are made for
    pick = None if only is None else selected_positions(only, n_drawn)
    if pick is not None:
        users, targets, typed = users[pick], targets[pick], typed[pick]
    n = users.size
    vocab = pages.vocabulary
    lengths = np.where(typed >= 0, vocab.lengths[np.maximum(typed, 0)], 0)
    n_tokens = (typed >= 0).sum(axis=1)
    total = lengths.sum(axis=1) + np.maximum(n_tokens - 1, 0)
    token_start = np.cumsum(lengths + 1, axis=1) - (lengths + 1)  # chars before token i
    first_len = lengths[:, 0]

    # Firefox's origins (moz_origins) and what autofill may complete to
    kernels = _kernels()
    host_known, origin, qualified = _origins(pages, state, users)
    profile = kernels.Profile(state.stored, state.listable, host_known, qualified, origin)
    words = kernels.PageWords(pages.words, vocab.chars, pages.is_root, pages.host)
    blind = 1 + rng.poisson(typing.blind_chars, n_drawn)
    blind = blind if pick is None else blind[pick]
    # the user reads the list from this character on: what the list holds before does not
    # matter, so only the pairs that still match then are compared
    look_from = np.minimum(blind, total)
    searched = kernels.TypedSearches(
        users, targets, typed, lengths, token_start, total, look_from
    )  # fmt: skip
    pairs = _matching_pairs(pages, searched, words, profile)
    lcp = vocab.lcp_pairs
    # the autofill rows (the qualified roots whose host name the first token starts) and
    # the frecency rows (listable pages of non-zero stored frecency), with what does not
    # change while typing: is the pair's page the target, or ahead of it
    stored = state.stored
    (af_owner, af_cand, af_until, af_origin, owner, cand, drop, p_stored, p_target,
     p_ahead) = kernels.pair_rows(pairs, searched, words, profile, config.autofill)  # fmt: skip

    # adaptive rows of every search's user: (search, row) pairs
    first_page = pages.user_offsets[users]
    last_page = pages.user_offsets[users + 1]
    r_lo, r_hi = state.inputs.rows_of_pages(first_page, last_page)
    r_count = r_hi - r_lo
    a_search = np.repeat(np.arange(n, dtype=np.int64), r_count)
    a_row = np.arange(int(r_count.sum()), dtype=np.int64) + np.repeat(
        r_lo - (np.cumsum(r_count) - r_count), r_count
    )
    inputs = state.inputs
    a_page = inputs.page[a_row]
    a_reach = np.minimum(lcp(typed[a_search, 0], inputs.word[a_row]), inputs.length[a_row])
    a_reach = np.minimum(a_reach, first_len[a_search])
    usable = np.flatnonzero((a_reach >= look_from[a_search]) & state.listable[a_page])
    a_row, a_search, a_page = a_row[usable], a_search[usable], a_page[usable]
    a_use = inputs.use_count[a_row]
    # Firefox's ROUND(use_count * (1 + (input = typed)), 1), not exact and exact
    a_rank = np.round(a_use[:, None] * np.array([1.0, 2.0]), 1)

    chars = total.copy()
    rank_out = np.full(n, -1, dtype=np.int64)
    found = np.zeros(n, dtype=bool)
    autofilled = np.zeros(n, dtype=bool)
    shown = np.full((n, config.history_rows), -1, dtype=np.int64)
    # the attention draws of every character for every search, as a loop over characters
    # draws them (one uniform per search per character while any search types); only the
    # characters the loop ran are consumed
    saved = rng.bit_generator.state
    uniforms = rng.random((int(total.max(initial=0)), n_drawn))
    uniforms = uniforms if pick is None else uniforms[:, pick]
    ran = kernels.keystroke_loop(
        searched,
        words,
        kernels.FrecencyRows(_offsets(owner, n), cand, drop, p_ahead, p_target, p_stored),
        kernels.AutofillRows(_offsets(af_owner, n), af_cand, af_until, af_origin),
        kernels.AdaptiveRows(
            _offsets(a_search, n), a_page, a_reach[usable], inputs.length[a_row], a_use,
            a_rank, stored[a_page],
        ),
        kernels.Reading(
            uniforms, typing.scan_continue ** np.arange(config.history_rows + 1),
            config.general_rows, min(config.adaptive_rows, config.general_rows),
            config.history_rows,
        ),
        kernels.Outcome(chars, rank_out, found, autofilled, shown),
    )  # fmt: skip
    rng.bit_generator.state = saved
    rng.random((ran, n_drawn))
    in_first = chars <= first_len
    return SearchBatch(
        user=users,
        target=targets,
        chars_typed=chars,
        selected_rank=rank_out,
        shown=shown,
        n_shown=(shown >= 0).sum(axis=1),
        found=found,
        autofilled=autofilled,
        first_word=typed[:, 0].copy(),
        first_chars=np.where(found & in_first, chars, 0),
    )


def selected_positions(only: np.ndarray, n: int) -> np.ndarray:
    """The positions of the searches ``only`` selects (a bool mask of ``n`` searches)."""
    only = np.asarray(only)
    if only.dtype != np.bool_ or only.shape != (n,):
        raise DataFormatError(
            f"only must be a bool mask with one entry per search ({n}), got {only.dtype} "
            f"{only.shape}"
        )
    return np.flatnonzero(only)


def _offsets(group: np.ndarray, n: int) -> np.ndarray:
    """int64 ``(n + 1,)``: where every group starts in ``group`` (sorted group ids)."""
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=n), out=out[1:])
    return out


def _check(
    pages: Pages, state: UrlbarState, users: np.ndarray, targets: np.ndarray, typed: np.ndarray
) -> None:
    n = pages.n_pages
    for name in ("stored", "origin", "listable"):
        if getattr(state, name).shape != (n,):
            raise DataFormatError(f"UrlbarState.{name} must have one entry per page ({n})")
    n_hosts = int(pages.host.max(initial=-1)) + 1
    for name in ("host_bookmarked", "host_known"):
        value = getattr(state, name)
        if value is not None and (value.ndim != 1 or value.size < n_hosts):
            raise DataFormatError(f"UrlbarState.{name} must cover every host id ({n_hosts})")
    if users.ndim != 1 or targets.shape != users.shape or typed.shape[0] != users.size:
        raise DataFormatError("users, targets and typed need one row per search")
    if users.size and (users.min() < 0 or users.max() >= pages.n_users):
        raise DataFormatError(f"user ids must be in 0..{pages.n_users - 1}")
    if targets.size and (pages.owner[targets] != users).any():
        raise DataFormatError("every target must be a page of the searching user")
    if users.size and (
        typed.shape[1] == 0
        or (typed[:, 0] < 0).any()
        or (typed < -1).any()
        or ((typed[:, :-1] < 0) & (typed[:, 1:] >= 0)).any()
        or (typed >= pages.vocabulary.n_words).any()
    ):
        raise DataFormatError("every search types at least one vocabulary word (-1 padded)")
