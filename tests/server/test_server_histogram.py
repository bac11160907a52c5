"""The commit-duration histogram: Prometheus semantics (le is inclusive, cumulative)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrank.server.histogram import Histogram


def test_bounds_are_inclusive_and_counts_cumulative() -> None:
    h = Histogram((0.01, 0.1, 1.0))
    for value in (0.0, 0.01, 0.05, 0.1, 0.5, 3.0):
        h.observe(value)
    view = h.view()
    assert view.cumulative == (2, 4, 5)
    assert view.count == 6
    assert view.total == pytest.approx(3.66)


@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), max_size=200))
def test_cumulative_counts_match_a_direct_count(values: list[float]) -> None:
    h = Histogram()
    for v in values:
        h.observe(v)
    view = h.view()
    assert view.cumulative == tuple(sum(v <= b for v in values) for b in view.bounds)
    assert view.count == len(values)
    assert view.total == pytest.approx(sum(values))


def test_observations_from_many_threads_are_all_counted() -> None:
    h = Histogram()

    def work() -> None:
        for _ in range(10_000):
            h.observe(0.003)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.view().count == 40_000
    assert h.view().cumulative[2] == 40_000  # 0.003 <= 0.005


@pytest.mark.parametrize("bounds", [(), (0.1, 0.01), (0.1, 0.1)])
def test_bad_bounds_are_refused(bounds: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="distinct and increasing"):
        Histogram(bounds)
