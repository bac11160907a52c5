"""URL bar simulation (paper Sec. 4, 6.2; Firefox 62-68): autofill of origins, adaptive
history, frecency rows, the general-rows cap and the typing model, against hand-written
lists and a slow, string-based reference written from the module's rules."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.data.browsing import Pages, Vocabulary
from fedrank.errors import DataFormatError
from fedrank.simulation.frecency.input_history import InputHistory
from fedrank.simulation.frecency.urlbar import (
    SearchBatch,
    TypingModel,
    UrlbarConfig,
    UrlbarState,
    simulate_searches,
)

#: The user selects at the first character where the target is shown at all.
EAGER = TypingModel(blind_chars=0.0, scan_continue=1.0)
#: The user selects the target only as the top row, or at the last character if shown.
TOP_ONLY = TypingModel(blind_chars=0.0, scan_continue=0.0)
#: The user looks only once the whole text is typed (1 + Poisson(1000) is never below the
#: few dozen characters typed here), and then reads every row: ``shown`` is the final list.
LOOK_AT_END = TypingModel(blind_chars=1000.0, scan_continue=0.0)


# ------------------------------------------------------------------ building worlds


def _pages(words: list[str], rows: list[tuple[int, int, bool, str]]) -> Pages:
    """Pages from ``(user, host, is_root, "hostname other words")`` rows (users in order)."""
    vocab = Vocabulary.from_words(words)
    index = {w: i for i, w in enumerate(words)}
    users = [r[0] for r in rows]
    assert users == sorted(users)
    n_users = max(users) + 1
    page_words = [[index[w] for w in r[3].split()] for r in rows]
    width = max(len(p) for p in page_words)
    table = np.full((len(rows), width), -1, dtype=np.int32)
    for i, ids in enumerate(page_words):
        table[i, : len(ids)] = ids
    return Pages(
        user_offsets=np.concatenate([[0], np.cumsum(np.bincount(users, minlength=n_users))]),
        host=np.array([r[1] for r in rows], dtype=np.int64),
        is_root=np.array([r[2] for r in rows], dtype=bool),
        words=table,
        n_url_words=np.ones(len(rows), dtype=np.int64),
        vocabulary=vocab,
    )


def _state(
    pages: Pages,
    stored,
    origin=None,
    listable=None,
    bookmarked_hosts=(),
    inputs: list[tuple[int, str, int, float]] = (),
) -> UrlbarState:
    """A state; ``inputs`` are ``(page, word, length, use_count)`` adaptive-history rows."""
    n = pages.n_pages
    stored = np.asarray(stored, dtype=np.float64)
    host_bookmarked = np.zeros(int(pages.host.max()) + 1, dtype=bool)
    host_bookmarked[list(bookmarked_hosts)] = True
    history = InputHistory(pages.vocabulary.n_words)
    if inputs:
        index = {w: i for i, w in enumerate(pages.vocabulary.words)}
        history.record(
            np.array([r[0] for r in inputs]),
            np.array([index[r[1]] for r in inputs]),
            np.array([r[2] for r in inputs]),
        )
        use = {(r[0], index[r[1]], r[2]): r[3] for r in inputs}
        history.use_count = np.array(
            [use[key] for key in zip(history.page, history.word, history.length, strict=True)]
        )
    return UrlbarState(
        stored=stored,
        origin=stored.copy() if origin is None else np.asarray(origin, dtype=np.float64),
        listable=np.ones(n, dtype=bool) if listable is None else np.asarray(listable, bool),
        host_bookmarked=host_bookmarked,
        inputs=history,
    )


def _typed(pages: Pages, *words: str) -> np.ndarray:
    index = {w: i for i, w in enumerate(pages.vocabulary.words)}
    return np.array([[index[w] for w in words]], dtype=np.int64)


def _one(
    pages: Pages,
    state: UrlbarState,
    user: int,
    target: int,
    *words: str,
    typing: TypingModel = LOOK_AT_END,
    config: UrlbarConfig | None = None,
) -> SearchBatch:
    return simulate_searches(
        pages, state, np.array([user]), np.array([target]), _typed(pages, *words),
        np.random.default_rng(0), typing=typing, config=config,
    )  # fmt: skip


def _shown(batch: SearchBatch, s: int = 0) -> list[int]:
    return [int(p) for p in batch.shown[s, : batch.n_shown[s]]]


# ------------------------------------------------------------------ the reference


class Outcome(NamedTuple):
    chars: int
    rank: int
    found: bool
    autofilled: bool
    shown: list[int]
    first_chars: int


def reference_lists(
    pages: Pages, state: UrlbarState, user: int, typed_row, config: UrlbarConfig
) -> tuple[str, list[tuple[int | None, list[int]]]]:
    """The typed text and, after every character ``c``, ``(autofill page or None, history
    rows)``, rebuilt from scratch with Python strings and sorts."""
    vocab = pages.vocabulary.words
    text = " ".join(vocab[w] for w in typed_row if w >= 0)
    own = range(int(pages.user_offsets[user]), int(pages.user_offsets[user + 1]))
    words_of = {p: [vocab[w] for w in pages.words[p] if w >= 0] for p in own}
    # origins: the sum of max(origin, 0) over a host's pages; the user's threshold is the
    # mean over the hosts with positive origin frecency, 0 when there is none (Firefox's
    # CASE count WHEN 0 THEN 0.0)
    # origins exist for hosts with a listable page or a bookmark (moz_origins)
    known = {int(pages.host[p]) for p in own if state.listable[p]}
    known |= {int(pages.host[p]) for p in own if state.host_bookmarked[int(pages.host[p])]}
    origin: dict[int, float] = {}
    for p in own:
        h = int(pages.host[p])
        if h in known:
            origin[h] = origin.get(h, 0.0) + max(float(state.origin[p]), 0.0)
    positive = [f for f in origin.values() if f > 0]
    mean = sum(positive) / len(positive) if positive else 0.0
    qualified = {h for h, f in origin.items() if f >= mean or bool(state.host_bookmarked[h])}
    roots = [p for p in own if pages.is_root[p] and int(pages.host[p]) in qualified]
    inputs = state.inputs
    input_rows = [
        (int(inputs.page[r]), vocab[inputs.word[r]][: inputs.length[r]], float(inputs.use_count[r]))
        for r in range(len(inputs))
        if int(inputs.page[r]) in own
    ]
    general = config.max_results - 1 - config.search_suggestions
    stored = state.stored
    lists = []
    for c in range(1, len(text) + 1):
        t = text[:c]
        one_token = " " not in t
        autofill = None
        if config.autofill and one_token:
            hits = [p for p in roots if words_of[p][0].startswith(t)]
            if hits:
                autofill = max(hits, key=lambda p: (origin[int(pages.host[p])], p))
        adaptive: list[int] = []
        if one_token:  # still typing the first word
            # SQL_ADAPTIVE_QUERY: per visited or bookmarked page, ROUND(MAX(use_count) *
            # (1 + (input = typed)), 1), the exact flag taken from the row holding the max
            top: dict[int, tuple[float, bool]] = {}
            for page, inp, use in input_rows:
                better = page not in top or use > top[page][0]
                if inp.startswith(t) and state.listable[page] and better:
                    top[page] = (use, inp == t)
            best = {p: round(u * (2 if exact else 1), 1) for p, (u, exact) in top.items()}
            # rank desc, then stored frecency desc; further ties (unspecified by the rules
            # and by Firefox's ORDER BY) by page id ascending
            ranked = sorted(
                (p for p in best if p != autofill), key=lambda p: (-best[p], -stored[p], p)
            )
            adaptive = ranked[: min(config.adaptive_rows, general)]
        tokens = t.split()
        frecency = [
            p for p in own
            if p != autofill and p not in adaptive and state.listable[p] and stored[p] != 0
            and all(any(w.startswith(tok) for w in words_of[p]) for tok in tokens)
        ]  # fmt: skip
        frecency.sort(key=lambda p: (-stored[p], -p))
        rows = ([] if autofill is None else [autofill]) + (adaptive + frecency)[:general]
        lists.append((autofill, rows))
    return text, lists


def reference_search(
    pages: Pages,
    state: UrlbarState,
    user: int,
    target: int,
    typed_row,
    config: UrlbarConfig,
    scan_continue: float,
    lists=None,
) -> Outcome:
    """One search with ``blind_chars = 0`` and ``scan_continue`` 1 (select when shown) or 0
    (select when on top, or at the last character when shown at all)."""
    assert scan_continue in (0.0, 1.0)
    text, lists = lists or reference_lists(pages, state, user, typed_row, config)
    first_len = len(text.split(" ")[0])
    for c, (autofill, rows) in enumerate(lists, start=1):
        if target not in rows:
            continue
        rank = rows.index(target)
        if scan_continue == 1.0 or rank == 0 or c == len(text):
            return Outcome(
                c, rank, True, autofill == target and rank == 0, rows, c if c <= first_len else 0
            )
    return Outcome(len(text), -1, False, False, [], 0)


def _assert_matches(batch: SearchBatch, s: int, ref: Outcome) -> None:
    got = Outcome(
        int(batch.chars_typed[s]), int(batch.selected_rank[s]), bool(batch.found[s]),
        bool(batch.autofilled[s]), _shown(batch, s), int(batch.first_chars[s]),
    )  # fmt: skip
    assert got == ref
    assert batch.n_shown[s] == len(ref.shown)
    assert (batch.shown[s, batch.n_shown[s] :] == -1).all()


# ------------------------------------------------------------------ random worlds


def _random_world(seed: int):
    """A few users with 5-30 pages over a vocabulary of short words on three letters (many
    shared prefixes), random frecencies with ties, zeros and -1, listable flags, host
    bookmarks, adaptive history; and a handful of searches."""
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    n_words = int(rng.integers(12, 30))
    while len(words) < n_words:
        words.add("".join(rng.choice(list("abc"), size=int(rng.integers(1, 6)))))
    vocab = Vocabulary.from_words(sorted(words))
    n_users = int(rng.integers(1, 4))
    offsets, hosts, roots, page_words = [0], [], [], []
    next_host = 0
    for _ in range(n_users):
        n = int(rng.integers(5, 31))
        n_hosts = int(rng.integers(1, min(6, n) + 1))
        host_word = rng.integers(0, vocab.n_words, n_hosts)
        local = rng.integers(0, n_hosts, n)
        has_root = rng.random(n_hosts) < 0.75
        seen: set[int] = set()
        for j in range(n):
            h = int(local[j])
            roots.append(bool(has_root[h] and h not in seen))
            seen.add(h)
            hosts.append(next_host + h)
            extra = rng.integers(0, vocab.n_words, int(rng.integers(0, 5)))
            page_words.append([int(host_word[h]), *extra.tolist()])
        next_host += n_hosts + int(rng.integers(0, 2))  # some host ids are unused
        offsets.append(offsets[-1] + n)
    n_pages = offsets[-1]
    width = max(len(w) for w in page_words)
    table = np.full((n_pages, width), -1, dtype=np.int32)
    for i, ids in enumerate(page_words):
        table[i, : len(ids)] = ids
    pages = Pages(
        user_offsets=np.array(offsets),
        host=np.array(hosts, dtype=np.int64),
        is_root=np.array(roots),
        words=table,
        n_url_words=np.ones(n_pages, dtype=np.int64),
        vocabulary=vocab,
    )
    stored = rng.choice([-1.0, 0.0, 0.0, 3.0, 7.0, 7.0, 12.0, 12.0, 25.0, 40.0, 100.0], n_pages)
    origin = rng.choice([-20.0, -1.0, 0.0, 2.0, 5.0, 5.0, 10.0, 30.0, 60.0], n_pages)
    # adaptive history: inputs typed from the page's own words or from any word, some
    # equal to prefixes of what will be typed; use counts on a 0.01 grid avoiding the
    # x.x5 midpoints (Python's and numpy's one-decimal rounding agree there)
    inputs = InputHistory(vocab.n_words)
    with_rows = np.flatnonzero(rng.random(n_pages) < 0.35)
    page = np.repeat(with_rows, rng.integers(1, 3, with_rows.size))
    word = np.where(
        rng.random(page.size) < 0.7,
        table[page, 0],
        rng.integers(0, vocab.n_words, page.size),
    ).astype(np.int64)
    length = 1 + (rng.random(page.size) * vocab.lengths[word]).astype(np.int64)
    inputs.record(page, word, length)
    grid = np.array([k for k in range(1, 300) if k % 10 != 5]) / 100.0
    inputs.use_count = rng.choice(grid, len(inputs))
    state = UrlbarState(
        stored=stored,
        origin=origin,
        listable=rng.random(n_pages) < 0.8,
        host_bookmarked=rng.random(next_host + 1) < 0.15,
        inputs=inputs,
    )
    n_searches = int(rng.integers(3, 9))
    users = rng.integers(0, n_users, n_searches)
    targets = np.array([rng.integers(offsets[u], offsets[u + 1]) for u in users])
    typed = np.full((n_searches, 3), -1, dtype=np.int64)
    for s, t in enumerate(targets):
        own = table[t][table[t] >= 0]
        k = int(rng.integers(1, 4))
        if rng.random() < 0.85:
            chosen = rng.choice(own, size=k)
            if rng.random() < 0.5:
                chosen[0] = own[0]  # the host's name first
        else:
            chosen = rng.integers(0, vocab.n_words, k)  # the target may never match
        typed[s, :k] = chosen
    config = UrlbarConfig(
        search_suggestions=int(rng.choice([0, 4, 6])),
        adaptive_rows=int(rng.choice([0, 1, 3])),
        autofill=bool(rng.random() < 0.9),
    )
    return pages, state, users, targets, typed, config


@pytest.mark.parametrize("block", range(4))
def test_matches_reference_on_random_worlds(block: int) -> None:
    """300 seeded worlds (75 per block): chars typed, rank, found, autofilled, rows shown
    and the adaptive-history input agree with the string reference for both
    deterministic typing models."""
    n_found = {0.0: 0, 1.0: 0}
    n_autofilled = n_adaptive = n_searches = 0
    for seed in range(block * 75, block * 75 + 75):
        pages, state, users, targets, typed, config = _random_world(seed)
        lists = [
            reference_lists(pages, state, int(u), typed[s], config) for s, u in enumerate(users)
        ]
        for typing in (EAGER, TOP_ONLY):
            batch = simulate_searches(
                pages, state, users, targets, typed, np.random.default_rng(seed),
                typing=typing, config=config,
            )  # fmt: skip
            for s in range(users.size):
                ref = reference_search(
                    pages, state, int(users[s]), int(targets[s]), typed[s], config,
                    typing.scan_continue, lists=lists[s],
                )  # fmt: skip
                try:
                    _assert_matches(batch, s, ref)
                except AssertionError as err:
                    raise AssertionError(f"seed {seed}, search {s}, {typing}") from err
            n_found[typing.scan_continue] += int(batch.found.sum())
            n_autofilled += int(batch.autofilled.sum())
            n_adaptive += int(batch.adaptive_input.sum())
        n_searches += users.size
    # the worlds exercise every branch
    assert 0 < n_found[0.0] <= n_found[1.0] < n_searches
    assert n_autofilled > 0 and n_adaptive > 0


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    blind=st.floats(0.0, 8.0),
    scan=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
)
def test_blind_chars_and_reading_only_delay(seed: int, blind: float, scan: float) -> None:
    """Any typing model selects no earlier than the eager user (who selects as soon as the
    target is shown), only targets the eager user finds, and what it reports is the
    reference's list at the characters it typed."""
    pages, state, users, targets, typed, config = _random_world(seed)
    eager = simulate_searches(
        pages, state, users, targets, typed, np.random.default_rng(0), typing=EAGER,
        config=config,
    )  # fmt: skip
    batch = simulate_searches(
        pages, state, users, targets, typed, np.random.default_rng(seed),
        typing=TypingModel(blind_chars=blind, scan_continue=scan), config=config,
    )  # fmt: skip
    assert (batch.chars_typed >= eager.chars_typed).all()
    assert not (batch.found & ~eager.found).any()
    for s in range(users.size):
        text, lists = reference_lists(pages, state, int(users[s]), typed[s], config)
        if not batch.found[s]:
            assert batch.chars_typed[s] == len(text) and batch.n_shown[s] == 0
            continue
        autofill, rows = lists[int(batch.chars_typed[s]) - 1]
        assert _shown(batch, s) == rows
        assert rows[batch.selected_rank[s]] == targets[s]
        assert batch.autofilled[s] == (autofill == targets[s])


@pytest.mark.parametrize("blind, scan", [(1.0, 0.5), (0.3, 0.8), (4.0, 0.2)])
def test_attention_uses_one_uniform_per_search_per_character(blind: float, scan: float) -> None:
    """The random reader against the reference with the same draws: ``1 + Poisson(blind)``
    characters typed before reading, then at character ``c`` the target at row ``r`` is
    picked when uniform ``c`` of the search (one ``rng.random(n)`` per character) is below
    ``scan ** r``, or when the text is complete; and the generator is left exactly past
    the characters typed (the last search's last character)."""
    for seed in range(40):
        pages, state, users, targets, typed, config = _random_world(seed)
        n = users.size
        rng = np.random.default_rng(seed)
        batch = simulate_searches(
            pages, state, users, targets, typed, rng,
            typing=TypingModel(blind_chars=blind, scan_continue=scan), config=config,
        )  # fmt: skip
        draws = np.random.default_rng(seed)
        look = 1 + draws.poisson(blind, n)
        uniforms = draws.random((int(batch.chars_typed.max()), n))
        assert rng.random() == draws.random(), f"seed {seed}: draws consumed"
        for s in range(n):
            text, lists = reference_lists(pages, state, int(users[s]), typed[s], config)
            ref = Outcome(len(text), -1, False, False, [], 0)
            for c in range(min(int(look[s]), len(text)), len(text) + 1):
                autofill, rows = lists[c - 1]
                if targets[s] not in rows:
                    continue
                rank = rows.index(targets[s])
                if c == len(text) or uniforms[c - 1, s] < scan**rank:
                    in_first = c <= len(text.split(" ")[0])
                    picked_autofill = autofill == targets[s] and rank == 0
                    ref = Outcome(c, rank, True, picked_autofill, rows, c if in_first else 0)
                    break
            try:
                _assert_matches(batch, s, ref)
            except AssertionError as err:
                raise AssertionError(f"seed {seed}, search {s}") from err


# ------------------------------------------------------------------ hand cases

AUTOFILL_WORDS = ["mozilla", "mozart", "mo", "moza", "news", "nest", "ne", "zero", "tabs"]
# user 0: host 0 "mozilla" (root p0 + p1), 1 "mozart" (p2), 2 "news" (p3), 3 "nest" (p4 root,
# p5), 4 "zero" (p6 root, p7)
AUTOFILL_ROWS = [
    (0, 0, True, "mozilla"),
    (0, 0, False, "mozilla tabs"),
    (0, 1, True, "mozart"),
    (0, 2, True, "news"),
    (0, 3, True, "nest"),
    (0, 3, False, "nest tabs"),
    (0, 4, True, "zero"),
    (0, 4, False, "zero"),
]
#: origin frecency: mozilla 50 + 30 = 80, mozart 60, news 10, nest 45 + max(-5, 0) = 45,
#: zero 0; threshold = mean over the positive hosts = (80 + 60 + 10 + 45) / 4 = 48.75
#: (counting the zero host would give 39 and qualify nest).
AUTOFILL_ORIGIN = [50, 30, 60, 10, 45, -5, 0, -1]
AUTOFILL_STORED = [50, 30, 60, 10, 45, 5, 2, -1]


def _autofill_world(bookmarked_hosts=()) -> tuple[Pages, UrlbarState]:
    pages = _pages(AUTOFILL_WORDS, AUTOFILL_ROWS)
    return pages, _state(pages, AUTOFILL_STORED, AUTOFILL_ORIGIN, bookmarked_hosts=bookmarked_hosts)


def test_autofill_takes_the_qualified_host_with_the_highest_origin_frecency() -> None:
    pages, state = _autofill_world()
    # "mo": mozilla (80) beats mozart (60); the frecency rows follow without p0
    batch = _one(pages, state, 0, 2, "mo")
    assert _shown(batch, 0) == [0, 2, 1]
    assert batch.selected_rank[0] == 1 and not batch.autofilled[0]
    # "moza": only mozart is left and autofilled; the top-only reader picks it there
    batch = _one(pages, state, 0, 2, "mozart", typing=TOP_ONLY)
    assert (batch.chars_typed[0], batch.selected_rank[0]) == (4, 0)
    assert batch.autofilled[0] and _shown(batch, 0) == [2]
    assert batch.first_chars[0] == 4 and not batch.adaptive_input[0]  # autofill: no input
    # the autofilled root is found at the first character
    batch = _one(pages, state, 0, 0, "mozilla", typing=TOP_ONLY)
    assert (batch.chars_typed[0], batch.selected_rank[0], batch.autofilled[0]) == (1, 0, True)
    assert _shown(batch, 0) == [0, 2, 1]


def test_autofill_disappears_once_a_space_is_typed() -> None:
    pages, state = _autofill_world()
    batch = _one(pages, state, 0, 0, "mozilla", "mozilla")
    assert _shown(batch, 0) == [0, 1]  # the frecency rows only
    assert batch.selected_rank[0] == 0 and not batch.autofilled[0]
    assert batch.chars_typed[0] == len("mozilla mozilla") and batch.first_chars[0] == 0
    # "mozilla t": the root no longer matches and nothing is autofilled
    batch = _one(pages, state, 0, 1, "mozilla", "tabs")
    assert _shown(batch, 0) == [1]
    assert not batch.autofilled[0]


def test_unqualified_host_is_autofilled_only_when_bookmarked() -> None:
    pages, state = _autofill_world()
    # "ne": news (10) and nest (45) are below 48.75: no autofill row
    assert _shown(_one(pages, state, 0, 3, "ne"), 0) == [4, 3, 5]
    assert _shown(_one(pages, state, 0, 3, "news"), 0) == [3]
    batch = _one(pages, state, 0, 3, "news", typing=TOP_ONLY)
    assert not batch.autofilled[0] and batch.chars_typed[0] == 3  # "new": p3 alone on top
    # a bookmark qualifies news: autofilled at "n", over the unbookmarked nest
    pages, state = _autofill_world(bookmarked_hosts=[2])
    batch = _one(pages, state, 0, 3, "news", typing=TOP_ONLY)
    assert (batch.chars_typed[0], batch.selected_rank[0], batch.autofilled[0]) == (1, 0, True)
    assert _shown(batch, 0) == [3, 4, 5]
    # a bookmarked host with origin frecency 0 is autofilled too
    pages, state = _autofill_world(bookmarked_hosts=[4])
    batch = _one(pages, state, 0, 6, "zero")
    assert _shown(batch, 0) == [6, 7] and batch.autofilled[0]


def test_autofill_tie_goes_to_the_higher_page_id() -> None:
    words = ["mozilla", "mozart", "mo"]
    rows = [(0, 0, True, "mozilla"), (0, 1, True, "mozart")]
    pages = _pages(words, rows)
    batch = _one(pages, _state(pages, [5, 9], origin=[40, 40]), 0, 0, "mo")
    assert _shown(batch, 0) == [1, 0]
    batch = _one(pages, _state(pages, [5, 9], origin=[41, 40]), 0, 0, "mo")
    assert _shown(batch, 0) == [0, 1]


def test_autofill_can_be_turned_off() -> None:
    pages, state = _autofill_world()
    batch = _one(pages, state, 0, 2, "mo", config=UrlbarConfig(autofill=False))
    assert _shown(batch, 0) == [2, 0, 1] and not batch.autofilled[0]


ADAPTIVE_WORDS = ["zeta", "al", "alp", "alpine", "alps", "other"]
# every host is "zeta" (nothing autofills "al"); ids 0..6
ADAPTIVE_ROWS = [
    (0, 0, False, "zeta alpine"),  # 0: stored 100
    (0, 0, False, "zeta alpine"),  # 1: stored 10, input "alp" used 1.0
    (0, 0, False, "zeta alps"),  # 2: stored 50
    (0, 0, False, "zeta alpine"),  # 3: stored 5, input "al" used 0.8
    (0, 0, False, "zeta alps"),  # 4: stored 20
    (0, 0, False, "zeta alps"),  # 5: stored 20 (ties with 4, higher id)
    (0, 0, False, "zeta other"),  # 6: stored 30, input "alps" used 0.3 (no "al" word)
]
ADAPTIVE_STORED = [100, 10, 50, 5, 20, 20, 30]
ADAPTIVE_INPUTS = [(1, "alpine", 3, 1.0), (3, "alpine", 2, 0.8), (6, "alps", 4, 0.3)]


def test_adaptive_rows_come_first_and_an_exact_input_doubles_the_rank() -> None:
    pages = _pages(ADAPTIVE_WORDS, ADAPTIVE_ROWS)
    state = _state(pages, ADAPTIVE_STORED, inputs=ADAPTIVE_INPUTS)
    wide = UrlbarConfig(search_suggestions=0)  # 9 general rows
    # "al": page 3 (exact "al": 0.8 * 2 = 1.6) over page 1 ("alp": 1.0) over page 6 ("alps":
    # 0.3); then the frecency rows, 5 and 4 tied at 20 in id-descending order
    batch = _one(pages, state, 0, 4, "al", config=wide)
    assert _shown(batch, 0) == [3, 1, 6, 0, 2, 5, 4]
    assert batch.selected_rank[0] == 6
    # at most adaptive_rows adaptive rows; page 6 does not match "al" as a frecency row
    batch = _one(
        pages, state, 0, 4, "al", config=UrlbarConfig(search_suggestions=0, adaptive_rows=2)
    )
    assert _shown(batch, 0) == [3, 1, 0, 2, 5, 4]
    # "alpine": no input starts with it; plain frecency order
    batch = _one(pages, state, 0, 3, "alpine", config=wide)
    assert _shown(batch, 0) == [0, 1, 3]
    # "alp": exact for pages 1 (2 * 1.0) and 0 (2 * 0.9), then page 6 ("alps": 0.3); page 3's
    # "al" does not start with "alp"
    state = _state(pages, ADAPTIVE_STORED, inputs=[*ADAPTIVE_INPUTS, (0, "alps", 3, 0.9)])
    batch = _one(pages, state, 0, 1, "alp", config=wide)
    assert _shown(batch, 0) == [1, 0, 6, 2, 5, 4, 3]
    assert batch.selected_rank[0] == 0 and not batch.autofilled[0]
    assert batch.adaptive_input[0] and batch.first_chars[0] == 3


def test_adaptive_ties_fall_back_to_stored_frecency() -> None:
    pages = _pages(ADAPTIVE_WORDS, ADAPTIVE_ROWS)
    # 1.04 and 0.96 both round to 1.0: page 2 (stored 50) before page 1 (stored 10)
    state = _state(pages, ADAPTIVE_STORED, inputs=[(1, "alps", 4, 1.04), (2, "alps", 4, 0.96)])
    batch = _one(pages, state, 0, 4, "al", config=UrlbarConfig(search_suggestions=0))
    assert _shown(batch, 0) == [2, 1, 0, 5, 4, 3]


TAB_WORDS = ["zeta", "tab", "tabs"]
#: seven pages with the word "tab", stored 70, 60, ..., 10
TAB_ROWS = [(0, 0, False, "zeta tab")] * 7


def test_general_rows_cap_hides_the_sixth_frecency_row() -> None:
    pages = _pages(TAB_WORDS, TAB_ROWS)
    state = _state(pages, [70, 60, 50, 40, 30, 20, 10])
    # 10 - 1 - 4 = 5 general rows: position 6 (page 5) is never shown
    batch = _one(pages, state, 0, 5, "tab", typing=EAGER)
    assert not batch.found[0] and batch.selected_rank[0] == -1
    assert batch.chars_typed[0] == 3 and batch.n_shown[0] == 0
    assert (batch.shown[0] == -1).all()
    batch = _one(pages, state, 0, 4, "tab")
    assert _shown(batch, 0) == [0, 1, 2, 3, 4] and batch.selected_rank[0] == 4
    # without search suggestions there are 9
    batch = _one(pages, state, 0, 5, "tab", config=UrlbarConfig(search_suggestions=0))
    assert _shown(batch, 0) == [0, 1, 2, 3, 4, 5, 6] and batch.selected_rank[0] == 5


def test_autofill_row_is_not_counted_in_the_general_rows() -> None:
    # page 0 is the root of a qualified host "tabs": autofilled for "tab", then 5 more rows
    rows = [(0, 1, True, "tabs"), *[(0, 0, False, "zeta tab")] * 7]
    pages = _pages(TAB_WORDS, rows)
    state = _state(pages, [5, 70, 60, 50, 40, 30, 20, 10], origin=[1000, *[1] * 7])
    batch = _one(pages, state, 0, 5, "tab")
    assert _shown(batch, 0) == [0, 1, 2, 3, 4, 5] and batch.selected_rank[0] == 5
    assert not _one(pages, state, 0, 6, "tab").found[0]


def test_pages_of_another_user_never_appear() -> None:
    words = ["mozilla", "mo", "zeta"]
    rows = [
        (0, 0, True, "mozilla"),
        (0, 1, False, "zeta mozilla"),
        (1, 2, True, "mozilla"),  # user 1: much higher frecencies and an input "mo"
        (1, 3, False, "zeta mozilla"),
    ]
    pages = _pages(words, rows)
    state = _state(pages, [10, 5, 900, 800], inputs=[(3, "mozilla", 2, 5.0)])
    batch = _one(pages, state, 0, 1, "mo")
    assert _shown(batch, 0) == [0, 1] and batch.autofilled.sum() == 0
    batch = _one(pages, state, 1, 2, "mo")
    assert _shown(batch, 0) == [2, 3]  # user 1: autofill 2, adaptive 3


def test_zero_frecency_and_unlistable_pages_are_not_frecency_rows() -> None:
    pages = _pages(TAB_WORDS, [(0, 0, False, "zeta tab")] * 5)
    # page 0: stored 0; page 1: not listable; page 4: stored -1 (listed, last)
    state = _state(pages, [0, 50, 40, 30, -1], listable=[True, False, True, True, True])
    batch = _one(pages, state, 0, 4, "tab")
    assert _shown(batch, 0) == [2, 3, 4]
    for target in (0, 1):
        batch = _one(pages, state, 0, target, "tab", typing=EAGER)
        assert not batch.found[0] and batch.chars_typed[0] == 3


def test_every_token_must_prefix_some_word() -> None:
    words = ["zeta", "tab", "tabs", "ta", "bat"]
    rows = [(0, 0, False, "zeta tabs"), (0, 0, False, "zeta bat tab"), (0, 0, False, "zeta bat")]
    pages = _pages(words, rows)
    state = _state(pages, [30, 20, 10])
    assert _shown(_one(pages, state, 0, 1, "ta", "bat"), 0) == [1]
    assert _shown(_one(pages, state, 0, 0, "tabs"), 0) == [0]
    assert _shown(_one(pages, state, 0, 2, "bat"), 0) == [1, 2]
    assert _shown(_one(pages, state, 0, 1, "tab", "tab"), 0) == [0, 1]  # one word, twice


def test_same_seed_same_batch_and_empty_batch() -> None:
    pages, state, users, targets, typed, config = _random_world(3)
    a, b = (
        simulate_searches(
            pages, state, users, targets, typed, np.random.default_rng(9), config=config
        )
        for _ in range(2)
    )
    for name in ("chars_typed", "selected_rank", "shown", "found", "autofilled"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    empty = simulate_searches(
        pages, state, np.zeros(0, int), np.zeros(0, int), np.zeros((0, 3), int),
        np.random.default_rng(0),
    )  # fmt: skip
    assert len(empty) == 0 and empty.shown.shape[0] == 0


BATCH_FIELDS = ("user", "target", "chars_typed", "selected_rank", "shown", "n_shown", "found",
                "autofilled", "first_word", "first_chars")  # fmt: skip


@pytest.mark.parametrize("seed", range(30))
def test_a_subset_gets_the_results_of_the_whole_batch(seed: int) -> None:
    """``only`` runs a subset of the searches with the attention draws each gets in the
    whole batch (blind characters, one uniform per character), so every field equals the
    whole batch's rows; the other users' state is not read."""
    pages, state, users, targets, typed, config = _random_world(seed)
    rng = np.random.default_rng(seed + 1000)
    users, targets, typed = np.tile(users, 4), np.tile(targets, 4), np.tile(typed, (4, 1))
    typing = TypingModel(blind_chars=2.0, scan_continue=0.6)
    whole = simulate_searches(
        pages, state, users, targets, typed, np.random.default_rng(seed), typing=typing,
        config=config,
    )  # fmt: skip
    only = rng.random(users.size) < 0.4
    only[rng.integers(users.size)] = True
    # pages of users who do not search in the subset: nonsense values
    others = ~np.isin(np.repeat(np.arange(pages.n_users), np.diff(pages.user_offsets)),
                      users[only])  # fmt: skip
    garbage = replace(state, stored=state.stored.copy(), origin=state.origin.copy())
    garbage.stored[others] = rng.normal(0, 1e3, int(others.sum()))
    garbage.origin[others] = rng.normal(0, 1e3, int(others.sum()))
    part = simulate_searches(
        pages, garbage, users, targets, typed, np.random.default_rng(seed), typing=typing,
        config=config, only=only,
    )  # fmt: skip
    assert len(part) == int(only.sum())
    for name in BATCH_FIELDS:
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name)[only], name)


# ------------------------------------------------------------------ input validation


def _call(pages: Pages, state: UrlbarState, users, targets, typed) -> SearchBatch:
    return simulate_searches(
        pages, state, np.asarray(users), np.asarray(targets), np.asarray(typed),
        np.random.default_rng(0),
    )  # fmt: skip


def test_rejects_a_target_of_another_user_and_unknown_users() -> None:
    pages = _pages(["mozilla", "zeta"], [(0, 0, True, "mozilla"), (1, 1, True, "zeta")])
    state = _state(pages, [1, 1])
    with pytest.raises(DataFormatError, match="target"):
        _call(pages, state, [0], [1], [[0]])
    with pytest.raises(DataFormatError, match="user"):
        _call(pages, state, [2], [1], [[0]])
    with pytest.raises(DataFormatError):
        _call(pages, state, [0, 1], [0], [[0], [1]])


@pytest.mark.parametrize(
    "typed",
    [
        [[2]],  # past the vocabulary
        [[0, 7]],
        [[-1]],  # nothing typed
        [[-1, -1]],
        [[-1, 0]],
        [[0, -2]],  # not a word id, not padding
        [[0, -1, 1]],  # padding before a word
        np.zeros((1, 0), dtype=np.int64),  # no column at all
    ],
)
def test_rejects_typed_words_outside_the_vocabulary_or_empty(typed) -> None:
    pages = _pages(["mozilla", "zeta"], [(0, 0, True, "mozilla zeta")])
    with pytest.raises(DataFormatError):
        _call(pages, _state(pages, [1]), [0], [0], typed)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stored", np.ones(2)),
        ("stored", np.ones(5)),
        ("origin", np.ones(1)),
        ("listable", np.ones(5, dtype=bool)),
        ("host_bookmarked", np.ones(1, dtype=bool)),  # would broadcast to every host
        ("host_bookmarked", np.zeros(0, dtype=bool)),
    ],
)
def test_rejects_state_arrays_of_the_wrong_length(field: str, value: np.ndarray) -> None:
    rows = [(0, 0, True, "mozilla"), (0, 1, True, "zeta"), (0, 0, False, "mozilla zeta")]
    pages = _pages(["mozilla", "zeta"], rows)
    state = _state(pages, [1, 1, 1])
    fields = {name: getattr(state, name) for name in state.__dataclass_fields__}
    fields[field] = value
    with pytest.raises(DataFormatError):
        _call(pages, UrlbarState(**fields), [0], [0], [[0]])


@pytest.mark.parametrize("only", [np.array([1, 0]), np.array([True]), np.array([[True, False]])])
def test_rejects_an_only_that_is_not_a_mask_of_the_searches(only: np.ndarray) -> None:
    pages = _pages(["mozilla", "zeta"], [(0, 0, True, "mozilla"), (1, 1, True, "zeta")])
    with pytest.raises(DataFormatError, match="only must be a bool mask"):
        simulate_searches(
            pages, _state(pages, [1, 1]), np.array([0, 1]), np.array([0, 1]),
            np.array([[0], [1]]), np.random.default_rng(0), only=only,
        )  # fmt: skip
