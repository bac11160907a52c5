"""Exact, JSON-compatible encodings of numpy arrays and floats for checkpointed state, and the
input checks shared by the optimizers.

Optimizer and aggregator states are checkpointed as JSON (ARCHITECTURE.md, Section 2: "state
as a small named record, so it can be checkpointed as JSON and restored exactly"). Finite
floats are written as JSON numbers: Python writes the shortest ``repr`` that reads back to the
same double, so ``json.dumps`` then ``json.loads`` is bit-exact (``-0.0`` included; float32
values widen to float64 exactly and narrow back exactly). JSON has no NaN or infinity, so those
are written as the strings ``"nan"``, ``"inf"`` and ``"-inf"``; the output therefore also
passes ``json.dumps(..., allow_nan=False)``.

An encoded array is ``{"dtype": "float64", "shape": [3], "data": [0.5, 1.0, -2.0]}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

#: dtypes an encoded array may have (floats, signed and unsigned integers, booleans).
SUPPORTED_KINDS = frozenset("fiub")


def float_to_json(value: float) -> float | str:
    """A JSON-safe, exactly restorable form of one float."""
    x = float(value)
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def float_from_json(value: Any) -> float:
    """Inverse of :func:`float_to_json`."""
    if isinstance(value, str):
        if value not in _NONFINITE:
            raise DataFormatError(
                f"expected a number or one of 'nan', 'inf', '-inf' in saved state, got {value!r}"
            )
        return _NONFINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataFormatError(f"expected a number in saved state, got {value!r}")
    return float(value)


def array_to_json(array: np.ndarray) -> dict[str, Any]:
    """``{"dtype", "shape", "data"}`` for a numeric array; :func:`array_from_json` restores it
    bit for bit."""
    arr = np.asarray(array)
    if arr.dtype.kind not in SUPPORTED_KINDS:
        raise DataFormatError(
            f"cannot save an array of dtype {arr.dtype} as JSON; use a numeric or boolean array"
        )
    flat = arr.reshape(-1)
    if arr.dtype.kind == "f":
        data: list[Any] = [float_to_json(v) for v in flat.tolist()]
    else:
        data = flat.tolist()
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "data": data}


def array_from_json(data: Mapping[str, Any]) -> np.ndarray:
    """Inverse of :func:`array_to_json` (returns a fresh, writeable array)."""
    try:
        dtype = np.dtype(data["dtype"])
        shape = tuple(int(s) for s in data["shape"])
        values = data["data"]
    except (KeyError, TypeError) as exc:
        raise DataFormatError(
            f"a saved array needs the keys 'dtype', 'shape' and 'data'; got {data!r:.200}"
        ) from exc
    if dtype.kind not in SUPPORTED_KINDS:
        raise DataFormatError(f"unsupported dtype {dtype} in saved array")
    if not isinstance(values, list) or len(values) != math.prod(shape):
        raise DataFormatError(
            f"saved array of shape {shape} needs {math.prod(shape)} values, got "
            f"{len(values) if isinstance(values, list) else type(values).__name__}"
        )
    if dtype.kind == "f":
        return np.array([float_from_json(v) for v in values], dtype=dtype).reshape(shape)
    return np.array(values, dtype=dtype).reshape(shape)


def check_state_type(data: Mapping[str, Any], expected: str) -> None:
    """Raise :class:`DataFormatError` unless ``data["type"] == expected``.

    Every saved state carries a ``"type"`` tag so that restoring, say, Adam state into Rprop
    fails loudly instead of producing nonsense.
    """
    if not isinstance(data, Mapping):
        raise DataFormatError(f"saved {expected} state must be a JSON object, got {data!r:.100}")
    found = data.get("type")
    if found != expected:
        raise DataFormatError(f"saved state is of type {found!r}, expected {expected!r}")


def require_keys(data: Mapping[str, Any], keys: tuple[str, ...], what: str) -> None:
    """Raise :class:`DataFormatError` naming the keys of ``keys`` missing from ``data``."""
    missing = [k for k in keys if k not in data]
    if missing:
        raise DataFormatError(f"saved {what} state lacks the key(s) {', '.join(missing)}")


# -- input checks shared by the optimizers -------------------------------------------------


def check_hyperparameter(
    name: str,
    value: float,
    *,
    low: float = 0.0,
    high: float = math.inf,
    low_inclusive: bool = False,
    high_inclusive: bool = True,
) -> float:
    """``value`` as a finite float inside the interval given, else :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    x = float(value)
    ok_low = x >= low if low_inclusive else x > low
    ok_high = x <= high if high_inclusive else x < high
    if not math.isfinite(x) or not (ok_low and ok_high):
        lo = "[" if low_inclusive else "("
        hi = "]" if high_inclusive else ")"
        raise ConfigError(f"{name} must be finite and lie in {lo}{low}, {high}{hi}, got {value!r}")
    return x


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
