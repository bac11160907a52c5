"""Browsing worlds (fedrank.data.browsing): the vocabulary's common-prefix lengths, the pages'
validation and derived columns, redirect chains of a visit stream, and the calibration
shapes of a click log, against hand-worked cases and string-based references."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.data import browsing
from fedrank.data.browsing import (
    BrowsingWorld,
    Pages,
    VisitStream,
    Vocabulary,
    browsing_shapes,
    first_char_index,
)
from fedrank.errors import DataFormatError

# --------------------------------------------------------------------------------------------
# Vocabulary.lcp_pairs


def _string_lcp(words: list[str], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Reference: ``len(os.path.commonprefix)`` of the two strings, 0 for id -1."""
    return np.array(
        [
            len(os.path.commonprefix([words[i], words[j]])) if i >= 0 and j >= 0 else 0
            for i, j in zip(a.tolist(), b.tolist(), strict=True)
        ],
        dtype=np.int64,
    )


def _all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of ids in ``-1..n-1`` (so -1 on either side, and both)."""
    ids = np.arange(-1, n)
    a, b = np.meshgrid(ids, ids, indexing="ij")
    return a.ravel(), b.ravel()


def _char_path_vocabulary(
    words: list[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[Vocabulary, Vocabulary]:
    """The same words twice: one vocabulary with the table, one forced onto the
    character-comparison path (the limit is read when the table is first needed)."""
    table = Vocabulary.from_words(words)
    assert table._lcp_flat is not None  # table built under the real limit
    monkeypatch.setattr(browsing, "LCP_TABLE_MAX_WORDS", 0)
    chars = Vocabulary.from_words(words)
    assert chars._lcp_flat is None
    return table, chars


def test_lcp_pairs_hand_cases_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    words = ["news", "newsday", "net", "x", "abcdefg", "abcdefz"]
    table, chars = _char_path_vocabulary(words, monkeypatch)
    a = np.array([0, 0, 1, 2, 3, 4, 4, 5, -1, 0, -1])
    b = np.array([1, 2, 2, 3, 3, 4, 5, 5, 0, -1, -1])
    # news/newsday: "news" = 4; news/net: "ne" = 2; newsday/net: 2; net/x: 0; x/x: 1;
    # abcdefg with itself: 7 (the full width: every column agrees); abcdefg/abcdefz: 6;
    # abcdefz/abcdefz: 7; any -1: 0.
    expected = [4, 2, 2, 0, 1, 7, 6, 7, 0, 0, 0]
    for vocab in (table, chars):
        got = vocab.lcp_pairs(a, b)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)
    # the table itself: symmetric, diagonal = word lengths
    np.testing.assert_array_equal(table.lcp, table.lcp.T)
    np.testing.assert_array_equal(np.diag(table.lcp), [4, 7, 3, 1, 7, 7])


def test_lcp_pairs_broadcasts_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    table, chars = _char_path_vocabulary(["ab", "abc", "b"], monkeypatch)
    a = np.array([0, 1, -1])
    b = np.array([[1], [2]])
    # row b=1 ("abc"): ab/abc = 2, abc/abc = 3, -1 -> 0; row b=2 ("b"): 0, 0, 0
    expected = [[2, 3, 0], [0, 0, 0]]
    for vocab in (table, chars):
        np.testing.assert_array_equal(vocab.lcp_pairs(a, b), expected)
        assert int(vocab.lcp_pairs(0, 1)) == 2


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(
        st.text(alphabet="abc", min_size=1, max_size=6), min_size=1, max_size=25, unique=True
    )
)
def test_lcp_pairs_table_equals_char_path_and_commonprefix(words: list[str]) -> None:
    # a 3-letter alphabet and short words: long shared prefixes and prefix-of-another words
    table = Vocabulary.from_words(words)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(browsing, "LCP_TABLE_MAX_WORDS", 0)
        chars = Vocabulary.from_words(words)
        a, b = _all_pairs(len(words))
        by_chars = chars.lcp_pairs(a, b)
    by_table = table.lcp_pairs(a, b)
    np.testing.assert_array_equal(by_table, by_chars)
    np.testing.assert_array_equal(by_table, _string_lcp(words, a, b))
    assert table.words == tuple(words)


def test_lcp_pairs_random_vocabulary_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    table = Vocabulary.random(300, rng, min_length=1, max_length=6)
    words = list(table.words)
    assert len(set(words)) == 300
    monkeypatch.setattr(browsing, "LCP_TABLE_MAX_WORDS", 0)
    chars = Vocabulary(chars=table.chars.copy(), lengths=table.lengths.copy())
    a, b = rng.integers(-1, 300, size=(2, 20_000))
    expected = _string_lcp(words, a, b)
    np.testing.assert_array_equal(table.lcp_pairs(a, b), expected)
    np.testing.assert_array_equal(chars.lcp_pairs(a, b), expected)


def test_lcp_pairs_large_vocabulary_compares_characters() -> None:
    # LCP_TABLE_MAX_WORDS + 1 words of up to ~66 characters: no table, and with 70 000 pairs
    # the character path works in several chunks ((1 << 22) // 66 = 63 550 pairs a chunk).
    # Word = a stem over {a, b} + a unique 5-digit number: distinct, and pairs with one stem
    # (or a stem that is a prefix of the other) share long prefixes.
    rng = np.random.default_rng(11)
    stems = ["".join(rng.choice(["a", "b"], size=rng.integers(0, 61))) for _ in range(40)]
    n = browsing.LCP_TABLE_MAX_WORDS + 1
    words = [stems[rng.integers(40)] + f"{i:05d}" for i in range(n)]
    vocab = Vocabulary.from_words(words)
    with pytest.raises(DataFormatError, match="no full lcp table"):
        _ = vocab.lcp
    a = np.concatenate([rng.integers(-1, n, size=70_000), np.arange(n)])
    b = np.concatenate([rng.integers(-1, n, size=70_000), np.arange(n)])
    same_stem = rng.integers(0, n, size=2000)  # partner with the same stem when there is one
    a = np.concatenate([a, same_stem])
    b = np.concatenate([b, (same_stem + 40) % n])
    got = vocab.lcp_pairs(a, b)
    np.testing.assert_array_equal(got, _string_lcp(words, a, b))
    assert got[70_000:][:n].tolist() == [len(w) for w in words]  # lcp(w, w) = |w|
    assert got.max() > 20  # the long shared prefixes were exercised


# --------------------------------------------------------------------------------------------
# Vocabulary construction


@pytest.mark.parametrize(
    ("words", "match"),
    [
        (["ab", "cd", "ab"], "distinct"),
        (["ab", ""], "1..127 ASCII"),
        (["caf\u00e9"], "1..127 ASCII"),
        (["two words"], "1..127 ASCII"),
        (["x" * 128], "1..127 ASCII"),
    ],
)
def test_from_words_errors(words: list[str], match: str) -> None:
    with pytest.raises(DataFormatError, match=match):
        Vocabulary.from_words(words)


def test_from_words_layout_and_limits() -> None:
    vocab = Vocabulary.from_words(["ab", "x" * 127, "Q?"])
    assert vocab.chars.dtype == np.uint8 and vocab.chars.shape == (3, 127)
    np.testing.assert_array_equal(vocab.lengths, [2, 127, 2])
    np.testing.assert_array_equal(vocab.chars[0, :3], [ord("a"), ord("b"), 0])
    assert vocab.words == ("ab", "x" * 127, "Q?")
    assert int(vocab.lcp_pairs(1, 1)) == 127  # fits the int8 table
    empty = Vocabulary.from_words([])
    assert empty.n_words == 0 and empty.chars.shape == (0, 1)


def test_vocabulary_shape_errors() -> None:
    with pytest.raises(DataFormatError, match="chars"):
        Vocabulary(chars=np.zeros(3, np.uint8), lengths=np.zeros(3, np.int64))
    with pytest.raises(DataFormatError, match="chars"):
        Vocabulary(chars=np.zeros((3, 2), np.uint8), lengths=np.zeros(2, np.int64))
    chars = np.array([[97, 98], [99, 0]], np.uint8)  # "ab", "c"
    with pytest.raises(DataFormatError, match="character counts"):
        Vocabulary(chars=chars, lengths=np.array([2, 2]))


# --------------------------------------------------------------------------------------------
# Pages

WORDS = ["news", "sport", "nba", "mail", "inbox", "zeta"]  # ids 0..5


def _pages(**override) -> Pages:
    """User 0: pages 0-2 (hosts 0, 0, 1); user 1: pages 3-4 (host 2).

    page 0: news/             root of host 0   words [news]
    page 1: news/sport | nba                   words [news, sport, nba]  (2 URL words)
    page 2: mail/ | inbox     root of host 1   words [mail, inbox]
    page 3: zeta/             root of host 2   words [zeta]
    page 4: zeta/ | news                       words [zeta, news]
    """
    fields = dict(
        user_offsets=np.array([0, 3, 5]),
        host=np.array([0, 0, 1, 2, 2]),
        is_root=np.array([True, False, True, True, False]),
        words=np.array(
            [[0, -1, -1], [0, 1, 2], [3, 4, -1], [5, -1, -1], [5, 0, -1]], dtype=np.int32
        ),
        n_url_words=np.array([1, 2, 1, 1, 1]),
        vocabulary=Vocabulary.from_words(WORDS),
    )
    fields.update(override)
    return Pages(**fields)


def test_pages_derived_columns() -> None:
    pages = _pages()
    assert pages.n_pages == 5 and pages.n_users == 2
    np.testing.assert_array_equal(pages.owner, [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(pages.root_of_host, [0, 2, 3])
    np.testing.assert_array_equal(pages.host_word, [0, 0, 3, 5, 5])
    n, s, m, i, z = (ord(c) for c in "nsmiz")
    first = pages.first_chars(np.arange(5))
    np.testing.assert_array_equal(first, [[n, 0, 0], [n, s, n], [m, i, 0], [z, 0, 0], [z, n, 0]])
    np.testing.assert_array_equal(pages.first_chars(np.array([3, 1])), first[[3, 1]])
    offsets, page, col = pages.words_by_first_char
    assert offsets.shape == (2 * 256 + 1,) and offsets[0] == 0 and offsets[-1] == page.size
    keys = np.repeat(np.arange(2 * 256), np.diff(offsets))
    # (owner * 256 + first character, page, column) sorted by key, then page, then column
    entries = sorted(
        (int(pages.owner[r]) * 256 + int(first[r, c]), r, c)
        for r in range(5)
        for c in range(3)
        if pages.words[r, c] >= 0
    )
    assert list(zip(keys.tolist(), page.tolist(), col.tolist(), strict=True)) == entries
    assert page.dtype == np.int32 and col.dtype == np.uint8
    assert pages.text(1) == "news sport | nba"
    assert pages.text(0) == "news | "


def test_root_of_host_without_root_is_minus_one() -> None:
    pages = _pages(is_root=np.array([False, False, True, True, False]))
    np.testing.assert_array_equal(pages.root_of_host, [-1, 2, 3])


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_words_by_first_char_lists_each_users_words_by_their_first_character(
    data: st.DataObject,
) -> None:
    # first characters anywhere in printable ASCII '!'..'~' (33..126), over several users
    words = data.draw(
        st.lists(
            st.text(alphabet=[chr(c) for c in range(33, 127)], min_size=1, max_size=3),
            min_size=1,
            max_size=12,
            unique=True,
        )
    )
    per_user = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
    n_pages = sum(per_user)
    width = data.draw(st.integers(1, 4))
    rows = []
    for _ in range(n_pages):
        k = data.draw(st.integers(1, width))
        ids = data.draw(st.lists(st.integers(0, len(words) - 1), min_size=k, max_size=k))
        rows.append(ids + [-1] * (width - k))
    pages = Pages(
        user_offsets=np.concatenate([[0], np.cumsum(per_user)]).astype(np.int64),
        host=np.arange(n_pages),
        is_root=np.ones(n_pages, bool),
        words=np.array(rows, dtype=np.int32).reshape(n_pages, width),
        n_url_words=np.ones(n_pages, np.int64),
        vocabulary=Vocabulary.from_words(words),
    )
    offsets, page, col = pages.words_by_first_char
    # built over blocks of whole users, the index is the same as in one piece
    block = data.draw(st.integers(1, 5))
    for got, want in zip(
        first_char_index(pages.words, pages.user_offsets, pages.vocabulary.chars, block),
        (offsets, page, col),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)
    assert offsets[-1] == page.size == int((pages.words >= 0).sum())
    for u in range(len(per_user)):
        for ch in {ord(w[0]) for w in words}:
            lo, hi = offsets[u * 256 + ch], offsets[u * 256 + ch + 1]
            expected = [
                (p, w)
                for p in range(pages.user_offsets[u], pages.user_offsets[u + 1])
                for w in rows[p]
                if w >= 0 and ord(words[w][0]) == ch
            ]
            got = pages.words[page[lo:hi], col[lo:hi]]
            assert list(zip(page[lo:hi].tolist(), got.tolist(), strict=True)) == expected


@pytest.mark.parametrize(
    ("override", "match"),
    [
        # host 1 used by user 0 (page 2) and user 1 (page 3)
        (dict(host=np.array([0, 0, 1, 1, 2])), "shared by two users"),
        # page 3 has no first (host name) word
        (
            dict(
                words=np.array(
                    [[0, -1, -1], [0, 1, 2], [3, 4, -1], [-1, 5, -1], [5, 0, -1]], np.int32
                )
            ),
            "host's name as its first word",
        ),
        (dict(n_url_words=np.array([1, 2, 0, 1, 1])), "host's name as its first word"),
        # word id 6 is past the 6-word vocabulary
        (
            dict(
                words=np.array(
                    [[0, -1, -1], [0, 1, 6], [3, 4, -1], [5, -1, -1], [5, 0, -1]], np.int32
                )
            ),
            "outside the vocabulary",
        ),
        (dict(user_offsets=np.array([1, 3, 5])), "user_offsets"),
        (dict(user_offsets=np.array([0, 4, 3, 5])), "user_offsets"),
        (dict(host=np.array([0, 0, 1, 2])), "Pages.host"),
        (dict(is_root=np.ones(4, bool)), "Pages.is_root"),
        (dict(words=np.zeros((4, 3), np.int32)), "Pages.words"),
    ],
)
def test_pages_validation_errors(override: dict, match: str) -> None:
    with pytest.raises(DataFormatError, match=match):
        _pages(**override)


# --------------------------------------------------------------------------------------------
# VisitStream

LINK, TYPED, R301, R302, EMBED = 1, 2, 5, 6, 4


def _stream(page, time, vtype, from_visit) -> VisitStream:
    return VisitStream(
        page=np.asarray(page, np.int64),
        time=np.asarray(time, np.float64),
        visit_type=np.asarray(vtype, np.int8),
        from_visit=np.asarray(from_visit, np.int64),
    )


def _chain_stream() -> VisitStream:
    """0: LINK p0; 1: 301 p1 from 0; 2: 302 p2 from 1; 3: EMBED p3;
    4: TYPED p4; 5: 302 p0 from 4; 6: 301 p5 with no source (from -1)."""
    return _stream(
        page=[0, 1, 2, 3, 4, 0, 5],
        time=[-3.0, -3.0, -3.0, -2.0, -1.0, -1.0, -0.5],
        vtype=[LINK, R301, R302, EMBED, TYPED, R302, R301],
        from_visit=[-1, 0, 1, -1, -1, 4, -1],
    )


def test_origin_and_redirect_target_of_a_chain() -> None:
    s = _chain_stream()
    # origin: the type of the visit a redirect came from -- 1 came from LINK, 2 from the 301,
    # 5 from TYPED; the source-less 301 (6) and non-redirects have none
    np.testing.assert_array_equal(s.origin_type(), [0, LINK, R301, 0, 0, TYPED, 0])
    # target: the redirect each visit led to -- LINK -> 301, 301 -> 302, TYPED -> 302
    np.testing.assert_array_equal(s.redirect_target(), [R301, R302, 0, 0, R302, 0, 0])
    assert s.origin_type().dtype == np.int8 and s.redirect_target().dtype == np.int8


def test_select_reindexes_from_visit() -> None:
    s = _chain_stream()
    sub = s.select(np.array([False, True, True, True, True, True, True]))
    # kept old visits 1..6 become 0..5; 1's source (0) is dropped -> -1; 2 came from 1 -> 0;
    # 5 came from 4 -> 3
    np.testing.assert_array_equal(sub.page, [1, 2, 3, 4, 0, 5])
    np.testing.assert_array_equal(sub.from_visit, [-1, 0, -1, -1, 3, -1])
    np.testing.assert_array_equal(sub.time, [-3.0, -3.0, -2.0, -1.0, -1.0, -0.5])
    np.testing.assert_array_equal(sub.origin_type(), [0, R301, 0, 0, TYPED, 0])
    np.testing.assert_array_equal(sub.redirect_target(), [R302, 0, 0, R302, 0, 0])
    # dropping the middle of the chain (visit 1) cuts both links that use it
    sub2 = s.select(np.array([True, False, True, False, False, True, False]))
    np.testing.assert_array_equal(sub2.from_visit, [-1, -1, -1])
    np.testing.assert_array_equal(sub2.origin_type(), [0, 0, 0])
    np.testing.assert_array_equal(sub2.redirect_target(), [0, 0, 0])
    assert s.select(np.zeros(7, bool)).n_visits == 0


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(time=[0.0, 1.0]), "VisitStream.time"),
        (dict(time=[0.0, -1.0, 2.0]), "non-decreasing"),
        (dict(from_visit=[-1, 1, -1]), "earlier visit"),  # points at itself
        (dict(from_visit=[-1, 2, -1]), "earlier visit"),  # points forward
    ],
)
def test_visit_stream_errors(kw: dict, match: str) -> None:
    args = dict(page=[0, 1, 2], time=[0.0, 0.0, 1.0], vtype=[LINK, R301, LINK])
    args["from_visit"] = [-1, 0, -1]
    args.update(kw)
    with pytest.raises(DataFormatError, match=match):
        _stream(**args)


# --------------------------------------------------------------------------------------------
# BrowsingWorld


def _world(**override) -> BrowsingWorld:
    fields = dict(
        name="synthetic",
        pages=_pages(),
        history=_stream([0, 1], [-2.0, -1.0], [LINK, LINK], [-1, -1]),
        bookmark_page=np.array([2]),
        bookmark_time=np.array([-5.0]),
        future=_stream([3], [0.0], [LINK], [-1]),
        future_search=np.array([True]),
        future_typed=np.array([[5, -1]], np.int32),
    )
    fields.update(override)
    return BrowsingWorld(**fields)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (dict(history=_stream([0], [0.0], [LINK], [-1])), "before the study"),
        (dict(future=_stream([0], [-0.5], [LINK], [-1]), future_search=np.array([1])), "in the"),
        (dict(future_search=np.array([True, False])), "one row per future visit"),
        (dict(future_typed=np.zeros((2, 2), np.int32)), "one row per future visit"),
        (dict(bookmark_time=np.array([-5.0, -4.0])), "one shape"),
    ],
)
def test_browsing_world_errors(override: dict, match: str) -> None:
    assert _world().n_users == 2
    with pytest.raises(DataFormatError, match=match):
        _world(**override)


# --------------------------------------------------------------------------------------------
# browsing_shapes


def _hand_clicks() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A click log (given shuffled, so the function has to sort it):

    user 0: host 10 @ 0.0, host 11 @ 0.01, host 10 @ 0.5, host 10 @ 2.0
    user 1: host 20 @ 1.0, host 20 @ 1.0 + 10 min
    user 2: host 30 @ 5.0, 6.0 (a revisit exactly one day later)
    user 3: 15 hourly clicks from day 10: hosts 40, 41, 40, 41, 40, then 42..51 once each
    users 4, 5: no clicks (n_users=6)
    """
    rows = [(0, 10, 0.0), (0, 11, 0.01), (0, 10, 0.5), (0, 10, 2.0)]
    rows += [(1, 20, 1.0), (1, 20, 1.0 + 10 / 1440)]
    rows += [(2, 30, 5.0), (2, 30, 6.0)]
    hosts3 = [40, 41, 40, 41, 40] + list(range(42, 52))
    rows += [(3, h, 10.0 + i / 24) for i, h in enumerate(hosts3)]
    order = np.random.default_rng(3).permutation(len(rows))
    arr = np.array(rows, dtype=np.float64)[order]
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]


def test_browsing_shapes_hand_case() -> None:
    user, host, time = _hand_clicks()
    shapes = browsing_shapes(user, host, time, n_users=6)
    # active users: 0, 1, 2, 3 (4 and 5 never click)
    assert shapes["users"] == 4.0
    # clicks 4, 2, 2, 15 -> 23 / 4
    assert shapes["clicks_per_user"] == pytest.approx(23 / 4)
    # hosts 2, 1, 1, 12 -> 16 / 4
    assert shapes["hosts_per_user"] == pytest.approx(4.0)
    # pairs: (0,10)x3 (0,11)x1 (1,20)x2 (2,30)x2 (3,40)x3 (3,41)x2 (3,42..51)x1 -> 16 pairs,
    # once: (0,11) and the ten of user 3 -> 11 / 16
    assert shapes["once_share"] == pytest.approx(11 / 16)
    # 23 clicks, 16 of them first clicks of their pair -> 7 revisits
    assert shapes["revisit_rate"] == pytest.approx(7 / 23)
    # users 0-2 have <= 10 hosts (share 1); user 3's top 10: 3 + 2 + 8 ones = 13 of 15
    assert shapes["top10_share"] == pytest.approx((1 + 1 + 1 + 13 / 15) / 4)
    # gaps in minutes within users: user 0: 0.01 d = 14.4, 0.49 d = 705.6, 1.5 d = 2160;
    # user 1: 10; user 2: 1 d = 1440; user 3: fourteen 60s -> 19 gaps, sorted 10, 14.4,
    # 60 x 14, 705.6, 1440, 2160: median = the 10th = 60; <= 30 min: 2 of 19
    assert shapes["gap_median_minutes"] == pytest.approx(60.0)
    assert shapes["gap_30min_share"] == pytest.approx(2 / 19)
    # revisit gaps (days) to the previous click on the host: host 10: 0.5, 1.5; host 20:
    # 10/1440; host 30: exactly 1.0 (counts: "within" includes one day); host 40: 2/24,
    # 2/24; host 41: 2/24 -> 7 gaps, all but 1.5 within a day -> 6 / 7
    assert shapes["revisit_within_day"] == pytest.approx(6 / 7)
    # the default n_users (max id + 1 = 4) measures the same active users
    assert browsing_shapes(user, host, time) == pytest.approx(shapes)


def test_browsing_shapes_one_click_per_user() -> None:
    # two users with one click each (same host id: hosts are per user in pairs): no gaps,
    # no revisits
    shapes = browsing_shapes(np.array([0, 1]), np.array([7, 7]), np.array([0.0, 0.5]))
    assert shapes["users"] == 2.0
    assert shapes["hosts_per_user"] == 1.0 and shapes["once_share"] == 1.0
    assert shapes["revisit_rate"] == 0.0 and shapes["top10_share"] == 1.0
    assert shapes["gap_median_minutes"] == 0.0 and shapes["gap_30min_share"] == 0.0
    assert shapes["revisit_within_day"] == 0.0


def test_browsing_shapes_empty_and_errors() -> None:
    empty = browsing_shapes(np.zeros(0), np.zeros(0), np.zeros(0))
    assert all(v == 0.0 for v in empty.values())
    with pytest.raises(DataFormatError, match="one length"):
        browsing_shapes(np.array([0, 1]), np.array([0]), np.array([0.0, 1.0]))
    with pytest.raises(DataFormatError, match="one length"):
        browsing_shapes(np.zeros((2, 1)), np.zeros((2, 1)), np.zeros((2, 1)))
