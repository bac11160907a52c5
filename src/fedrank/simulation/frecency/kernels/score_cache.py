"""Compiled part of :class:`fedrank.simulation.frecency.score_cache.PageScoreCache` (numba):
the stale pages among runs of a caller's page list, without gathering the runs first
(imported on first use)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["stale_in_runs"]


@numba.njit(cache=True, nogil=True)
def stale_in_runs(
    pages: np.ndarray, start: np.ndarray, runs: np.ndarray, until: np.ndarray, now: float
) -> np.ndarray:
    """The entries of ``pages[start[r]:start[r + 1]]``, for every ``r`` of ``runs`` in
    order, whose validity ``until[page]`` (float32, compared as float64) is not after
    ``now``."""
    total = 0
    for r in runs:
        total += start[r + 1] - start[r]
    out = np.empty(total, dtype=np.int64)
    k = 0
    for r in runs:
        for i in range(start[r], start[r + 1]):
            page = pages[i]
            if not np.float64(until[page]) > now:
                out[k] = page
                k += 1
    return out[:k].copy()
