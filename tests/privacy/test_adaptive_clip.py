"""Adaptive clipping with a private quantile estimate (fedrank.privacy.adaptive_clip; Andrew
et al. 2021): the budget split of Theorem 1 checked against ``dp_accounting`` composing the
two releases itself, the noised fraction, and the clip finding the quantile."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import erfinv

from fedrank.errors import ConfigError
from fedrank.privacy.adaptive_clip import AdaptiveClip


def _pld_epsilon(event: dp_accounting.DpEvent, delta: float) -> float:
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(("z", "sigma_b", "rounds"), [(3.0, 5.0, 10), (7.5, 300.0, 40)])
def test_the_two_releases_together_spend_the_budget_of_z(
    z: float, sigma_b: float, rounds: int
) -> None:
    """Each round releases the updates' sum (multiplier z_u) and the centered count
    (sensitivity 1/2, noise sigma_b: multiplier 2 sigma_b); dp_accounting composes them
    round by round and must find the epsilon of T rounds of one Gaussian of multiplier z."""
    clip = AdaptiveClip(quantile=0.5, count_noise=sigma_b)
    z_u = clip.update_noise_multiplier(z)
    assert z_u > z  # the updates pay a little for the count
    both = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(z_u), dp_accounting.GaussianDpEvent(2 * sigma_b)]
        ),
        rounds,
    )
    one = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds)
    assert _pld_epsilon(both, 1e-6) == pytest.approx(_pld_epsilon(one, 1e-6), rel=2e-3)


def test_a_count_noise_too_small_for_the_budget_is_refused() -> None:
    with pytest.raises(ConfigError, match="2 sigma_b > z"):
        AdaptiveClip(quantile=0.5, count_noise=0.5).update_noise_multiplier(1.0)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"quantile": 1.0, "count_noise": 1.0}, "quantile"),
        ({"quantile": 0.0, "count_noise": 1.0}, "quantile"),
        ({"quantile": 0.5, "count_noise": 0.0}, "count noise"),
        ({"quantile": 0.5, "count_noise": 1.0, "eta": -0.2}, "eta"),
    ],
)
def test_bad_settings_say_what_is_wrong(kwargs: dict[str, float], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        AdaptiveClip(**kwargs)


def test_the_noised_fraction_is_the_centered_count_plus_sigma_b_noise() -> None:
    clip = AdaptiveClip(quantile=0.5, count_noise=4.0)
    draws = np.array([clip.noisy_fraction(30, 100, np.random.default_rng(s)) for s in range(4000)])
    assert draws.mean() == pytest.approx(0.30, abs=4 * 0.04 / np.sqrt(draws.size))
    assert draws.std() == pytest.approx(4.0 / 100, rel=0.05)
    # the same numbers as the formula, draw for draw
    rng = np.random.default_rng(7)
    expected = (30 - 50 + rng.normal(0.0, 4.0)) / 100 + 0.5
    assert clip.noisy_fraction(30, 100, np.random.default_rng(7)) == expected


def test_an_empty_round_keeps_the_clip_and_still_draws_its_normal() -> None:
    clip = AdaptiveClip(quantile=0.5, count_noise=2.0)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert clip.next_clip(0.7, 0, 0, a) == 0.7
    b.normal()
    assert a.random() == b.random()
    with pytest.raises(ConfigError, match="within"):
        clip.noisy_fraction(5, 3, a)


@settings(max_examples=25, deadline=None)
@given(
    quantile=st.sampled_from([0.3, 0.5, 0.8]),
    start=st.floats(0.01, 100.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_clip_finds_the_quantile_of_the_norms(quantile: float, start: float, seed: int) -> None:
    """1,000 users a round, norms log-normal around 1: from any start within four orders of
    magnitude the clip ends within 15% of the norms' quantile (count noise 50: b~ +- 0.05)."""
    rng = np.random.default_rng(seed)
    clip = AdaptiveClip(quantile=quantile, count_noise=50.0)
    c = start
    for _ in range(150):
        norms = rng.lognormal(0.0, 0.5, size=1000)
        c = clip.next_clip(c, int(np.count_nonzero(norms <= c)), norms.size, rng)
    truth = float(np.exp(0.5 * np.sqrt(2) * erfinv(2 * quantile - 1)))  # log-normal quantile
    assert c == pytest.approx(truth, rel=0.15)
