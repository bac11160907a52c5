"""Array helpers the hot paths share.

:func:`unique_values` is ``np.unique(x)`` for a 1-D array by sorting. numpy 2.4's plain
``np.unique`` (no ``return_*`` option) takes a hash-based path that is much slower than
sorting on large int64 arrays with a wide range of values, and the frecency simulator calls
it on arrays of that kind every iteration.
"""

from __future__ import annotations

import numpy as np

__all__ = ["unique_values"]


def unique_values(x: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``x`` (flattened), like ``np.unique(x)``; NaNs, if
    any, stay one NaN each as ``np.sort`` orders them (use ``np.unique`` for floats with
    NaN)."""
    values = np.sort(np.asarray(x).ravel())
    if values.size == 0:
        return values
    return values[np.r_[True, values[1:] != values[:-1]]]
