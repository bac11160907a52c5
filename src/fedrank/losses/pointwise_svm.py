"""Pointwise SVM ranking loss (Mozilla paper, Section 5.2).

If the URL bar showed suggestions ``x_1 .. x_n`` and the user chose ``x_i``, the loss is

    E = sum_{j != i} max(0, f(x_j) + Delta - f(x_i))

where ``f`` is the pointwise score (frecency) and ``Delta`` a margin chosen beforehand. Every
suggestion scored above the chosen one, or less than ``Delta`` below it, adds to the loss.

Score scale. On raw frecency the loss is not scale-free: multiplying every weight by
``c < 1`` shrinks every violated margin, so shrinking the weights always lowers the loss
without changing any ranking, and an optimizer exploits that (measured: the weights
collapse towards 0 and the "improvement" is an artefact; see ``docs/frecency.md``).
:func:`scaled_scores` offers ``"log"``: the loss on ``log(1 + max(f, 0))``, where a common
factor on the scores cancels in every difference, so only the *order* and the ratios of
the scores matter and ``Delta`` is a log-ratio (0.1: the chosen page should score ~10%
above the others). ``"raw"`` is the paper's formulation, ``Delta`` in frecency points.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

SCORE_SCALES: tuple[str, ...] = ("log", "raw")


def scaled_scores(scores: np.ndarray, scale: str) -> np.ndarray:
    """The scores the loss compares: ``log(1 + max(f, 0))`` for ``"log"`` (non-positive
    frecencies, Firefox's -1 and 0, all map to 0), unchanged for ``"raw"``."""
    if scale == "log":
        return np.log1p(np.maximum(np.asarray(scores, dtype=np.float64), 0.0))
    if scale == "raw":
        return np.asarray(scores, dtype=np.float64)
    raise ConfigError(f"unknown score scale {scale!r}; choose one of {', '.join(SCORE_SCALES)}")


def pointwise_svm_loss(
    scores: np.ndarray, selected: np.ndarray, valid: np.ndarray, delta: float
) -> np.ndarray:
    """Loss of every shown list under every parameter vector.

    Args:
        scores: ``(..., S, k)`` scores of the ``k`` shown suggestions of ``S`` searches; any
            leading axes (for example one per parameter vector) are kept.
        selected: ``(S,)`` index of the chosen suggestion in each list.
        valid: ``(S, k)`` bool, which list slots hold a suggestion (lists may be shorter
            than ``k``).
        delta: the margin ``Delta`` (>= 0).

    Returns:
        ``(..., S)`` losses.
    """
    if delta < 0 or not np.isfinite(delta):
        raise ConfigError(f"the margin Delta must be a finite number >= 0, got {delta}")
    scores = np.asarray(scores, dtype=np.float64)
    selected = np.asarray(selected, dtype=np.int64)
    valid = np.asarray(valid, dtype=bool)
    n_searches, k = valid.shape
    if scores.shape[-2:] != (n_searches, k) or selected.shape != (n_searches,):
        raise DataFormatError(
            f"scores {scores.shape}, selected {selected.shape} and valid {valid.shape} do not "
            "agree: expected scores (..., S, k), selected (S,), valid (S, k)"
        )
    if n_searches and (selected.min() < 0 or selected.max() >= k):
        raise DataFormatError(
            f"selected indices must lie in [0, {k}), got {selected.min()}..{selected.max()}"
        )
    if n_searches and not valid[np.arange(n_searches), selected].all():
        raise DataFormatError(
            "a selected index points at an empty list slot (valid is False there)"
        )
    chosen = scores[..., np.arange(n_searches), selected][..., None]
    margins = np.maximum(scores + delta - chosen, 0.0)
    others = valid.copy()
    others[np.arange(n_searches), selected] = False
    return np.where(others, margins, 0.0).sum(axis=-1)
