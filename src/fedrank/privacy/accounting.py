"""Privacy accounting: what a mechanism guarantees per message, per round and per user over a
whole training run.

Two mechanisms are accounted here:

* **The Gaussian mechanism on a sum of clipped updates** (central differential privacy,
  DP-SGD / DP-FedAvg: Abadi et al. 2016, "Deep Learning with Differential Privacy", CCS;
  McMahan et al. 2018, "Learning Differentially Private Recurrent Language Models", ICLR).
  Every round the server adds ``N(0, (z C)^2 I)`` to the sum of the round's updates, each
  clipped to L2 norm ``C``; with one update per user and round, adding or removing one
  user moves that sum by at most ``C``, so each round is the Gaussian mechanism of
  sensitivity 1 with noise multiplier ``z`` (``dp_accounting.GaussianDpEvent(z)``), and a
  training run is its composition over ``rounds`` rounds, Poisson-subsampled at rate
  ``q`` when the server samples users (``PoissonSampledDpEvent``). Its ``(epsilon,
  delta)`` is computed with Google's ``dp_accounting`` by either

  - ``rdp``: Renyi differential privacy (Mironov 2017, "Renyi Differential Privacy", CSF;
    the moments accountant of Abadi et al. 2016), a slightly loose upper bound, fast for
    any ``z``; or
  - ``pld``: privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022,
    "Connect the Dots"), tight up to the discretization (``1e-3`` here: pessimistic, so
    still an upper bound, within about ``1e-6`` of the exact epsilon at ``q = 1``; 5-10x
    faster than the library's ``1e-4``).

  Without sampling (``q = 1``) the ``T``-fold composition is exactly the Gaussian mechanism
  with multiplier ``z / sqrt(T)`` (Dong, Roth & Su 2019), which the tests use as a check.
* **Randomized response** (FOLtR-ES, Kharitonov 2019, Section 4, Eq. 10): each of a
  client's ``B`` interaction values is ``epsilon = ln(p (n - 1) / (1 - p))``-locally
  differentially private (:meth:`fedrank.privacy.randomized_response.RandomizedResponse.
  epsilon`). A message carries ``B`` of them: by basic (sequential) composition it is
  ``B epsilon``-LDP -- what one client reveals to the server, or to anyone who sees the
  message, per message; over ``k`` rounds a client takes part in, ``k B epsilon``. Basic
  composition is an upper bound (advanced composition would give a smaller epsilon at some
  ``delta > 0``; not used here).

Adjacency (what "one user" means): ``add-or-remove`` (the default) compares datasets with and
without all of one user's data; ``replace-one`` compares datasets where one user's data is
replaced, so the sum moves by up to ``2 C`` -- at ``q = 1`` exactly the add-or-remove
guarantee of noise multiplier ``z / 2``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.randomized_response import RandomizedResponse

if TYPE_CHECKING:
    import dp_accounting

#: The accountants of the Gaussian mechanism: ``pld`` (tight, the default) and ``rdp``.
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")
#: The neighbouring relations accounted: add or remove one user, replace one user.
ADJACENCIES: tuple[str, ...] = ("add-or-remove", "replace-one")
#: The PLD accountant's discretization of the privacy loss (module docstring).
PLD_DISCRETIZATION = 1e-3
#: The relative tolerance of :func:`gaussian_noise_multiplier`.
CALIBRATION_RTOL = 1e-3
#: The budgets :func:`gaussian_noise_multiplier` calibrates: outside them the PLD accountant's
#: discretization is too coarse (tiny epsilon), its calibration takes minutes (epsilon
#: beyond ~100) or its bracket search fails (delta near float underflow).
CALIBRATED_EPSILON = (0.05, 50.0)
CALIBRATED_DELTA = (1e-12, 0.1)
MAX_CALIBRATED_ROUNDS = 100_000


def _dp() -> ModuleType:
    """``dp_accounting``, imported on first use: it imports ``scipy.stats``, a slow import
    that every server start and CLI call without a Gaussian mechanism would pay."""
    import dp_accounting
    import dp_accounting.mechanism_calibration
    import dp_accounting.pld
    import dp_accounting.rdp

    return dp_accounting


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An ``(epsilon, delta)`` guarantee of a mechanism over ``rounds`` rounds.

    Attributes:
        mechanism: ``gaussian`` (central DP of the aggregate) or ``randomized-response``
            (local DP of each message).
        epsilon: the privacy loss bound (``inf``: no protection).
        delta: the probability the bound may fail (0 for pure DP).
        rounds: the rounds composed.
        sampling_rate: the probability a user takes part in a round, if the server samples
            users at random independently of their data (1.0: every round, no
            amplification by subsampling).
        noise_multiplier: the Gaussian noise's standard deviation over the sensitivity
            (``None`` for randomized response).
        clip: the L2 bound ``C`` of every update (``None`` for randomized response).
    """

    mechanism: str
    epsilon: float
    delta: float
    rounds: int
    sampling_rate: float
    noise_multiplier: float | None
    clip: float | None

    def to_json(self) -> dict[str, Any]:
        """``{mechanism, epsilon, delta, rounds, sampling_rate, noise_multiplier, clip}``;
        an infinite epsilon is written as ``None`` (JSON has no infinity)."""
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "delta": self.delta,
            "rounds": self.rounds,
            "sampling_rate": self.sampling_rate,
            "noise_multiplier": self.noise_multiplier,
            "clip": self.clip,
        }


# ------------------------------------------------------------------------ validation


def _check_rounds(rounds: int) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int | np.integer) or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1 (the rounds composed), got {rounds!r}")
    return int(rounds)


def _check_delta(delta: float) -> float:
    return check_hyperparameter(
        "delta (the Gaussian mechanism's failure probability; typically below 1 / users)",
        delta,
        high=1.0,
        high_inclusive=False,
    )


def _check_sampling(sampling_rate: float) -> float:
    return check_hyperparameter(
        "sampling_rate (the probability a user takes part in a round)", sampling_rate, high=1.0
    )


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _check_multiplier(noise_multiplier: float) -> float:
    return check_hyperparameter(
        "noise_multiplier (the noise's standard deviation over the sensitivity)",
        noise_multiplier,
    )


# ------------------------------------------------------------------------ the Gaussian mechanism


def gaussian_event(
    noise_multiplier: float, rounds: int, sampling_rate: float = 1.0
) -> dp_accounting.DpEvent:
    """The ``dp_accounting`` event of a training run: ``rounds`` rounds of the Gaussian
    mechanism of sensitivity 1 and noise ``noise_multiplier``, each Poisson-subsampled at
    ``sampling_rate`` when it is below 1."""
    dp = _dp()
    event: dp_accounting.DpEvent = dp.GaussianDpEvent(_check_multiplier(noise_multiplier))
    if _check_sampling(sampling_rate) < 1.0:
        event = dp.PoissonSampledDpEvent(sampling_rate, event)
    return dp.SelfComposedDpEvent(event, _check_rounds(rounds))


def _accountant(accountant: str) -> dp_accounting.PrivacyAccountant:
    dp = _dp()
    if _check_choice("accountant", accountant, ACCOUNTANTS) == "rdp":
        return dp.rdp.RdpAccountant()
    return dp.pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)


def gaussian_epsilon(
    noise_multiplier: float,
    delta: float,
    rounds: int,
    sampling_rate: float = 1.0,
    accountant: str = "pld",
    adjacency: str = "add-or-remove",
) -> float:
    """The ``epsilon`` at ``delta`` of ``rounds`` rounds of the (subsampled) Gaussian
    mechanism with ``noise_multiplier`` (module docstring), by the ``pld`` or ``rdp``
    accountant, for ``add-or-remove`` or ``replace-one`` adjacency (the latter only at
    ``sampling_rate = 1``, where it equals add-or-remove at half the multiplier)."""
    z = _check_multiplier(noise_multiplier)
    if _check_choice("adjacency", adjacency, ADJACENCIES) == "replace-one":
        if _check_sampling(sampling_rate) < 1.0:
            raise ConfigError(
                "replace-one accounting of the Poisson-subsampled Gaussian mechanism is not "
                "built; use adjacency add-or-remove, or sampling_rate 1"
            )
        z /= 2.0  # the sum moves by up to 2 C: the same loss as z / 2 at sensitivity C
    event = gaussian_event(z, rounds, sampling_rate)
    return float(_accountant(accountant).compose(event).get_epsilon(_check_delta(delta)))


def check_budget(epsilon: float, delta: float, rounds: int) -> tuple[float, float, int]:
    """``(epsilon, delta, rounds)`` checked against the range the noise is calibrated for
    (:data:`CALIBRATED_EPSILON`, :data:`CALIBRATED_DELTA`, :data:`MAX_CALIBRATED_ROUNDS`),
    for every mechanism calibrated to a budget (Gaussian here, Skellam in
    :func:`fedrank.privacy.skellam.plan`)."""
    target = check_hyperparameter("epsilon (the privacy budget)", epsilon)
    delta = _check_delta(delta)
    rounds = _check_rounds(rounds)
    low, high = CALIBRATED_EPSILON
    if not (low <= target <= high and CALIBRATED_DELTA[0] <= delta <= CALIBRATED_DELTA[1]):
        raise ConfigError(
            f"a budget of epsilon {target:g} at delta {delta:g} is outside what the noise is "
            f"calibrated for: epsilon in [{low:g}, {high:g}], delta in "
            f"[{CALIBRATED_DELTA[0]:g}, {CALIBRATED_DELTA[1]:g}] (beyond them the accountant "
            "is too coarse, too slow or fails; a budget there protects no one or needs no "
            "noise)"
        )
    if rounds > MAX_CALIBRATED_ROUNDS:
        raise ConfigError(f"rounds must be at most {MAX_CALIBRATED_ROUNDS:,}, got {rounds:,}")
    return target, delta, rounds


def gaussian_noise_multiplier(
    epsilon: float,
    delta: float,
    rounds: int,
    sampling_rate: float = 1.0,
    accountant: str = "pld",
) -> float:
    """The smallest noise multiplier (within a relative :data:`CALIBRATION_RTOL`, never
    below it) whose :func:`gaussian_epsilon` over ``rounds`` rounds at ``delta`` is at
    most ``epsilon``: ``dp_accounting.calibrate_dp_mechanism`` (Brent's method with a
    bisection fallback that keeps the budget), by RDP first and then, for ``pld``, within
    ``[z_rdp / 2^k, z_rdp]`` (PLD is tighter, so it needs no more noise than RDP)."""
    target, delta, rounds = check_budget(epsilon, delta, rounds)
    sampling_rate = _check_sampling(sampling_rate)
    _check_choice("accountant", accountant, ACCOUNTANTS)
    no_bracket = _dp().mechanism_calibration.NoBracketIntervalFoundError
    try:
        return _calibrate(target, delta, rounds, sampling_rate, accountant)
    except (ValueError, ArithmeticError, no_bracket) as exc:
        raise ConfigError(
            f"the accountant could not calibrate the noise for epsilon {target:g}, delta "
            f"{delta:g} over {rounds} rounds at sampling rate {sampling_rate:g}: {exc}"
        ) from exc


def _calibrate(
    target: float, delta: float, rounds: int, sampling_rate: float, accountant: str
) -> float:
    """:func:`gaussian_noise_multiplier` on checked arguments."""
    dp = _dp()

    def event(z: float) -> dp_accounting.DpEvent:  # unchecked: the search starts at z = 0
        inner: dp_accounting.DpEvent = dp.GaussianDpEvent(z)
        if sampling_rate < 1.0:
            inner = dp.PoissonSampledDpEvent(sampling_rate, inner)
        return dp.SelfComposedDpEvent(inner, rounds)

    # The RDP search tries small multipliers at which dp_accounting's subsampled-Gaussian
    # series cannot converge for the lowest orders; it drops those orders (still an upper
    # bound) and logs a warning for each try, dozens per calibration: quieted here.
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        z_rdp = float(
            dp.calibrate_dp_mechanism(dp.rdp.RdpAccountant, event, target, delta, tol=1e-9)
        )
    finally:
        absl.setLevel(level)
    if accountant == "rdp":
        return z_rdp

    def fresh() -> dp_accounting.PrivacyAccountant:
        return _accountant("pld")

    def gap(z: float) -> float:
        return float(fresh().compose(event(z)).get_epsilon(delta)) - target

    high = z_rdp
    for _ in range(20):  # a PLD over the RDP bound would be a discretization artefact
        if gap(high) <= 0:
            break
        high *= 1.05
    low = high / 2
    for _ in range(20):
        if gap(low) > 0:
            break
        low /= 2
    bracket = dp.ExplicitBracketInterval(low, high)
    return float(
        dp.calibrate_dp_mechanism(
            fresh, event, target, delta, bracket_interval=bracket, tol=CALIBRATION_RTOL * low
        )
    )


def gaussian_guarantee(
    noise_multiplier: float,
    clip: float,
    delta: float,
    rounds: int,
    sampling_rate: float = 1.0,
    accountant: str = "pld",
) -> PrivacyGuarantee:
    """The guarantee of ``rounds`` rounds of the Gaussian mechanism on sums of updates
    clipped to ``clip`` (add-or-remove adjacency; :func:`gaussian_epsilon`)."""
    clip = check_hyperparameter("clip (the L2 bound C of every update)", clip)
    eps = gaussian_epsilon(noise_multiplier, delta, rounds, sampling_rate, accountant)
    return PrivacyGuarantee(
        mechanism="gaussian",
        epsilon=eps,
        delta=float(delta),
        rounds=int(rounds),
        sampling_rate=float(sampling_rate),
        noise_multiplier=float(noise_multiplier),
        clip=clip,
    )


# ------------------------------------------------------------------------ randomized response


def randomized_response_epsilon(p: float, n: int) -> float:
    """FOLtR-ES's ``epsilon = ln(p (n - 1) / (1 - p))`` of one privatized interaction value
    (Eq. 10; :meth:`RandomizedResponse.epsilon
    <fedrank.privacy.randomized_response.RandomizedResponse.epsilon>`, the one formula);
    ``inf`` at ``p = 1``. Needs ``1 / n < p <= 1``."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 2:
        raise ConfigError(f"n (the metric's number of values) must be an integer >= 2, got {n!r}")
    return RandomizedResponse(np.arange(int(n), dtype=np.float64), p).epsilon()


def randomized_response_message_epsilon(p: float, n: int, batch: int) -> float:
    """The local DP of one FOLtR-ES message of ``batch`` (``B``) privatized values: ``B``
    times :func:`randomized_response_epsilon`, by basic composition -- what one client
    reveals per message."""
    if isinstance(batch, bool) or not isinstance(batch, int | np.integer) or batch < 1:
        raise ConfigError(f"batch (B, interactions per message) must be >= 1, got {batch!r}")
    return int(batch) * randomized_response_epsilon(p, n)


def randomized_response_guarantee(p: float, n: int, batch: int, rounds: int) -> PrivacyGuarantee:
    """One client's guarantee over ``rounds`` rounds it takes part in, one message of
    ``batch`` values each: ``rounds * B * epsilon`` (basic composition; pure LDP, delta 0;
    no amplification by sampling is claimed)."""
    eps = _check_rounds(rounds) * randomized_response_message_epsilon(p, n, batch)
    return PrivacyGuarantee(
        mechanism="randomized-response",
        epsilon=eps,
        delta=0.0,
        rounds=int(rounds),
        sampling_rate=1.0,
        noise_multiplier=None,
        clip=None,
    )
