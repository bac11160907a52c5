"""Conformance checks run on every privatizer: never mutates its input, keeps the message's
other fields, shape and dtype, seeded reproducibility, batch == per-row, documented output."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.core.codec import decode_message, encode_message
from fedrank.core.message import Message
from fedrank.core.protocols import Privatizer
from fedrank.privacy import SignCompressor


@dataclass(frozen=True)
class PrivCase:
    name: str
    build: Callable[[], Any]
    allowed: frozenset[float]  # the documented output values

    def __str__(self) -> str:
        return self.name


CASES = [
    PrivCase(
        "SignCompressor-2bit", lambda: SignCompressor(with_zero=True), frozenset({-1.0, 0.0, 1.0})
    ),
    PrivCase(
        "SignCompressor-1bit", lambda: SignCompressor(with_zero=False), frozenset({-1.0, 1.0})
    ),
]
parametrize_cases = pytest.mark.parametrize("case", CASES, ids=str)
SETTINGS = settings(max_examples=40, deadline=None)

_value = st.one_of(st.just(0.0), st.just(-0.0), st.floats(-1e300, 1e300))


@st.composite
def update_matrices(draw: st.DrawFn) -> np.ndarray:
    rows, dim = draw(st.integers(1, 8)), draw(st.integers(1, 10))
    values = draw(st.lists(_value, min_size=rows * dim, max_size=rows * dim))
    return np.array(values, dtype=np.float64).reshape(rows, dim)


def test_cases_follow_the_privatizer_protocol() -> None:
    for case in CASES:
        assert isinstance(case.build(), Privatizer)


@parametrize_cases
@SETTINGS
@given(updates=update_matrices(), seed=st.integers(0, 2**32 - 1))
def test_never_mutates_and_keeps_the_other_fields(
    case: PrivCase, updates: np.ndarray, seed: int
) -> None:
    message = Message(update=updates[0], n=7, model_version=3, metrics={"loss": 0.25})
    before = copy.deepcopy(message)
    out = case.build().privatize(message, np.random.default_rng(seed))
    assert message.update.tobytes() == before.update.tobytes()
    assert message.metrics == before.metrics
    assert (out.n, out.model_version, out.metrics) == (7, 3, {"loss": 0.25})
    assert out.metrics is not message.metrics
    assert out.update is not message.update
    matrix = updates.copy()
    case.build().privatize_batch(updates, np.random.default_rng(seed))
    assert updates.tobytes() == matrix.tobytes()


@parametrize_cases
@SETTINGS
@given(updates=update_matrices(), seed=st.integers(0, 2**32 - 1))
def test_shape_dtype_and_documented_values(case: PrivCase, updates: np.ndarray, seed: int) -> None:
    priv = case.build()
    out = priv.privatize(Message(update=updates[0]), np.random.default_rng(seed)).update
    assert out.shape == updates[0].shape and out.dtype == np.float64
    batch = priv.privatize_batch(updates, np.random.default_rng(seed))
    assert batch.shape == updates.shape and batch.dtype == np.float64
    assert set(np.unique(batch).tolist()) <= case.allowed
    nonzero = updates != 0
    np.testing.assert_array_equal(batch[nonzero], np.sign(updates[nonzero]))
    # float32 in -> float32 out
    in32 = np.clip(updates, -1e38, 1e38).astype(np.float32)
    out32 = priv.privatize_batch(in32, np.random.default_rng(seed))
    assert out32.dtype == np.float32


@parametrize_cases
@SETTINGS
@given(updates=update_matrices(), seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_output(case: PrivCase, updates: np.ndarray, seed: int) -> None:
    priv = case.build()
    a = priv.privatize_batch(updates, np.random.default_rng(seed))
    b = priv.privatize_batch(updates, np.random.default_rng(seed))
    assert a.tobytes() == b.tobytes()
    m = Message(update=updates[0])
    assert (
        priv.privatize(m, np.random.default_rng(seed)).update.tobytes()
        == priv.privatize(m, np.random.default_rng(seed)).update.tobytes()
    )


@parametrize_cases
@SETTINGS
@given(updates=update_matrices(), seed=st.integers(0, 2**32 - 1))
def test_batch_equals_rows_privatized_in_order(
    case: PrivCase, updates: np.ndarray, seed: int
) -> None:
    priv = case.build()
    batch = priv.privatize_batch(updates, np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    rows = np.stack([priv.privatize(Message(update=u), rng).update for u in updates])
    assert batch.tobytes() == rows.tobytes()


@parametrize_cases
@SETTINGS
@given(updates=update_matrices(), seed=st.integers(0, 2**32 - 1))
def test_output_survives_its_wire_encoding(case: PrivCase, updates: np.ndarray, seed: int) -> None:
    priv = case.build()
    out = priv.privatize(Message(update=updates[0], n=2), np.random.default_rng(seed))
    data = encode_message(out, priv.encoding)
    np.testing.assert_array_equal(decode_message(data).update, out.update)


@parametrize_cases
def test_no_global_rng_is_used(case: PrivCase) -> None:
    before = np.random.get_state()[1].copy()
    case.build().privatize_batch(np.zeros((5, 5)), np.random.default_rng(0))
    np.testing.assert_array_equal(np.random.get_state()[1], before)
