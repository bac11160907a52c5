"""Exact, JSON-compatible form of the aggregators' and optimizers' states.

Every state is a small record, a ``NamedTuple`` or a dataclass, so that it can be
checkpointed as JSON and restored exactly (docs/architecture.md): the server stores the
optimizer's state with each model and an iteration's aggregate with each close, and proxies
send merged aggregator states. :func:`encode_state` writes a record as one readable object,

    {"type": "WeightedMean", "dim": 3, "weighted_sum": {...}, "total_weight": 2.0, "count": 2}

-- its owner's name under ``"type"``, the owner's settings that a state only fits (such as
``dim``), then one key per field -- and :func:`decode_state` reads it back, taking each
field's type from the record's annotations, bit for bit:

* floats are JSON numbers. Python writes the shortest ``repr`` that reads back to the same
  double, so ``json.dumps`` then ``json.loads`` is exact (``-0.0`` and subnormals included).
  JSON has no NaN or infinity: they are the strings ``"nan"``, ``"inf"`` and ``"-inf"``
  (every NaN reads back as the standard quiet NaN), so the output also passes
  ``json.dumps(..., allow_nan=False)``;
* arrays are ``{"dtype": "float64", "shape": [3], "data": [0.5, 1.0, -2.0]}`` (numeric or
  boolean dtypes; float32 values widen to float64 exactly and narrow back exactly). A field
  annotated ``npt.NDArray[np.float64]`` must hold exactly that dtype, on saving and loading;
* ints, bools, strings and ``None`` are themselves; a tuple is a list, a mapping with string
  keys an object, and a nested record an object of its own with its class name as type;
* a field whose state belongs to another component -- ``NormBounded``'s inner aggregator,
  a ``Chain``'s transformations -- is written by that component's own ``state_to_json``
  (``nested``), so it keeps its own type and checks.

Loading is the server's parsing of untrusted input (a proxy's merged state, a store written
by an earlier run): every key, type, dtype and length is checked, and what does not fit
raises :class:`~fedrank.errors.DataFormatError` naming the key (a setting that differs, as a
state of another dimension, raises :class:`~fedrank.errors.ConfigError`). What only the owner
knows -- dimensions, shapes that must agree -- the owner checks after :func:`decode_state`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from fedrank.core.protocols import StateCodec
from fedrank.errors import ConfigError, DataFormatError

Record = TypeVar("Record")

_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

#: dtypes an encoded array may have (floats, signed and unsigned integers, booleans).
SUPPORTED_KINDS = frozenset("fiub")

#: How a setting is called in the error of a mismatch (by default its key).
_SETTING_NAMES = {"dim": "dimension"}

#: Where a nested component's state goes: one codec, or one per element of a tuple field.
Nested = StateCodec[Any] | Sequence[StateCodec[Any]]


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
        raise DataFormatError(f"expected a number in saved state, got {value!r:.100}")
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
        name, shape, values = data["dtype"], data["shape"], data["data"]
    except (KeyError, TypeError) as exc:
        raise DataFormatError(
            f"a saved array needs the keys 'dtype', 'shape' and 'data'; got {data!r:.200}"
        ) from exc
    dtype = _saved_dtype(name)
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise DataFormatError(
            f"a saved array's shape must be a list of integers >= 0, got {shape!r:.100}"
        )
    size = math.prod(shape)
    if not isinstance(values, list) or len(values) != size:
        got = len(values) if isinstance(values, list) else type(values).__name__
        raise DataFormatError(f"saved array of shape {tuple(shape)} needs {size} values, got {got}")
    if dtype.kind == "f":
        return np.array([float_from_json(v) for v in values], dtype=dtype).reshape(shape)
    valid = (lambda v: type(v) is bool) if dtype.kind == "b" else _is_int
    if not all(valid(v) for v in values):
        wanted = "true or false" if dtype.kind == "b" else "integers"
        raise DataFormatError(f"a saved {dtype} array holds {wanted} only, got {values!r:.100}")
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if info is not None and values and not info.min <= min(values) <= max(values) <= info.max:
        raise DataFormatError(
            f"a saved {dtype} array holds values in [{info.min}, {info.max}] only"
        )
    return np.array(values, dtype=dtype).reshape(shape)


def _saved_dtype(name: Any) -> np.dtype:
    """The dtype a saved array names: a supported dtype by its own name (``"float64"``, not
    ``"f8"`` or ``">f8"``), as :func:`array_to_json` writes it."""
    try:
        dtype = np.dtype(name) if isinstance(name, str) else None
    except (TypeError, ValueError, SyntaxError):
        dtype = None
    if dtype is None or dtype.name != name:
        raise DataFormatError(
            f"unknown dtype {name!r:.50} in saved array; saved arrays name a numeric or boolean "
            "dtype such as 'float64', 'int64' or 'bool'"
        )
    if dtype.kind not in SUPPORTED_KINDS:
        raise DataFormatError(f"unsupported dtype {dtype} in saved array")
    return dtype


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def encode_state(
    state: Any,
    tag: str,
    *,
    settings: Mapping[str, Any] | None = None,
    nested: Mapping[str, Nested] | None = None,
) -> dict[str, Any]:
    """``{"type": tag, **settings, <field>: <value>, ...}``: the record ``state`` as
    JSON-compatible values that :func:`decode_state` restores exactly (module docstring).

    Args:
        state: a ``NamedTuple`` or dataclass instance.
        tag: the name its owner saves it under (``"WeightedMean"``).
        settings: the owner's settings the state only fits (``{"dim": 3}``), written beside
            it and compared on loading.
        nested: the components that write the fields holding their states (a field's
            codec, or a tuple field's codecs, one per element).

    A field value that does not fit its annotation raises
    :class:`~fedrank.errors.DataFormatError`: it could not be loaded back.
    """
    fields = _fields(type(state), tag, settings, nested)
    out: dict[str, Any] = {"type": tag, **(settings or {})}
    for name, hint in fields:
        value, where = getattr(state, name), f"cannot save the {tag} state: field {name}"
        if nested and name in nested:
            out[name] = _encode_nested(nested[name], value, where)
        else:
            out[name] = _encode(value, hint, where)
    return out


def decode_state(
    data: Any,
    state_type: type[Record],
    tag: str,
    *,
    settings: Mapping[str, Any] | None = None,
    nested: Mapping[str, Nested] | None = None,
) -> Record:
    """The ``state_type`` record that :func:`encode_state` wrote as ``data``, with the same
    ``tag``, ``settings`` and ``nested`` codecs.

    Raises :class:`~fedrank.errors.DataFormatError` for another type tag, a missing key, or a
    value that does not fit its field's annotation (naming it), and
    :class:`~fedrank.errors.ConfigError` for a setting that differs from ``settings``.
    Keys beyond the type, the settings and the fields are ignored.
    """
    fields = _fields(state_type, tag, settings, nested)
    if not isinstance(data, Mapping):
        raise DataFormatError(f"saved {tag} state must be a JSON object, got {data!r:.100}")
    found = data.get("type")
    if found != tag:
        raise DataFormatError(f"saved state is of type {found!r:.100}, expected {tag!r}")
    settings = settings or {}
    missing = [key for key in (*settings, *(name for name, _ in fields)) if key not in data]
    if missing:
        raise DataFormatError(f"saved {tag} state lacks the key(s) {', '.join(missing)}")
    for key, expected in settings.items():
        if data[key] != expected or type(data[key]) is not type(expected):
            raise ConfigError(
                f"saved {tag} state has {_SETTING_NAMES.get(key, key)} {data[key]!r:.100}, "
                f"expected {expected!r}: it was saved by a {tag} of other settings"
            )
    values: dict[str, Any] = {}
    for name, hint in fields:
        where = f"saved {tag} state: field {name}"
        if nested and name in nested:
            values[name] = _decode_nested(nested[name], data[name], where)
        else:
            values[name] = _decode(data[name], hint, where)
    return state_type(**values)


def _encode_nested(codecs: Nested, value: Any, where: str) -> Any:
    """The state ``value`` as its component writes it, or a list of states, one per
    component of ``codecs``."""
    if not isinstance(codecs, Sequence):
        return codecs.state_to_json(value)
    pairs = zip(codecs, _one_per_codec(codecs, value, where), strict=True)
    return [codec.state_to_json(sub) for codec, sub in pairs]


def _decode_nested(codecs: Nested, data: Any, where: str) -> Any:
    """Inverse of :func:`_encode_nested` (a tuple of states for a sequence of codecs)."""
    if not isinstance(codecs, Sequence):
        return codecs.state_from_json(data)
    pairs = zip(codecs, _one_per_codec(codecs, data, where), strict=True)
    return tuple(codec.state_from_json(sub) for codec, sub in pairs)


def _one_per_codec(codecs: Sequence[StateCodec[Any]], value: Any, where: str) -> Sequence[Any]:
    """``value``, once it is a tuple or list of one state per codec."""
    if not isinstance(value, tuple | list) or len(value) != len(codecs):
        raise DataFormatError(
            f"{where} must list {len(codecs)} states, one per component, got {value!r:.100}"
        )
    return value


def _is_record(cls: Any) -> bool:
    return isinstance(cls, type) and (
        dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    )


@functools.cache
def _record_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """``(name, annotation)`` of each field of the record class ``cls``, in order."""
    if not _is_record(cls):
        raise TypeError(f"a state must be a NamedTuple or a dataclass, not {cls.__name__}")
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls) if f.init]
    else:
        names = list(cls._fields)  # type: ignore[attr-defined]
    return tuple((name, hints[name]) for name in names)


def _fields(
    cls: type,
    tag: str,
    settings: Mapping[str, Any] | None,
    nested: Mapping[str, Nested] | None,
) -> tuple[tuple[str, Any], ...]:
    """The fields of ``cls``, once the keys the codec is given fit them (a programming
    error otherwise: :class:`TypeError`)."""
    fields = _record_fields(cls)
    names = {name for name, _ in fields}
    clash = names & {"type", *(settings or {})}
    unknown = set(nested or {}) - names
    if clash or unknown:
        raise TypeError(
            f"{tag}: the settings and the type tag must not be fields ({sorted(clash)}), and "
            f"nested codecs must name fields ({sorted(unknown)})"
        )
    return fields


def _dtype_of(hint: Any) -> np.dtype | None:
    """The dtype ``npt.NDArray[...]`` names, or ``None`` for any dtype."""
    args = typing.get_args(hint)
    scalar = typing.get_args(args[1])[0] if len(args) == 2 and typing.get_args(args[1]) else Any
    return None if scalar is Any else np.dtype(scalar)


def _optional(hint: Any) -> Any:
    """``X`` for ``X | None``; :class:`TypeError` for any other union (it would be ambiguous
    to load)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) != 1 or len(typing.get_args(hint)) != 2:
        raise TypeError(f"a state field may be 'X | None', not {hint}")
    return args[0]


#: The scalar field types other than float: what a value must be, and the test of a loaded
#: value (a saved one is tested after numpy scalars become Python ones).
_SCALARS: dict[Any, tuple[str, Callable[[Any], bool]]] = {
    int: ("an integer", _is_int),
    bool: ("true or false", lambda v: isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
    type(None): ("null", lambda v: v is None),
}


def _encode(value: Any, hint: Any, where: str) -> Any:
    """``value`` of a field annotated ``hint`` as JSON-compatible values."""
    origin = typing.get_origin(hint)
    if hint is np.ndarray or origin is np.ndarray:
        dtype = _dtype_of(hint)
        if not isinstance(value, np.ndarray) or (dtype is not None and value.dtype != dtype):
            _unfit(where, f"an array of {'numbers' if dtype is None else dtype}", value)
        return array_to_json(value)
    plain = value.item() if isinstance(value, np.generic) else value
    if hint is float:
        if isinstance(plain, bool) or not isinstance(plain, int | float):
            _unfit(where, "a number", value)
        return float_to_json(plain)
    if hint in _SCALARS:
        wanted, fits = _SCALARS[hint]
        if not fits(plain):
            _unfit(where, wanted, value)
        return plain
    if origin in (typing.Union, types.UnionType):
        return None if value is None else _encode(value, _optional(hint), where)
    if origin is tuple:
        if not isinstance(value, tuple):
            _unfit(where, "a tuple", value)
        items = _items(typing.get_args(hint), value, where)
        return [_encode(v, h, f"{where}[{i}]") for i, (v, h) in enumerate(items)]
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            _unfit(where, "a mapping with string keys", value)
        _, item_hint = typing.get_args(hint)
        return {k: _encode(v, item_hint, f"{where}[{k!r}]") for k, v in value.items()}
    if _is_record(hint):
        if not isinstance(value, hint):
            _unfit(where, f"a {hint.__name__}", value)
        return encode_state(value, hint.__name__)
    raise TypeError(f"{where}: the state codec has no JSON form for {hint}")


def _decode(data: Any, hint: Any, where: str) -> Any:
    """Inverse of :func:`_encode`."""
    origin = typing.get_origin(hint)
    if hint is np.ndarray or origin is np.ndarray:
        if not isinstance(data, Mapping):
            _unfit(where, "an array: an object with the keys dtype, shape and data", data)
        try:
            arr = array_from_json(data)
        except DataFormatError as exc:
            raise DataFormatError(f"{where}: {exc}") from exc
        dtype = _dtype_of(hint)
        if dtype is not None and arr.dtype != dtype:
            raise DataFormatError(f"{where} must be an array of {dtype}, got one of {arr.dtype}")
        return arr
    if hint is float:
        try:
            return float_from_json(data)
        except DataFormatError:
            _unfit(where, "a number (or 'nan', 'inf', '-inf')", data)
    if hint in _SCALARS:
        wanted, fits = _SCALARS[hint]
        if not fits(data):
            _unfit(where, wanted, data)
        return data
    if origin in (typing.Union, types.UnionType):
        return None if data is None else _decode(data, _optional(hint), where)
    if origin is tuple:
        if not isinstance(data, list):
            _unfit(where, "a list", data)
        items = _items(typing.get_args(hint), data, where)
        return tuple(_decode(v, h, f"{where}[{i}]") for i, (v, h) in enumerate(items))
    if origin in (dict, Mapping):
        if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
            _unfit(where, "an object", data)
        _, item_hint = typing.get_args(hint)
        return {k: _decode(v, item_hint, f"{where}[{k!r}]") for k, v in data.items()}
    if _is_record(hint):
        return decode_state(data, hint, hint.__name__)
    raise TypeError(f"{where}: the state codec has no JSON form for {hint}")


def _items(args: tuple[Any, ...], values: Sequence[Any], where: str) -> list[tuple[Any, Any]]:
    """``(value, annotation)`` pairs of a tuple annotated ``tuple[args]``."""
    if len(args) == 2 and args[1] is Ellipsis:
        return [(v, args[0]) for v in values]
    if len(values) != len(args):
        raise DataFormatError(f"{where} must hold {len(args)} values, got {len(values)}")
    return list(zip(values, args, strict=True))


def _unfit(where: str, wanted: str, got: Any) -> typing.NoReturn:
    raise DataFormatError(f"{where} must be {wanted}, got {got!r:.100}")
