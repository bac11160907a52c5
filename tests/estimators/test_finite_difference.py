import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator


def quadratic_objective(a: np.ndarray, b: np.ndarray):
    """Per-unit losses L_s(theta) = sum_i a_s,i theta_i^2 + b_s,i theta_i for S units."""

    def objective(rows: np.ndarray) -> np.ndarray:
        return (rows**2) @ a.T + rows @ b.T

    def gradient(theta: np.ndarray) -> np.ndarray:
        return 2 * a * theta[None, :] + b

    return objective, gradient


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.integers(1, 5), st.integers(0, 10_000))
def test_central_difference_is_exact_on_quadratics(dim: int, units: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(units, dim)), rng.normal(size=(units, dim))
    theta = rng.normal(size=dim) * 10
    objective, gradient = quadratic_objective(a, b)
    grads, loss = FiniteDifferenceEstimator(eps=0.5).estimate_units(theta, objective)
    np.testing.assert_allclose(grads, gradient(theta), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(loss, objective(theta[None, :])[0])


def test_forward_difference_is_exact_on_linear_and_biased_on_quadratic() -> None:
    theta = np.array([1.0, -2.0, 3.0])
    b = np.array([[0.5, -1.0, 2.0]])
    linear = lambda rows: rows @ b.T  # noqa: E731
    grads, _ = FiniteDifferenceEstimator(eps=0.25, scheme="forward").estimate_units(theta, linear)
    np.testing.assert_allclose(grads[0], b[0])
    # on theta^2 the forward scheme is off by eps, the central one is exact
    square = lambda rows: (rows**2).sum(axis=1, keepdims=True)  # noqa: E731
    fwd, _ = FiniteDifferenceEstimator(eps=0.25, scheme="forward").estimate_units(theta, square)
    ctr, _ = FiniteDifferenceEstimator(eps=0.25).estimate_units(theta, square)
    np.testing.assert_allclose(fwd[0], 2 * theta + 0.25)
    np.testing.assert_allclose(ctr[0], 2 * theta)


def test_central_difference_error_shrinks_quadratically_in_eps_on_cubic() -> None:
    theta = np.array([0.7, -1.3])
    cubic = lambda rows: (rows**3).sum(axis=1, keepdims=True)  # noqa: E731
    exact = 3 * theta**2
    errors = []
    for eps in (0.1, 0.05):
        g, _ = FiniteDifferenceEstimator(eps=eps).estimate_units(theta, cubic)
        errors.append(np.abs(g[0] - exact).max())
    # truncation error is eps^2 f'''/6 = eps^2: halving eps quarters it
    assert errors[0] == pytest.approx(0.1**2, rel=1e-6)
    assert errors[1] == pytest.approx(errors[0] / 4, rel=1e-6)


def test_uses_2d_plus_one_evaluations_for_22_weights() -> None:
    est = FiniteDifferenceEstimator()
    rows = est.parameter_rows(np.zeros(22))
    assert rows.shape == (45, 22)
    assert est.n_evaluations(22) == 45
    assert FiniteDifferenceEstimator(scheme="forward").n_evaluations(22) == 23


def test_estimate_message_is_mean_over_units_and_clients_agree() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    objective, gradient = quadratic_objective(a, b)
    theta = rng.normal(size=4)
    est = FiniteDifferenceEstimator(eps=0.1)
    msg = est.estimate(theta, objective)
    assert msg.n == 6
    np.testing.assert_allclose(msg.update, gradient(theta).mean(axis=0), atol=1e-9)
    clients = np.array([0, 2, 2, 0, 0, 2])
    updates, n, loss = est.estimate_clients(theta, objective, clients, 3)
    assert n.tolist() == [3, 0, 3]
    np.testing.assert_allclose(updates[0], gradient(theta)[[0, 3, 4]].mean(axis=0), atol=1e-9)
    np.testing.assert_allclose(updates[1], 0.0)
    np.testing.assert_allclose(loss[2], objective(theta[None])[0][[1, 2, 5]].mean())


@pytest.mark.parametrize(
    "kwargs", [{"eps": 0.0}, {"eps": -1.0}, {"eps": float("nan")}, {"scheme": "backward"}]
)
def test_bad_configuration_is_refused(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        FiniteDifferenceEstimator(**kwargs)
