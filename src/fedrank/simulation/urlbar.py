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
       ``ROUND(use_count * (1 + exact), 1)`` then frecency (:mod:`fedrank.simulation.
       input_history`);
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

Vectorization
    Searches are flattened into (search, candidate page) pairs; a loop over the number of
    characters typed (at most a few dozen) updates every still-typing search at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedrank.data.browsing import LCP_TABLE_MAX_WORDS, Pages
from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.input_history import InputHistory

__all__ = ["SearchBatch", "TypingModel", "UrlbarConfig", "UrlbarState", "simulate_searches"]


@dataclass(frozen=True)
class UrlbarConfig:
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

    def __post_init__(self) -> None:
        if self.max_results < 2 or not 0 <= self.search_suggestions <= self.max_results - 2:
            raise ConfigError(
                "max_results must be >= 2 and search_suggestions in 0..max_results - 2 (one "
                f"heuristic row and at least one general row), got {self.max_results}, "
                f"{self.search_suggestions}"
            )
        if self.adaptive_rows < 0:
            raise ConfigError(f"adaptive_rows must be >= 0, got {self.adaptive_rows}")

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
        scored: optional int64, ascending: the only pages whose ``stored`` and ``origin``
            may be non-zero (``None``: any page); origin frecency then sums over these.
        host_known: optional bool ``(H,)``: Firefox's origins, the hosts with a listable
            page or a bookmark, when the caller keeps them (``None``: computed from
            ``listable`` and ``host_bookmarked``, which it must equal).
    """

    stored: np.ndarray
    origin: np.ndarray
    listable: np.ndarray
    host_bookmarked: np.ndarray
    inputs: InputHistory
    scored: np.ndarray | None = None
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

    @property
    def adaptive_input(self) -> np.ndarray:
        """bool ``(S,)``: the selection is recorded in adaptive history (a history row other
        than autofill, picked while typing the first word)."""
        return self.found & ~self.autofilled & (self.first_chars > 0)


#: Searches :func:`_matching_pairs` compares at a time (bounds its (search, word) arrays).
_MATCH_BLOCK = 4096
#: Pages per block when :func:`prefix_index` sorts the users' words (bounds the
#: temporaries).
_INDEX_BLOCK_PAGES = 1 << 17


@dataclass(frozen=True)
class PrefixIndex:
    """Every word of every page, per user in the vocabulary's lexicographic order: the
    words of user ``u``'s pages that start with a given prefix are one run of the user's
    entries ``offsets[u]:offsets[u + 1]`` (words with a common prefix are neighbours in
    lexicographic order), found by binary search instead of reading all the user's words.

    Attributes:
        word_at: int64 ``(V,)`` the vocabulary's words in lexicographic order.
        rank: int64 ``(V,)`` every word's position in :attr:`word_at`.
        offsets: int64 ``(U + 1,)`` the entries of user ``u``.
        entry_rank: uint16 (int32 for more than 65,536 words) ``(E,)`` the rank of every
            entry's word, non-decreasing within a user (then by page).
        entry_page: int32 ``(E,)`` the page of every entry.
        work: int64 ``(2, N)`` scratch rows over the pages (:func:`_matching_block`; used
            under :attr:`lock`, touched once).
        lock: guards :attr:`work`.
        host_user: int64 ``(H,)`` the user of every host id (``-1``: an unused id).
    """

    word_at: np.ndarray
    rank: np.ndarray
    offsets: np.ndarray
    entry_rank: np.ndarray
    entry_page: np.ndarray
    work: np.ndarray
    lock: threading.Lock
    host_user: np.ndarray


def prefix_index(pages: Pages) -> PrefixIndex:
    """The :class:`PrefixIndex` of ``pages``, built on first use and kept with them."""
    index = pages.__dict__.get("_prefix_index")
    if index is None:
        index = _build_prefix_index(pages)
        pages.__dict__["_prefix_index"] = index  # like a cached_property of Pages
    return index


def _build_prefix_index(pages: Pages) -> PrefixIndex:
    """Sorts the words of every user's pages by (user, lexicographic rank, page), over
    blocks of whole users of about :data:`_INDEX_BLOCK_PAGES` pages."""
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
    n_users = pages.n_users
    per_page = np.zeros(words.shape[0] + 1, dtype=np.int64)
    np.cumsum((words >= 0).sum(axis=1), out=per_page[1:])
    entry_offsets = per_page[offsets]  # the users' first entries
    per_user = np.diff(entry_offsets)
    entry_rank = np.empty(int(entry_offsets[-1]), dtype=rank_dtype)
    entry_page = np.empty(int(entry_offsets[-1]), dtype=np.int32)
    bounds = np.unique(
        np.searchsorted(offsets, np.arange(0, words.shape[0], _INDEX_BLOCK_PAGES), side="right") - 1
    )
    users = np.r_[bounds[(bounds >= 0) & (bounds < n_users)], n_users]
    for u_lo, u_hi in zip(users[:-1], users[1:], strict=True):
        lo, hi = int(offsets[u_lo]), int(offsets[u_hi])
        rows, cols = np.nonzero(words[lo:hi] >= 0)  # page, then column
        r = rank[words[lo + rows, cols]]
        local = np.repeat(np.arange(u_hi - u_lo, dtype=np.int64), per_user[u_lo:u_hi])
        order = np.argsort(local * n_words + r, kind="stable")  # then by page, column
        e_lo, e_hi = int(entry_offsets[u_lo]), int(entry_offsets[u_hi])
        entry_rank[e_lo:e_hi] = r[order]
        entry_page[e_lo:e_hi] = lo + rows[order]
    work = np.zeros((2, pages.n_pages), dtype=np.int64)
    host_user = np.full(int(pages.host.max(initial=-1)) + 1, -1, dtype=np.int64)
    host_user[pages.host] = pages.owner
    return PrefixIndex(
        word_at, rank, entry_offsets, entry_rank, entry_page, work, threading.Lock(), host_user
    )


def _origins(
    pages: Pages, state: UrlbarState, index: PrefixIndex
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Firefox's origins (``moz_origins``), over all host ids: ``host_known`` (a page of
    the host is in the history, or it holds a bookmark), ``origin`` (origin frecency: the
    sum of ``max(origin, 0)`` over the host's pages, 0 for unknown hosts) and
    ``qualified`` (autofill may complete to the host: its origin frecency reaches the
    user's threshold, the mean over the user's hosts with positive origin frecency, or it
    holds a bookmark)."""
    host = pages.host
    n_hosts = index.host_user.size
    if state.host_known is None:
        host_known = np.bincount(host[state.listable], minlength=n_hosts) > 0
        host_known |= state.host_bookmarked[:n_hosts]
    else:
        host_known = state.host_known[:n_hosts].copy()
    if state.scored is None:
        origin = np.bincount(host, weights=np.maximum(state.origin, 0.0), minlength=n_hosts)
    else:  # the same sums: the other pages add 0
        at = state.scored
        origin = np.bincount(host[at], weights=np.maximum(state.origin[at], 0.0), minlength=n_hosts)
    origin[~host_known] = 0.0
    host_user = index.host_user
    valid = (host_user >= 0) & (origin > 0)
    sums = np.bincount(host_user[valid], weights=origin[valid], minlength=pages.n_users)
    counts = np.bincount(host_user[valid], minlength=pages.n_users)
    threshold = sums / np.maximum(counts, 1)
    # (no positive origin: the threshold is 0 and every host qualifies, as in Firefox)
    qualified = origin >= threshold[np.maximum(host_user, 0)]
    qualified |= state.host_bookmarked[:n_hosts]
    qualified &= host_known
    return host_known, origin, qualified


def _first_true(
    lo: np.ndarray, hi: np.ndarray, pred: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """Vectorized binary search: for every ``i``, the smallest ``k`` in ``lo[i]..hi[i]``
    with ``pred(i, k)`` true, ``hi[i]`` when none (``pred(i, .)`` false then true on
    ``lo[i]..hi[i] - 1``; ``pred`` gets the indices ``i`` still searching and one ``k``
    each)."""
    lo = np.array(lo, dtype=np.int64)
    hi = np.array(hi, dtype=np.int64)
    todo = np.flatnonzero(lo < hi)
    while todo.size:
        mid = (lo[todo] + hi[todo]) // 2
        ok = pred(todo, mid)
        hi[todo[ok]] = mid[ok]
        lo[todo[~ok]] = mid[~ok] + 1
        todo = todo[lo[todo] < hi[todo]]
    return lo


def _matching_pairs(
    pages: Pages,
    users: np.ndarray,
    typed: np.ndarray,
    lengths: np.ndarray,
    token_start: np.ndarray,
    state: UrlbarState,
    host_known: np.ndarray,
    look_from: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(search, page, drop)`` of the (search, page) pairs that may be rows once the user
    reads the list, at ``look_from`` characters typed or more: the pages that match
    ``look_from`` characters (at most the first token), with their *drop step*, the first
    number of typed characters at which the page stops matching (int64 max when it
    matches the whole text), which is above ``look_from``. Pages that match fewer
    characters can only be rows before the user reads. Computed over blocks of searches
    (:func:`_matching_block`)."""
    starts = range(0, users.size, _MATCH_BLOCK)
    parts = [
        _matching_block(
            pages, state, host_known,
            *(a[lo : lo + _MATCH_BLOCK] for a in (users, typed, lengths, token_start, look_from)),
        )
        for lo in starts
    ]  # fmt: skip
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return (
        np.concatenate([owner + lo for (owner, _, _), lo in zip(parts, starts, strict=True)]),
        np.concatenate([cand for _, cand, _ in parts]),
        np.concatenate([drop for _, _, drop in parts]),
    )


def _matching_block(
    pages: Pages,
    state: UrlbarState,
    host_known: np.ndarray,
    *searches: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_matching_pairs` of some searches. The first token typed to ``p = min(
    look_from, its length)`` characters matches the user's words that start with those
    ``p`` characters: a run of the user's entries in :func:`prefix_index` (every word of
    the run shares ``p`` or more characters with the token, so a page matching more has a
    word in it); later tokens are compared with the surviving pages' words.
    ``searches``: their ``users, typed, lengths, token_start, look_from``."""
    users, typed, lengths, token_start, look_from = searches
    n = users.size
    vocab = pages.vocabulary
    index = prefix_index(pages)
    lcp = vocab.lcp_pairs
    first = typed[:, 0]
    p = np.minimum(look_from, lengths[:, 0])
    # the vocabulary's words that start with the first p characters: ranks lo..hi - 1
    r = index.rank[first]
    word_at = index.word_at
    lo_rank = _first_true(
        np.zeros(n, dtype=np.int64), r, lambda i, k: lcp(first[i], word_at[k]) >= p[i]
    )
    hi_rank = _first_true(
        r + 1, np.full(n, vocab.n_words), lambda i, k: lcp(first[i], word_at[k]) < p[i]
    )
    # and the user's entries with those words
    entry_rank = index.entry_rank
    u_lo, u_hi = index.offsets[users], index.offsets[users + 1]
    e_lo = _first_true(u_lo, u_hi, lambda i, k: entry_rank[k] >= lo_rank[i])
    e_hi = _first_true(e_lo, u_hi, lambda i, k: entry_rank[k] >= hi_rank[i])
    # searches by the user's occurrence among them, so that one round of searches holds
    # every page at most once (a page belongs to one user)
    by_user = np.argsort(users, kind="stable")
    sorted_users = users[by_user]
    group = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]]) if n else by_user
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[by_user] = np.arange(n) - np.repeat(group, np.diff(np.r_[group, n]))
    order = np.argsort(occurrence, kind="stable")
    count = (e_hi - e_lo)[order]
    at = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(
        e_lo[order] - (np.cumsum(count) - count), count
    )
    e_owner = np.repeat(order, count)
    e_round = np.repeat(occurrence[order], count)
    e_page = index.entry_page[at].astype(np.int64)
    # only pages in the history can be history rows; a root page can be the autofill row
    # of its origin once the origin is known
    keep = state.listable[e_page] | (pages.is_root[e_page] & host_known[pages.host[e_page]])
    e_owner, e_page, e_round = e_owner[keep], e_page[keep], e_round[keep]
    e_lcp = lcp(typed[e_owner, 0], word_at[entry_rank[at[keep]]])
    # one pair per (search, page) with the page's best common prefix, a round at a time
    rounds = np.searchsorted(e_round, np.arange(int(e_round.max(initial=-1)) + 2))
    pair = np.zeros(e_owner.size, dtype=bool)
    best_of = np.zeros(e_owner.size, dtype=np.int64)
    with index.lock:
        best, rep = index.work
        for a, b in zip(rounds[:-1], rounds[1:], strict=True):
            pg = e_page[a:b]
            best[pg] = 0
            np.maximum.at(best, pg, e_lcp[a:b])
            seq = np.arange(a, b, dtype=np.int64)
            rep[pg] = seq
            pair[a:b] = rep[pg] == seq
            best_of[a:b] = best[pg]
    owner, cand, best = e_owner[pair], e_page[pair], best_of[pair]
    drop = np.full(cand.size, np.iinfo(np.int64).max)
    fails = best < lengths[owner, 0]
    drop[fails] = best[fails] + 1  # the first token starts at character 0
    if typed.shape[1] > 1:  # the later tokens are compared once they are typed
        drop[~fails & (typed[owner, 1] >= 0)] = _PENDING
    keep = drop > np.maximum(look_from[owner], 1)
    return owner[keep], cand[keep], drop[keep]


#: :func:`_matching_block`'s drop step of a pair that matches the whole first token while
#: the search types more (:func:`_later_drop` tells once the second token starts).
_PENDING = np.iinfo(np.int64).max - 1


def _later_drop(
    pages: Pages,
    owner: np.ndarray,
    cand: np.ndarray,
    typed: np.ndarray,
    lengths: np.ndarray,
    token_start: np.ndarray,
) -> np.ndarray:
    """The drop steps of (search ``owner``, page ``cand``) pairs whose page matches the
    whole first token: the character at which a later token stops matching (int64 max
    when every token matches). A token is compared with the words that start like it."""
    vocab = pages.vocabulary
    drop = np.full(cand.size, np.iinfo(np.int64).max)
    alive = np.ones(cand.size, dtype=bool)
    for i in range(1, typed.shape[1]):
        pairs = np.flatnonzero(alive & (typed[owner, i] >= 0))
        if not pairs.size:
            break
        token = typed[owner[pairs], i]
        if vocab.n_words <= LCP_TABLE_MAX_WORDS:  # every word: a lookup in the lcp table
            best = vocab.lcp_pairs(token[:, None], pages.words[cand[pairs]]).max(axis=1)
        else:  # only the words that start like the token
            hit_pair, hit_col = np.nonzero(
                pages.first_chars(cand[pairs]) == vocab.chars[token, 0][:, None]
            )
            best = np.zeros(pairs.size, dtype=np.int64)
            if hit_pair.size:
                lcp_i = vocab.lcp_pairs(
                    token[hit_pair], pages.words[cand[pairs[hit_pair]], hit_col]
                )
                np.maximum.at(best, hit_pair, lcp_i)
        tl = lengths[owner[pairs], i]
        fails = best < tl
        drop[pairs[fails]] = token_start[owner[pairs[fails]], i] + best[fails] + 1
        alive[pairs[fails]] = False
    return drop


def _segment_argmax(keys: tuple[np.ndarray, ...], group: np.ndarray, n_groups: int) -> np.ndarray:
    """Index of the lexicographically largest ``keys`` (last key most significant, like
    ``np.lexsort``) in every group, ``-1`` for empty groups."""
    out = np.full(n_groups, -1, dtype=np.int64)
    if group.size == 0:
        return out
    order = np.lexsort((*keys, group))
    last = np.r_[group[order][1:] != group[order][:-1], True]
    out[group[order][last]] = order[last]
    return out


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
    """
    typing = typing or TypingModel()
    config = config or UrlbarConfig()
    users = np.asarray(users, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    typed = np.atleast_2d(np.asarray(typed, dtype=np.int64))
    n = users.size
    _check(pages, state, users, targets, typed)
    vocab = pages.vocabulary
    lengths = np.where(typed >= 0, vocab.lengths[np.maximum(typed, 0)], 0)
    n_tokens = (typed >= 0).sum(axis=1)
    total = lengths.sum(axis=1) + np.maximum(n_tokens - 1, 0)
    token_start = np.cumsum(lengths + 1, axis=1) - (lengths + 1)  # chars before token i
    first_len = lengths[:, 0]

    # Firefox's origins (moz_origins) and what autofill may complete to
    host = pages.host
    host_known, origin, qualified = _origins(pages, state, prefix_index(pages))
    blind = 1 + rng.poisson(typing.blind_chars, n)
    # the user reads the list from this character on: what the list holds before does not
    # matter, so only the pairs that still match then are compared
    look_from = np.minimum(blind, total)
    owner, cand, drop = _matching_pairs(
        pages, users, typed, lengths, token_start, state, host_known, look_from
    )
    lcp = vocab.lcp_pairs

    # autofill: the qualified roots whose host name the first token starts
    af_owner = af_cand = af_until = af_origin = np.zeros(0, dtype=np.int64)
    if config.autofill:
        af_pair = np.flatnonzero(pages.is_root[cand] & qualified[host[cand]])
        reach = lcp(typed[owner[af_pair], 0], pages.words[cand[af_pair], 0])
        af_until = np.minimum(reach, first_len[owner[af_pair]])
        usable = af_until >= look_from[owner[af_pair]]
        af_pair, af_until = af_pair[usable], af_until[usable]
        af_owner, af_cand = owner[af_pair], cand[af_pair]
        af_origin = origin[host[af_cand]]

    # the frecency rows: listable pages of non-zero stored frecency (only these pairs stay)
    stored = state.stored
    p_stored = stored[cand]
    keep = state.listable[cand] & (p_stored != 0)
    owner, cand, drop, p_stored = owner[keep], cand[keep], drop[keep], p_stored[keep]
    # what does not change while typing: is the pair's page the target, or ahead of it
    t_stored = stored[targets]
    p_target = cand == targets[owner]
    p_ahead = p_stored > t_stored[owner]
    p_ahead |= (p_stored == t_stored[owner]) & (cand > targets[owner])
    # pairs in the order their searches start reading: pairs [:enter[c]] read by c
    by_look = np.argsort(look_from[owner], kind="stable")
    owner, cand, drop = owner[by_look], cand[by_look], drop[by_look]
    p_target, p_ahead = p_target[by_look], p_ahead[by_look]
    enter = np.searchsorted(
        look_from[owner], np.arange(int(total.max(initial=0)) + 1), side="right"
    )

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
    a_len = inputs.length[a_row]
    a_reach = np.minimum(lcp(typed[a_search, 0], inputs.word[a_row]), a_len)
    a_reach = np.minimum(a_reach, first_len[a_search])
    usable = (a_reach >= look_from[a_search]) & state.listable[a_page]
    a_search, a_page, a_len, a_reach = (
        a_search[usable],
        a_page[usable],
        a_len[usable],
        a_reach[usable],
    )
    a_use = inputs.use_count[a_row[usable]]

    general = config.general_rows
    chars = total.copy()
    rank_out = np.full(n, -1, dtype=np.int64)
    found = np.zeros(n, dtype=bool)
    autofilled = np.zeros(n, dtype=bool)
    shown = np.full((n, config.history_rows), -1, dtype=np.int64)
    n_shown = np.zeros(n, dtype=np.int64)
    active = total >= 1

    pool = np.zeros(0, dtype=np.int64)  # pairs of reading searches, still matching
    entered = 0
    for c in range(1, int(total.max(initial=0)) + 1):
        live = active & (total >= c)
        if not live.any():
            break
        reading = live & (look_from <= c)
        if not reading.any():
            rng.random(n)  # this character's attention draw (nobody reads yet)
            continue
        pool = np.concatenate([pool, np.arange(entered, enter[c])])
        entered = int(enter[c])
        pending = pool[drop[pool] == _PENDING]
        due = pending[token_start[owner[pending], 1] <= c] if pending.size else pending
        if due.size:  # the second token starts: compare the later tokens
            drop[due] = _later_drop(pages, owner[due], cand[due], typed, lengths, token_start)
        pool = pool[(drop[pool] > c) & reading[owner[pool]]]
        idx = pool
        s_of = owner[idx]
        j = cand[idx]
        # autofill row: the qualified root with the highest origin frecency among those
        # whose host starts with the typed text
        af = np.flatnonzero((af_until >= c) & reading[af_owner])
        af_idx = _segment_argmax((af_cand[af], af_origin[af]), af_owner[af], n)
        af_page = np.full(n, -1, dtype=np.int64)
        af_page[af_idx >= 0] = af_cand[af[af_idx[af_idx >= 0]]]
        # adaptive rows (first word only), best rank per (search, page), top adaptive_rows
        # (Firefox: ROUND(MAX(use_count) * (1 + (input = typed)), 1) per visited or
        # bookmarked page, the exact flag from the row holding the max)
        sel = np.flatnonzero(reading[a_search] & (a_reach >= c))
        ad_s, ad_p, ad_u, ad_x = a_search[sel], a_page[sel], a_use[sel], a_len[sel] == c
        order = np.lexsort((-ad_u, ad_p, ad_s))
        ad_s, ad_p, ad_u, ad_x = ad_s[order], ad_p[order], ad_u[order], ad_x[order]
        firsts = np.r_[True, (ad_s[1:] != ad_s[:-1]) | (ad_p[1:] != ad_p[:-1])][: ad_s.size]
        ad_s, ad_p = ad_s[firsts], ad_p[firsts]
        ad_r = np.round(ad_u[firsts] * (1.0 + ad_x[firsts]), 1)
        keep = ad_p != af_page[ad_s]
        ad_s, ad_p, ad_r = ad_s[keep], ad_p[keep], ad_r[keep]
        order = np.lexsort((-stored[ad_p], -ad_r, ad_s))
        ad_s, ad_p, ad_r = ad_s[order], ad_p[order], ad_r[order]
        seg = np.flatnonzero(np.r_[True, ad_s[1:] != ad_s[:-1]]) if ad_s.size else np.zeros(0, int)
        pos = np.arange(ad_s.size) - np.repeat(seg, np.diff(np.r_[seg, ad_s.size]))
        top = pos < min(config.adaptive_rows, general)
        ad_s, ad_p, pos = ad_s[top], ad_p[top], pos[top]
        n_adaptive = np.bincount(ad_s, minlength=n)
        t_adaptive = np.full(n, -1, dtype=np.int64)
        hit = ad_p == targets[ad_s]
        t_adaptive[ad_s[hit]] = pos[hit]
        in_adaptive = np.zeros(idx.size, dtype=bool)
        if ad_s.size:
            key_pairs = s_of * (pages.n_pages + 1) + j
            key_ad = np.sort(ad_s * (pages.n_pages + 1) + ad_p)
            p = np.minimum(np.searchsorted(key_ad, key_pairs), key_ad.size - 1)
            in_adaptive = key_ad[p] == key_pairs
        # frecency rows ahead of the target
        matching = j != af_page[s_of]
        matching &= ~in_adaptive
        n_ahead = np.bincount(s_of[matching & p_ahead[idx]], minlength=n)
        t_listed = np.zeros(n, dtype=bool)
        t_listed[s_of[p_target[idx]]] = True
        has_af = af_page >= 0
        is_af = has_af & (af_page == targets)
        in_ad = t_adaptive >= 0
        room = general - n_adaptive
        rank = np.where(
            is_af, 0,
            np.where(in_ad, has_af + t_adaptive,
                     np.where(t_listed & (n_ahead < room), has_af + n_adaptive + n_ahead, -1)),
        )  # fmt: skip
        look = reading & (rank >= 0)
        u = rng.random(n)
        notice = look & ((c == total) | (u < typing.scan_continue ** np.maximum(rank, 0)))
        done = np.flatnonzero(notice)
        if done.size:
            chars[done] = c
            rank_out[done] = rank[done]
            found[done] = True
            autofilled[done] = is_af[done]
            rows = _rows_at(
                done, s_of, j, matching, stored, af_page, ad_s, ad_p, pos, n,
                config.history_rows,
            )  # fmt: skip
            shown[done] = rows
            n_shown[done] = (rows >= 0).sum(axis=1)
            active[done] = False
    in_first = chars <= first_len
    return SearchBatch(
        user=users,
        target=targets,
        chars_typed=chars,
        selected_rank=rank_out,
        shown=shown,
        n_shown=n_shown,
        found=found,
        autofilled=autofilled,
        first_word=typed[:, 0].copy(),
        first_chars=np.where(found & in_first, chars, 0),
    )


def _rows_at(
    done: np.ndarray,
    s_of: np.ndarray,
    j: np.ndarray,
    matching: np.ndarray,
    stored: np.ndarray,
    af_page: np.ndarray,
    ad_s: np.ndarray,
    ad_p: np.ndarray,
    ad_pos: np.ndarray,
    n: int,
    width: int,
) -> np.ndarray:
    """The history rows of the searches ``done`` now: autofill, the adaptive rows, then the
    frecency rows (frecency desc, id desc); ``width`` rows with an autofill row, one fewer
    without (the heuristic row is then of another style)."""
    mark = np.zeros(n, dtype=bool)
    mark[done] = True
    # category 0: autofill, 1: adaptive (by position), 2: frecency rows
    s_f = s_of[matching & mark[s_of]]
    p_f = j[matching & mark[s_of]]
    s_a = ad_s[mark[ad_s]]
    p_a = ad_p[mark[ad_s]]
    s_0 = done[af_page[done] >= 0]
    p_0 = af_page[s_0]
    all_s = np.concatenate([s_0, s_a, s_f])
    all_p = np.concatenate([p_0, p_a, p_f])
    group = all_s * 3  # the search, then the category
    group[s_0.size : s_0.size + s_a.size] += 1
    group[s_0.size + s_a.size :] += 2
    within = np.concatenate([
        np.zeros(s_0.size), ad_pos[mark[ad_s]].astype(np.float64), -stored[p_f],
    ])  # fmt: skip
    tie = np.concatenate([np.zeros(s_0.size + s_a.size, dtype=np.int64), -p_f])
    order = np.lexsort((tie, within, group))
    all_s, all_p = all_s[order], all_p[order]
    seg = np.flatnonzero(np.r_[True, all_s[1:] != all_s[:-1]]) if all_s.size else np.zeros(0, int)
    pos = np.arange(all_s.size) - np.repeat(seg, np.diff(np.r_[seg, all_s.size]))
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[done] = np.arange(done.size)
    out = np.full((done.size, width), -1, dtype=np.int64)
    keep = pos < width
    has_af = np.zeros(n, dtype=bool)
    has_af[s_0] = True
    keep &= pos < np.where(has_af[all_s], width, width - 1)
    out[row_of[all_s[keep]], pos[keep]] = all_p[keep]
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
    scored = state.scored
    if scored is not None and scored.size and (scored[0] < 0 or scored[-1] >= n):  # ascending
        raise DataFormatError(f"UrlbarState.scored must hold page ids in 0..{n - 1}")
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
