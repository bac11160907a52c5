"""The secure noise (:mod:`fedrank.privacy.discrete_gaussian`): exact samples of the
discrete Gaussian (Canonne, Kamath & Steinke 2020) from a ChaCha20 keystream, checked
against the pmf; the lattice mechanism's sensitivity and noise; its accounting against the
zCDP formula."""

from __future__ import annotations

import math
from fractions import Fraction

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError
from fedrank.privacy.discrete_gaussian import (
    ROUNDING_SHARE,
    KeyStream,
    LatticeGaussian,
    discrete_gaussian_pmf,
    noise_key,
)

KEY = noise_key(0x0123456789ABCDEF0123456789ABCDEF, "test")


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(5, 2), Fraction(40)])
def test_samples_follow_the_pmf(sigma2: Fraction) -> None:
    """Chi-square of 40,000 samples (fixed key: the same samples every run) against the
    exact pmf, at the 0.999 quantile; the first two moments against the pmf's. At
    sigma^2 = 1/4 the discrete Gaussian is far from a rounded continuous one: a sampler
    that rounded normals would fail here (P(0) = 0.787 against 0.683)."""
    n = 40_000
    samples = KeyStream(KEY).discrete_gaussians(sigma2, n)
    reach = int(4 * math.sqrt(sigma2)) + 1
    support = np.arange(-reach, reach + 1)
    pmf = discrete_gaussian_pmf(float(sigma2), support)
    expected = np.append(pmf, 1.0 - pmf.sum()) * n  # the two tails as one last bin
    clipped = np.where(np.abs(samples) > reach, reach + 1, samples)
    observed = np.array([np.count_nonzero(clipped == x) for x in support])
    observed = np.append(observed, np.count_nonzero(clipped == reach + 1))
    keep = expected >= 5
    chi2 = float((((observed - expected) ** 2 / expected)[keep]).sum())
    assert chi2 < stats.chi2.ppf(0.999, int(keep.sum()) - 1)
    wide = np.arange(-60 * reach, 60 * reach + 1)
    variance = float((discrete_gaussian_pmf(float(sigma2), wide) * wide**2).sum())
    assert variance <= float(sigma2)
    assert abs(samples.mean()) < 4 * math.sqrt(variance / n)
    assert samples.var() == pytest.approx(variance, rel=6 * math.sqrt(2 / n))


def test_bernoulli_exp_is_exact_in_frequency() -> None:
    stream = KeyStream(KEY)
    n = 20_000
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)):
        hits = sum(stream.bernoulli_exp(gamma) for _ in range(n))
        p = math.exp(-float(gamma))
        assert abs(hits / n - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_the_keystream_is_deterministic_by_key() -> None:
    one = KeyStream(KEY).discrete_gaussians(Fraction(9), 200)
    again = KeyStream(KEY).discrete_gaussians(Fraction(9), 200)
    other = KeyStream(noise_key(0x0123456789ABCDEF0123456789ABCDEF, "other")).discrete_gaussians(
        Fraction(9), 200
    )
    assert np.array_equal(one, again) and not np.array_equal(one, other)
    assert noise_key(1, "iteration 1") != noise_key(1, "iteration 2")
    assert noise_key(1 << 200, "x") != noise_key(1, "x")
    with pytest.raises(ConfigError, match=">= 0"):
        noise_key(-1, "x")
    with pytest.raises(ConfigError, match="32 bytes"):
        KeyStream(b"short")


def test_the_lattice_mechanism_rounds_and_noises_on_the_lattice() -> None:
    clip, z, dim = 0.5, 1.3, 64
    mech = LatticeGaussian(clip, z, dim)
    assert mech.step == pytest.approx(ROUNDING_SHARE * clip / math.sqrt(dim))
    assert mech.sensitivity == pytest.approx(clip / mech.step + math.sqrt(dim))
    sigma = math.sqrt(float(mech.sigma2))
    assert z * mech.sensitivity <= sigma <= z * mech.sensitivity + 1e-3  # rounded up
    assert mech.sum_std == pytest.approx(z * clip * (1 + ROUNDING_SHARE), rel=1e-6)
    total = np.linspace(-3, 3, dim)
    noised = mech.noised_sum(total, KeyStream(KEY))
    units = noised / mech.step
    assert np.allclose(units, np.rint(units), atol=1e-6)  # on the lattice
    assert np.std(noised - total) == pytest.approx(mech.sum_std, rel=0.35)
    assert np.array_equal(noised, mech.noised_sum(total, KeyStream(KEY)))
    with pytest.raises(ConfigError, match="not finite"):
        mech.noised_sum(np.full(dim, np.inf), KeyStream(KEY))


def test_its_accounting_is_the_zcdp_bound_of_the_noise_over_the_sensitivity() -> None:
    """CKS 2020, Theorem 14: noise sigma_Z on a sum of L2 sensitivity Delta is
    Delta^2 / (2 sigma_Z^2)-zCDP per round; T rounds compose to T times that. The Renyi
    accountant of GaussianDpEvent(sigma_Z / Delta) is that bound, and its epsilon at delta
    is at most the zCDP conversion rho + 2 sqrt(rho log(1 / delta)) (Bun & Steinke 2016,
    Proposition 1.3)."""
    mech = LatticeGaussian(1.0, 1.7, 100)
    ratio = math.sqrt(float(mech.sigma2)) / mech.sensitivity
    rounds, delta = 20, 1e-6
    rho = rounds * mech.sensitivity**2 / (2 * float(mech.sigma2))
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(ratio), rounds)
    epsilon = accountant.get_epsilon(delta)
    assert ratio >= 1.7
    assert epsilon <= rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert rho == pytest.approx(rounds / (2 * 1.7**2), rel=1e-3)
