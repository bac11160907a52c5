"""Page scores kept between searches while they cannot have changed.

A study scores the pages of every searching user again and again under the same fixed
scoring: the users' hidden preference, Firefox's default weights (control-no-decay), the
control branch's stored frecency, the final model during evaluation. A page's score under
a fixed scoring changes only when its history changes (a new visit or bookmark: the store's
:attr:`~fedrank.simulation.frecency.history_store.VisitStore.changed_at`) or when one of its
whole-day ages passes the limit its scorer names
(:meth:`~fedrank.models.frecency.scorer.PageScorer.fresh_age_limits`: for classic frecency,
the cutoff of the row's age bucket). :class:`PageScoreCache` keeps every page's values with
the store version they were read at and the time they stop being valid, so only pages that
may have changed are scored again; what it returns is what scoring every page again would
give, bit for bit.
"""

from __future__ import annotations

import numpy as np

from fedrank.simulation.frecency.history_store import VisitStore

__all__ = ["FLOAT32_MAX", "VALIDITY_MARGIN", "PageScoreCache"]

#: Relative margin by which a page's validity ends early (absorbs the rounding of
#: ``now - time``): ending early only costs a recomputation.
VALIDITY_MARGIN = 1e-9
#: Ends beyond float32's range are kept at its largest value (earlier, so still valid).
FLOAT32_MAX = float(np.finfo(np.float32).max)


class PageScoreCache:
    """``n_values`` values per page of ``store`` under one fixed scoring, each valid from the
    store version it was read at until a time (float32, rounded down).

    Attributes:
        values: float64 ``(n_values, N)`` the last values put for each page.
    """

    def __init__(self, store: VisitStore, n_values: int = 1) -> None:
        self.store = store
        self.values = np.zeros((n_values, store.n_pages))
        self._until = np.full(store.n_pages, -np.inf, dtype=np.float32)
        self._synced = store.version  # the store's changes up to here are in _until

    def clear(self) -> None:
        """Forget every value (the scoring changed)."""
        self._until.fill(-np.inf)
        self._synced = self.store.version

    def _sync(self) -> None:
        """End the validity of every page the store changed since the last sync."""
        if self._synced == self.store.version:
            return
        changed = self.store.changed_since(self._synced)
        if changed is None:
            self._until.fill(-np.inf)
        else:
            self._until[changed] = -np.inf
        self._synced = self.store.version

    def synced(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, until)``, the validity of every page the store changed since ended:
        for compiled callers that read and put values under :meth:`stale`'s and
        :meth:`put`'s rules (:mod:`~fedrank.simulation.frecency.kernels.classic`)."""
        self._sync()
        return self.values, self._until

    def stale(self, index: np.ndarray, now: float) -> np.ndarray:
        """bool: which pages at ``index`` must be scored again at time ``now``."""
        self._sync()
        return ~np.greater(self._until[index], np.float64(now))

    def stale_in_runs(
        self, pages: np.ndarray, start: np.ndarray, runs: np.ndarray, now: float
    ) -> np.ndarray:
        """:meth:`stale`'s pages among ``pages[start[r]:start[r + 1]]`` for every ``r`` of
        ``runs``, in that order, without gathering the runs (int64 ``pages`` and
        ``start``, runs inside ``start``)."""
        from fedrank.simulation.frecency.kernels.score_cache import stale_in_runs

        self._sync()
        return stale_in_runs(pages, start, runs, self._until, np.float64(now))

    def put(
        self,
        index: np.ndarray,
        values: np.ndarray,
        row_limits: np.ndarray,
        bookmark_limits: np.ndarray,
        now: float,
        *,
        reads_day: bool = False,
        times: np.ndarray | None = None,
    ) -> None:
        """Keep ``values`` (``(n_values, m)``) of the pages at ``index``, scored at ``now``
        from the store's current histories, their first ``row_limits.shape[1]`` rows
        (pages with more rows must not be put). A page stays valid until a row or its
        bookmark grows older than its limit (whole-day ages ``trunc(now - time)``,
        :func:`_ends`), or, with ``reads_day``, until the next day. ``times``: the pages'
        ``store.time[index, :width]`` when the caller has read them."""
        self._sync()
        index = np.asarray(index, dtype=np.int64)
        width = row_limits.shape[1]
        times = self.store.time[index, :width] if times is None else times
        rows = _ends(times, row_limits)
        rows[np.isnan(times)] = np.inf
        until = rows.min(axis=1, initial=np.inf)
        bookmark = self.store.bookmark_time[index]
        has = self.store.bookmarked[index] & ~np.isnan(bookmark)
        until[has] = np.minimum(until[has], _ends(bookmark[has], bookmark_limits[has]))
        if reads_day:
            until = np.minimum(until, _ends(np.floor(now), 0.0))
        until32 = np.minimum(until, FLOAT32_MAX).astype(np.float32)  # inf: the largest
        high = until32.astype(np.float64) > until
        until32[high] = np.nextafter(until32[high], np.float32(-np.inf))
        self.values[:, index] = values
        self._until[index] = until32


def _ends(start: np.ndarray | float, limit: np.ndarray | float) -> np.ndarray:
    """When the whole-day age ``trunc(now - start)`` passes the whole number ``limit``,
    minus a margin: at ``start + limit + 1`` for ``limit >= 0``; for a negative limit (a
    visit or bookmark ahead of the clock) as soon as ``now - start`` exceeds it."""
    lim = np.asarray(limit, dtype=np.float64)
    end = np.asarray(start, dtype=np.float64) + lim + (lim >= 0)
    return end - VALIDITY_MARGIN * (np.abs(np.where(np.isfinite(end), end, 0.0)) + 1.0)
