"""Firefox's per-page visit history (fedrank.simulation.frecency.history_store.VisitStore),
against a brute-force reference that keeps every visit and hand-worked cases (sampled rows,
counts, typed, redirects, bookmarks, ages)."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.data.browsing import BrowsingWorld, Pages, VisitStream, Vocabulary
from fedrank.errors import DataFormatError
from fedrank.models.frecency.history import PageHistories
from fedrank.simulation.frecency import history_store
from fedrank.simulation.frecency.history_store import VisitStore

LINK, TYPED, BOOKMARK, EMBED, R301, R302, DOWNLOAD, FRAMED, RELOAD = range(1, 10)
#: Types moz_places.visit_count skips (written out, not imported from the code under test).
NOT_COUNTED = {EMBED, DOWNLOAD, FRAMED, RELOAD}


def _stream(page, time, vtype, from_visit=None) -> VisitStream:
    n = len(page)
    return VisitStream(
        page=np.asarray(page, np.int64).reshape(n),
        time=np.asarray(time, np.float64).reshape(n),
        visit_type=np.asarray(vtype, np.int8).reshape(n),
        from_visit=np.asarray([-1] * n if from_visit is None else from_visit, np.int64).reshape(n),
    )


class ReferenceStore:
    """Every visit in Python lists; the sampled rows are the ``width`` newest by sorting."""

    def __init__(self, n_pages: int, width: int = 10) -> None:
        self.width = width
        self.visits: list[list[tuple[float, int, int, int, int]]] = [[] for _ in range(n_pages)]
        self.arrived = 0

    def add(self, page, time, vtype, from_visit) -> None:
        n = len(page)
        origin, target = [0] * n, [0] * n
        for i in range(n):
            if vtype[i] in (R301, R302) and from_visit[i] >= 0:
                origin[i] = vtype[from_visit[i]]
                target[from_visit[i]] = vtype[i]
        for i in range(n):
            row = (time[i], self.arrived, vtype[i], origin[i], target[i])
            self.visits[page[i]].append(row)
            self.arrived += 1

    def rows(self, p: int) -> list[tuple[float, int, int, int, int]]:
        # newest first; equal times: the later-arriving visit first
        return sorted(self.visits[p], key=lambda r: (-r[0], -r[1]))[: self.width]

    def visit_count(self, p: int) -> int:
        return sum(r[2] not in NOT_COUNTED for r in self.visits[p])

    def typed(self, p: int) -> bool:
        return any(r[2] == TYPED for r in self.visits[p])


def assert_store_matches(store: VisitStore, ref: ReferenceStore, now: float) -> None:
    hist = store.histories(now)
    for p in range(store.n_pages):
        rows = ref.rows(p)
        k = len(rows)
        cols = list(zip(*rows, strict=True)) if rows else [[]] * 5
        np.testing.assert_array_equal(store.time[p, :k], cols[0])
        assert np.isnan(store.time[p, k:]).all()
        pad = [0] * (store.width - k)
        np.testing.assert_array_equal(store.visit_type[p], list(cols[2]) + pad)
        np.testing.assert_array_equal(store.origin_type[p], list(cols[3]) + pad)
        np.testing.assert_array_equal(store.redirect_target[p], list(cols[4]) + pad)
        assert store.visit_count[p] == ref.visit_count(p)
        assert bool(store.typed[p]) == ref.typed(p)
        # histories: whole-day ages trunc(now - t) (Firefox's integer division), padding 0
        ages = [math.trunc(now - t) for t in cols[0]] + pad
        np.testing.assert_array_equal(hist.visit_age_days[p], ages)
        np.testing.assert_array_equal(hist.visit_type[p], list(cols[2]) + pad)
        np.testing.assert_array_equal(hist.visit_origin_type[p], list(cols[3]) + pad)
        np.testing.assert_array_equal(hist.visit_redirect_target[p], list(cols[4]) + pad)
        assert hist.visit_count[p] == ref.visit_count(p)
        assert bool(hist.typed[p]) == ref.typed(p)
        last = store.last_visit()[p]
        assert (math.isnan(last) and k == 0) or last == cols[0][0]


@st.composite
def visit_streams(draw: st.DrawFn, n_pages: int) -> tuple[list, list, list, list]:
    """A stream of up to 24 visits over ``n_pages`` pages: times on a quarter-day grid (many
    ties, within and across streams), every type, redirects from earlier visits in the stream
    (each source redirects at most once)."""
    n = draw(st.integers(0, 24))
    page = draw(st.lists(st.integers(0, n_pages - 1), min_size=n, max_size=n))
    quarters = sorted(draw(st.lists(st.integers(-40, 8), min_size=n, max_size=n)))
    vtype = draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    from_visit = [-1] * n
    used: set[int] = set()
    for i in range(1, n):
        if vtype[i] in (R301, R302):
            src = draw(st.integers(-1, i - 1))
            if src >= 0 and src not in used:
                from_visit[i] = src
                used.add(src)
    return page, [q / 4 for q in quarters], vtype, from_visit


@settings(max_examples=80, deadline=None)
@given(
    width=st.sampled_from([1, 3, 10]),
    calls=st.lists(visit_streams(n_pages=4), min_size=1, max_size=4),
    now_quarters=st.integers(-44, 12),
    block=st.sampled_from([1, 2, 5, history_store.MERGE_BLOCK_ROWS]),
)
def test_store_equals_brute_force_reference(
    width: int, calls: list[tuple[list, list, list, list]], now_quarters: int, block: int
) -> None:
    # later calls may carry visits older than the stored ones (times are not ordered across
    # calls): the merge must still keep the newest rows, however many rows a block merges
    default = history_store.MERGE_BLOCK_ROWS
    history_store.MERGE_BLOCK_ROWS = block
    try:
        store = VisitStore(4, width=width)
        ref = ReferenceStore(4, width=width)
        for page, time, vtype, from_visit in calls:
            store.add(_stream(page, time, vtype, from_visit))
            ref.add(page, time, vtype, from_visit)
            assert_store_matches(store, ref, now_quarters / 4)
    finally:
        history_store.MERGE_BLOCK_ROWS = default


def test_store_equals_reference_on_long_random_streams() -> None:
    # many visits per page across calls (rows pushed out many times over), default width 10
    rng = np.random.default_rng(2024)
    store, ref = VisitStore(7), ReferenceStore(7)
    for _ in range(6):
        n = int(rng.integers(50, 200))
        page = rng.integers(0, 7, size=n).tolist()
        time = np.sort(rng.integers(-200, 0, size=n) / 2).tolist()
        vtype = rng.integers(1, 10, size=n).tolist()
        from_visit = [-1] * n
        used: set[int] = set()
        for i in range(1, n):
            src = int(rng.integers(max(0, i - 5), i))
            if vtype[i] in (R301, R302) and src not in used:
                from_visit[i] = src
                used.add(src)
        store.add(_stream(page, time, vtype, from_visit))
        ref.add(page, time, vtype, from_visit)
    assert_store_matches(store, ref, now=0.0)
    assert store.visit_count.sum() == sum(ref.visit_count(p) for p in range(7))


def test_eleventh_visit_pushes_the_oldest_row_out() -> None:
    store = VisitStore(2)
    # page 0: ten LINK visits on days -10..-1
    store.add(_stream([0] * 10, np.arange(-10.0, 0.0), [LINK] * 10))
    np.testing.assert_array_equal(store.time[0], np.arange(-1.0, -11.0, -1.0))  # -1, ..., -10
    # an 11th visit, TYPED, at day -0.5: rows -0.5, -1, ..., -9; the -10 visit is gone
    store.add(_stream([0], [-0.5], [TYPED]))
    np.testing.assert_array_equal(store.time[0], [-0.5] + list(np.arange(-1.0, -10.0, -1.0)))
    np.testing.assert_array_equal(store.visit_type[0], [TYPED] + [LINK] * 9)
    assert store.visit_count[0] == 11 and store.typed[0]
    # a 12th visit older than every row (day -20) is counted but not sampled
    before = store.time.copy()
    store.add(_stream([0], [-20.0], [LINK]))
    np.testing.assert_array_equal(store.time, before)
    assert store.visit_count[0] == 12
    # page 1 untouched
    assert np.isnan(store.time[1]).all() and store.visit_count[1] == 0 and not store.typed[1]


def test_equal_times_put_the_later_arrival_first() -> None:
    store = VisitStore(1)
    store.add(_stream([0], [-1.0], [LINK]))  # first
    store.add(_stream([0, 0], [-1.0, -1.0], [TYPED, BOOKMARK]))  # second, third
    # all at day -1: newest arrival first -> BOOKMARK, TYPED, LINK
    np.testing.assert_array_equal(store.visit_type[0, :3], [BOOKMARK, TYPED, LINK])
    assert store.visit_count[0] == 3
    # a fourth and fifth arrival at the same time go before them, the fifth first
    store.add(_stream([0, 0], [-1.0, -1.0], [RELOAD, EMBED]))
    np.testing.assert_array_equal(store.visit_type[0, :5], [EMBED, RELOAD, BOOKMARK, TYPED, LINK])


def test_visit_count_skips_types_firefox_does_not_count() -> None:
    store = VisitStore(1)
    # one visit of each type 1..9; counted: LINK, TYPED, BOOKMARK, 301, 302 = 5
    # (not: EMBED 4, DOWNLOAD 7, FRAMED_LINK 8, RELOAD 9)
    store.add(_stream([0] * 9, np.arange(9.0) - 10, list(range(1, 10))))
    assert store.visit_count[0] == 5
    assert store.typed[0]
    # uncounted visits are still sampled rows, newest first: types 9, 8, ..., 1
    np.testing.assert_array_equal(store.visit_type[0, :9], list(range(9, 0, -1)))
    # a page visited only by uncounted types has visit_count 0 and is not typed
    store2 = VisitStore(1)
    store2.add(_stream([0, 0, 0, 0], [-4.0, -3.0, -2.0, -1.0], [EMBED, DOWNLOAD, FRAMED, RELOAD]))
    assert store2.visit_count[0] == 0 and not store2.typed[0]
    assert (store2.visit_type[0, :4] != 0).all()


def test_redirect_chain_rows() -> None:
    # TYPED p0 -> 301 p1 -> 302 p2 (one stream), then a LINK to p1
    store = VisitStore(3)
    store.add(_stream([0, 1, 2], [-2.0, -2.0, -2.0], [TYPED, R301, R302], [-1, 0, 1]))
    store.add(_stream([1], [-1.0], [LINK]))
    # p0: its TYPED row led to a 301
    assert (store.visit_type[0, 0], store.origin_type[0, 0], store.redirect_target[0, 0]) == (
        TYPED,
        0,
        R301,
    )
    # p1: newest the LINK (no redirect), then the 301 that came from TYPED and led to a 302
    np.testing.assert_array_equal(store.visit_type[1, :2], [LINK, R301])
    np.testing.assert_array_equal(store.origin_type[1, :2], [0, TYPED])
    np.testing.assert_array_equal(store.redirect_target[1, :2], [0, R302])
    # p2: the 302 came from the 301
    assert (store.visit_type[2, 0], store.origin_type[2, 0], store.redirect_target[2, 0]) == (
        R302,
        R301,
        0,
    )
    hist = store.histories(0.0)
    # frecency scores a redirect by its origin: p1's 301 row counts as TYPED, p2's as 301
    np.testing.assert_array_equal(
        hist.effective_type[:, :2], [[TYPED, 0], [LINK, TYPED], [R301, 0]]
    )
    np.testing.assert_array_equal(hist.redirect_source[:, 0], [True, False, False])
    # only p0 was typed; the 301/302 landing pages were not
    np.testing.assert_array_equal(store.typed, [True, False, False])


def test_ages_are_whole_days_truncated_like_firefox_sql() -> None:
    # Ages are (now - time) in whole days truncated toward zero, as Firefox's SQL integer
    # division computes them: a visit half a day after `now` is 0 days old, two days after
    # it -2 (such visits only arise when a window's visits are added before its searches).
    store = VisitStore(1)
    store.add(_stream([0] * 5, [-1.5, -0.25, 0.0, 0.5, 2.0], [LINK] * 5))
    hist = store.histories(0.0)
    # rows newest first: 2.0, 0.5, 0.0, -0.25, -1.5
    # ages: trunc(-2) = -2, trunc(-0.5) = 0, trunc(0) = 0, trunc(0.25) = 0, trunc(1.5) = 1
    np.testing.assert_array_equal(hist.visit_age_days[0, :5], [-2.0, 0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(hist.visit_age_days[0, 5:], 0.0)  # padding
    # at now = 3.75: 1.75 -> 1, 3.25 -> 3, 3.75 -> 3, 4.0 -> 4, 5.25 -> 5
    np.testing.assert_array_equal(
        store.histories(3.75).visit_age_days[0, :5], [1.0, 3.0, 3.0, 4.0, 5.0]
    )


def test_bookmarks_keep_the_newest_time() -> None:
    store = VisitStore(4)
    # page 1 twice in one call (-5, -3) -> -3; page 2 at -4
    store.add_bookmarks(np.array([1, 1, 2]), np.array([-5.0, -3.0, -4.0]))
    # an older bookmark of page 1 does not replace -3; a newer one of page 2 replaces -4
    store.add_bookmarks(np.array([1, 2]), np.array([-10.0, -1.25]))
    np.testing.assert_array_equal(store.bookmarked, [False, True, True, False])
    np.testing.assert_array_equal(store.bookmark_time[1:3], [-3.0, -1.25])
    assert np.isnan(store.bookmark_time[[0, 3]]).all()
    hist = store.histories(2.5)
    # ages floor(2.5 + 3) = 5, floor(2.5 + 1.25) = 3; not bookmarked: 0 (not floor(2.5))
    np.testing.assert_array_equal(hist.bookmark_age_days, [0.0, 5.0, 3.0, 0.0])
    np.testing.assert_array_equal(hist.bookmarked, [False, True, True, False])
    # bookmarks are not visits
    assert store.visit_count.sum() == 0 and np.isnan(store.time).all()
    store.add_bookmarks(np.zeros(0, np.int64), np.zeros(0))  # no-op
    np.testing.assert_array_equal(store.bookmark_time[1:3], [-3.0, -1.25])


def test_histories_at_index_equal_full_histories_taken() -> None:
    rng = np.random.default_rng(8)
    store = VisitStore(6)
    n = 60
    store.add(
        _stream(
            rng.integers(0, 5, n),  # page 5 never visited
            np.sort(rng.uniform(-30, -0.1, n)),
            rng.integers(1, 10, n),
        )
    )
    store.add_bookmarks(np.array([0, 5]), np.array([-7.5, -2.0]))
    full = store.histories(1.5)
    assert isinstance(full, PageHistories) and full.n_pages == 6
    index = np.array([5, 2, 2, 0, 4])
    part = store.histories(1.5, index=index)
    want = full.take(index)
    for f in fields(PageHistories):
        np.testing.assert_array_equal(getattr(part, f.name), getattr(want, f.name), f.name)
    assert not full.is_place_query.any()


def test_from_world_holds_history_and_bookmarks() -> None:
    vocab = Vocabulary.from_words(["a", "b"])
    pages = Pages(
        user_offsets=np.array([0, 3]),
        host=np.array([0, 1, 2]),
        is_root=np.ones(3, bool),
        words=np.array([[0], [1], [0]], np.int32),
        n_url_words=np.ones(3, np.int64),
        vocabulary=vocab,
    )
    world = BrowsingWorld(
        name="synthetic",
        pages=pages,
        history=_stream([0, 1, 0], [-3.0, -2.0, -1.0], [LINK, TYPED, LINK]),
        bookmark_page=np.array([2]),
        bookmark_time=np.array([-4.0]),
        future=_stream([], [], []),
        future_search=np.zeros(0, bool),
        future_typed=np.zeros((0, 1), np.int32),
    )
    store = VisitStore.from_world(world)
    assert store.n_pages == 3 and store.width == 10
    np.testing.assert_array_equal(store.visit_count, [2, 1, 0])
    np.testing.assert_array_equal(store.typed, [False, True, False])
    np.testing.assert_array_equal(store.time[0, :2], [-1.0, -3.0])
    np.testing.assert_array_equal(store.bookmarked, [False, False, True])
    assert store.bookmark_time[2] == -4.0
    np.testing.assert_array_equal(store.last_visit()[:2], [-1.0, -2.0])
    assert np.isnan(store.last_visit()[2])


def test_empty_add_is_a_no_op() -> None:
    store = VisitStore(2)
    store.add(_stream([], [], []))
    assert np.isnan(store.time).all() and store.visit_count.sum() == 0
    store.add(_stream([1], [-1.0], [LINK]))
    assert store.time[1, 0] == -1.0 and store.visit_type[1, 0] == LINK


def test_errors_and_out_of_range_pages_leave_the_store_unchanged() -> None:
    with pytest.raises(DataFormatError):
        VisitStore(-1)
    with pytest.raises(DataFormatError):
        VisitStore(3, width=0)
    store = VisitStore(3)
    store.add(_stream([0], [-1.0], [LINK]))
    for bad in ([3], [0, -1], [2, 5]):
        n = len(bad)
        with pytest.raises(DataFormatError, match="page ids"):
            store.add(_stream(bad, [-0.5] * n, [TYPED] * n))
        with pytest.raises(DataFormatError, match="page ids"):
            store.add_bookmarks(np.array(bad), np.full(n, -0.5))
    np.testing.assert_array_equal(store.visit_count, [1, 0, 0])
    assert not store.typed.any() and not store.bookmarked.any()
    assert np.isnan(store.time[:, 1:]).all() and np.isnan(store.time[1:]).all()
    store.add(_stream([2], [-0.25], [LINK]))  # the store still works
    assert store.time[2, 0] == -0.25 and store.visit_count[2] == 1
