"""The Firefox URL bar, simulated for many searches at once (paper Sec. 4 and 6.2).

Searching history in the URL bar is a two-step process (paper Sec. 4): (1) the typed text
is *matched* against the history, a binary decision; (2) the matched pages are *ranked* by
frecency and the top ``k`` are suggested. The study measures how many characters users
type and which rank they select (paper Sec. 6.2). This module simulates both steps:

Typing
    The user wants a target page and types its title character by character: the words
    joined by single spaces (starting with the word ``first_slot`` names, if given, then the
    others in title order). Every character counts, spaces included.

Matching (binary, at word boundaries, like Firefox)
    The typed text is split into tokens at spaces. A page matches when *every* token is a
    prefix of some word of its title: a finished token must be a prefix of some title word
    (typing a whole word also matches longer words it begins), and so must the part of the
    token being typed. Only the user's own pages are candidates. With ``vocabulary.lcp``,
    token ``i`` with ``p`` characters typed matches page ``j`` iff
    ``M[j, i] = max_{u in title(j)} lcp[target_word_i, u] >= p``. A typed space changes no
    token, so it changes no match.

Ranking
    After every character the matched pages are sorted by ``model_scores`` descending
    (ties: lower global page id first) and the first ``k`` are shown.

Attention model (when the user selects)
    After every keystroke the user scans the first ``attention_depth`` suggestions
    (default: all ``k`` shown) and selects the target as soon as it is among them. If even
    the full title never brings it that high (rare: at least ``attention_depth`` better
    scored pages carry every word of the target's title), the search ends unsuccessful
    with the full title typed (``found`` is False) and must not be used for learning.

Vectorization
    Adding characters only removes matches, so each candidate has a *drop step*: the first
    character count at which it no longer matches (``M[j, i] + 1`` characters into the
    first token ``i`` it fails, or never). The target's rank after ``c`` characters is the
    number of outranking candidates whose drop step exceeds ``c``; it first falls below the
    attention depth at ``c* = max(1, D_A)`` where ``D_A`` is the ``A``-th largest drop step
    among the outranking candidates. Everything runs on the flattened (search, candidate)
    pairs with one sort; no Python loop over searches, pages or characters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.data.synthetic_history import Population
from fedrank.errors import ConfigError, DataFormatError


@dataclass(frozen=True)
class SearchBatch:
    """The outcome of ``S`` simulated URL bar searches (paper Sec. 6.2 metrics).

    Attributes:
        user: int64 ``(S,)``: who searched.
        target: int64 ``(S,)``: global id of the page the user wanted.
        chars_typed: int64 ``(S,)``: characters typed when the target was selected (>= 1;
            the full title length when it was never found).
        selected_rank: int64 ``(S,)``: 0-based rank of the target in the suggestions at that
            moment (its rank among all matches, possibly >= k, when not found).
        shown: int64 ``(S, k)``: the suggestions at that moment, best first (global page
            ids), padded with -1.
        n_shown: int64 ``(S,)``: number of suggestions shown (``min(k, matches)``).
        found: bool ``(S,)``: the user found the target within the attention depth. When
            False the search has no valid selection and must be excluded from learning.
    """

    user: np.ndarray
    target: np.ndarray
    chars_typed: np.ndarray
    selected_rank: np.ndarray
    shown: np.ndarray
    n_shown: np.ndarray
    found: np.ndarray

    def __post_init__(self) -> None:
        s = self.user.shape
        for name in ("target", "chars_typed", "selected_rank", "n_shown", "found"):
            if getattr(self, name).shape != s:
                raise DataFormatError(
                    f"SearchBatch.{name} has shape {getattr(self, name).shape}, expected {s}"
                )
        if self.shown.ndim != 2 or self.shown.shape[0] != s[0]:
            raise DataFormatError(
                f"SearchBatch.shown has shape {self.shown.shape}, expected (S, k)"
            )

    @property
    def n_searches(self) -> int:
        return int(self.user.size)

    @property
    def k(self) -> int:
        return int(self.shown.shape[1])

    def __len__(self) -> int:
        return self.n_searches


def simulate_searches(
    population: Population,
    users: np.ndarray,
    targets: np.ndarray,
    model_scores: np.ndarray,
    *,
    k: int = 10,
    attention_depth: int | None = None,
    first_slot: np.ndarray | None = None,
) -> SearchBatch:
    """Simulate one URL bar search per entry of ``users`` (paper Sec. 4, 6.2).

    Args:
        population: the users' histories and page titles.
        users: int ``(S,)``: who searches.
        targets: int ``(S,)``: the global id of the wanted page (a page of that user).
        model_scores: float64 ``(N,)``: the ranking model's score of every page (its
            owner's URL bar sorts matches by it).
        k: number of suggestions shown.
        attention_depth: how many of the top suggestions the user scans after every
            keystroke (``1..k``; default ``k``).
        first_slot: int ``(S,)``, optional: which word of the target's title the user types
            first (the others follow in title order); default: the title in order.

    Returns:
        The :class:`SearchBatch` (see the module docstring for the typing, matching and
        attention model).
    """
    users = population.check_users(users)
    targets = np.asarray(targets)
    if targets.shape != users.shape or not (
        targets.size == 0 or np.issubdtype(targets.dtype, np.integer)
    ):
        raise DataFormatError(
            f"targets must be integers shaped like users {users.shape}, got "
            f"{targets.dtype} {targets.shape}"
        )
    targets = targets.astype(np.int64, copy=False)
    if targets.size and (targets.min() < 0 or targets.max() >= population.n_pages):
        raise DataFormatError(f"targets hold page ids outside 0..{population.n_pages - 1}")
    if not np.array_equal(population.page_user[targets], users):
        bad = int(np.flatnonzero(population.page_user[targets] != users)[0])
        raise DataFormatError(
            f"search {bad}: target page {targets[bad]} belongs to user "
            f"{population.page_user[targets[bad]]}, not to the searching user {users[bad]}"
        )
    scores = np.asarray(model_scores, dtype=np.float64)
    if scores.shape != (population.n_pages,):
        raise DataFormatError(
            f"model_scores has shape {scores.shape}, expected ({population.n_pages},)"
        )
    if np.isnan(scores).any():
        raise DataFormatError("model_scores contains NaN; the URL bar cannot rank NaN")
    if int(k) != k or k < 1:
        raise ConfigError(f"k (suggestions shown) must be a positive integer, got {k}")
    k = int(k)
    depth = k if attention_depth is None else attention_depth
    if int(depth) != depth or not 1 <= depth <= k:
        raise ConfigError(f"attention_depth must be an integer in 1..k={k}, got {depth}")
    depth = int(depth)

    n_search = users.size
    if n_search == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SearchBatch(
            user=empty, target=empty, chars_typed=empty, selected_rank=empty,
            shown=np.zeros((0, k), dtype=np.int64), n_shown=empty,
            found=np.zeros(0, dtype=bool),
        )  # fmt: skip

    vocab = population.vocabulary
    row = vocab.n_words + 1
    lcp_flat = vocab.lcp_padded.reshape(-1)  # word -1 (padding) has lcp 0 with everything
    title_words = population.title_words

    # The typed string of every target: token i starts after offset[i] characters.
    target_words = title_words[targets].astype(np.int64)  # (S, W), -1 padding
    has_word = target_words >= 0
    n_tokens = has_word.sum(axis=1)
    if first_slot is not None:
        first_slot = np.asarray(first_slot)
        if first_slot.shape != targets.shape or not np.issubdtype(first_slot.dtype, np.integer):
            raise DataFormatError(
                f"first_slot must be integers shaped like targets {targets.shape}, got "
                f"{first_slot.dtype} {first_slot.shape}"
            )
        if first_slot.size and ((first_slot < 0) | (first_slot >= n_tokens)).any():
            raise DataFormatError("first_slot points past the end of a target's title")
        # Move the first-typed word to the front; the rest keep their order.
        slot = np.arange(target_words.shape[1])[None, :]
        chosen = first_slot[:, None]
        order = np.where(slot == 0, chosen, np.where(slot <= chosen, slot - 1, slot))
        target_words = np.take_along_axis(target_words, order, axis=1)
    word_len = np.where(has_word, vocab.lengths[np.maximum(target_words, 0)], 0)
    offset = np.cumsum(word_len + 1, axis=1) - (word_len + 1)
    title_len = word_len.sum(axis=1) + n_tokens - 1
    never = int(title_len.max()) + 1  # drop step of candidates that always match

    # Drop step of every (search, candidate) pair, token by token over the survivors.
    flat = population.pages_of_users(users)
    owner, page = flat.owner, flat.page
    drop = np.full(page.size, never, dtype=np.int64)
    alive = np.arange(page.size)
    for i in range(target_words.shape[1]):
        alive = alive[n_tokens[owner[alive]] > i]
        if alive.size == 0:
            break
        who = owner[alive]
        base = target_words[who, i] * row
        cand = page[alive]
        best = lcp_flat[base + title_words[cand, 0]]
        for slot in range(1, title_words.shape[1]):
            np.maximum(best, lcp_flat[base + title_words[cand, slot]], out=best)
        fails = best < word_len[who, i]
        failed = alive[fails]
        drop[failed] = offset[who[fails], i] + best[fails] + 1
        alive = alive[~fails]

    # Outranking candidates that match after the first character decide the rank.
    cand_score = scores[page]
    target_score = scores[targets][owner]
    outranks = (cand_score > target_score) | (
        (cand_score == target_score) & (page < targets[owner])
    )
    rel = np.flatnonzero(outranks & (drop > 1))
    rel_owner = owner[rel]
    rel_drop = drop[rel]
    n_rel = np.bincount(rel_owner, minlength=n_search)
    # The depth-th largest drop step per search: sort by (owner, drop descending).
    order = np.argsort(rel_owner * (never + 1) + (never - rel_drop))
    sorted_drop = rel_drop[order]
    rel_start = np.cumsum(n_rel) - n_rel
    enough = n_rel >= depth
    kth = np.zeros(n_search, dtype=np.int64)
    kth[enough] = sorted_drop[rel_start[enough] + depth - 1]
    found = kth < never
    chars = np.where(found, np.maximum(kth, 1), title_len)
    rank = np.bincount(rel_owner, weights=rel_drop > chars[rel_owner], minlength=n_search)
    rank = rank.astype(np.int64)

    # Suggestions at that moment: the matched candidates, best first, top k.
    matched = np.flatnonzero(drop > chars[owner])
    m_owner = owner[matched]
    # Sort by (owner, score descending); the sort is stable and candidates are listed in
    # ascending page id, so ties go to the lower page id. ``matched`` is already grouped by
    # owner, which the stable (run-detecting) sort exploits.
    # Complex numbers sort lexicographically by (real, imag).
    key = np.empty(matched.size, dtype=np.complex128)
    key.real = m_owner
    key.imag = -cand_score[matched]
    m_order = np.argsort(key, kind="stable")
    m_owner = m_owner[m_order]
    m_page = page[matched][m_order]
    n_matched = np.bincount(m_owner, minlength=n_search)
    m_pos = np.arange(m_owner.size) - (np.cumsum(n_matched) - n_matched)[m_owner]
    top = m_pos < k
    shown = np.full((n_search, k), -1, dtype=np.int64)
    shown[m_owner[top], m_pos[top]] = m_page[top]

    return SearchBatch(
        user=users,
        target=targets,
        chars_typed=chars.astype(np.int64),
        selected_rank=rank,
        shown=shown,
        n_shown=np.minimum(n_matched, k).astype(np.int64),
        found=found,
    )


__all__ = ["SearchBatch", "simulate_searches"]
