"""The generic state codec: every kind of field a NamedTuple or dataclass state may have,
exact round trips (bit for bit, dtypes and shapes kept), and refusals naming the fault."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pytest

from fedrank.core.state_json import (
    array_from_json,
    array_to_json,
    decode_state,
    encode_state,
    float_from_json,
    float_to_json,
)
from fedrank.errors import ConfigError, DataFormatError
from tests.conformance.statekit import as_text, assert_identical


class Inner(NamedTuple):
    total: npt.NDArray[np.float64]
    count: int


@dataclasses.dataclass(frozen=True)
class Record:
    """A state with every kind of field the codec knows."""

    values: np.ndarray  # any dtype
    sums: npt.NDArray[np.float64]
    ratio: float
    count: int
    flag: bool
    name: str
    limit: float | None
    shape: tuple[int, ...]
    pair: tuple[str, float]
    weights: Mapping[str, float]
    inner: Inner


def _record(**changes: Any) -> Record:
    fields = {
        "values": np.array([[1, -2], [3, 2**62]], dtype=np.int64),
        "sums": np.array([-0.0, 1e-308, 5e-324, np.inf, -np.inf, np.nan, 1.1]),
        "ratio": -0.0,
        "count": 7,
        "flag": True,
        "name": "loss",
        "limit": None,
        "shape": (3, 0, 2),
        "pair": ("x", math.nan),
        "weights": {"b": 1e200, "a": -1.5},
        "inner": Inner(np.array([0.1, -0.0]), 2),
    }
    return Record(**{**fields, **changes})


def _round_trip(state: Any, tag: str = "Owner", **kwargs: Any) -> Any:
    data = encode_state(state, tag, **kwargs)
    text = json.dumps(data, allow_nan=False)
    restored = decode_state(json.loads(text), type(state), tag, **kwargs)
    assert as_text(encode_state(restored, tag, **kwargs)) == as_text(json.loads(text))
    return restored


def test_every_kind_of_field_round_trips_bit_for_bit() -> None:
    for state in (_record(), _record(limit=2.5, flag=False, weights={}, shape=())):
        assert_identical(dataclasses.astuple(_round_trip(state)), dataclasses.astuple(state))


def test_the_layout_is_the_type_the_settings_and_one_key_per_field() -> None:
    data = encode_state(_record(), "Owner", settings={"dim": 2, "weighted": False})
    assert list(data) == ["type", "dim", "weighted", *(f.name for f in dataclasses.fields(Record))]
    assert data["type"] == "Owner" and data["count"] == 7 and data["ratio"] == 0.0
    assert data["sums"]["data"][3:6] == ["inf", "-inf", "nan"]
    assert data["pair"] == ["x", "nan"] and data["weights"] == {"b": 1e200, "a": -1.5}
    assert data["inner"] == {
        "type": "Inner",
        "total": {"dtype": "float64", "shape": [2], "data": [0.1, -0.0]},
        "count": 2,
    }


@pytest.mark.parametrize(
    "array",
    [
        np.array([1.5, -0.0, 3.4028235e38], dtype=np.float32),
        np.array([[True, False]]),
        np.array([0, 2**64 - 1], dtype=np.uint64),
        np.array([-128, 127], dtype=np.int8),
        np.float16(-0.0) * np.ones((2, 0, 3), dtype=np.float16),
        np.array(5e-324),
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    ],
    ids=["float32", "bool", "uint64", "int8", "empty-float16", "0-d", "fortran"],
)
def test_arrays_keep_dtype_shape_and_bits(array: np.ndarray) -> None:
    back = array_from_json(json.loads(json.dumps(array_to_json(array), allow_nan=False)))
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes() and back.flags.writeable


def test_floats_keep_their_bits() -> None:
    for x in (-0.0, 5e-324, 1e-308, 1.7976931348623157e308, math.inf, -math.inf):
        back = float_from_json(json.loads(json.dumps(float_to_json(x), allow_nan=False)))
        assert math.copysign(1, back) == math.copysign(1, x) and back == x
    assert math.isnan(float_from_json(float_to_json(math.nan)))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"count": "7"}, "field count must be an integer, got '7'"),
        ({"count": 7.0}, "field count must be an integer"),
        ({"flag": 1}, "field flag must be true or false"),
        ({"name": 3}, "field name must be a string"),
        ({"ratio": "big"}, "field ratio must be a number"),
        ({"limit": "x"}, "field limit must be a number"),
        ({"shape": [3, "0", 2]}, r"field shape\[1\] must be an integer"),
        ({"pair": ["x"]}, "field pair must hold 2 values, got 1"),
        ({"weights": [1.0]}, "field weights must be an object"),
        ({"weights": {"a": None}}, r"field weights\['a'\] must be a number"),
        ({"sums": {"dtype": "int64", "shape": [1], "data": [1]}}, "array of float64"),
        ({"sums": {"dtype": "f8", "shape": [1], "data": [1.0]}}, "unknown dtype 'f8'"),
        ({"sums": {"dtype": ">f8", "shape": [1], "data": [1.0]}}, "unknown dtype '>f8'"),
        ({"sums": {"dtype": "float64", "shape": [2], "data": [1.0]}}, "needs 2 values, got 1"),
        ({"sums": {"dtype": "float64", "shape": [1]}}, "needs the keys"),
        ({"values": {"dtype": "int8", "shape": [1], "data": [300]}}, r"in \[-128, 127\]"),
        ({"values": {"dtype": "int64", "shape": [1], "data": [1.5]}}, "integers only"),
        ({"values": {"dtype": "bool", "shape": [1], "data": [1]}}, "true or false only"),
        ({"values": {"dtype": "int64", "shape": [True], "data": [1]}}, "shape must be"),
        ({"inner": {"type": "Inner", "total": [0.1], "count": 2}}, "field total must be an"),
        ({"inner": {"type": "Other"}}, "of type 'Other', expected 'Inner'"),
    ],
)
def test_a_field_that_does_not_fit_is_refused_by_name(change: dict[str, Any], match: str) -> None:
    data = {**encode_state(_record(), "Owner"), **change}
    with pytest.raises(DataFormatError, match=match):
        decode_state(data, Record, "Owner")


def test_missing_keys_another_type_and_other_settings_are_refused() -> None:
    data = encode_state(_record(), "Owner", settings={"dim": 2})
    with pytest.raises(DataFormatError, match="lacks the key"):
        decode_state(
            {k: v for k, v in data.items() if k != "dim"}, Record, "Owner", settings={"dim": 2}
        )
    with pytest.raises(DataFormatError, match="lacks the key"):
        decode_state({k: v for k, v in data.items() if k != "inner"}, Record, "Owner")
    with pytest.raises(DataFormatError, match="of type 'Owner', expected 'Other'"):
        decode_state(data, Record, "Other", settings={"dim": 2})
    with pytest.raises(DataFormatError, match="must be a JSON object"):
        decode_state([data], Record, "Owner")
    with pytest.raises(ConfigError, match="has dimension 2, expected 3"):
        decode_state(data, Record, "Owner", settings={"dim": 3})
    with pytest.raises(ConfigError, match="has dimension True, expected 1"):
        decode_state({**data, "dim": True}, Record, "Owner", settings={"dim": 1})


class _Codec:
    """A component that saves its states (a float) under its own type."""

    def __init__(self, name: str) -> None:
        self.name = name

    def state_to_json(self, state: float) -> dict[str, Any]:
        return {"type": self.name, "value": float_to_json(state)}

    def state_from_json(self, data: dict[str, Any]) -> float:
        if data.get("type") != self.name:
            raise DataFormatError(f"not a {self.name} state")
        return float_from_json(data["value"])


class Wrapper(NamedTuple):
    one: Any
    many: tuple[Any, ...]


def test_nested_states_are_written_by_their_components() -> None:
    nested = {"one": _Codec("A"), "many": (_Codec("B"), _Codec("C"))}
    state = Wrapper(-0.0, (1e-308, math.inf))
    data = encode_state(state, "W", nested=nested)
    assert data == {
        "type": "W",
        "one": {"type": "A", "value": -0.0},
        "many": [{"type": "B", "value": 1e-308}, {"type": "C", "value": "inf"}],
    }
    assert_identical(_round_trip(state, "W", nested=nested), state)
    with pytest.raises(DataFormatError, match="field many must list 2 states"):
        decode_state({**data, "many": data["many"][:1]}, Wrapper, "W", nested=nested)
    with pytest.raises(DataFormatError, match="not a B state"):
        decode_state({**data, "many": data["many"][::-1]}, Wrapper, "W", nested=nested)
    with pytest.raises(DataFormatError, match="cannot save the W state: field many must list"):
        encode_state(Wrapper(0.0, (1.0,)), "W", nested=nested)


def test_a_state_that_does_not_fit_its_annotations_is_not_saved() -> None:
    with pytest.raises(DataFormatError, match="field sums must be an array of float64"):
        encode_state(_record(sums=np.zeros(2, dtype=np.float32)), "Owner")
    with pytest.raises(DataFormatError, match="field count must be an integer"):
        encode_state(_record(count=1.5), "Owner")
    with pytest.raises(DataFormatError, match="field ratio must be a number"):
        encode_state(_record(ratio="1"), "Owner")
    # numpy scalars are saved as the Python values they hold
    data = encode_state(_record(count=np.int64(3), flag=np.bool_(False)), "Owner")
    assert data["count"] == 3 and data["flag"] is False


class Ambiguous(NamedTuple):
    value: int | str


def test_codec_misuse_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'X | None'"):
        encode_state(Ambiguous(1), "A")
    with pytest.raises(TypeError, match="no JSON form"):
        encode_state(Wrapper(1.0, ()), "W")  # Any without a nested codec
    with pytest.raises(TypeError, match="must not be fields"):
        encode_state(_record(), "Owner", settings={"count": 1})
    with pytest.raises(TypeError, match="nested codecs must name fields"):
        encode_state(_record(), "Owner", nested={"nothing": _Codec("A")})
    with pytest.raises(TypeError, match="NamedTuple or a dataclass"):
        encode_state({"count": 1}, "Owner")
