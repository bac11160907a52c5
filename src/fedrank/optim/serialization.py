"""Input checks shared by the optimizers: their hyperparameters (a check the privacy
mechanisms and strategies use too) and the update and parameters of a step. Their states
are saved by :mod:`fedrank.core.state_json`."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from fedrank.core.validation import Accepts, Interval
from fedrank.errors import ConfigError, DataFormatError


def check_hyperparameter(
    name: str,
    value: float,
    *,
    low: float = 0.0,
    high: float = math.inf,
    low_inclusive: bool = False,
    high_inclusive: bool = True,
) -> float:
    """``value`` as a finite float inside the interval given, else :class:`ConfigError` in
    the one form of :mod:`fedrank.core.validation` (a constructor's argument, checked as a
    config's field is)."""
    closed = {
        (True, True): "both",
        (True, False): "left",
        (False, True): "right",
        (False, False): "neither",
    }[(low_inclusive, high_inclusive)]
    interval = Interval(Real, low, None if math.isinf(high) else high, closed=closed)
    if not interval.accepts(value):
        raise ConfigError(Accepts(interval).message(name, value))
    return float(value)


def check_step_inputs(
    update: np.ndarray, params: np.ndarray, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``(update, params)`` as float64 arrays of the state's ``shape``; the update must be
    finite (a NaN gradient would silently poison the optimizer state)."""
    g = np.asarray(update)
    p = np.asarray(params)
    if g.shape != shape:
        raise ConfigError(f"expected an update of shape {shape}, got shape {g.shape}")
    if p.shape != shape:
        raise ConfigError(f"expected params of shape {shape}, got shape {p.shape}")
    if g.dtype.kind not in "fiub":
        raise DataFormatError(f"update must be numeric, got dtype {g.dtype}")
    g = g.astype(np.float64, copy=False)
    if not np.all(np.isfinite(g)):
        raise DataFormatError(
            "update contains NaN or infinite values; the optimizer refuses to step on it"
        )
    return g, p


def step_dtype(params: np.ndarray) -> np.dtype:
    """The dtype of a step for ``params``: theirs if floating, else float64."""
    dtype = np.asarray(params).dtype
    return dtype if dtype.kind == "f" else np.dtype(np.float64)
