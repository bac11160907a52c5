"""Visit histories of many pages, as padded numpy arrays.

This is the input of the classic frecency scorer (paper Section 4; Firefox's pre-2024
``CalculateFrecency``): for every page, its sampled visits (the most recent ones, newest
first, at most ``V`` per page) and the page-level facts frecency needs.

Firefox transition (visit) types, as stored in ``moz_historyvisits.visit_type``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from fedrank.errors import DataFormatError


class VisitType(IntEnum):
    """``nsINavHistoryService`` transition types (``moz_historyvisits.visit_type``)."""

    LINK = 1
    TYPED = 2
    BOOKMARK = 3
    EMBED = 4
    REDIRECT_PERMANENT = 5
    REDIRECT_TEMPORARY = 6
    DOWNLOAD = 7
    FRAMED_LINK = 8
    RELOAD = 9


#: Number of visits Firefox samples per page (``places.frecency.numVisits``).
NUM_SAMPLED_VISITS = 10


@dataclass(frozen=True)
class PageHistories:
    """Sampled visits of ``n`` pages, padded to ``V`` visits per page.

    Attributes:
        visit_age_days: float64 ``(n, V)``; age of each sampled visit in days at scoring time
            (0 = today). Padding entries are ignored.
        visit_type: int8 ``(n, V)``; :class:`VisitType` value, ``0`` marks padding. Real
            visits come first in each row, newest first.
        visit_is_redirect_source: bool ``(n, V)``; the visit redirected to another page
            (classic frecency gives it ``redirectSourceVisitBonus`` instead of its type bonus).
        visit_count: int64 ``(n,)``; total number of visits ``|S_x|`` (>= sampled visits).
        bookmarked: bool ``(n,)``; the page has a bookmark.
        typed: bool ``(n,)``; the page was ever typed (``moz_places.typed``).
    """

    visit_age_days: np.ndarray
    visit_type: np.ndarray
    visit_is_redirect_source: np.ndarray
    visit_count: np.ndarray
    bookmarked: np.ndarray
    typed: np.ndarray

    def __post_init__(self) -> None:
        n_v = self.visit_type.shape
        if len(n_v) != 2:
            raise DataFormatError(
                f"visit_type must be 2-D (pages, visits), got shape {self.visit_type.shape}"
            )
        for name in ("visit_age_days", "visit_is_redirect_source"):
            if getattr(self, name).shape != n_v:
                raise DataFormatError(
                    f"{name} has shape {getattr(self, name).shape}, expected {n_v} like visit_type"
                )
        for name in ("visit_count", "bookmarked", "typed"):
            if getattr(self, name).shape != (n_v[0],):
                raise DataFormatError(
                    f"{name} has shape {getattr(self, name).shape}, expected ({n_v[0]},)"
                )

    @property
    def n_pages(self) -> int:
        return int(self.visit_type.shape[0])

    @property
    def visit_mask(self) -> np.ndarray:
        """bool ``(n, V)``: which entries are real visits."""
        return self.visit_type != 0

    @property
    def n_sampled(self) -> np.ndarray:
        """int64 ``(n,)``: number of sampled visits per page."""
        return self.visit_mask.sum(axis=1)

    def take(self, index: np.ndarray) -> PageHistories:
        """The histories of the pages at ``index`` (any integer array; result keeps its shape
        flattened to 1-D page order)."""
        idx = np.asarray(index).reshape(-1)
        return PageHistories(
            visit_age_days=self.visit_age_days[idx],
            visit_type=self.visit_type[idx],
            visit_is_redirect_source=self.visit_is_redirect_source[idx],
            visit_count=self.visit_count[idx],
            bookmarked=self.bookmarked[idx],
            typed=self.typed[idx],
        )

    def aged(self, days: float | np.ndarray) -> PageHistories:
        """The same histories seen ``days`` later (scalar, or one value per page)."""
        shift = np.asarray(days, dtype=np.float64)
        if shift.ndim == 1:
            shift = shift[:, None]
        return PageHistories(
            visit_age_days=self.visit_age_days + shift,
            visit_type=self.visit_type,
            visit_is_redirect_source=self.visit_is_redirect_source,
            visit_count=self.visit_count,
            bookmarked=self.bookmarked,
            typed=self.typed,
        )
