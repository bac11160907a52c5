"""The Skellam mechanism for distributed DP (:mod:`fedrank.privacy.skellam`; Agarwal, Kairouz
& Liu, NeurIPS 2021): the RDP bound against the exact Renyi divergence of one-dimensional
Skellam distributions, the (epsilon, delta) against the Gaussian mechanism it tends to,
the calibration, the clients' noise shares, the tail bound behind the no-wrap headroom, and
the plan a secure-aggregation server runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from scipy.special import logsumexp
from scipy.stats import skellam

from fedrank.errors import ConfigError
from fedrank.privacy import skellam as sk
from fedrank.privacy.accounting import gaussian_epsilon


def _exact_renyi(variance: float, shift: int, order: int) -> float:
    """``D_order(Sk(variance) || Sk(variance) + shift)``, summed over the support."""
    lam = variance / 2.0
    width = int(shift + 40 * math.sqrt(variance) + 40)
    k = np.arange(-width, width + 1)
    p, q = skellam.logpmf(k, lam, lam), skellam.logpmf(k - shift, lam, lam)
    ok = np.isfinite(p) & np.isfinite(q)
    return float(logsumexp(order * p[ok] + (1 - order) * q[ok]) / (order - 1))


@pytest.mark.parametrize("variance", [1.0, 10.0, 100.0, 1e4])
@pytest.mark.parametrize("shift", [1, 3, 10])
def test_the_rdp_bound_is_above_the_exact_divergence_and_tight_for_large_noise(
    variance: float, shift: int
) -> None:
    bound = sk.rdp(variance, shift, shift)
    for order in (2, 5, 16, 64):
        exact = _exact_renyi(variance, shift, order)
        b = bound[sk.ORDERS.index(order)]
        assert exact <= b
        gaussian = order * shift * shift / (2 * variance)  # the bound's first term
        assert b >= gaussian
        if variance >= 1e4:
            assert b == pytest.approx(exact, rel=2e-3)


def test_epsilon_tends_to_the_gaussian_mechanism_with_the_same_variance() -> None:
    """With the integer grid fine against the noise, the Skellam mechanism's epsilon is the
    Gaussian's of multiplier ``z = sqrt(mu) / Delta_2`` at the same (integer) Renyi orders,
    never below it; ``dp_accounting``'s Gaussian RDP accountant, which also takes fractional
    orders, is at most a few percent below."""
    l1, l2 = sk.sensitivities(2.0**20, 1.0, 22)
    for z, rounds in ((1.0, 1), (5.0, 100), (14.0, 137)):
        variance = (z * l2) ** 2
        eps = sk.skellam_epsilon(variance, l1, l2, rounds, 1e-6)
        orders = np.asarray(sk.ORDERS, dtype=np.float64)
        same_orders, _ = compute_epsilon(sk.ORDERS, rounds * orders / (2 * z * z), 1e-6)
        assert same_orders <= eps <= same_orders * 1.001
        library = gaussian_epsilon(z, 1e-6, rounds, accountant="rdp")
        assert library <= eps <= library * 1.03


def test_the_calibrated_variance_is_the_smallest_that_keeps_the_budget() -> None:
    l1, l2 = sk.sensitivities(2.0**16, 0.5, 100)
    for epsilon, rounds in ((0.5, 10), (4.0, 137), (8.0, 1000)):
        v = sk.skellam_variance(epsilon, 1e-6, rounds, l1, l2)
        assert sk.skellam_epsilon(v, l1, l2, rounds, 1e-6) <= epsilon
        assert sk.skellam_epsilon(v * (1 - 1e-3), l1, l2, rounds, 1e-6) > epsilon


def test_shares_sum_to_the_calibrated_noise_and_are_reproducible() -> None:
    """``t`` clients adding ``Sk(mu / t)`` put ``Sk(mu)`` on the sum: integers of mean 0 and
    variance ``mu``, the same draws from the same seed."""
    mu, t, n = 5_000.0, 7, 200_000
    rng = np.random.default_rng(3)
    total = sum(sk.skellam_noise(rng, mu / t, n) for _ in range(t))
    assert total.dtype == np.int64
    assert abs(total.mean()) < 4 * math.sqrt(mu / n)
    assert total.var() == pytest.approx(mu, rel=0.02)
    a = sk.skellam_noise(np.random.default_rng(9), 12.5, 50)
    assert np.array_equal(a, sk.skellam_noise(np.random.default_rng(9), 12.5, 50))
    assert not np.any(sk.skellam_noise(rng, 0.0, 5))
    with pytest.raises(ConfigError, match="variance"):
        sk.skellam_noise(rng, -1.0, 5)


@pytest.mark.parametrize("variance", [3.0, 400.0, 1e6])
def test_the_tail_bound_holds_and_is_not_loose(variance: float) -> None:
    for probability in (1e-3, 1e-9):
        x = sk.tail_bound(variance, probability)
        lam = variance / 2.0
        exceed = 2 * skellam.sf(math.floor(x), lam, lam)  # P(|X| > x), symmetric
        assert exceed <= probability
        gauss = math.sqrt(variance) * math.sqrt(2 * math.log(2 / probability))
        assert x <= 1.5 * gauss + 10


def test_the_plan_fits_32_bits_keeps_the_budget_and_refuses_what_cannot_fit() -> None:
    p = sk.plan(4.0, 1e-6, 137, 1.0, 22, 100, 51)
    assert math.log2(p.scale).is_integer()
    headroom = sk.tail_bound(p.variance * p.clients / p.threshold, 1e-12 / (22 * 137))
    assert p.clients * round(p.scale * p.clip) + headroom <= sk.MAX_ABS_SUM
    # the next finer scale would not fit (the plan takes the finest that does)
    finer = sk.plan(4.0, 1e-6, 137, 0.5, 22, 100, 51)  # half the clip: twice the scale
    assert finer.scale == 2 * p.scale
    assert p.epsilon_after(137) <= 4.0
    assert p.epsilon_after(137) > 3.99  # calibrated, not merely safe
    assert p.epsilon_after(137, "replace-one") > p.epsilon_after(137)
    assert p.client_variance == pytest.approx(p.variance / 51)
    # the noise as a Gaussian multiplier: close to central DP's RDP calibration
    assert 14.0 < p.noise_multiplier < 15.5
    with pytest.raises(ConfigError, match="does not fit 32-bit"):
        sk.plan(4.0, 1e-6, 10, 1.0, 10**10, 1000, 501)
    with pytest.raises(ConfigError, match="threshold"):
        sk.plan(4.0, 1e-6, 10, 1.0, 10, 100, 1)
    for budget in (float("inf"), 1e4, 0.001):  # what the Gaussian's calibration refuses too
        with pytest.raises(ConfigError, match="epsilon"):
            sk.plan(budget, 1e-6, 10, 1.0, 22, 100, 51)
