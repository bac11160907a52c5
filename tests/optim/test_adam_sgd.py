"""Adam (PyTorch defaults, bias-corrected) and SGD, checked against hand computations."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import fedrank.optim.adam as adam_module
import fedrank.optim.sgd as sgd_module
from fedrank.errors import ConfigError
from fedrank.optim import SGD, Adam


def test_docstring_examples_pass() -> None:
    for module in (adam_module, sgd_module):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


def test_adam_defaults_are_pytorchs() -> None:
    opt = Adam()
    assert (opt.learning_rate, opt.b1, opt.b2, opt.eps) == (1e-3, 0.9, 0.999, 1e-8)


def test_adam_two_steps_match_a_hand_computation() -> None:
    opt = Adam(learning_rate=0.1)
    params = np.array([0.5, -0.5])
    state = opt.init(params)
    step1, state = opt.update(np.array([1.0, -2.0]), state, params)
    step2, state = opt.update(np.array([3.0, 0.5]), state, params + step1)

    # t = 1: m = 0.1 g, v = 0.001 g^2; bias correction divides by 0.1 and 0.001.
    expected1 = [-0.1 * 1.0 / (1.0 + 1e-8), -0.1 * -2.0 / (2.0 + 1e-8)]
    # t = 2: m = 0.9 m1 + 0.1 g2 = [0.39, -0.13]; v = 0.999 v1 + 0.001 g2^2 = [0.009999, 0.004246]
    #        bias corrections 1 - 0.9^2 = 0.19 and 1 - 0.999^2 = 0.001999.
    expected2 = [
        -0.1 * (0.39 / 0.19) / (math.sqrt(0.009999 / 0.001999) + 1e-8),
        -0.1 * (-0.13 / 0.19) / (math.sqrt(0.004246 / 0.001999) + 1e-8),
    ]
    np.testing.assert_allclose(step1, expected1, rtol=1e-12)
    np.testing.assert_allclose(step2, expected2, rtol=1e-12)
    np.testing.assert_allclose(state.mu, [0.39, -0.13], rtol=1e-12)
    np.testing.assert_allclose(state.nu, [0.009999, 0.004246], rtol=1e-12)
    assert state.count == 2
    # numerically: about -0.0917 and +0.0469
    np.testing.assert_allclose(step2, [-0.09178, 0.04695], atol=5e-5)


def test_adam_matches_the_pytorch_update_rule_over_many_steps() -> None:
    """torch.optim.Adam: denom = sqrt(v) / sqrt(1 - b2^t) + eps, step = -lr / (1 - b1^t) m /
    denom."""
    rng = np.random.default_rng(0)
    opt = Adam(learning_rate=0.01)
    params = rng.normal(size=4)
    state = opt.init(params)
    m = np.zeros(4)
    v = np.zeros(4)
    for t in range(1, 30):
        g = rng.normal(size=4) * 10.0 ** rng.integers(-3, 3)
        step, state = opt.update(g, state, params)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        denom = np.sqrt(v) / math.sqrt(1 - 0.999**t) + 1e-8
        np.testing.assert_allclose(step, -(0.01 / (1 - 0.9**t)) * m / denom, rtol=1e-10)
        params = params + step


def test_adam_zero_gradient_from_start_gives_zero_step() -> None:
    opt = Adam()
    step, _ = opt.update(np.zeros(3), opt.init(np.zeros(3)), np.zeros(3))
    np.testing.assert_array_equal(step, np.zeros(3))


def test_sgd_steps_against_the_gradient() -> None:
    opt = SGD(learning_rate=0.5)
    params = np.array([1.0, 2.0])
    state = opt.init(params)
    step, state = opt.update(np.array([2.0, -4.0]), state, params)
    np.testing.assert_array_equal(step, [-1.0, 2.0])
    step, state = opt.update(np.array([0.0, 1.0]), state, params + step)
    np.testing.assert_array_equal(step, [0.0, -0.5])
    assert not np.signbit(step[0])
    assert state.count == 2


@pytest.mark.parametrize(
    "build",
    [
        lambda: SGD(learning_rate=0.0),
        lambda: SGD(learning_rate=float("inf")),
        lambda: Adam(learning_rate=-1e-3),
        lambda: Adam(b1=1.0),
        lambda: Adam(b2=1.5),
        lambda: Adam(eps=-1.0),
    ],
)
def test_invalid_hyperparameters_are_refused(build) -> None:
    with pytest.raises(ConfigError, match=r"must be (in|[<>]=?) .*, got"):
        build()
