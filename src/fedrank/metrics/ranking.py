"""Turning scores into ranked lists.

Every ranking in fedrank's LETOR simulations sorts by score, best first, and breaks ties by
document order in the data file (a stable sort), so a ranking is a deterministic function
of the scores: the zero-initialized models of FOLtR-ES tie every document, and then the
file order decides.
"""

from __future__ import annotations

import numpy as np


def rank_order(scores: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """``(I, min(k, W))`` positions of the ``k`` best-scored valid slots of each row, best
    first; rows with fewer than ``k`` valid slots end in padding slots (check ``valid``)."""
    masked = np.where(valid, scores, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")
    return order[:, : min(k, scores.shape[1])]


def ranked_labels(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """``(I, k)`` grades of the top ``k`` documents of each row, ``-1`` where a list is
    shorter than ``k``. ``labels`` is ``-1`` in padding slots."""
    valid = labels >= 0
    order = rank_order(scores, valid, k)
    top = np.take_along_axis(labels, order, axis=1).astype(np.int64)
    if top.shape[1] < k:
        top = np.pad(top, ((0, 0), (0, k - top.shape[1])), constant_values=-1)
    return top
