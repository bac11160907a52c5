"""What the conformance suites check saved states with: bit-for-bit equality of two states,
and the malformed variants of a saved state that loading must refuse."""

from __future__ import annotations

import copy
import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

ARRAY_KEYS = {"dtype", "shape", "data"}


def assert_identical(a: Any, b: Any, path: str = "state") -> None:
    """``a`` and ``b`` are the same state bit for bit: records of one type, arrays of one
    dtype, shape and bytes, floats of one bit pattern (``-0.0`` is not ``0.0``; NaN is
    NaN), nested states and mappings alike."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), (path, b)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (path, a.dtype, a.shape, b.dtype, b.shape)
        assert a.tobytes() == b.tobytes(), (path, a, b)
    elif isinstance(a, float):
        assert isinstance(b, float), (path, b)
        assert struct.pack("<d", a) == struct.pack("<d", b), (path, a, b)
    elif isinstance(a, tuple):
        assert type(a) is type(b) and len(a) == len(b), (path, a, b)
        names = getattr(a, "_fields", range(len(a)))
        for name, x, y in zip(names, a, b, strict=True):
            assert_identical(x, y, f"{path}.{name}")
    elif isinstance(a, Mapping):
        assert isinstance(b, Mapping) and list(a) == list(b), (path, a, b)
        for key in a:
            assert_identical(a[key], b[key], f"{path}[{key!r}]")
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def as_text(data: Any) -> str:
    """``data`` as JSON text: equal texts are equal bit for bit (``-0.0`` stays ``-0.0``)."""
    return json.dumps(data, sort_keys=True, allow_nan=False)


def malformed(saved: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(what is wrong, the saved state with that fault)`` for every fault loading must
    refuse: the saved state not an object, each key missing, each value of a wrong type
    (numbers as strings or booleans, arrays as numbers, lists as strings, settings of
    another value), each array with a wrong dtype, a value too few, a value of a wrong type,
    or one column more (a wrong shape), each list of states a state short -- inside nested
    states too."""
    yield "not an object", [saved]
    yield "a string", "state"
    for path, fault, value in _faults(saved, ()):
        yield f"{'/'.join(map(str, path))}: {fault}", _replaced(saved, path, value)


def _faults(obj: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str, Any]]:
    """``(where, what, replacement)`` for the values inside the saved state ``obj``."""
    for key, value in obj.items():
        where = (*path, key)
        yield path, f"without {key}", {k: v for k, v in obj.items() if k != key}
        if key == "type":
            yield where, "another type", f"Not{value}"
        elif isinstance(value, dict) and "type" in value:
            yield from _faults(value, where)
        elif isinstance(value, dict) and set(value) == ARRAY_KEYS:
            yield from _array_faults(value, where)
        elif isinstance(value, dict):
            yield where, "a list for an object", list(value.values())
            for name in value:
                yield (*where, name), "a string for a number", "x"
        elif isinstance(value, list):
            yield where, "a string for a list", "x"
            if value and all(isinstance(v, dict) and "type" in v for v in value):
                yield where, "a state short", value[:-1]
                for i, sub in enumerate(value):
                    yield from _faults(sub, (*where, i))
            elif value:
                yield (*where, 0), "a string for a number", "x"
        elif isinstance(value, bool):
            yield where, "a number for a boolean", int(value)
        else:  # a number, or a float saved as "nan" / "inf"
            yield where, "a boolean for a number", True
            yield where, "an unknown string for a number", "x"
            yield where, "null for a number", None
            if isinstance(value, int):
                yield where, "a fraction for an integer", value + 0.5


def _array_faults(
    array: dict[str, Any], where: tuple[Any, ...]
) -> Iterator[tuple[tuple[Any, ...], str, Any]]:
    dtype, shape, data = array["dtype"], array["shape"], array["data"]
    other = "int64" if dtype.startswith("float") else "float64"
    yield where, "a number for an array", 1.5
    yield where, f"dtype {other} for {dtype}", {**array, "dtype": other}
    yield where, "an unknown dtype", {**array, "dtype": "complex128"}
    yield where, "a negative shape", {**array, "shape": [-s for s in shape] if shape else [-1]}
    if data:
        yield where, "a value too few", {**array, "data": data[:-1]}
        yield where, "a string for a value", {**array, "data": ["x", *data[1:]]}
    if shape:
        rows = int(np.prod(shape[:-1]))
        wider = [*shape[:-1], shape[-1] + 1]
        columns = np.array(data, dtype=object).reshape(rows, shape[-1]).tolist()
        zero = False if dtype == "bool" else (0.0 if dtype.startswith("float") else 0)
        widened = [value for row in columns for value in (*row, zero)]
        yield where, "one column more", {**array, "shape": wider, "data": widened}


def _replaced(saved: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    """A deep copy of ``saved`` with the value at ``path`` replaced (``path == ()``: the
    whole state)."""
    if not path:
        return value
    out = copy.deepcopy(saved)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return out


def loads(owner: Any, data: Any) -> bool:
    """Whether ``owner`` (an aggregator or optimizer) loads the saved state ``data``; a
    refusal must be a clear error (a config or format error naming the fault), nothing
    else."""
    try:
        owner.state_from_json(data)
    except (ConfigError, DataFormatError):
        return False
    return True
