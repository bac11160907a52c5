"""The Gaussian mechanism on a sum of clipped updates (fedrank.privacy.gaussian)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.privacy.accounting import gaussian_guarantee
from fedrank.privacy.gaussian import GaussianSumMechanism


def test_noise_on_the_mean_has_the_stated_std() -> None:
    """200 rounds x 50 coordinates of the mean of 10 zero updates: the sample standard
    deviation is z C / m within 4% (its relative error is about 1 / sqrt(2 * 10,000))."""
    mech = GaussianSumMechanism(clip=0.5, noise_multiplier=2.0)
    rng = np.random.default_rng(7)
    draws = np.stack([mech.noisy_mean(np.zeros(50), 10, rng) for _ in range(200)])
    assert mech.mean_std(10) == pytest.approx(0.1)
    assert draws.std() == pytest.approx(0.1, rel=0.04)
    assert abs(draws.mean()) < 4 * 0.1 / np.sqrt(draws.size)


def test_privatize_clips_every_update_before_the_mean() -> None:
    mech = GaussianSumMechanism(clip=1.0, noise_multiplier=1e-12)  # noise negligible
    updates = np.zeros((4, 3))
    updates[0] = [1e6, 0.0, 0.0]  # one huge update among three zeros
    out = mech.privatize(updates, np.random.default_rng(0))
    np.testing.assert_allclose(out, [0.25, 0.0, 0.0], atol=1e-9)


def test_same_seed_same_noise_and_empty_rounds_take_their_draw() -> None:
    mech = GaussianSumMechanism(clip=1.0, noise_multiplier=1.0)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    np.testing.assert_array_equal(
        mech.noisy_mean(np.ones(5), 2, a), mech.noisy_mean(np.ones(5), 2, b)
    )
    assert not mech.noisy_mean(np.zeros(5), 0, a).any()  # no updates: no step
    mech.noise(5, b)
    np.testing.assert_array_equal(mech.noise(5, a), mech.noise(5, b))  # streams still aligned


def test_guarantee_is_the_accountants() -> None:
    mech = GaussianSumMechanism(clip=0.3, noise_multiplier=4.0)
    assert mech.guarantee(1e-6, 20) == gaussian_guarantee(4.0, 0.3, 1e-6, 20)


@pytest.mark.parametrize(("clip", "z", "message"), [(0.0, 1.0, "clip"), (1.0, -1.0, "noise")])
def test_bad_parameters_raise(clip: float, z: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GaussianSumMechanism(clip, z)
