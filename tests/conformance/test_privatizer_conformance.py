"""Conformance checks run on every privatizer: never mutates its input, keeps the message's
other fields, shape and dtype, seeded reproducibility, batch == per-row, documented output
(values or noise scale), output survives its wire encoding, no global RNG."""

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
from fedrank.metrics.maxrr import maxrr_values
from fedrank.privacy import SignCompressor
from fedrank.privacy.laplace import DistributedLaplace, LocalLaplace, clip_l1
from fedrank.privacy.randomized_response import RandomizedResponse
from fedrank.privacy.sign import RandomizedSigns

MAXRR = maxrr_values(10)
_any_float = st.one_of(st.just(0.0), st.just(-0.0), st.floats(-1e300, 1e300))
_update_float = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


def _sign_check(
    inputs: np.ndarray, outputs: np.ndarray, allowed: set[float], exact: bool = True
) -> None:
    """Votes in ``allowed``; with ``exact``, every non-zero input keeps its sign."""
    assert set(np.unique(outputs).tolist()) <= allowed
    if exact:
        nonzero = inputs != 0
        np.testing.assert_array_equal(outputs[nonzero], np.sign(inputs[nonzero]))


def _rr_check(inputs: np.ndarray, outputs: np.ndarray) -> None:
    assert set(np.unique(outputs).tolist()) <= set(MAXRR.tolist())


def _laplace_check(inputs: np.ndarray, outputs: np.ndarray) -> None:
    # The output minus the clipped input is the noise: finite, and (for these small scales)
    # of the documented order of magnitude.
    noise = outputs - clip_l1(inputs, 1.0)
    assert np.all(np.isfinite(noise)) and np.abs(noise).max() < 200.0


@dataclass(frozen=True)
class PrivCase:
    name: str
    build: Callable[[], Any]
    values: st.SearchStrategy[float]  # what an entry of an input update can be
    check: Callable[[np.ndarray, np.ndarray], None]  # the documented output

    def __str__(self) -> str:
        return self.name


CASES = [
    PrivCase(
        "SignCompressor-2bit",
        lambda: SignCompressor(with_zero=True),
        _any_float,
        lambda i, o: _sign_check(i, o, {-1.0, 0.0, 1.0}),
    ),
    PrivCase(
        "SignCompressor-1bit",
        lambda: SignCompressor(with_zero=False),
        _any_float,
        lambda i, o: _sign_check(i, o, {-1.0, 1.0}),
    ),
    PrivCase(
        "RandomizedSigns",
        lambda: RandomizedSigns(1.0),
        _any_float,
        lambda i, o: _sign_check(i, o, {-1.0, 0.0, 1.0}, exact=False),
    ),
    PrivCase(
        "RandomizedResponse",
        lambda: RandomizedResponse(MAXRR, 0.6),
        st.sampled_from(MAXRR.tolist()),
        _rr_check,
    ),
    PrivCase("LocalLaplace", lambda: LocalLaplace(1.0, 2.0), _update_float, _laplace_check),
    PrivCase(
        "DistributedLaplace",
        lambda: DistributedLaplace(1.0, 2.0, n_clients=8),
        _update_float,
        _laplace_check,
    ),
]
parametrize_cases = pytest.mark.parametrize("case", CASES, ids=str)
SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def update_matrices(draw: st.DrawFn, values: st.SearchStrategy[float]) -> np.ndarray:
    rows, dim = draw(st.integers(1, 8)), draw(st.integers(1, 10))
    entries = draw(st.lists(values, min_size=rows * dim, max_size=rows * dim))
    return np.array(entries, dtype=np.float64).reshape(rows, dim)


def cases_with_inputs() -> Any:
    return st.sampled_from(CASES).flatmap(
        lambda case: st.tuples(st.just(case), update_matrices(case.values))
    )


def test_cases_follow_the_privatizer_protocol() -> None:
    for case in CASES:
        assert isinstance(case.build(), Privatizer)


@SETTINGS
@given(data=cases_with_inputs(), seed=st.integers(0, 2**32 - 1))
def test_never_mutates_and_keeps_the_other_fields(
    data: tuple[PrivCase, np.ndarray], seed: int
) -> None:
    case, updates = data
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


@SETTINGS
@given(data=cases_with_inputs(), seed=st.integers(0, 2**32 - 1))
def test_shape_dtype_and_documented_output(data: tuple[PrivCase, np.ndarray], seed: int) -> None:
    case, updates = data
    priv = case.build()
    out = priv.privatize(Message(update=updates[0]), np.random.default_rng(seed)).update
    assert out.shape == updates[0].shape and out.dtype == np.float64
    batch = priv.privatize_batch(updates, np.random.default_rng(seed))
    assert batch.shape == updates.shape and batch.dtype == np.float64
    case.check(updates, batch)
    in32 = np.clip(updates, -1e38, 1e38).astype(np.float32)
    if case.name == "RandomizedResponse":
        in32 = updates.astype(np.float32).astype(np.float64)  # float32 rounding leaves the domain
        assert (
            priv.privatize_batch(updates.astype(np.float64), np.random.default_rng(0)).dtype
            == np.float64
        )
    else:
        assert priv.privatize_batch(in32, np.random.default_rng(seed)).dtype == np.float32


@SETTINGS
@given(data=cases_with_inputs(), seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_output(data: tuple[PrivCase, np.ndarray], seed: int) -> None:
    case, updates = data
    priv = case.build()
    a = priv.privatize_batch(updates, np.random.default_rng(seed))
    b = priv.privatize_batch(updates, np.random.default_rng(seed))
    assert a.tobytes() == b.tobytes()
    m = Message(update=updates[0])
    assert (
        priv.privatize(m, np.random.default_rng(seed)).update.tobytes()
        == priv.privatize(m, np.random.default_rng(seed)).update.tobytes()
    )


@SETTINGS
@given(data=cases_with_inputs(), seed=st.integers(0, 2**32 - 1))
def test_batch_equals_rows_privatized_in_order(
    data: tuple[PrivCase, np.ndarray], seed: int
) -> None:
    case, updates = data
    priv = case.build()
    batch = priv.privatize_batch(updates, np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    rows = np.stack([priv.privatize(Message(update=u), rng).update for u in updates])
    assert batch.tobytes() == rows.tobytes()


@SETTINGS
@given(data=cases_with_inputs(), seed=st.integers(0, 2**32 - 1))
def test_output_survives_its_wire_encoding(data: tuple[PrivCase, np.ndarray], seed: int) -> None:
    case, updates = data
    priv = case.build()
    out = priv.privatize(Message(update=updates[0], n=2), np.random.default_rng(seed))
    data_bytes = encode_message(out, priv.encoding)
    np.testing.assert_array_equal(decode_message(data_bytes).update, out.update)


@parametrize_cases
def test_no_global_rng_is_used(case: PrivCase) -> None:
    before = np.random.get_state()[1].copy()
    inputs = np.full((5, 5), MAXRR[2]) if case.name == "RandomizedResponse" else np.zeros((5, 5))
    case.build().privatize_batch(inputs, np.random.default_rng(0))
    np.testing.assert_array_equal(np.random.get_state()[1], before)
