"""Bounding the L2 norm of client updates.

A server that averages updates lets one client with a huge update steer the model: a single
huge frecency gradient among 100 honest ones flips 15 of 22 weights (docs/service.md,
Poisoning).
Scaling every update down to L2 norm at most ``bound`` before aggregation caps what one
message can move (the same clipping that differential privacy needs before it adds noise:
McMahan et al. 2018, "Learning Differentially Private Recurrent Language Models").
"""

from __future__ import annotations

import math

import numpy as np

from fedrank.errors import ConfigError


def clip_l2(updates: np.ndarray, bound: float) -> np.ndarray:
    """Each row of ``(C, d)`` ``updates`` (or a single ``(d,)`` vector) scaled down to L2
    norm at most ``bound`` (rows within it unchanged; a float64 copy)."""
    if not (np.isfinite(bound) and bound > 0):
        raise ConfigError(f"the norm bound must be a finite number > 0, got {bound}")
    mat = np.array(updates, dtype=np.float64, ndmin=1)
    norms = np.linalg.norm(mat, axis=-1, keepdims=True)
    return mat * (bound / np.maximum(norms, bound))  # 1 within the bound: no 0-division


def geometric_bound(
    bound: float, within: float, quantile: float, eta: float, low: float, high: float
) -> float:
    """Andrew et al.'s (2021) update of an adaptive bound: ``C exp(-eta (b - gamma))`` for
    the share ``b`` (``within``) of a round's updates whose norm was at most ``C``,
    clamped to ``[low, high]``. Its fixed point is the ``gamma``-quantile of the norms
    (:class:`~fedrank.aggregators.norm_bounded.NormBounded` counts ``b`` exactly,
    :class:`~fedrank.privacy.adaptive_clip.AdaptiveClip` with noise)."""
    return min(max(bound * math.exp(-eta * (within - quantile)), low), high)
