"""Compiled classic frecency points of stored pages (numba, imported on first use): what
:class:`~fedrank.simulation.frecency_world.FrecencyWorld` scores every iteration under the
newly published model (the scores of fixed vectors are kept and need no speed).

The additions are made in the order of
:func:`fedrank.models.frecency.classic.visit_sum` (each page's visits left to right,
the bookmark bonus's sum added last), so the values equal numpy's
:meth:`~fedrank.models.frecency.classic.ClassicFrecency.points100` bit for bit."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["rounded_frecency", "stored_points100"]


@numba.njit(cache=True, nogil=True)
def stored_points100(
    index: np.ndarray,
    n_rows: np.ndarray,
    time: np.ndarray,
    slot: np.ndarray,
    bookmarked: np.ndarray,
    now: float,
    cutoffs: np.ndarray,
    bucket_weights: np.ndarray,
    slot_weights: np.ndarray,
    bookmark_weight: float,
) -> np.ndarray:
    """``100 * points`` of the pages at ``index``: over each page's first ``n_rows`` rows
    (age ``trunc(now - time)`` days, bucket = how many of the non-decreasing ``cutoffs``
    lie below it), ``bucket_weights[bucket] * slot_weights[slot]`` (``slot_weights`` with
    the zero padding slot last), plus ``bookmark_weight`` times the bucket weights of the
    rows in a real slot for bookmarked pages; 0 for a page without rows."""
    padding = slot_weights.size - 1
    out = np.zeros(index.size)
    for k in range(index.size):
        i = index[k]
        rows = n_rows[i]
        if rows == 0:
            continue
        points = 0.0
        extra = 0.0
        for j in range(rows):
            age = np.trunc(now - time[i, j])
            bucket = 0
            for c in range(cutoffs.size):
                if age > cutoffs[c]:
                    bucket += 1
            w = bucket_weights[bucket]
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
        out[k] = points
    return out


@numba.njit(cache=True, nogil=True)
def rounded_frecency(
    points100: np.ndarray,
    index: np.ndarray,
    visit_count: np.ndarray,
    n_sampled: np.ndarray,
    bookmarked: np.ndarray,
    typed: np.ndarray,
    first_weight: float,
    unvisited_bookmark: float,
    unvisited_typed: float,
    rounding: bool,
) -> np.ndarray:
    """Frecency of the pages at ``index`` from their :func:`stored_points100`, as
    :meth:`~fedrank.models.frecency.classic.ClassicFrecency.from_points` (float64, no
    ``place:`` queries) gives it for one weight vector, in the same operations: sampled
    pages ``ceil(ceil(points / 100) * visit_count / sampled)`` (``points * visit_count /
    (100 * sampled)`` without ``rounding``), -1 for zero points; pages without a sampled
    visit ``first_weight * (unvisited_bookmark + typed * unvisited_typed) / 100`` (ceiled
    with ``rounding``) when bookmarked, else 0."""
    out = np.empty(index.size)
    for k in range(index.size):
        i = index[k]
        count = visit_count[i]
        sampled = n_sampled[i] if count > 0 else 0
        if sampled == 0:
            if bookmarked[i]:
                bonus = unvisited_bookmark + (1.0 if typed[i] else 0.0) * unvisited_typed
                value = first_weight * bonus / 100.0
                out[k] = np.ceil(value) if rounding else value
            else:
                out[k] = 0.0
        elif points100[k] == 0.0:
            out[k] = -1.0
        elif rounding:
            out[k] = np.ceil(np.ceil(points100[k] / 100.0) * np.float64(count) / sampled)
        else:
            out[k] = points100[k] * np.float64(count) / (100.0 * sampled)
    return out
