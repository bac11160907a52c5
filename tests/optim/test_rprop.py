"""Rprop (paper Section 5.3, Eq. (1)-(2))."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

import fedrank.optim.rprop as rprop_module
from fedrank.errors import ConfigError
from fedrank.optim import Rprop


def run_signs(opt: Rprop, signs: list[float]) -> tuple[list[float], list[float]]:
    """Step sizes and moves of a 1-weight model fed the given gradient signs."""
    params = np.zeros(1)
    state = opt.init(params)
    sizes, moves = [], []
    for s in signs:
        step, state = opt.update(np.array([s]), state, params)
        params = params + step
        sizes.append(float(state.step_size[0]))
        moves.append(float(step[0]))
    return sizes, moves


def test_docstring_example_passes() -> None:
    result = doctest.testmod(rprop_module)
    assert result.attempted > 0 and result.failed == 0


def test_steps_grow_geometrically_under_a_constant_sign() -> None:
    opt = Rprop(eta_plus=1.2, step_init=0.1, step_max=100.0)
    sizes, moves = run_signs(opt, [5.0] * 6)
    np.testing.assert_allclose(sizes, [0.1 * 1.2**k for k in range(6)], rtol=1e-15)
    np.testing.assert_allclose(moves, [-s for s in sizes], rtol=0)


def test_steps_shrink_when_the_sign_alternates() -> None:
    opt = Rprop(eta_minus=0.5, step_init=1.0, step_min=1e-6)
    sizes, moves = run_signs(opt, [1.0, -1.0] * 3)
    np.testing.assert_allclose(sizes, [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125], rtol=0)
    # adapt first, then move against the *current* sign
    np.testing.assert_allclose(moves, [-1.0, 0.5, -0.25, 0.125, -0.0625, 0.03125], rtol=0)


def test_step_sizes_clip_at_both_bounds() -> None:
    opt = Rprop(eta_plus=2.0, eta_minus=0.1, step_init=1.0, step_min=0.05, step_max=3.0)
    sizes, _ = run_signs(opt, [1.0] * 5)
    assert sizes == [1.0, 2.0, 3.0, 3.0, 3.0]
    sizes, _ = run_signs(opt, [1.0, -1.0, 1.0, -1.0])
    assert sizes == [1.0, 0.1, 0.05, 0.05]


def test_zero_gradient_keeps_step_size_and_does_not_move() -> None:
    opt = Rprop()
    sizes, moves = run_signs(opt, [1.0, 1.0, 0.0, 1.0, -1.0])
    assert sizes == [1.0, 1.2, 1.2, 1.2, 0.6]
    assert moves[2] == 0.0 and np.signbit(moves[2]) == np.False_
    # after a zero the next sign has no previous sign to agree with: unchanged step size
    assert moves[3] == -1.2


def test_only_signs_matter() -> None:
    opt = Rprop()
    a, _ = run_signs(opt, [1e-9, 3.0, -1e9, -2.0])
    b, _ = run_signs(opt, [1.0, 1.0, -1.0, -1.0])
    assert a == b


def test_weights_adapt_independently() -> None:
    opt = Rprop()
    params = np.zeros(3)
    state = opt.init(params)
    for g in ([1.0, 1.0, 0.0], [1.0, -1.0, 0.0], [1.0, -1.0, 2.0]):
        step, state = opt.update(np.array(g), state, params)
        params = params + step
    # weight 0 keeps its sign (grows), weight 1 flips then keeps it, weight 2 starts late
    np.testing.assert_allclose(state.step_size, [1.44, 0.6, 1.0], rtol=1e-15)
    np.testing.assert_allclose(params, [-1 - 1.2 - 1.44, -1 + 0.5 + 0.6, -1.0], rtol=1e-15)


def test_integer_rounded_step_sizes_would_stick_while_ours_adapt() -> None:
    """Rounding the step sizes to integers (a tempting shortcut for integer-valued frecency
    weights) breaks Eq. (2): 1 * 1.2 rounds back to 1, so steps never grow, and 1 * 0.5
    rounds to 0 (banker's rounding), which freezes the weight for good."""

    def integer_rprop(signs: list[float]) -> list[int]:
        size, prev, sizes = 1, 0.0, []
        for s in signs:
            if s * prev > 0:
                size = min(round(size * 1.2), 3)
            elif s * prev < 0:
                size = max(round(size * 0.5), 0)
            sizes.append(size)
            prev = s
        return sizes

    grow = [1.0] * 6
    flip = [1.0, -1.0, 1.0, -1.0]
    assert integer_rprop(grow) == [1] * 6  # stuck: never grows
    assert integer_rprop(flip)[1:] == [0, 0, 0]  # stuck at zero: never moves again

    ours_grow, _ = run_signs(Rprop(), grow)
    assert ours_grow[-1] == pytest.approx(min(1.2**5, 3.0))
    assert all(b > a for a, b in zip(ours_grow[:5], ours_grow[1:5], strict=False))
    ours_flip, moves = run_signs(Rprop(), flip)
    assert ours_flip == [1.0, 0.5, 0.25, 0.125]
    assert all(m != 0 for m in moves)
    assert all(isinstance(s, float) for s in ours_grow)
    assert Rprop().init(np.zeros(2)).step_size.dtype == np.float64


def test_sign_vote_output_drives_rprop_like_gradients() -> None:
    opt = Rprop()
    a, _ = run_signs(opt, [1.0, 1.0, -1.0])
    b, _ = run_signs(opt, [42.0, 0.5, -7.0])
    assert a == b


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"eta_plus": 0.9}, "eta_plus"),
        ({"eta_plus": 1.0}, "eta_plus"),
        ({"eta_minus": 1.5}, "eta_minus"),
        ({"eta_minus": -0.1}, "eta_minus"),
        ({"step_min": -1.0}, "step_min"),
        ({"step_init": 0.0001}, "step_min <= step_init <= step_max"),
        ({"step_init": 10.0}, "step_min <= step_init <= step_max"),
        ({"step_max": 1e-4, "step_init": 1e-4}, "step_min <= step_init <= step_max"),
    ],
)
def test_invalid_hyperparameters_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Rprop(**kwargs)


def test_defaults_are_the_documented_ones() -> None:
    opt = Rprop()
    assert (opt.eta_plus, opt.eta_minus, opt.step_init, opt.step_min, opt.step_max) == (
        1.2,
        0.5,
        1.0,
        1e-3,
        3.0,
    )
    assert "eta_plus=1.2" in repr(opt)


def test_replays_the_deployed_scala_server_rule() -> None:
    """Six iterations of FederatedLearningRPropOptimizer.scala (mozilla/telemetry-streaming)
    worked out by hand from its rule, for three weights:

        lr = min(lr * 2.0, 3.0) if g * prev_g > 0; max(lr * 0.6, 1.0) if < 0; else lr
        (prev_g = None on the first iteration: lr stays at StartingLearningRate = 2)
        weight = weight + lr * signum(g)

    where g is the mean client update, i.e. minus the gradient; fedrank's Rprop gets -g.
    ``3.0 * 0.6`` is written out because in doubles it is 1.7999999999999998, not 1.8."""
    opt = Rprop(eta_plus=2.0, eta_minus=0.6, step_init=2.0, step_min=1.0, step_max=3.0)
    mean_updates = [
        [0.5, -1.0, 0.0],  # first iteration: no previous gradient
        [3.0, 1.0, 0.0],
        [-1.0, -1.0, 2.0],
        [0.0, 1.0, 5.0],
        [-2.0, 1.0, -3.0],
        [-0.25, 1.0, 0.0],
    ]
    d = 3.0 * 0.6  # a step of 3 shrunk once
    expected_rates = [
        [2.0, 2.0, 2.0],
        [3.0, 2.0 * 0.6, 2.0],  # a: 2*2 clipped to 3; b: flip, 1.2; c: 0 * 0, kept
        [d, 1.0, 2.0],  # a: flip; b: flip, 0.72 clipped to 1; c: 2 * 0 = 0, kept
        [d, 1.0, 3.0],  # a: zero, kept; b: flip, 0.6 clipped to 1; c: 4 clipped to 3
        [d, 2.0, d],  # a: -2 * 0 = 0, kept; b: same sign, 2; c: flip
        [3.0, 3.0, d],  # a: 3.6 clipped to 3; b: 4 clipped to 3; c: zero, kept
    ]
    expected_moves = [
        [2.0, -2.0, 0.0],
        [3.0, 2.0 * 0.6, 0.0],
        [-d, -1.0, 2.0],
        [0.0, 1.0, 3.0],  # a zero gradient does not move the weight
        [-d, 2.0, -d],  # the move uses the new sign right after a flip (no backtracking)
        [-3.0, 3.0, 0.0],
    ]
    params = np.array([10.0, 10.0, 10.0])
    expected_params = params.copy()
    state = opt.init(params)
    for t, g in enumerate(mean_updates):
        step, state = opt.update(-np.array(g), state, params)
        params = params + step
        expected_params = expected_params + np.array(expected_moves[t])
        np.testing.assert_array_equal(state.step_size, expected_rates[t], err_msg=f"t={t}")
        np.testing.assert_array_equal(step, expected_moves[t], err_msg=f"t={t}")
        if t == 2:  # a restart from the JSON checkpoint continues identically
            state = opt.state_from_json(json.loads(json.dumps(opt.state_to_json(state))))
    np.testing.assert_array_equal(params, expected_params)
    np.testing.assert_allclose(params, [10 + 2 + 3 - 1.8 - 1.8 - 3, 14.2, 13.2], rtol=1e-15)
