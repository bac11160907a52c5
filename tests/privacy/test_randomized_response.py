"""Randomized response (FOLtR-ES Section 3.3): epsilon of Eq. (10), Fact 1, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError, DataFormatError
from fedrank.metrics.maxrr import maxrr_values
from fedrank.privacy.randomized_response import RandomizedResponse

VALUES = maxrr_values(10)


def test_epsilon_is_equation_10() -> None:
    for p in (0.15, 0.25, 0.5, 0.9, 0.99):
        assert RandomizedResponse(VALUES, p).epsilon() == pytest.approx(np.log(p * 10 / (1 - p)))
    assert RandomizedResponse(VALUES, 1.0).epsilon() == float("inf")


@pytest.mark.parametrize("p", [1 / 11, 0.05, 0.0, 1.01, -0.2])
def test_p_at_or_below_one_over_n_is_refused(p: float) -> None:
    with pytest.raises(ConfigError, match=r"p must lie in \(1/n, 1\]"):
        RandomizedResponse(VALUES, p)


def test_fact_1_expected_privatized_metric_is_increasing_affine_in_the_true_one() -> None:
    rr = RandomizedResponse(VALUES, 0.3)
    # exact: the transition matrix's expectation equals Eq. (7) for every true value
    exact = rr.transition_matrix() @ VALUES
    np.testing.assert_allclose(exact, rr.expected(VALUES), rtol=1e-12)
    slope = (rr.p * rr.n - 1) / (rr.n - 1)
    np.testing.assert_allclose(np.diff(exact) / np.diff(VALUES), slope)
    assert slope > 0
    # sampled: the mean privatized value of each true value matches
    rng = np.random.default_rng(0)
    for idx in (0, 1, 4, 10):
        out = rr.privatize_indices(np.full(100_000, idx), rng)
        got = VALUES[out].mean()
        assert abs(got - rr.expected(VALUES[idx])) < 4 * VALUES.std() / np.sqrt(100_000)


def test_output_distribution_is_the_transition_matrix() -> None:
    rr = RandomizedResponse(VALUES, 0.6)
    out = rr.privatize_indices(np.full(55_000, 3), np.random.default_rng(1))
    observed = np.bincount(out, minlength=11)
    expected = rr.transition_matrix()[3] * out.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    np.testing.assert_allclose(rr.transition_matrix().sum(axis=1), 1.0)


def test_p_one_is_the_identity_and_values_outside_the_domain_are_refused() -> None:
    rr = RandomizedResponse(VALUES, 1.0)
    v = VALUES[[0, 3, 10]][None, :]
    np.testing.assert_array_equal(rr.privatize_batch(v, np.random.default_rng(0)), v)
    with pytest.raises(DataFormatError, match="own values"):
        rr.privatize_batch(np.array([[0.3]]), np.random.default_rng(0))
    with pytest.raises(DataFormatError, match="lie in"):
        rr.privatize_indices(np.array([11]), np.random.default_rng(0))
