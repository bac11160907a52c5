"""Compiled parts of :func:`fedrank.simulation.frecency.intent.sample_targets` (numba): the
exponential race of every search over its eligible pages, from the Gaussian and
exponential draws the caller makes (imported on first use, so that processes that never
draw searches start without numba)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["race_keys", "race_winners"]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def race_keys(
    scores: np.ndarray,
    source: np.ndarray,
    first: np.ndarray,
    ptr: np.ndarray,
    noise: np.ndarray,
    key: np.ndarray,
    users: np.ndarray,
    user_offsets: np.ndarray,
    check: bool,
) -> tuple[int, np.ndarray]:
    """In place, ``key[k] /= max(score + noise[k], 0)`` for every (search, page) entry
    (+inf where the weight is 0; ``noise`` empty: none; the max as ``np.maximum``);
    returns ``(problem, has_positive)``: bool ``(S,)``, the search has a positive weight.
    With ``check`` (a caller's kept candidates), every page is first checked as one of
    the searching user's (``user_offsets[u] <= page < user_offsets[u + 1]``) with a score:
    ``problem`` is 2 at the first page that is not, 1 at the first NaN score (the keys are
    then left part divided), else 0. ``first`` and ``ptr`` must stay inside ``source``
    (the caller checks the offsets)."""
    has_positive = np.zeros(ptr.size - 1, np.bool_)
    for s in range(ptr.size - 1):
        lo = user_offsets[users[s]]
        hi = user_offsets[users[s] + 1]
        for k in range(ptr[s], ptr[s + 1]):
            page = source[first[s] + k - ptr[s]]
            if check:
                if page < lo or page >= hi:
                    return 2, has_positive
                if np.isnan(scores[page]):
                    return 1, has_positive
            weight = scores[page]
            if noise.size:
                weight += noise[k]
            if not (weight >= 0.0 or np.isnan(weight)):
                weight = 0.0
            if weight > 0.0:
                has_positive[s] = True
            key[k] = key[k] / weight
    return 0, has_positive


@numba.njit(cache=True, nogil=True)
def race_winners(key: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """The entry of the smallest ``key`` of every search (``ptr[s]:ptr[s + 1]``), the
    first on ties (ties have probability 0)."""
    out = np.empty(ptr.size - 1, np.int64)
    for s in range(ptr.size - 1):
        best = ptr[s]
        for k in range(ptr[s] + 1, ptr[s + 1]):
            if key[k] < key[best]:
                best = k
        out[s] = best
    return out
