"""PageScoreCache: a kept value is valid exactly while the page's history and the ages its
scorer reads stay the same (``fedrank.simulation.frecency.score_cache``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.data.browsing import VisitStream
from fedrank.simulation.frecency.history_store import VisitStore
from fedrank.simulation.frecency.score_cache import PageScoreCache


def _store() -> VisitStore:
    store = VisitStore(3)
    store.add(
        VisitStream(
            page=np.array([0, 1, 0]),
            time=np.array([10.25, 11.75, 12.5]),
            visit_type=np.array([1, 2, 1], dtype=np.int8),
            from_visit=np.full(3, -1),
        )
    )
    store.add_bookmarks(np.array([2]), np.array([9.5]))
    return store


def test_a_value_is_valid_until_an_age_passes_its_limit() -> None:
    """Page 0's rows (times 12.5, 10.25) with limits (2, 5) days: valid until the newer
    row's age passes 2 at 15.5 (the older one passes 5 at 16.25); page 1 (11.75, limit
    inf) never expires by age; page 2's bookmark (9.5, limit 1) expires at 11.5."""
    store = _store()
    cache = PageScoreCache(store)
    now = 13.0
    index = np.arange(3)
    assert cache.stale(index, now).all()  # nothing kept yet
    rows = np.array([[2.0, 5.0], [np.inf, np.inf], [np.inf, np.inf]])
    bookmarks = np.array([np.inf, np.inf, 1.0])
    cache.put(index, np.array([[5.0, 6.0, 7.0]]), rows, bookmarks, now)
    np.testing.assert_array_equal(cache.values[0], [5.0, 6.0, 7.0])
    assert not cache.stale(index[:2], 15.49).any()
    assert cache.stale(index, 15.5).tolist() == [True, False, True]
    assert cache.stale(index, 11.6)[2] and not cache.stale(index, 11.49)[2]
    assert not cache.stale(index[1:2], 1e6).any()


def test_a_changed_page_is_stale_and_others_stay_kept() -> None:
    store = _store()
    cache = PageScoreCache(store)
    limits = np.full((3, 2), np.inf)
    cache.put(np.arange(3), np.ones((1, 3)), limits, np.full(3, np.inf), 13.0)
    store.add(
        VisitStream(
            page=np.array([1]), time=np.array([13.0]), visit_type=np.array([1], np.int8),
            from_visit=np.array([-1]),
        )
    )  # fmt: skip
    assert cache.stale(np.arange(3), 13.0).tolist() == [False, True, False]
    store.add_bookmarks(np.array([0]), np.array([13.0]))
    assert cache.stale(np.arange(3), 13.0).tolist() == [True, True, False]
    cache.put(np.array([0, 1]), np.zeros((1, 2)), limits[:2], np.full(2, np.inf), 13.0)
    assert not cache.stale(np.arange(3), 13.0).any()
    cache.clear()
    assert cache.stale(np.arange(3), 13.0).all()


@pytest.mark.parametrize("now", [13.0, 13.5, 13.999])
def test_reads_day_expires_at_the_next_day(now: float) -> None:
    store = _store()
    cache = PageScoreCache(store)
    limits = np.full((3, 2), np.inf)
    cache.put(np.arange(3), np.ones((1, 3)), limits, np.full(3, np.inf), now, reads_day=True)
    assert not cache.stale(np.arange(3), now).any()
    assert cache.stale(np.arange(3), 14.0).all()


def test_validity_ends_early_never_late() -> None:
    """The float32 end of validity is rounded down: at large times (float32 steps of 1/64
    day near 100,000) a value is never kept past the moment the age passes its limit."""
    store = VisitStore(1)
    t = 100_000.3
    store.add(
        VisitStream(
            page=np.array([0]), time=np.array([t]), visit_type=np.array([1], np.int8),
            from_visit=np.array([-1]),
        )
    )  # fmt: skip
    cache = PageScoreCache(store)
    cache.put(np.array([0]), np.ones((1, 1)), np.array([[3.0]]), np.array([np.inf]), t)
    assert cache.stale(np.array([0]), t + 4.0)[0]
    assert not cache.stale(np.array([0]), t + 3.9)[0]


def test_ages_ahead_of_the_clock_expire_when_they_change() -> None:
    """A visit 2.5 days ahead of ``now`` (a replayed visit of the next window) has age
    ``trunc(-2.5) = -2`` until ``now - time`` exceeds -2, half a day later; one 0.5 days
    ahead has age 0 (like -0.5 truncated) until a day after its time."""
    store = VisitStore(2)
    store.add(
        VisitStream(
            page=np.array([1, 0]), time=np.array([10.5, 12.5]),
            visit_type=np.array([1, 1], np.int8), from_visit=np.full(2, -1),
        )
    )  # fmt: skip
    cache = PageScoreCache(store)
    now = 10.0
    ages = np.trunc(now - store.time[:, :1])
    np.testing.assert_array_equal(ages[:, 0], [-2.0, 0.0])
    cache.put(np.arange(2), np.ones((1, 2)), ages, np.full(2, np.inf), now)
    assert cache.stale(np.arange(2), 10.499).tolist() == [False, False]
    assert cache.stale(np.arange(2), 10.5).tolist() == [True, False]
    assert cache.stale(np.arange(2), 11.499).tolist() == [True, False]
    assert cache.stale(np.arange(2), 11.5).tolist() == [True, True]


@pytest.mark.parametrize("limit", [1e308, np.inf])
def test_ends_beyond_float32_are_kept_without_overflow(limit: float) -> None:
    """A limit past float32's range (a huge cutoff) keeps the value for good, with no
    overflow warning from the cast."""
    store = _store()
    cache = PageScoreCache(store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put(np.arange(3), np.ones((1, 3)), np.full((3, 2), limit), np.full(3, limit), 13.0)
    assert not cache.stale(np.arange(3), 1e30).any()


def test_an_unknown_limit_is_never_kept() -> None:
    """A NaN limit (a NaN cutoff) ends at once: the page is scored again."""
    store = _store()
    cache = PageScoreCache(store)
    cache.put(np.arange(3), np.ones((1, 3)), np.full((3, 2), np.nan), np.full(3, np.inf), 13.0)
    assert cache.stale(np.arange(3)[:2], 13.0).all()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), now=st.floats(0.0, 40.0))
def test_stale_in_runs_is_stale_over_the_gathered_runs(seed: int, now: float) -> None:
    """The stale pages of runs of a page list (the searching users' listable pages) are
    :meth:`stale` over the runs gathered in order, for validities ending at, just before
    and just after ``now`` (float32) and pages never kept."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    cache = PageScoreCache(VisitStore(n))
    near = np.float32(now)
    below, above = np.nextafter(near, np.float32(-np.inf)), np.nextafter(near, np.float32(np.inf))
    ends = np.array([near, below, above, 0.0, 50.0, -np.inf], np.float32)
    cache._until[:] = rng.choice(ends, n)
    pages = np.sort(rng.choice(n, int(rng.integers(0, n + 1)), replace=False)).astype(np.int64)
    start = np.sort(rng.integers(0, pages.size + 1, int(rng.integers(1, 6)))).astype(np.int64)
    start[0] = 0
    start = np.append(start, pages.size)
    runs = rng.permutation(start.size - 1)[: int(rng.integers(0, start.size))]
    gathered = np.concatenate([pages[start[r] : start[r + 1]] for r in runs] + [pages[:0]])
    expected = gathered[cache.stale(gathered, now)]
    np.testing.assert_array_equal(cache.stale_in_runs(pages, start, runs, now), expected)
