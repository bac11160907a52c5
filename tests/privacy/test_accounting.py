"""Privacy accounting (fedrank.privacy.accounting) against dp_accounting called directly, the
exact Gaussian composition, and FOLtR-ES's randomized-response formula."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from fedrank.errors import ConfigError
from fedrank.metrics.maxrr import maxrr_values
from fedrank.privacy.accounting import (
    PLD_DISCRETIZATION,
    PrivacyGuarantee,
    gaussian_epsilon,
    gaussian_guarantee,
    gaussian_noise_multiplier,
    randomized_response_epsilon,
    randomized_response_guarantee,
    randomized_response_message_epsilon,
)
from fedrank.privacy.randomized_response import RandomizedResponse

#: (noise multiplier, rounds, sampling rate, delta)
SETTINGS = [(1.1, 100, 0.02, 1e-5), (5.0, 40, 1.0, 1e-6), (2.0, 3, 1.0, 1e-5)]


def _event(z: float, rounds: int, q: float) -> dp_accounting.DpEvent:
    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(z)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    return dp_accounting.SelfComposedDpEvent(event, rounds)


@pytest.mark.parametrize(("z", "rounds", "q", "delta"), SETTINGS)
def test_rdp_epsilon_is_dp_accountings(z: float, rounds: int, q: float, delta: float) -> None:
    accountant = rdp.RdpAccountant()
    accountant.compose(_event(z, rounds, q))
    assert gaussian_epsilon(z, delta, rounds, q, "rdp") == accountant.get_epsilon(delta)


@pytest.mark.parametrize(("z", "rounds", "q", "delta"), SETTINGS)
def test_pld_epsilon_is_dp_accountings(z: float, rounds: int, q: float, delta: float) -> None:
    accountant = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    accountant.compose(_event(z, rounds, q))
    assert gaussian_epsilon(z, delta, rounds, q, "pld") == pytest.approx(
        accountant.get_epsilon(delta), rel=1e-12
    )


def test_pld_at_the_coarser_grid_stays_within_the_library_default() -> None:
    """The 1e-3 grid is pessimistic: at least the library's 1e-4 estimate, and close to it."""
    z, rounds, q, delta = SETTINGS[0]
    fine = pld.PLDAccountant()
    fine.compose(_event(z, rounds, q))
    reference = fine.get_epsilon(delta)
    ours = gaussian_epsilon(z, delta, rounds, q, "pld")
    assert reference - 1e-9 <= ours <= reference * (1 + 1e-3)


@pytest.mark.parametrize(("z", "rounds", "delta"), [(5.0, 40, 1e-6), (2.0, 3, 1e-5)])
def test_full_participation_matches_the_exact_gaussian_composition(
    z: float, rounds: int, delta: float
) -> None:
    """Without sampling, T rounds of multiplier z are one Gaussian of z / sqrt(T)."""
    exact = dp_accounting.get_epsilon_gaussian(z / math.sqrt(rounds), delta)
    assert gaussian_epsilon(z, delta, rounds, 1.0, "pld") == pytest.approx(exact, abs=1e-5)
    assert gaussian_epsilon(z, delta, rounds, 1.0, "rdp") >= exact  # RDP: an upper bound


def test_replace_one_is_pld_with_the_replace_one_relation() -> None:
    accountant = pld.PLDAccountant(
        dp_accounting.NeighboringRelation.REPLACE_ONE,
        value_discretization_interval=PLD_DISCRETIZATION,
    )
    accountant.compose(_event(5.0, 40, 1.0))
    ours = gaussian_epsilon(5.0, 1e-6, 40, 1.0, "pld", adjacency="replace-one")
    assert ours == pytest.approx(accountant.get_epsilon(1e-6), rel=1e-6)
    assert ours > gaussian_epsilon(5.0, 1e-6, 40, 1.0, "pld")
    with pytest.raises(ConfigError, match="replace-one"):
        gaussian_epsilon(5.0, 1e-6, 40, 0.5, adjacency="replace-one")


@pytest.mark.parametrize(
    ("epsilon", "delta", "rounds", "q", "accountant"),
    [
        (4.0, 1e-6, 40, 1.0, "pld"),
        (4.0, 1e-6, 40, 1.0, "rdp"),
        (1.0, 1e-5, 5, 1.0, "pld"),
        (2.0, 1e-5, 20, 0.1, "rdp"),
    ],
)
def test_noise_multiplier_meets_the_budget_and_5_percent_less_does_not(
    epsilon: float, delta: float, rounds: int, q: float, accountant: str
) -> None:
    z = gaussian_noise_multiplier(epsilon, delta, rounds, q, accountant)
    assert gaussian_epsilon(z, delta, rounds, q, accountant) <= epsilon
    assert gaussian_epsilon(0.95 * z, delta, rounds, q, accountant) > epsilon


def test_pld_needs_less_noise_than_rdp() -> None:
    z_pld = gaussian_noise_multiplier(4.0, 1e-6, 40, accountant="pld")
    z_rdp = gaussian_noise_multiplier(4.0, 1e-6, 40, accountant="rdp")
    assert z_pld < z_rdp


def test_gaussian_guarantee_json_has_exactly_the_documented_keys() -> None:
    g = gaussian_guarantee(5.0, 0.5, 1e-6, 40)
    assert list(g.to_json()) == [
        "mechanism", "epsilon", "delta", "rounds", "sampling_rate", "noise_multiplier", "clip",
    ]  # fmt: skip
    assert g.to_json() == {
        "mechanism": "gaussian",
        "epsilon": gaussian_epsilon(5.0, 1e-6, 40),
        "delta": 1e-6,
        "rounds": 40,
        "sampling_rate": 1.0,
        "noise_multiplier": 5.0,
        "clip": 0.5,
    }


def test_randomized_response_is_foltr_es_equation_10() -> None:
    p, n, batch = 0.9, 11, 4
    eps = math.log(p * (n - 1) / (1 - p))
    assert randomized_response_epsilon(p, n) == pytest.approx(eps, rel=1e-15)
    assert randomized_response_epsilon(p, n) == RandomizedResponse(maxrr_values(10), p).epsilon()
    assert randomized_response_message_epsilon(p, n, batch) == pytest.approx(batch * eps)
    g = randomized_response_guarantee(p, n, batch, rounds=25)
    assert g.epsilon == pytest.approx(25 * batch * eps)
    assert (g.delta, g.rounds, g.noise_multiplier, g.clip) == (0.0, 25, None, None)


def test_truthful_randomized_response_has_no_guarantee() -> None:
    g = randomized_response_guarantee(1.0, 11, 4, 3)
    assert math.isinf(g.epsilon)
    assert g.to_json()["epsilon"] is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: gaussian_epsilon(1.0, 0.0, 10), "delta"),
        (lambda: gaussian_epsilon(1.0, 1e-5, 0), "rounds"),
        (lambda: gaussian_epsilon(1.0, 1e-5, 10, 1.5), "sampling_rate"),
        (lambda: gaussian_epsilon(0.0, 1e-5, 10), "noise_multiplier"),
        (lambda: gaussian_epsilon(1.0, 1e-5, 10, accountant="moments"), "accountant"),
        (lambda: gaussian_noise_multiplier(-1.0, 1e-5, 10), "epsilon"),
        (lambda: gaussian_guarantee(1.0, 0.0, 1e-5, 10), "clip"),
        (lambda: randomized_response_epsilon(0.05, 11), "p must lie in"),
        (lambda: randomized_response_message_epsilon(0.9, 11, 0), "batch"),
    ],
)
def test_bad_settings_raise_naming_the_setting(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


def test_guarantee_is_frozen() -> None:
    g = PrivacyGuarantee("gaussian", 1.0, 1e-6, 1, 1.0, 1.0, 1.0)
    with pytest.raises(AttributeError):
        g.epsilon = 0.5  # type: ignore[misc]
    assert np.isfinite(g.epsilon)


@pytest.mark.parametrize(
    ("epsilon", "delta", "rounds", "reason"),
    [
        (1e6, 1e-6, 10, "outside what the noise is calibrated for"),
        (1e-6, 1e-6, 10, "outside what the noise is calibrated for"),
        (4.0, 1e-300, 10, "outside what the noise is calibrated for"),
        (4.0, 0.5, 10, "outside what the noise is calibrated for"),
        (4.0, 1e-6, 10**6, "rounds must be at most"),
    ],
)
def test_calibration_refuses_budgets_it_cannot_calibrate(
    epsilon: float, delta: float, rounds: int, reason: str
) -> None:
    """An attacker's (or a typo's) extreme budget is a clear ConfigError at once, not a
    traceback from the accountant or a calibration that runs for minutes."""
    with pytest.raises(ConfigError, match=reason):
        gaussian_noise_multiplier(epsilon, delta, rounds)
