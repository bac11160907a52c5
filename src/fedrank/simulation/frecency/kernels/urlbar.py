"""The URL bar's compiled parts (numba, imported on first use), one search at a time
(the rules are :mod:`fedrank.simulation.frecency.urlbar`'s module docstring; Mozilla paper,
Sec. 4 and 6.2):

* :func:`word_entries`: every user's page words in lexicographic order (the word index);
* :func:`matching_pairs`: the (search, page) pairs that may become rows once the user
  reads the list, found by binary search in the user's run of the word index;
* :func:`origins`: Firefox's origins of the searching users' hosts;
* :func:`pair_rows`: what each (search, page) pair can be -- an autofill row, a frecency
  row -- and what does not change while typing;
* :func:`keystroke_loop`: every search typed character by character with those lists --
  the rows Firefox shows and whether the user picks the wanted page. A per-character pass
  over all searches in numpy spent most of its time building and sorting the same small
  lists again.

The passes read their arrays as named tuples (numba takes them as they are): the searches
(:class:`TypedSearches`), the pages (:class:`PageWords`), the word index
(:class:`WordIndex`), the profile's frecencies (:class:`Profile`), and the rows each search
can show (:class:`FrecencyRows`, :class:`AutofillRows`, :class:`AdaptiveRows`).

The user's attention is one uniform per search per character, drawn for all searches at
once as the numpy loop drew it (``rng.random(n)`` per character while any search is still
typing): :func:`keystroke_loop` reads them from a ``(characters, searches)`` table
(:class:`Reading`) and returns how many characters the loop ran, so the caller consumes
exactly that many draws.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

__all__ = [
    "AdaptiveRows",
    "AutofillRows",
    "FrecencyRows",
    "Outcome",
    "PageWords",
    "Pairs",
    "Profile",
    "Reading",
    "TypedSearches",
    "WordIndex",
    "keystroke_loop",
    "matching_pairs",
    "origins",
    "pair_rows",
    "word_entries",
]


class TypedSearches(NamedTuple):
    """What ``S`` searches type (int64; ``(S, T)`` arrays over the typed tokens).

    Attributes:
        users, targets: ``(S,)`` who searches, and the wanted page.
        typed: ``(S, T)`` the typed words (``-1`` padded); lengths: their lengths (0 for
            padding); token_start: ``(S, T)`` characters typed before each token.
        total: ``(S,)`` characters of the whole text.
        look_from: ``(S,)`` the character from which the user reads the list.
    """

    users: np.ndarray
    targets: np.ndarray
    typed: np.ndarray
    lengths: np.ndarray
    token_start: np.ndarray
    total: np.ndarray
    look_from: np.ndarray


class PageWords(NamedTuple):
    """The pages as the URL bar matches them.

    Attributes:
        words: ``(N, K)`` every page's words, the host's name first (``-1`` padded).
        chars: ``(V, L)`` the vocabulary's characters (0 padded).
        is_root: bool ``(N,)`` the host's root page; host: ``(N,)`` its host.
    """

    words: np.ndarray
    chars: np.ndarray
    is_root: np.ndarray
    host: np.ndarray


class WordIndex(NamedTuple):
    """The arrays of :class:`~fedrank.simulation.frecency.urlbar.PrefixIndex` (its
    attributes say what they hold)."""

    word_at: np.ndarray
    rank: np.ndarray
    offsets: np.ndarray
    entry_rank: np.ndarray
    entry_page: np.ndarray


class Profile(NamedTuple):
    """What the searches read of the profile: per page, ``stored`` frecency (float64) and
    ``listable`` (bool); per host, ``host_known``, ``qualified`` (bool) and ``origin``
    frecency (float64), as :func:`origins` gives them."""

    stored: np.ndarray
    listable: np.ndarray
    host_known: np.ndarray
    qualified: np.ndarray
    origin: np.ndarray


class Pairs(NamedTuple):
    """Every search's (search, page) pairs, ``ptr[s]:ptr[s + 1]``: the page and its drop
    step (:func:`matching_pairs`)."""

    ptr: np.ndarray
    page: np.ndarray
    drop: np.ndarray


class FrecencyRows(NamedTuple):
    """The frecency-row pairs of every search, ``ptr[s]:ptr[s + 1]``: page, drop step
    (``PENDING``: resolved when the second token starts; updated in place), ahead of the
    target in the frecency order (stored frecency desc, then page id desc), is the target,
    stored frecency."""

    ptr: np.ndarray
    page: np.ndarray
    drop: np.ndarray
    ahead: np.ndarray
    target: np.ndarray
    stored: np.ndarray


class AutofillRows(NamedTuple):
    """The autofill candidates of every search, ``ptr[s]:ptr[s + 1]``: root page,
    characters it matches, origin frecency."""

    ptr: np.ndarray
    page: np.ndarray
    until: np.ndarray
    origin: np.ndarray


class AdaptiveRows(NamedTuple):
    """The adaptive-history rows of every search in the order Firefox reads them,
    ``ptr[s]:ptr[s + 1]``: page, the characters it matches, the input's length,
    ``use_count``, ``rank[k, x]`` = ``ROUND(use_count * (1 + x), 1)``, the page's stored
    frecency."""

    ptr: np.ndarray
    page: np.ndarray
    reach: np.ndarray
    length: np.ndarray
    use: np.ndarray
    rank: np.ndarray
    stored: np.ndarray


class Reading(NamedTuple):
    """How the users read the list and what it holds.

    Attributes:
        uniforms: ``(C, S)`` ``uniforms[c - 1, s]``: the attention draw at character ``c``.
        notice_prob: ``notice_prob[r]``: the probability of reading down to row ``r``.
        general: the general rows; adaptive_cap: most adaptive rows among them.
        width: history rows with an autofill row (one fewer without).
    """

    uniforms: np.ndarray
    notice_prob: np.ndarray
    general: int
    adaptive_cap: int
    width: int


class Outcome(NamedTuple):
    """What :func:`keystroke_loop` writes per search: ``chars`` (preset to the whole
    text), ``rank`` (preset -1), ``found``, ``autofilled``, ``shown`` (``(S, R)``, preset
    -1)."""

    chars: np.ndarray
    rank: np.ndarray
    found: np.ndarray
    autofilled: np.ndarray
    shown: np.ndarray


#: Drop step of a pair that matches the whole first token while the search types more: the
#: later tokens are compared once the second one starts (:func:`_later_drop`).
PENDING = np.iinfo(np.int64).max - 1
_NEVER = np.iinfo(np.int64).max


@numba.njit(cache=True, nogil=True)
def _lcp(chars: np.ndarray, a: int, b: int) -> int:
    """Length of the longest common prefix of words ``a`` and ``b`` (0 if either is -1)."""
    if a < 0 or b < 0:
        return 0
    n = 0
    for k in range(chars.shape[1]):
        x = chars[a, k]
        if x == 0 or x != chars[b, k]:
            break
        n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _later_drop(
    s: int,
    page: int,
    typed: np.ndarray,
    lengths: np.ndarray,
    token_start: np.ndarray,
    words: np.ndarray,
    chars: np.ndarray,
) -> int:
    """The character at which a later token of search ``s`` stops matching ``page`` (a page
    matching the whole first token): token ``i`` typed to ``p`` characters matches when one
    of the page's words shares ``p`` or more characters with it; ``_NEVER`` when every
    token matches."""
    for i in range(1, typed.shape[1]):
        token = typed[s, i]
        if token < 0:
            break
        best = 0
        for w in range(words.shape[1]):
            common = _lcp(chars, token, words[page, w])
            if common > best:
                best = common
        if best < lengths[s, i]:
            return token_start[s, i] + best + 1
    return _NEVER


@numba.njit(cache=True, nogil=True)
def _better_adaptive(r_a: float, st_a: float, p_a: int, r_b: float, st_b: float, p_b: int) -> bool:
    """Adaptive rows' order: rank desc, then stored frecency desc, then page id asc."""
    if r_a != r_b:
        return r_a > r_b
    if st_a != st_b:
        return st_a > st_b
    return p_a < p_b


@numba.njit(cache=True, nogil=True)
def _holds(top: np.ndarray, n_top: int, page: int) -> bool:
    """``page`` is one of the first ``n_top`` entries of ``top``."""
    for q in range(n_top):  # noqa: SIM110 (numba compiles no generator in any())
        if top[q] == page:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def keystroke_loop(
    searches: TypedSearches,
    pages: PageWords,
    frecency: FrecencyRows,
    autofill: AutofillRows,
    adaptive: AdaptiveRows,
    reading: Reading,
    out: Outcome,
) -> int:
    """Type every search until the user picks the target or the text is complete, with
    the rows it can show (``frecency``, ``autofill``, ``adaptive``) and how the user reads
    them (``reading``); writes ``out``; returns the number of characters the loop ran (the
    rows of ``reading.uniforms`` consumed)."""
    total, look_from, targets = searches.total, searches.look_from, searches.targets
    typed, lengths, token_start = searches.typed, searches.lengths, searches.token_start
    words, chars = pages.words, pages.chars
    p_ptr, p_cand, p_drop, p_ahead, p_target, p_stored = frecency
    af_ptr, af_cand, af_until, af_origin = autofill
    ad_ptr, ad_page, ad_reach, ad_len, ad_use, ad_rank, ad_stored = adaptive
    uniforms, notice_prob, general, adaptive_cap, width = reading
    chars_out, rank_out, found, autofilled, shown = out
    n = total.size
    most_adaptive = 0
    for s in range(n):
        most_adaptive = max(most_adaptive, ad_ptr[s + 1] - ad_ptr[s])
    seen_page = np.empty(most_adaptive, np.int64)  # the distinct adaptive pages now
    seen_use = np.empty(most_adaptive, np.float64)
    seen_rank = np.empty(most_adaptive, np.float64)
    seen_stored = np.empty(most_adaptive, np.float64)
    top = np.empty(max(adaptive_cap, 1), np.int64)  # the adaptive rows shown, in order
    top_rank = np.empty(max(adaptive_cap, 1), np.float64)
    top_stored = np.empty(max(adaptive_cap, 1), np.float64)
    row_pair = np.empty(shown.shape[1], np.int64)  # the pair of every frecency row shown
    ran = 0
    for s in range(n):
        end = total[s]
        target = targets[s]
        for c in range(max(look_from[s], 1), total[s] + 1):
            # autofill: the candidate with the highest origin frecency, then page id
            af_page = -1
            af_best = 0.0
            for k in range(af_ptr[s], af_ptr[s + 1]):
                if af_until[k] >= c and (
                    af_page < 0
                    or af_origin[k] > af_best
                    or (af_origin[k] == af_best and af_cand[k] > af_page)
                ):
                    af_page = af_cand[k]
                    af_best = af_origin[k]
            # adaptive rows: per page its row of highest use_count (the first on ties),
            # ranked by ROUND(use_count * (1 + exact), 1), then stored frecency, page id
            m = 0
            for k in range(ad_ptr[s], ad_ptr[s + 1]):
                if ad_reach[k] < c:
                    continue
                q = 0
                while q < m and seen_page[q] != ad_page[k]:
                    q += 1
                exact = 1 if ad_len[k] == c else 0
                if q == m:
                    seen_page[m] = ad_page[k]
                    seen_stored[m] = ad_stored[k]
                    m += 1
                elif not ad_use[k] > seen_use[q]:
                    continue
                seen_use[q] = ad_use[k]
                seen_rank[q] = ad_rank[k, exact]
            n_top = 0
            for q in range(m):
                if seen_page[q] == af_page:
                    continue
                pos = n_top
                while pos > 0 and _better_adaptive(
                    seen_rank[q], seen_stored[q], seen_page[q],
                    top_rank[pos - 1], top_stored[pos - 1], top[pos - 1],
                ):  # fmt: skip
                    pos -= 1
                if pos >= adaptive_cap:
                    continue
                last = min(n_top, adaptive_cap - 1)
                for z in range(last, pos, -1):
                    top[z] = top[z - 1]
                    top_rank[z] = top_rank[z - 1]
                    top_stored[z] = top_stored[z - 1]
                top[pos] = seen_page[q]
                top_rank[pos] = seen_rank[q]
                top_stored[pos] = seen_stored[q]
                n_top = min(n_top + 1, adaptive_cap)
            t_adaptive = -1
            for q in range(n_top):
                if top[q] == target:
                    t_adaptive = q
            # frecency rows: the pairs still matching, not autofill or adaptive rows
            n_ahead = 0
            t_listed = False
            for k in range(p_ptr[s], p_ptr[s + 1]):
                drop = p_drop[k]
                if drop == PENDING and token_start[s, 1] <= c:
                    drop = _later_drop(s, p_cand[k], typed, lengths, token_start, words, chars)
                    p_drop[k] = drop
                if drop <= c:
                    continue
                if p_target[k]:
                    t_listed = True
                page = p_cand[k]
                if page == af_page or _holds(top, n_top, page):
                    continue
                if p_ahead[k]:
                    n_ahead += 1
            has_af = 1 if af_page >= 0 else 0
            is_af = has_af == 1 and af_page == target
            if is_af:
                rank = 0
            elif t_adaptive >= 0:
                rank = has_af + t_adaptive
            elif t_listed and n_ahead < general - n_top:
                rank = has_af + n_top + n_ahead
            else:
                continue
            if c != total[s] and not uniforms[c - 1, s] < notice_prob[rank]:
                continue
            end = c
            chars_out[s] = c
            rank_out[s] = rank
            found[s] = True
            autofilled[s] = is_af
            rows = width if has_af else width - 1
            r = 0
            if has_af:
                shown[s, 0] = af_page
                r = 1
            for q in range(n_top):
                if r < rows:
                    shown[s, r] = top[q]
                    r += 1
            # then the frecency rows: the best by stored frecency desc, then page id desc
            first = r
            for k in range(p_ptr[s], p_ptr[s + 1]):
                page = p_cand[k]
                if p_drop[k] <= c or page == af_page or _holds(top, n_top, page):
                    continue
                pos = r
                while pos > first and (
                    p_stored[k] > p_stored[row_pair[pos - 1]]
                    or (p_stored[k] == p_stored[row_pair[pos - 1]] and page > shown[s, pos - 1])
                ):
                    pos -= 1
                if pos >= rows:
                    continue
                for z in range(min(r, rows - 1), pos, -1):
                    shown[s, z] = shown[s, z - 1]
                    row_pair[z] = row_pair[z - 1]
                shown[s, pos] = page
                row_pair[pos] = k
                r = min(r + 1, rows)
            break
        ran = max(ran, end)
    return ran


@numba.njit(cache=True, nogil=True)
def _first_at_least(values: np.ndarray, lo: int, hi: int, bound: int) -> int:
    """The first ``k`` in ``lo..hi - 1`` with ``values[k] >= bound`` (non-decreasing
    ``values``), ``hi`` when none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] >= bound:
            hi = mid
        else:
            lo = mid + 1
    return lo


@numba.njit(cache=True, nogil=True)
def _first_sharing(
    chars: np.ndarray, token: int, word_at: np.ndarray, lo: int, hi: int, p: int, sharing: bool
) -> int:
    """The first ``k`` in ``lo..hi - 1`` where ``word_at[k]`` shares ``p`` or more
    characters with ``token`` (``sharing``) or fewer (not ``sharing``), ``hi`` when none
    (the answer changes once over the range)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if (_lcp(chars, token, word_at[mid]) >= p) == sharing:
            hi = mid
        else:
            lo = mid + 1
    return lo


@numba.njit(cache=True, nogil=True)
def matching_pairs(
    searches: TypedSearches,
    pages: PageWords,
    index: WordIndex,
    profile: Profile,
    slot: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ptr, page, drop)`` (:class:`Pairs`): every search's (search, page) pairs of
    :func:`fedrank.simulation.frecency.urlbar._matching_pairs`. The first token typed to
    ``p = min(look_from, its length)`` characters matches the user's words that start with
    those ``p`` characters: the vocabulary's words ``word_at[lo:hi]`` (lexicographic order
    puts them next to the token), and the user's entries of the word ``index`` with those
    ranks, one run found by binary search. A page's drop step is one more than the longest
    prefix of the first token its words share (``PENDING`` when it shares the whole token
    and more tokens follow; int64 max when it is the only one); pages whose drop step is
    not above ``max(look_from, 1)`` are left out. Only pages in the history can be history
    rows (``profile.listable``); a root page can be the autofill row of its origin once the
    origin is known (``profile.host_known``). ``slot``: int64 scratch per page, all -1
    (restored on return)."""
    users, typed, lengths, look_from = (
        searches.users, searches.typed, searches.lengths, searches.look_from
    )  # fmt: skip
    chars, is_root, host = pages.chars, pages.is_root, pages.host
    word_at, rank, offsets, entry_rank, entry_page = index
    listable, host_known = profile.listable, profile.host_known
    n = users.size
    n_words = word_at.size
    run_lo = np.empty(n, np.int64)
    run_hi = np.empty(n, np.int64)
    total = 0
    for s in range(n):
        first = typed[s, 0]
        p = min(look_from[s], lengths[s, 0])
        r = rank[first]
        # the vocabulary's words that share p characters with the token: ranks lo..hi - 1
        # (words in lexicographic order share more with the token the nearer they are)
        lo_rank = _first_sharing(chars, first, word_at, 0, r, p, True)
        hi_rank = _first_sharing(chars, first, word_at, r + 1, n_words, p, False)
        u = users[s]
        run_lo[s] = _first_at_least(entry_rank, offsets[u], offsets[u + 1], lo_rank)
        run_hi[s] = _first_at_least(entry_rank, run_lo[s], offsets[u + 1], hi_rank)
        total += run_hi[s] - run_lo[s]
    ptr = np.zeros(n + 1, np.int64)
    page_out = np.empty(total, np.int64)
    drop_out = np.empty(total, np.int64)
    m = 0
    for s in range(n):
        first = typed[s, 0]
        start = m
        for e in range(run_lo[s], run_hi[s]):
            page = entry_page[e]
            if not (listable[page] or (is_root[page] and host_known[host[page]])):
                continue
            common = _lcp(chars, first, word_at[entry_rank[e]])
            at = slot[page]
            if at < 0:
                slot[page] = m
                page_out[m] = page
                drop_out[m] = common  # the best common prefix so far
                m += 1
            elif common > drop_out[at]:
                drop_out[at] = common
        kept = start
        floor = max(look_from[s], 1)
        for k in range(start, m):
            slot[page_out[k]] = -1
            best = drop_out[k]
            if best < lengths[s, 0]:
                drop = best + 1  # the first token starts at character 0
            elif typed.shape[1] > 1 and typed[s, 1] >= 0:
                drop = PENDING
            else:
                drop = _NEVER
            if drop > floor:
                page_out[kept] = page_out[k]
                drop_out[kept] = drop
                kept += 1
        m = kept
        ptr[s + 1] = m
    return ptr, page_out[:m], drop_out[:m]


@numba.njit(cache=True, nogil=True)
def origins(
    users: np.ndarray,
    user_offsets: np.ndarray,
    host: np.ndarray,
    page_origin: np.ndarray,
    listable: np.ndarray,
    host_bookmarked: np.ndarray,
    host_known: np.ndarray,
    n_hosts: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Firefox's origins (``moz_origins``) of the hosts of ``users`` (distinct), over all
    host ids (other hosts: False, 0, False): ``known`` (``host_known``, or when it is empty
    a page of the host is listable or the host holds a bookmark), ``origin`` (origin
    frecency: the sum of ``max(page_origin, 0)`` over the host's pages in page order, 0
    for unknown hosts) and ``qualified`` (autofill may complete to the host: its origin
    frecency reaches the user's threshold -- the mean over the user's hosts with positive
    origin frecency, summed in host order -- or it holds a bookmark; known hosts only).
    Hosts are never shared between users."""
    given = host_known.size > 0
    known = np.zeros(n_hosts, np.bool_)
    origin = np.zeros(n_hosts, np.float64)
    qualified = np.zeros(n_hosts, np.bool_)
    seen = np.zeros(n_hosts, np.bool_)
    most = 0
    for u in users:
        most = max(most, user_offsets[u + 1] - user_offsets[u])
    hosts = np.empty(most, np.int64)
    for u in users:
        m = 0
        for p in range(user_offsets[u], user_offsets[u + 1]):
            h = host[p]
            if not seen[h]:
                seen[h] = True
                hosts[m] = h
                m += 1
            if page_origin[p] > 0.0:
                origin[h] += page_origin[p]
            if not given and listable[p]:
                known[h] = True
        mine = np.sort(hosts[:m])
        total = 0.0
        count = 0
        for h in mine:
            seen[h] = False
            known[h] = host_known[h] if given else known[h] or host_bookmarked[h]
            if not known[h]:
                origin[h] = 0.0
            elif origin[h] > 0.0:
                total += origin[h]
                count += 1
        threshold = total / max(count, 1)
        for h in mine:
            qualified[h] = known[h] and (origin[h] >= threshold or host_bookmarked[h])
    return known, origin, qualified


@numba.njit(cache=True, nogil=True)
def pair_rows(
    pairs: Pairs, searches: TypedSearches, pages: PageWords, profile: Profile, autofill: bool
) -> tuple[np.ndarray, ...]:
    """The rows the ``pairs`` of :func:`matching_pairs` can be, in pair order. Autofill
    (when ``autofill``): the pairs whose page is a root of a qualified host and whose
    host's name the first typed word reaches at least to ``look_from``, as ``(owner, page,
    until, origin)``: the search, the page, the characters up to which the first token
    stays a prefix of the host's name (at most the first word's length), the host's origin
    frecency. Frecency rows: the pairs whose page is listable with a stored frecency other
    than 0, as ``(owner, page, drop, stored, is_target, ahead)``: ahead of the search's
    target in the history rows' order (stored frecency descending, then page id
    descending)."""
    ptr, cand, drop = pairs
    typed, lengths = searches.typed, searches.lengths
    look_from, targets = searches.look_from, searches.targets
    words, chars, is_root, host = pages
    stored, listable = profile.stored, profile.listable
    qualified, origin = profile.qualified, profile.origin
    m = cand.size
    af_owner = np.empty(m, np.int64)
    af_cand = np.empty(m, np.int64)
    af_until = np.empty(m, np.int64)
    af_origin = np.empty(m, np.float64)
    owner = np.empty(m, np.int64)
    page_out = np.empty(m, np.int64)
    drop_out = np.empty(m, np.int64)
    p_stored = np.empty(m, np.float64)
    p_target = np.empty(m, np.bool_)
    p_ahead = np.empty(m, np.bool_)
    n_af = 0
    n_rows = 0
    for s in range(ptr.size - 1):
        target = targets[s]
        t_stored = stored[target]
        for k in range(ptr[s], ptr[s + 1]):
            page = cand[k]
            if autofill and is_root[page] and qualified[host[page]]:
                until = min(_lcp(chars, typed[s, 0], words[page, 0]), lengths[s, 0])
                if until >= look_from[s]:
                    af_owner[n_af] = s
                    af_cand[n_af] = page
                    af_until[n_af] = until
                    af_origin[n_af] = origin[host[page]]
                    n_af += 1
            value = stored[page]
            if listable[page] and value != 0:
                owner[n_rows] = s
                page_out[n_rows] = page
                drop_out[n_rows] = drop[k]
                p_stored[n_rows] = value
                p_target[n_rows] = page == target
                p_ahead[n_rows] = value > t_stored or (value == t_stored and page > target)
                n_rows += 1
    return (
        af_owner[:n_af].copy(), af_cand[:n_af].copy(), af_until[:n_af].copy(),
        af_origin[:n_af].copy(), owner[:n_rows].copy(), page_out[:n_rows].copy(),
        drop_out[:n_rows].copy(), p_stored[:n_rows].copy(), p_target[:n_rows].copy(),
        p_ahead[:n_rows].copy(),
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def word_entries(
    words: np.ndarray,
    offsets: np.ndarray,
    rank: np.ndarray,
    entry_offsets: np.ndarray,
    entry_rank: np.ndarray,
    entry_page: np.ndarray,
) -> None:
    """Fill the word index: user ``u``'s entries ``entry_offsets[u]:entry_offsets[u + 1]``
    are the words of its pages ``offsets[u]:offsets[u + 1]`` (``words``, -1 padded), as
    ``(rank[word], page)``, sorted by rank, then page, then column (a counting sort by
    rank over the pages in order)."""
    count = np.zeros(rank.size, np.int64)  # per rank: the user's entries (0 between users)
    cursor = np.empty(rank.size, np.int64)  # per rank: where its next entry goes
    for u in range(offsets.size - 1):
        for page in range(offsets[u], offsets[u + 1]):
            for column in range(words.shape[1]):
                if words[page, column] >= 0:
                    count[rank[words[page, column]]] += 1
        at = entry_offsets[u]
        for r in range(rank.size):
            cursor[r] = at
            at += count[r]
            count[r] = 0
        for page in range(offsets[u], offsets[u + 1]):
            for column in range(words.shape[1]):
                word = words[page, column]
                if word >= 0:
                    r = rank[word]
                    entry_rank[cursor[r]] = r
                    entry_page[cursor[r]] = page
                    cursor[r] += 1
