"""Firefox's history of every page, kept up to date while a study runs (Mozilla paper,
Sec. 4; ``moz_places`` and ``moz_historyvisits``).

:class:`VisitStore` holds, for every page, what classic frecency reads: the rows of
Firefox's sampling query (the ``NUM_SAMPLED_VISITS`` newest visits, newest first, each with
its type, the type of the visit it was redirected from and the type of the redirect it led
to) and the page facts (``visit_count`` counting only the types Firefox counts, ``typed``,
bookmarks). New visits -- a URL-bar selection recorded as TYPED, a click of the AOL log --
are merged in with :meth:`VisitStore.add` (compiled, page by page);
:meth:`VisitStore.histories` gives the :class:`~fedrank.models.frecency.history.
PageHistories` at any time, ages in whole days as Firefox computes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedrank.core.arrays import unique_values
from fedrank.data.browsing import BrowsingWorld, VisitStream
from fedrank.errors import DataFormatError
from fedrank.models.frecency.history import (
    NOT_COUNTED_TYPES,
    NUM_SAMPLED_VISITS,
    PageHistories,
    VisitType,
)
from fedrank.simulation.frecency.pipeline import Pipeline

if TYPE_CHECKING:
    from fedrank.simulation.frecency.kernels.store import VisitRows

__all__ = ["MERGE_BLOCK_ROWS", "VisitStore"]

#: New visit rows :meth:`VisitStore.add` merges at a time.
MERGE_BLOCK_ROWS = 1 << 18


class VisitStore:
    """The newest visit rows and page facts of ``n_pages`` pages (see module docstring).

    Attributes:
        time: float64 ``(N, W)`` visit times (days; NaN: no row), newest first; rows of
            equal time in arrival order, the later visit first (as Firefox's index scan
            returns them).
        visit_type, origin_type, redirect_target: int8 ``(N, W)`` the row columns of
            :class:`~fedrank.models.frecency.history.PageHistories`.
        visit_count: int32 ``(N,)``; typed: bool ``(N,)``.
        bookmarked: bool ``(N,)``; bookmark_time: float64 ``(N,)`` the newest bookmark's
            time (NaN when none).
        version: how many times the store changed (:meth:`add`, :meth:`add_bookmarks`):
            histories read at the same version and time are the same.
        changed_at: int32 ``(N,)`` the version at which each page last changed (0: never):
            a page's history read at version ``v`` is still its history while
            ``changed_at <= v``.

    :meth:`changed_since` lists the pages changed after a version, so that what is kept
    about pages (scores, :class:`~fedrank.simulation.frecency.score_cache.PageScoreCache`)
    is brought up to date without reading every page.

    ``pipeline``: whether a large batch of visits merges in two halves of the pages on two
    threads (:class:`~fedrank.simulation.frecency.pipeline.Pipeline`; the same rows).
    """

    def __init__(
        self, n_pages: int, width: int = NUM_SAMPLED_VISITS, *, pipeline: Pipeline | None = None
    ) -> None:
        if n_pages < 0 or width < 1:
            raise DataFormatError(f"need n_pages >= 0 and width >= 1, got {n_pages}, {width}")
        self.time = np.full((n_pages, width), np.nan, order="F")
        self.visit_type = np.zeros((n_pages, width), dtype=np.int8, order="F")
        self.origin_type = np.zeros((n_pages, width), dtype=np.int8, order="F")
        self.redirect_target = np.zeros((n_pages, width), dtype=np.int8, order="F")
        self.visit_count = np.zeros(n_pages, dtype=np.int32)
        self.typed = np.zeros(n_pages, dtype=bool)
        self.bookmarked = np.zeros(n_pages, dtype=bool)
        self.bookmark_time = np.full(n_pages, np.nan)
        self._n_rows = np.zeros(n_pages, dtype=np.int16)
        self.version = 0
        self.changed_at = np.zeros(n_pages, dtype=np.int32)
        # the pages of every change after version _log_floor: (version, distinct pages)
        self._log_versions: list[int] = []
        self._log_pages: list[np.ndarray] = []
        self._log_size = 0
        self._log_floor = 0
        # the last answer of changed_since: ((version asked, store version), pages)
        self._since: tuple[tuple[int, int], np.ndarray] | None = None
        self.pipeline = pipeline or Pipeline()

    @classmethod
    def from_world(cls, world: BrowsingWorld, *, pipeline: Pipeline | None = None) -> VisitStore:
        """The store as of the study's start: the world's history and bookmarks."""
        store = cls(world.pages.n_pages, pipeline=pipeline)
        store.add_bookmarks(world.bookmark_page, world.bookmark_time)
        store.add(world.history)
        return store

    @property
    def n_pages(self) -> int:
        return int(self.time.shape[0])

    @property
    def width(self) -> int:
        return int(self.time.shape[1])

    def add_bookmarks(self, pages: np.ndarray, times: np.ndarray) -> None:
        """Bookmark ``pages`` at ``times`` (``foreign_count > 0`` from then on)."""
        pages = np.asarray(pages, dtype=np.int64)
        times = np.asarray(times, dtype=np.float64)
        self._check_pages(pages)
        self._changed(pages)
        self.bookmarked[pages] = True
        current = np.where(np.isnan(self.bookmark_time), -np.inf, self.bookmark_time)
        np.maximum.at(current, pages, times)
        self.bookmark_time = np.where(np.isfinite(current), current, np.nan)

    def add(self, visits: VisitStream) -> None:
        """Merge new visits (redirects resolved within ``visits``): every affected page keeps
        its ``width`` newest rows; counts and ``typed`` are updated."""
        if visits.n_visits == 0:
            return
        self._check_pages(visits.page)
        self._changed(visits.page)
        origin = visits.origin_type()
        target = visits.redirect_target()
        counted = ~np.isin(visits.visit_type, NOT_COUNTED_TYPES)
        many = visits.n_visits > self.n_pages // 16  # (a history: one pass over the pages)
        if many:
            added = np.bincount(visits.page, weights=counted, minlength=self.n_pages)
            self.visit_count += added.astype(np.int64)
        else:
            np.add.at(self.visit_count, visits.page, counted.astype(np.int64))
        self.typed[visits.page[visits.visit_type == VisitType.TYPED]] = True

        def merge(rows: np.ndarray) -> None:
            """Merge the visits at ``rows`` (ascending: in arrival order) a block at a time
            (bounds the temporaries of a large history): merging into the rows kept so far
            gives the same rows as merging everything at once."""
            for lo in range(0, rows.size, MERGE_BLOCK_ROWS):
                at = rows[lo : lo + MERGE_BLOCK_ROWS]
                self._merge(
                    visits.page[at],
                    visits.time[at],
                    {
                        "visit_type": visits.visit_type[at],
                        "origin_type": origin[at],
                        "redirect_target": target[at],
                    },
                )

        if not many:
            merge(np.arange(visits.n_visits))
            return
        # many: the lower and the upper half of the pages on two threads (a page's rows
        # depend only on its own visits, in their order)
        low = visits.page < self.n_pages // 2
        with self.pipeline.helper("fedrank-store") as pool:
            upper = pool.submit(merge, np.flatnonzero(~low))
            merge(np.flatnonzero(low))
            upper.result()

    def _changed(self, pages: np.ndarray) -> None:
        self.version += 1
        self.changed_at[pages] = self.version
        if pages.size > self.n_pages // 16:  # many: a mask is cheaper than a sort
            mask = np.zeros(self.n_pages, dtype=bool)
            mask[pages] = True
            distinct = np.flatnonzero(mask)
        else:
            distinct = unique_values(pages)
        self._log_versions.append(self.version)
        self._log_pages.append(distinct)
        self._log_size += distinct.size
        while self._log_size > max(self.n_pages, 1 << 16) and self._log_pages:
            # forget the oldest changes (a reader that old rereads every page)
            self._log_floor = self._log_versions.pop(0)
            self._log_size -= self._log_pages.pop(0).size

    def changed_since(self, version: int) -> np.ndarray | None:
        """The distinct pages (sorted) changed after ``version`` (by :meth:`add` or
        :meth:`add_bookmarks`), or ``None`` when the store no longer remembers that far
        back (every page may have changed). What the world keeps per page (the listed
        pages, the bonus slots, each kept score) asks the same question in a row: the last
        answer is kept (read-only, as every answer is)."""
        if version >= self.version:
            return np.zeros(0, dtype=np.int64)
        if version < self._log_floor:
            return None
        asked = (version, self.version)
        since = self._since
        if since is not None and since[0] == asked:
            return since[1]
        first = int(np.searchsorted(self._log_versions, version, side="right"))
        parts = self._log_pages[first:]
        changed = parts[0] if len(parts) == 1 else unique_values(np.concatenate(parts))
        self._since = (asked, changed)
        return changed

    def _merge(self, pages: np.ndarray, times: np.ndarray, new: dict[str, np.ndarray]) -> None:
        """Merge visit rows, in arrival order (``new``: their int8 columns), into their
        pages' rows: every affected page keeps its ``width`` newest, and of equal times
        the later arrival first -- the new rows, latest first, then the stored ones in
        their order (:func:`~fedrank.simulation.frecency.kernels.store.merge_rows`)."""
        from fedrank.simulation.frecency.kernels.store import VisitRows, merge_rows

        new_rows = VisitRows(
            times.astype(np.float64),
            *(np.ascontiguousarray(new[name], dtype=np.int8)
              for name in ("visit_type", "origin_type", "redirect_target")),
        )  # fmt: skip
        merge_rows(
            self.rows(), self._n_rows, pages.astype(np.int64), new_rows,
            np.argsort(pages, kind="stable"),
        )  # fmt: skip

    def rows(self) -> VisitRows:
        """The stored rows' columns as the compiled passes read them (views)."""
        from fedrank.simulation.frecency.kernels.store import VisitRows  # (numba: on first use)

        return VisitRows(self.time, self.visit_type, self.origin_type, self.redirect_target)

    def last_visit(self) -> np.ndarray:
        """float64 ``(N,)``: the newest visit's time (NaN for pages never visited)."""
        return self.time[:, 0].copy()

    def n_rows(self) -> np.ndarray:
        """int16 ``(N,)``: sampled rows per page (a view: do not modify)."""
        return self._n_rows

    def histories(
        self, now: float, index: np.ndarray | None = None, width: int | None = None
    ) -> PageHistories:
        """The pages' :class:`PageHistories` at time ``now`` (days): ages in whole days
        truncated toward zero (``trunc(now - time)``, Firefox's integer division), rows
        newest first; ``index`` selects pages, ``width`` keeps only the first rows (pages
        with at most ``width`` rows lose nothing)."""
        if index is None:
            idx: slice | np.ndarray = slice(None)
        else:
            idx = np.asarray(index, dtype=np.int64)
            self._check_pages(idx)
        cols = slice(None) if width is None else slice(0, max(int(width), 1))
        age = now - self.time[idx, cols]  # NaN where there is no row
        np.trunc(age, out=age)
        real = ~np.isnan(age)
        age[~real] = 0.0
        bm_time = self.bookmark_time[idx]
        bookmarked = self.bookmarked[idx]
        return PageHistories.build(
            age,
            np.where(real, self.visit_type[idx, cols], 0).astype(np.int8),
            self.visit_count[idx],
            visit_origin_type=self.origin_type[idx, cols],
            visit_redirect_target=self.redirect_target[idx, cols],
            bookmarked=bookmarked,
            typed=self.typed[idx],
            bookmark_age_days=np.where(bookmarked, np.trunc(now - np.nan_to_num(bm_time)), 0.0),
        )

    def _check_pages(self, pages: np.ndarray) -> None:
        if pages.size and (pages.min() < 0 or pages.max() >= self.n_pages):
            raise DataFormatError(
                f"page ids must be in 0..{self.n_pages - 1}, got {pages.min()}..{pages.max()}"
            )
