"""Visit histories of many pages, as padded numpy arrays.

This is the input of the classic frecency scorer (paper Section 4; Firefox's pre-2024
``CalculateFrecency``): for every page, its sampled visits (the most recent ones, newest
first, at most ``V`` per page) and the page-level facts frecency needs.

Firefox transition (visit) types, as stored in ``moz_historyvisits.visit_type``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
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


#: Visit types ``moz_places.visit_count`` does not count (Firefox's ``visit_count`` trigger
#: skips EMBED, DOWNLOAD, FRAMED_LINK and RELOAD visits).
NOT_COUNTED_TYPES: tuple[int, ...] = (
    int(VisitType.EMBED),
    int(VisitType.DOWNLOAD),
    int(VisitType.FRAMED_LINK),
    int(VisitType.RELOAD),
)

#: ``moz_historyvisits.visit_type`` values of redirect visits.
REDIRECT_TYPES: tuple[int, ...] = (
    int(VisitType.REDIRECT_PERMANENT),
    int(VisitType.REDIRECT_TEMPORARY),
)


@dataclass(frozen=True)
class PageHistories:
    """Sampled visit rows of ``n`` pages, padded to ``V`` rows per page.

    A row is what Firefox's classic sampling query returns for a page (``SQLFunctions.cpp``,
    ``CalculateFrecencyFunction``, Firefox 62-68): one row per visit, newest first, joined
    with the visit it was redirected *from* (``origin``, only for redirect visits) and the
    visit it redirected *to* (``target``, only when that one is a redirect); a visit that
    redirected to several visits gives one row per target. Ages are what Firefox computes:
    whole days for real profiles and the synthetic generator (any float is accepted, e.g. for
    analysis).

    Attributes:
        visit_age_days: float64 ``(n, V)``; age of each sampled visit in days at scoring time
            (0 = today). Padding entries are ignored.
        visit_type: int8 ``(n, V)``; the visit's own :class:`VisitType`, ``0`` marks padding.
            Real rows come first in each row, newest first.
        visit_origin_type: int8 ``(n, V)``; for a redirect visit (type 5/6), the type of the
            visit it was redirected from (``origin``; 0 when there is none).
        visit_redirect_target: int8 ``(n, V)``; the type (5 or 6) of the redirect visit this
            visit led to (``target``; 0 when it led to none).
        visit_count: int64 ``(n,)``; ``moz_places.visit_count`` (Firefox does not count
            EMBED, FRAMED_LINK, DOWNLOAD and RELOAD visits there).
        bookmarked: bool ``(n,)``; the page is bookmarked (``foreign_count > 0``).
        typed: bool ``(n,)``; the page was ever typed (``moz_places.typed``).
        is_place_query: bool ``(n,)``; a ``place:`` URL (a saved query, never scored).
        bookmark_age_days: float64 ``(n,)``; age of the page's newest bookmark (0 when not
            bookmarked); the cached frecency of an unvisited bookmark was computed then.
    """

    visit_age_days: np.ndarray
    visit_type: np.ndarray
    visit_origin_type: np.ndarray
    visit_redirect_target: np.ndarray
    visit_count: np.ndarray
    bookmarked: np.ndarray
    typed: np.ndarray
    is_place_query: np.ndarray
    bookmark_age_days: np.ndarray

    def __post_init__(self) -> None:
        n_v = self.visit_type.shape
        if len(n_v) != 2:
            raise DataFormatError(
                f"visit_type must be 2-D (pages, visits), got shape {self.visit_type.shape}"
            )
        for name in ("visit_age_days", "visit_origin_type", "visit_redirect_target"):
            if getattr(self, name).shape != n_v:
                raise DataFormatError(
                    f"{name} has shape {getattr(self, name).shape}, expected {n_v} like visit_type"
                )
        for name in PAGE_FIELDS:
            if getattr(self, name).shape != (n_v[0],):
                raise DataFormatError(
                    f"{name} has shape {getattr(self, name).shape}, expected ({n_v[0]},)"
                )

    @classmethod
    def build(
        cls,
        visit_age_days: np.ndarray,
        visit_type: np.ndarray,
        visit_count: np.ndarray,
        *,
        visit_origin_type: np.ndarray | None = None,
        visit_redirect_target: np.ndarray | None = None,
        bookmarked: np.ndarray | None = None,
        typed: np.ndarray | None = None,
        is_place_query: np.ndarray | None = None,
        bookmark_age_days: np.ndarray | None = None,
    ) -> PageHistories:
        """Histories with the optional columns defaulted: no redirects, not bookmarked, not
        typed, no ``place:`` query, bookmarks added now."""
        vtype = np.asarray(visit_type, dtype=np.int8)
        n = vtype.shape[0] if vtype.ndim else 0

        def rows(x: np.ndarray | None) -> np.ndarray:
            return np.zeros(vtype.shape, np.int8) if x is None else np.asarray(x, np.int8)

        def pages(x: np.ndarray | None, dtype: type) -> np.ndarray:
            return np.zeros(n, dtype) if x is None else np.asarray(x, dtype)

        return cls(
            visit_age_days=np.asarray(visit_age_days, dtype=np.float64),
            visit_type=vtype,
            visit_origin_type=rows(visit_origin_type),
            visit_redirect_target=rows(visit_redirect_target),
            visit_count=np.asarray(visit_count, dtype=np.int64),
            bookmarked=pages(bookmarked, bool),
            typed=pages(typed, bool),
            is_place_query=pages(is_place_query, bool),
            bookmark_age_days=pages(bookmark_age_days, np.float64),
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

    @property
    def effective_type(self) -> np.ndarray:
        """int8 ``(n, V)``: the type frecency scores a row by -- a redirect visit takes its
        origin's type (``IFNULL(origin.visit_type, v.visit_type)``), others their own."""
        redirected = np.isin(self.visit_type, REDIRECT_TYPES) & (self.visit_origin_type != 0)
        return np.where(redirected, self.visit_origin_type, self.visit_type).astype(np.int8)

    @property
    def redirect_source(self) -> np.ndarray:
        """bool ``(n, V)``: the row led to a redirect (``target`` exists, any type)."""
        return self.visit_redirect_target != 0

    def take(self, index: np.ndarray) -> PageHistories:
        """The histories of the pages at ``index`` (any integer array; result keeps its shape
        flattened to 1-D page order)."""
        idx = np.asarray(index).reshape(-1)
        return PageHistories(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def aged(self, days: float | np.ndarray) -> PageHistories:
        """The same histories seen ``days`` later (scalar, or one value per page)."""
        shift = np.asarray(days, dtype=np.float64)
        return replace(
            self,
            visit_age_days=self.visit_age_days + (shift[:, None] if shift.ndim == 1 else shift),
            bookmark_age_days=self.bookmark_age_days + shift,
        )


#: The per-page (1-D) fields of :class:`PageHistories`.
PAGE_FIELDS: tuple[str, ...] = (
    "visit_count",
    "bookmarked",
    "typed",
    "is_place_query",
    "bookmark_age_days",
)
