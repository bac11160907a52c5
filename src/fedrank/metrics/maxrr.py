"""MaxRR: the reciprocal rank of the highest clicked result (FOLtR-ES, Section 5).

"we select the reciprocal rank of the highest clicked result (MaxRR) ... we only consider
clicks on the first ten results (n = 11, including the non-click event)." MaxRR is a
function of the *first* click only, so its distribution under a click model is the first
click distribution (:func:`fedrank.models.click_models.first_click_distribution`), and
its expectation is exact: ``E[MaxRR] = sum_k P(first click at k) / (k + 1)``.

Values are indexed ``0..depth``: index 0 is "no click" (MaxRR 0) and index ``v >= 1`` is a
first click at position ``v - 1`` (MaxRR ``1 / v``). The privatizer works on these indices.
"""

from __future__ import annotations

import numpy as np

from fedrank.models.click_models import DEFAULT_DEPTH, ClickModel, first_click_distribution


def maxrr_values(depth: int = DEFAULT_DEPTH) -> np.ndarray:
    """The ``depth + 1`` values MaxRR can take, by index: ``[0, 1, 1/2, ..., 1/depth]``."""
    return np.concatenate([[0.0], 1.0 / np.arange(1, depth + 1, dtype=np.float64)])


def maxrr_index_from_clicks(clicks: np.ndarray, depth: int = DEFAULT_DEPTH) -> np.ndarray:
    """``(I,)`` MaxRR value index of each click vector ``(I, K)`` (clicks below ``depth``
    are ignored)."""
    top = np.asarray(clicks, dtype=bool)[:, :depth]
    any_click = top.any(axis=1)
    return np.where(any_click, np.argmax(top, axis=1) + 1, 0)


def maxrr_from_index(index: np.ndarray, depth: int = DEFAULT_DEPTH) -> np.ndarray:
    """MaxRR values of value indices."""
    return maxrr_values(depth)[np.asarray(index)]


def expected_maxrr(model: ClickModel, ranked: np.ndarray) -> np.ndarray:
    """``(I,)`` exact expected MaxRR of ranked lists of grades ``(I, K)`` under ``model``."""
    dist = first_click_distribution(model, ranked)
    depth = dist.shape[1] - 1
    return dist[:, :depth] @ (1.0 / np.arange(1, depth + 1, dtype=np.float64))
