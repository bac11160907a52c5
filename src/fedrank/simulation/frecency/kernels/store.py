"""Compiled helpers of :class:`~fedrank.simulation.frecency.history_store.VisitStore`
(numba, imported on first use)."""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

__all__ = ["VisitRows", "merge_rows"]


class VisitRows(NamedTuple):
    """Visit rows as the compiled passes read them: the store's ``(N, W)`` columns (or a
    batch's ``(n,)`` new rows).

    Attributes:
        time: float64 visit times (days; NaN: no row).
        visit_type, origin_type, redirect_target: int8, the columns of
            :class:`~fedrank.models.frecency.history.PageHistories`.
    """

    time: np.ndarray
    visit_type: np.ndarray
    origin_type: np.ndarray
    redirect_target: np.ndarray


@numba.njit(cache=True, nogil=True)
def _before(time_a: float, tie_a: int, time_b: float, tie_b: int) -> bool:
    """Row order: newer first, then the smaller tie key."""
    if time_a != time_b:
        return time_a > time_b
    return tie_a < tie_b


@numba.njit(cache=True, nogil=True)
def merge_rows(
    stored: VisitRows, n_rows: np.ndarray, pages: np.ndarray, new: VisitRows, by_page: np.ndarray
) -> None:
    """Merge ``new`` visit rows of ``pages`` (arrival order; ``by_page``: their stable order
    by page) into every affected page's ``stored`` rows (``n_rows`` per page), in place:
    the page keeps its ``width`` newest rows, of equal times the new rows first, the later
    arrival first, then the stored rows in their order (tie keys ``n_new - 1 - arrival``
    and ``n_new + column``)."""
    time, visit_type, origin_type, redirect_target = stored
    times, new_visit_type, new_origin_type, new_redirect_target = new
    width = time.shape[1]
    n_new = pages.size
    top_time = np.empty(width, np.float64)
    top_tie = np.empty(width, np.int64)
    top_v = np.empty(width, np.int8)
    top_o = np.empty(width, np.int8)
    top_r = np.empty(width, np.int8)
    lo = 0
    while lo < n_new:
        page = pages[by_page[lo]]
        hi = lo
        while hi < n_new and pages[by_page[hi]] == page:
            hi += 1
        kept = 0
        # the stored rows, then the page's new rows: insert each into the top ``width``
        for k in range(n_rows[page] + hi - lo):
            if k < n_rows[page]:
                t, tie = time[page, k], n_new + k
                v, o, r = visit_type[page, k], origin_type[page, k], redirect_target[page, k]
            else:
                i = by_page[lo + k - n_rows[page]]
                t, tie = times[i], n_new - 1 - i
                v, o, r = new_visit_type[i], new_origin_type[i], new_redirect_target[i]
            pos = kept
            while pos > 0 and _before(t, tie, top_time[pos - 1], top_tie[pos - 1]):
                pos -= 1
            if pos >= width:
                continue
            for z in range(min(kept, width - 1), pos, -1):
                top_time[z] = top_time[z - 1]
                top_tie[z] = top_tie[z - 1]
                top_v[z] = top_v[z - 1]
                top_o[z] = top_o[z - 1]
                top_r[z] = top_r[z - 1]
            top_time[pos] = t
            top_tie[pos] = tie
            top_v[pos] = v
            top_o[pos] = o
            top_r[pos] = r
            kept = min(kept + 1, width)
        for z in range(width):
            if z < kept:
                time[page, z] = top_time[z]
                visit_type[page, z] = top_v[z]
                origin_type[page, z] = top_o[z]
                redirect_target[page, z] = top_r[z]
            else:
                time[page, z] = np.nan
                visit_type[page, z] = 0
                origin_type[page, z] = 0
                redirect_target[page, z] = 0
        n_rows[page] = kept
        lo = hi
