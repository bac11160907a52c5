"""Compiled part of :mod:`fedrank.core.group_sort` (numba, imported on first use)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["sort_each_group"]


@numba.njit(cache=True, nogil=True)
def sort_each_group(key: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The positions of ``key`` ordered ascending inside every group
    ``offsets[g]:offsets[g + 1]`` (groups stay in place; merge sort: ties keep their
    order)."""
    out = np.empty(key.size, np.int64)
    for g in range(offsets.size - 1):
        lo = offsets[g]
        hi = offsets[g + 1]
        out[lo:hi] = np.argsort(key[lo:hi], kind="mergesort") + lo
    return out
