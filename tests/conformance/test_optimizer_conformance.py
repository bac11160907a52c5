"""Conformance checks run on every optimizer: Optax-style purity, shape/dtype, descent
direction, exact JSON checkpoints (restore mid-run and continue -> identical trajectory; odd
values too: -0.0, subnormals, infinite moments, float32 parameters), refusal of malformed
checkpoints, seed reproducibility, input validation."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim import SGD, Adam, Rprop
from fedrank.optim.chain import Chain, Scale
from tests.conformance.statekit import as_text, assert_identical, loads, malformed


@dataclass(frozen=True)
class OptCase:
    name: str
    build: Callable[[], Any]
    bad_kwargs: tuple[dict[str, Any], ...]
    cls: type

    def __str__(self) -> str:
        return self.name


CASES = [
    OptCase(
        "Rprop",
        Rprop,
        (
            {"eta_plus": 1.0},
            {"eta_minus": 1.0},
            {"eta_minus": 0.0},
            {"step_min": 0.0},
            {"step_init": 5.0},
            {"step_min": 2.0},
            {"step_max": float("inf")},
            {"eta_plus": float("nan")},
        ),
        Rprop,
    ),
    OptCase(
        "SGD",
        lambda: SGD(learning_rate=0.1),
        ({"learning_rate": 0.0}, {"learning_rate": -1.0}, {"learning_rate": float("nan")}),
        SGD,
    ),
    OptCase(
        "Adam",
        lambda: Adam(learning_rate=0.1),
        ({"learning_rate": 0.0}, {"b1": 1.0}, {"b2": -0.1}, {"eps": 0.0}, {"b1": "0.9"}),
        Adam,
    ),
]
# Chains run the same checks: a positive scale keeps the descent direction of what follows.
CASES += [
    OptCase("Chain(Rprop)", lambda: Chain(Rprop()), (), Chain),
    OptCase("Chain(Scale(2), Adam)", lambda: Chain(Scale(2.0), Adam(learning_rate=0.1)), (), Chain),
]
parametrize_cases = pytest.mark.parametrize("case", CASES, ids=str)


SETTINGS = settings(max_examples=30, deadline=None)

# Gradients below ~1e-100 would underflow in Adam's moments (as in any float64 Adam).
_grad = st.one_of(
    st.just(0.0),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).filter(lambda x: abs(x) > 1e-100),
)


@st.composite
def trajectories(draw: st.DrawFn) -> tuple[np.ndarray, list[np.ndarray]]:
    dim = draw(st.integers(1, 6))
    steps = draw(st.integers(2, 8))
    params = np.array(draw(st.lists(st.floats(-100, 100), min_size=dim, max_size=dim)))
    grads = [
        np.array(draw(st.lists(_grad, min_size=dim, max_size=dim)), dtype=np.float64)
        for _ in range(steps)
    ]
    return params, grads


def run(opt: Any, params: np.ndarray, grads: list[np.ndarray], state: Any = None):
    state = opt.init(params) if state is None else state
    steps = []
    for g in grads:
        step, state = opt.update(g, state, params)
        params = params + step
        steps.append(step)
    return params, state, steps


def state_bytes(opt: Any, state: Any) -> str:
    return json.dumps(opt.state_to_json(state), allow_nan=False, sort_keys=True)


@parametrize_cases
@SETTINGS
@given(data=trajectories())
def test_step_shape_and_dtype_kept(case: OptCase, data) -> None:
    params, grads = data
    opt = case.build()
    _, _, steps = run(opt, params, grads)
    for step in steps:
        assert step.shape == params.shape and step.dtype == np.float64
        assert np.all(np.isfinite(step))


@parametrize_cases
@SETTINGS
@given(data=trajectories())
def test_first_step_goes_downhill_and_zero_gradient_does_not_move(case: OptCase, data) -> None:
    params, grads = data
    opt = case.build()
    step, _ = opt.update(grads[0], opt.init(params), params)
    nonzero = grads[0] != 0
    np.testing.assert_array_equal(np.sign(step[nonzero]), -np.sign(grads[0][nonzero]))
    np.testing.assert_array_equal(step[~nonzero], 0.0)


@parametrize_cases
@SETTINGS
@given(data=trajectories())
def test_update_is_pure(case: OptCase, data) -> None:
    params, grads = data
    opt = case.build()
    state = opt.init(params)
    _, state, _ = run(opt, params, grads[:1], state)
    before_state = state_bytes(opt, state)
    g, p = grads[1].copy(), params.copy()
    step_a, new_a = opt.update(grads[1], state, params)
    step_b, new_b = opt.update(grads[1], state, params)
    np.testing.assert_array_equal(grads[1], g)
    np.testing.assert_array_equal(params, p)
    assert state_bytes(opt, state) == before_state
    assert step_a.tobytes() == step_b.tobytes()
    assert state_bytes(opt, new_a) == state_bytes(opt, new_b)
    assert isinstance(state, tuple)


@parametrize_cases
@SETTINGS
@given(data=trajectories(), cut=st.integers(0, 8))
def test_json_checkpoint_restores_exactly_and_resumes_identically(
    case: OptCase, data, cut: int
) -> None:
    params, grads = data
    cut = min(cut, len(grads))
    opt = case.build()
    full_params, full_state, full_steps = run(opt, params, grads)

    mid_params, mid_state, first_steps = run(opt, params, grads[:cut])
    saved = json.loads(json.dumps(opt.state_to_json(mid_state), allow_nan=False))
    restored = case.build().state_from_json(saved)
    assert_identical(restored, mid_state)
    end_params, end_state, rest_steps = run(opt, mid_params, grads[cut:], restored)
    assert end_params.tobytes() == full_params.tobytes()
    assert state_bytes(opt, end_state) == state_bytes(opt, full_state)
    for a, b in zip(first_steps + rest_steps, full_steps, strict=True):
        assert a.tobytes() == b.tobytes()


#: Gradients with the values a checkpoint must keep exactly: -0.0, subnormals, and 1e200,
#: whose square makes Adam's second moment infinite.
ODD_GRADIENTS = (
    np.array([-0.0, 1e-308, 2.5, -3.0]),
    np.array([0.5, 0.0, 1e200, -1e-300]),
    np.array([1.5, -2.25, -0.0, 5e-324]),
    np.array([-0.0, 3.0, -4.0, 0.1]),
)


@parametrize_cases
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_json_checkpoint_keeps_odd_values_bit_for_bit(case: OptCase, dtype: type) -> None:
    opt = case.build()
    params = np.array([1.0, -0.0, 1e-30, 3.0], dtype=dtype)
    _, state, _ = run(opt, params, list(ODD_GRADIENTS[:3]))
    text = json.dumps(opt.state_to_json(state), allow_nan=False)
    restored = case.build().state_from_json(json.loads(text))
    assert_identical(restored, state)
    assert as_text(opt.state_to_json(restored)) == as_text(json.loads(text))
    step_a, after_a = opt.update(ODD_GRADIENTS[3], restored, params)
    step_b, after_b = opt.update(ODD_GRADIENTS[3], state, params)
    assert step_a.dtype == dtype and step_a.tobytes() == step_b.tobytes()
    assert_identical(after_a, after_b)


@parametrize_cases
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_malformed_checkpoints_are_refused(case: OptCase) -> None:
    """Missing keys, values of a wrong type, arrays of a wrong dtype or of shapes that do
    not agree, in the state and in the states nested in it (a Chain's): each is refused
    with a ConfigError or DataFormatError."""
    opt = case.build()
    _, state, _ = run(opt, np.zeros(4), list(ODD_GRADIENTS))
    saved = json.loads(json.dumps(opt.state_to_json(state), allow_nan=False))
    accepted = [fault for fault, data in malformed(saved) if loads(opt, data)]
    assert not accepted
    assert loads(opt, saved)


@parametrize_cases
def test_same_seed_same_trajectory(case: OptCase) -> None:
    def trajectory(seed: int) -> bytes:
        rng = np.random.default_rng(seed)
        grads = [rng.normal(size=5) for _ in range(10)]
        final, _, _ = run(case.build(), np.zeros(5), grads)
        return final.tobytes()

    assert trajectory(3) == trajectory(3)
    assert trajectory(3) != trajectory(4)


@parametrize_cases
def test_bad_hyperparameters_raise_config_error(case: OptCase) -> None:
    if case.cls is Chain:
        with pytest.raises(ConfigError):
            Chain()
        for factor in (0.0, float("nan"), True):
            with pytest.raises(ConfigError):
                Scale(factor)
    for kwargs in case.bad_kwargs:
        base = {"learning_rate": 0.1} if case.cls is SGD else {}
        with pytest.raises(ConfigError):
            case.cls(**{**base, **kwargs})


@parametrize_cases
def test_shape_mismatch_and_nonfinite_updates_are_refused(case: OptCase) -> None:
    opt = case.build()
    state = opt.init(np.zeros(3))
    with pytest.raises(ConfigError, match=r"expected an update of shape \(3,\), got shape \(4,\)"):
        opt.update(np.zeros(4), state, np.zeros(3))
    with pytest.raises(ConfigError, match="params"):
        opt.update(np.zeros(3), state, np.zeros(2))
    with pytest.raises(DataFormatError, match="NaN"):
        opt.update(np.array([0.0, np.nan, 1.0]), state, np.zeros(3))


@parametrize_cases
def test_restoring_another_optimizers_state_is_refused(case: OptCase) -> None:
    opt = case.build()
    for other in CASES:
        if other.cls is case.cls or other.cls is Chain:
            continue
        foreign = other.build()
        with pytest.raises(DataFormatError, match="type"):
            opt.state_from_json(foreign.state_to_json(foreign.init(np.zeros(2))))


@parametrize_cases
def test_float32_params_get_float32_steps(case: OptCase) -> None:
    opt = case.build()
    params = np.zeros(3, dtype=np.float32)
    step, _ = opt.update(np.array([1.0, -1.0, 0.0]), opt.init(params), params)
    assert step.dtype == np.float32 and step.shape == (3,)


@parametrize_cases
def test_no_global_rng_is_used(case: OptCase) -> None:
    before = np.random.get_state()[1].copy()
    run(case.build(), np.zeros(3), [np.array([1.0, -2.0, 0.5])] * 3)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
