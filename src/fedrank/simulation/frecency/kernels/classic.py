"""Compiled classic frecency of stored pages (numba, imported on first use): what
:class:`~fedrank.simulation.frecency.scoring.PageScores` scores every iteration under the
newly published model, and the kept scores of fixed scorings (the hidden preference, the
defaults, the control branch's stored frecency) brought up to date and read in one pass
(:func:`kept_fresh`, :func:`kept_stored`: the rules of
:class:`~fedrank.simulation.frecency.score_cache.PageScoreCache`).

Every entry reads the pages as one :class:`ClassicPages` and a weight vector as one
:class:`ClassicWeights` (numba takes named tuples of arrays as they are), unpacked once at
its start: the loops and the per-page helpers work on the arrays themselves
(:mod:`fedrank.simulation.frecency.kernels`).

The additions are made in the order of
:func:`fedrank.models.frecency.classic.visit_sum` (each page's visits left to right,
the bookmark bonus's sum added last), so the values equal numpy's
:meth:`~fedrank.models.frecency.classic.ClassicFrecency.points100` bit for bit."""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from fedrank.models.frecency.classic import (
    CLASSIC_SLOT_TABLE,
    N_BONUS_SLOTS,
    REDIRECT_SOURCE_SLOT,
)
from fedrank.simulation.frecency.kernels.store import VisitRows
from fedrank.simulation.frecency.score_cache import FLOAT32_MAX, VALIDITY_MARGIN

__all__ = [
    "ClassicPages",
    "ClassicWeights",
    "fresh_frecency",
    "kept_fresh",
    "kept_stored",
    "page_frecency",
    "page_points100",
    "row_slots",
]


class ClassicPages(NamedTuple):
    """What the compiled classic scorers read of every stored page: the
    :class:`~fedrank.simulation.frecency.history_store.VisitStore`'s arrays and the rows'
    bonus slots (:func:`row_slots`).

    Attributes:
        n_rows: int16 ``(N,)`` sampled rows per page.
        time: float64 ``(N, W)`` the rows' visit times (NaN: no row).
        slot: uint8 ``(N, W)`` every row's bonus slot (``N_BONUS_SLOTS``: padding).
        bookmarked: bool ``(N,)``; visit_count: int32 ``(N,)``.
        n_sampled: int8 ``(N,)`` rows with a visit type; typed: bool ``(N,)``.
        visit_type: int8 ``(N, W)``; bookmark_time: float64 ``(N,)`` (NaN: none).
    """

    n_rows: np.ndarray
    time: np.ndarray
    slot: np.ndarray
    bookmarked: np.ndarray
    visit_count: np.ndarray
    n_sampled: np.ndarray
    typed: np.ndarray
    visit_type: np.ndarray
    bookmark_time: np.ndarray


class ClassicWeights(NamedTuple):
    """One classic weight vector as the compiled scorers read it, and Firefox's rounding.

    Attributes:
        cutoffs: the effective (non-decreasing) age cutoffs.
        bucket_weights: the age buckets' weights.
        slot_weights: the visit bonuses, with the padding slot's 0 last.
        bookmark_weight: the bookmark visit bonus.
        first_weight, unvisited_bookmark, unvisited_typed: ``firstBucketWeight``,
            ``unvisitedBookmarkBonus`` and ``unvisitedTypedBonus``.
        rounding: Firefox's integer frecency (``ceil``s), or the unrounded variant.
    """

    cutoffs: np.ndarray
    bucket_weights: np.ndarray
    slot_weights: np.ndarray
    bookmark_weight: float
    first_weight: float
    unvisited_bookmark: float
    unvisited_typed: float
    rounding: bool


@numba.njit(cache=True, nogil=True)
def row_slots(
    at: np.ndarray,
    rows: VisitRows,
    visit_count: np.ndarray,
    slots: np.ndarray,
    n_sampled: np.ndarray,
) -> None:
    """In place, for the pages at ``at``: ``slots[page]``, the bonus slot of every stored
    row as ``ClassicFrecency.row_slots`` gives it (the effective type's slot by
    ``CLASSIC_SLOT_TABLE`` over the type as uint8 -- a redirect visit takes its origin's
    type when it has one --; ``REDIRECT_SOURCE_SLOT`` for a visit that led to a permanent
    redirect, or to a temporary one from a visit not typed; ``N_BONUS_SLOTS`` for padding
    rows and pages with ``visit_count <= 0``), and ``n_sampled[page]``, its rows with a
    visit type."""
    visit_type, origin_type, redirect_target = (
        rows.visit_type, rows.origin_type, rows.redirect_target
    )  # fmt: skip
    padding = N_BONUS_SLOTS
    for k in range(at.size):
        i = at[k]
        counted = visit_count[i] > 0
        sampled = 0
        for j in range(visit_type.shape[1]):
            kind = np.int64(visit_type[i, j])
            if kind == 0:
                slots[i, j] = padding
                continue
            sampled += 1
            origin = np.int64(origin_type[i, j])
            effective = origin if (kind == 5 or kind == 6) and origin != 0 else kind
            slot = CLASSIC_SLOT_TABLE[effective & 0xFF]
            target = redirect_target[i, j]
            if target == 5 or (target == 6 and effective != 2):
                slot = REDIRECT_SOURCE_SLOT
            slots[i, j] = slot if counted else padding
        n_sampled[i] = sampled


@numba.njit(cache=True, nogil=True, inline="always")
def _bucket(age: float, cutoffs: np.ndarray) -> int:
    """How many of the non-decreasing ``cutoffs`` lie below ``age`` (its age bucket)."""
    bucket = 0
    for c in range(cutoffs.size):
        if age > cutoffs[c]:
            bucket += 1
    return bucket


@numba.njit(cache=True, nogil=True, inline="always")
def page_points100(
    i: int,
    rows: int,
    time: np.ndarray,
    slot: np.ndarray,
    bookmarked: np.ndarray,
    now: float,
    shift: float,
    cutoffs: np.ndarray,
    bucket_weights: np.ndarray,
    slot_weights: np.ndarray,
    bookmark_weight: float,
) -> float:
    """``100 * points`` of page ``i`` (``rows > 0``) over its first ``rows`` rows (age
    ``trunc(now - time) - shift`` days; bucket = how many of the non-decreasing
    ``cutoffs`` lie below it): ``bucket_weights[bucket] * slot_weights[slot]``
    (``slot_weights`` with the zero padding slot last), plus ``bookmark_weight`` times the
    bucket weights of the rows in a real slot for a bookmarked page; added visit after
    visit, the bookmark's sum last, as :func:`fedrank.models.frecency.classic.visit_sum`
    adds them."""
    padding = slot_weights.size - 1
    points = 0.0
    extra = 0.0
    for j in range(rows):
        age = np.trunc(now - time[i, j]) - shift
        w = bucket_weights[_bucket(age, cutoffs)]
        s = slot[i, j]
        term = w * slot_weights[s]
        in_slot = 1.0 if s != padding else 0.0
        if j == 0:
            points = term
            extra = w * in_slot
        else:
            points += term
            extra += w * in_slot
    if bookmarked[i]:
        points += bookmark_weight * extra
    return points


@numba.njit(cache=True, nogil=True, inline="always")
def page_frecency(
    points100: float,
    i: int,
    visit_count: np.ndarray,
    n_sampled: np.ndarray,
    bookmarked: np.ndarray,
    typed: np.ndarray,
    first_weight: float,
    unvisited_bookmark: float,
    unvisited_typed: float,
    rounding: bool,
) -> float:
    """Frecency of page ``i`` from its :func:`page_points100`, as
    :meth:`~fedrank.models.frecency.classic.ClassicFrecency.from_points` (float64, no
    ``place:`` queries) gives it for one weight vector, in the same operations: sampled
    pages ``ceil(ceil(points / 100) * visit_count / sampled)`` (``points * visit_count /
    (100 * sampled)`` without ``rounding``), -1 for zero points; pages without a sampled
    visit ``first_weight * (unvisited_bookmark + typed * unvisited_typed) / 100`` (ceiled
    with ``rounding``) when bookmarked, else 0."""
    count = visit_count[i]
    sampled = n_sampled[i] if count > 0 else 0
    if sampled == 0:
        if bookmarked[i]:
            bonus = unvisited_bookmark + (1.0 if typed[i] else 0.0) * unvisited_typed
            value = first_weight * bonus / 100.0
            return np.ceil(value) if rounding else value
        return 0.0
    if points100 == 0.0:
        return -1.0
    if rounding:
        return np.ceil(np.ceil(points100 / 100.0) * np.float64(count) / sampled)
    return points100 * np.float64(count) / (100.0 * sampled)


@numba.njit(cache=True, nogil=True, inline="always")
def _end(start: float, limit: float) -> float:
    """``score_cache._ends``: when the whole-day age ``trunc(now - start)`` passes the
    whole number ``limit``, minus the margin (``start + limit + 1``; for a negative limit
    ``start + limit``)."""
    end = start + limit + (1.0 if limit >= 0 else 0.0)
    return end - VALIDITY_MARGIN * (np.abs(end if np.isfinite(end) else 0.0) + 1.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _until32(until: float) -> np.float32:
    """``until`` as float32, rounded down (``PageScoreCache.put``)."""
    low = np.float32(min(until, FLOAT32_MAX))
    if np.float64(low) > until:
        low = np.nextafter(low, np.float32(-np.inf))
    return low


@numba.njit(cache=True, nogil=True)
def kept_fresh(
    index: np.ndarray,
    values: np.ndarray,
    until: np.ndarray,
    now: float,
    pages: ClassicPages,
    weights: ClassicWeights,
    into: np.ndarray,
) -> np.ndarray:
    """The kept fresh frecency of the pages at ``index`` under one vector (``values``,
    ``until``: a :class:`~fedrank.simulation.frecency.score_cache.PageScoreCache`'s): a
    page whose validity ``until[page]`` (float32) is not after ``now`` is scored (as
    :func:`page_points100` and :func:`page_frecency`) into ``values[0, page]`` and kept
    until one of its rows' whole-day ages passes the floor of its bucket's cutoff (never,
    in the last bucket); returns ``values[0]`` at ``index``, and writes them at the pages
    of both rows of ``into`` (``(2, N)``; ``(0, 0)``: nowhere)."""
    n_rows, time, slot, bookmarked, visit_count, n_sampled, typed, _, _ = pages
    (cutoffs, bucket_weights, slot_weights, bookmark_weight, first_weight, unvisited_bookmark,
     unvisited_typed, rounding) = weights  # fmt: skip
    row_limits = np.empty(cutoffs.size + 1)
    row_limits[:-1] = np.floor(cutoffs)
    row_limits[-1] = np.inf
    out = np.empty(index.size)
    for k in range(index.size):
        i = index[k]
        if not np.float64(until[i]) > now:  # stale: scored again and kept
            rows = n_rows[i]
            points = 0.0
            valid = np.inf
            if rows > 0:
                points = page_points100(
                    i, rows, time, slot, bookmarked, now, 0.0, cutoffs, bucket_weights,
                    slot_weights, bookmark_weight,
                )  # fmt: skip
                for j in range(rows):
                    limit = row_limits[_bucket(np.trunc(now - time[i, j]), cutoffs)]
                    valid = min(valid, _end(time[i, j], limit))
            values[0, i] = page_frecency(
                points, i, visit_count, n_sampled, bookmarked, typed, first_weight,
                unvisited_bookmark, unvisited_typed, rounding,
            )  # fmt: skip
            until[i] = _until32(valid)
        out[k] = values[0, i]
        if into.shape[0]:
            into[0, i] = into[1, i] = out[k]
    return out


@numba.njit(cache=True, nogil=True)
def kept_stored(
    index: np.ndarray,
    values: np.ndarray,
    until: np.ndarray,
    now: float,
    pages: ClassicPages,
    weights: ClassicWeights,
    decay_rate: float,
    lift: np.ndarray,
    into: np.ndarray,
) -> np.ndarray:
    """``(2, m)``: the kept stored and origin frecency of the pages at ``index`` under the
    ``weights`` (the defaults), ``ClassicFrecency.stored_slots`` with Firefox's rounding:
    the score as of the newest sampled visit, or of the newest bookmark when unsampled,
    then ``ROUND(v * decay_rate)`` once per whole day since while ``v > 0`` (integers
    below ``lift.shape[1]`` by its tables of ``2 ** level`` days,
    ``classic.decay_tables``, any other value day by day). A page whose validity
    ``until[page]`` is not after ``now`` is scored into ``values[:, page]`` and kept until
    one of its rows' or its bookmark's whole-day age changes. Both are also written at the
    pages of ``into``'s rows (``(2, N)``; ``(0, 0)``: nowhere)."""
    n_rows, time, slot, bookmarked, visit_count, n_sampled, typed, visit_type, bookmark_time = pages
    (cutoffs, bucket_weights, slot_weights, bookmark_weight, first_weight, unvisited_bookmark,
     unvisited_typed, _) = weights  # fmt: skip
    out = np.empty((2, index.size))
    for k in range(index.size):
        i = index[k]
        if not np.float64(until[i]) > now:  # stale: scored again and kept
            rows = n_rows[i]
            bookmark_age = 0.0
            if bookmarked[i]:
                bookmark_age = np.trunc(
                    now - (0.0 if np.isnan(bookmark_time[i]) else bookmark_time[i])
                )
            newest = np.inf
            valid = np.inf
            for j in range(rows):
                age = np.trunc(now - time[i, j])
                if visit_type[i, j] != 0 and age < newest:
                    newest = age
                valid = min(valid, _end(time[i, j], age))
            if bookmarked[i] and not np.isnan(bookmark_time[i]):
                valid = min(valid, _end(bookmark_time[i], bookmark_age))
            if not np.isfinite(newest):
                newest = 0.0
            sampled = n_sampled[i] > 0 and visit_count[i] > 0
            since = max(np.floor(newest if sampled else bookmark_age), 0.0)
            points = 0.0
            if rows > 0:
                points = page_points100(
                    i, rows, time, slot, bookmarked, now, since, cutoffs, bucket_weights,
                    slot_weights, bookmark_weight,
                )  # fmt: skip
            fresh = page_frecency(
                points, i, visit_count, n_sampled, bookmarked, typed, first_weight,
                unvisited_bookmark, unvisited_typed, True,
            )  # fmt: skip
            values[0, i] = _daily_decay(fresh, int(since), decay_rate, lift)
            values[1, i] = fresh
            until[i] = _until32(valid)
        out[0, k] = values[0, i]
        out[1, k] = values[1, i]
        if into.shape[0]:
            into[0, i] = out[0, k]
            into[1, i] = out[1, k]
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _daily_decay(fresh: float, days: int, rate: float, lift: np.ndarray) -> float:
    """``fresh`` after ``days`` runs of Firefox's idle-daily ``ROUND(v * rate) WHERE v >
    0`` (``classic.daily_decay``): integers below ``lift.shape[1]`` by its tables of ``2 **
    level`` days (``classic.decay_tables``), any other value day by day."""
    if 0.0 < fresh < lift.shape[1] and fresh == np.floor(fresh) and days < (1 << lift.shape[0]):
        v = int(fresh)
        for level in range(lift.shape[0]):  # binary lifting: one table per bit of the days
            if (days >> level) & 1:
                v = lift[level, v]
        return float(v)
    decayed = fresh
    for _ in range(days):
        if decayed <= 0.0:
            break
        x = decayed * rate
        step = np.sign(x) * np.floor(np.abs(x) + 0.5)
        if step == decayed:
            break
        decayed = step
    return decayed


@numba.njit(cache=True, nogil=True)
def fresh_frecency(
    index: np.ndarray, now: float, pages: ClassicPages, weights: ClassicWeights, into: np.ndarray
) -> np.ndarray:
    """Fresh classic frecency of the pages at ``index`` (any order, repeats allowed) under
    one vector, nothing kept (:func:`page_points100`, :func:`page_frecency`; 0 points for
    a page without rows); also written at the pages of both rows of ``into`` (``(2, N)``;
    ``(0, 0)``: nowhere)."""
    n_rows, time, slot, bookmarked, visit_count, n_sampled, typed, _, _ = pages
    (cutoffs, bucket_weights, slot_weights, bookmark_weight, first_weight, unvisited_bookmark,
     unvisited_typed, rounding) = weights  # fmt: skip
    out = np.empty(index.size)
    for k in range(index.size):
        i = index[k]
        rows = n_rows[i]
        points = 0.0
        if rows > 0:
            points = page_points100(
                i, rows, time, slot, bookmarked, now, 0.0, cutoffs, bucket_weights,
                slot_weights, bookmark_weight,
            )  # fmt: skip
        value = page_frecency(
            points, i, visit_count, n_sampled, bookmarked, typed, first_weight,
            unvisited_bookmark, unvisited_typed, rounding,
        )  # fmt: skip
        out[k] = value
        if into.shape[0]:
            into[0, i] = into[1, i] = value
    return out
