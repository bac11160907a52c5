"""Distributed differential privacy under secure aggregation: the Skellam mechanism (Agarwal,
Kairouz & Liu, "The Skellam Mechanism for Differentially Private Federated Learning",
NeurIPS 2021; docs/privacy.md, "Distributed DP").

Under secure aggregation (:mod:`fedrank.secagg`) the server learns only the sum of a
round's encoded updates, so it cannot add noise to the sum without first seeing it exactly.
Instead every client adds a share of integer noise to its encoded update before masking it.
The symmetric Skellam distribution ``Sk(mu) = Poisson(mu / 2) - Poisson(mu / 2)`` (variance
``mu``) is closed under addition: ``k`` clients adding ``Sk(mu / t)`` each put exactly
``Sk(k mu / t)`` on the sum, and at least ``t`` (the protocol's threshold) must contribute
for the round to complete, so the sum always carries ``Sk(mu')`` with ``mu' >= mu``.
Integers go through the protocol's modular arithmetic untouched: the server's decoded sum
is the Skellam mechanism applied to the sum of the clients' integer vectors.

**Sensitivity.** A client clips its update to L2 norm ``C`` and encodes it as ``v =
rint(gamma x)`` (:class:`~fedrank.secagg.field.FixedPointEncoder`, scale ``gamma``). Rounding
moves each coordinate by at most 1/2, so ``|v|_2 <= gamma C + sqrt(d) / 2 = Delta_2``; ``v``
is an integer vector, so ``|v|_1 <= min(sqrt(d) Delta_2, Delta_2^2) = Delta_1``. Adding or
removing one user moves the sum by ``v``.

**Renyi DP** (Agarwal et al., Theorem 3.5 / Corollary 3.6, in the parametrization where
``mu`` is the per-coordinate variance of the noise on the sum): for every integer order
``alpha > 1``

    eps(alpha) <= alpha Delta_2^2 / (2 mu)
                  + min(((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2), 3 Delta_1 / (2 mu)).

The first term is the Gaussian mechanism's with variance ``mu``; the second vanishes as
``mu`` grows. Rounds compose by adding RDP; the conversion to ``(epsilon, delta)`` is
``dp_accounting``'s (Canonne, Kamath & Steinke 2020, Prop. 12). The tests check the bound
against the exact Renyi divergence of one-dimensional Skellam distributions.

**Who the guarantee holds against.** The server (and anyone who sees the models), with
honest-but-curious clients that add their share. ``c`` clients colluding with the server
know their own noise, which leaves ``(k - c) mu / t`` on the sum; the budget assumes none
do (docs/privacy.md says how to choose ``t`` against collusion).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.fixed_point import MAX_ABS_SUM

#: The integer Renyi orders the accountant takes the best of (the bound holds for integers).
ORDERS: tuple[int, ...] = (
    *range(2, 65),
    *range(72, 257, 8),
    *range(288, 1025, 32),
    *range(1152, 4097, 128),
)
#: A round's sum wraps modulo ``2**32`` with probability at most this (over the whole
#: training): the noise headroom of :func:`plan` is sized for it.
WRAP_PROBABILITY = 1e-12
#: The largest share of ``Delta_2`` that rounding (``sqrt(d) / 2``) may take: beyond it the
#: grid is too coarse for the clip, and the plan refuses.
MAX_ROUNDING_SHARE = 0.01


def skellam_noise(rng: np.random.Generator, variance: float, size: int) -> np.ndarray:
    """``size`` draws of the symmetric Skellam distribution of ``variance`` (``Poisson(
    variance / 2) - Poisson(variance / 2)``), as ``int64``. ``variance = 0``: zeros."""
    if not (math.isfinite(variance) and variance >= 0):
        raise ConfigError(f"the Skellam variance must be a finite number >= 0, got {variance}")
    if variance == 0:
        return np.zeros(size, dtype=np.int64)
    lam = variance / 2.0
    return rng.poisson(lam, size).astype(np.int64) - rng.poisson(lam, size).astype(np.int64)


def sensitivities(scale: float, clip: float, dim: int) -> tuple[float, float]:
    """``(Delta_1, Delta_2)`` of one client's encoded update (module docstring)."""
    l2 = scale * clip + math.sqrt(dim) / 2.0
    return min(math.sqrt(dim) * l2, l2 * l2), l2


def rdp(variance: float, l1: float, l2: float, rounds: int = 1) -> np.ndarray:
    """The Renyi DP of ``rounds`` rounds of the Skellam mechanism at every order of
    :data:`ORDERS` (Agarwal et al., Theorem 3.5; module docstring)."""
    a = np.asarray(ORDERS, dtype=np.float64)
    mu = float(variance)
    tail = np.minimum(((2 * a - 1) * l2 * l2 + 6 * l1) / (4 * mu * mu), 3 * l1 / (2 * mu))
    return rounds * (a * l2 * l2 / (2 * mu) + tail)


def skellam_epsilon(variance: float, l1: float, l2: float, rounds: int, delta: float) -> float:
    """The ``epsilon`` at ``delta`` of ``rounds`` rounds of the Skellam mechanism with
    noise ``variance`` on sums of sensitivity ``(l1, l2)`` (RDP converted by
    ``dp_accounting``)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    check_hyperparameter("the Skellam variance", variance)
    eps, _ = compute_epsilon(ORDERS, rdp(variance, l1, l2, rounds).tolist(), delta)
    return float(eps)


def skellam_variance(epsilon: float, delta: float, rounds: int, l1: float, l2: float) -> float:
    """The smallest noise variance (within a relative ``1e-4``, never below it) whose
    ``rounds`` rounds stay within ``(epsilon, delta)``."""
    hi = l2 * l2
    while skellam_epsilon(hi, l1, l2, rounds, delta) > epsilon:
        hi *= 4.0
    lo = hi / 4.0
    while skellam_epsilon(lo, l1, l2, rounds, delta) <= epsilon and lo > 1e-12:
        lo /= 4.0
    while hi / lo > 1.0 + 1e-4:
        mid = math.sqrt(lo * hi)
        if skellam_epsilon(mid, l1, l2, rounds, delta) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def tail_bound(variance: float, probability: float) -> float:
    """An ``x`` with ``P(|Sk(variance)| > x) <= probability``, by the Chernoff bound
    ``P(X >= x) <= exp(variance (cosh s - 1) - s x)`` at ``s = asinh(x / variance)``."""
    if variance == 0:
        return 0.0

    def log_tail(x: float) -> float:
        s = math.asinh(x / variance)
        return variance * (math.cosh(s) - 1.0) - s * x + math.log(2.0)

    target = math.log(probability)
    lo, hi = 0.0, math.sqrt(variance) + 1.0
    while log_tail(hi) > target:
        hi *= 2.0
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if log_tail(mid) > target else (lo, mid)
    return hi


@dataclass(frozen=True)
class SkellamPlan:
    """The distributed noise of a secure-aggregation server: the encoder's ``scale``, the
    noise ``variance`` every round's sum carries (at least), and the ``client_variance``
    each of the round's clients adds, for a budget of ``(epsilon, delta)`` over
    ``rounds`` rounds of ``clients`` clients (threshold ``threshold``) with updates clipped
    to ``clip`` in ``dim`` coordinates."""

    epsilon: float
    delta: float
    rounds: int
    clip: float
    dim: int
    clients: int
    threshold: int
    scale: float
    variance: float
    l1: float
    l2: float

    @property
    def client_variance(self) -> float:
        return self.variance / self.threshold

    @property
    def noise_multiplier(self) -> float:
        """The noise's standard deviation over ``Delta_2``: the Gaussian mechanism's ``z``
        that the first term of the bound matches."""
        return math.sqrt(self.variance) / self.l2

    @property
    def noise_std(self) -> float:
        """The standard deviation of the noise on one coordinate of the decoded sum, in the
        updates' units, when ``threshold`` clients contribute (the least the budget needs)."""
        return math.sqrt(self.variance) / self.scale

    @property
    def noise_std_full_cohort(self) -> float:
        """The same when all ``clients`` contribute: ``sqrt(clients / threshold)`` times
        more, the price of tolerating dropouts down to the threshold."""
        return math.sqrt(self.variance * self.clients / self.threshold) / self.scale

    def epsilon_after(self, rounds: int, adjacency: str = "add-or-remove") -> float:
        """Each user's epsilon after ``rounds`` rounds (``replace-one``: the sum moves by
        up to twice the sensitivities)."""
        k = 2.0 if adjacency == "replace-one" else 1.0
        return skellam_epsilon(self.variance, k * self.l1, k * self.l2, rounds, self.delta)

    def to_json(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "scale": self.scale,
            "variance": self.variance,
            "client_variance": self.client_variance,
            "noise_multiplier": self.noise_multiplier,
            "noise_std": self.noise_std,
            "noise_std_full_cohort": self.noise_std_full_cohort,
            "l1_sensitivity": self.l1,
            "l2_sensitivity": self.l2,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> SkellamPlan:
        """The plan a run's ``privacy`` object recorded (:meth:`to_json` with the budget:
        ``target_epsilon``, ``delta``, ``rounds``, ``clip``, ``clients_per_round``,
        ``threshold``).

        Raises:
            ConfigError: a field is missing or not a number (named).
        """
        try:
            return cls._from_record(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"the run's privacy object does not record a Skellam plan ({exc!r} missing or "
                "malformed): rerun it with this version of fedrank"
            ) from exc

    @classmethod
    def _from_record(cls, record: dict[str, Any]) -> SkellamPlan:
        return cls(
            float(record["target_epsilon"]),
            float(record["delta"]),
            int(record["rounds"]),
            float(record["clip"]),
            int(record["dim"]),
            int(record["clients_per_round"]),
            int(record["threshold"]),
            float(record["scale"]),
            float(record["variance"]),
            float(record["l1_sensitivity"]),
            float(record["l2_sensitivity"]),
        )


def share_threshold(share: float, clients: int) -> int:
    """Secure aggregation's threshold ``t`` as a share of a round's ``clients``:
    ``max(2, ceil(share clients))`` (the simulators' ``--dp-threshold``)."""
    return max(2, math.ceil(share * clients))


def plan(
    epsilon: float,
    delta: float,
    rounds: int,
    clip: float,
    dim: int,
    clients: int,
    threshold: int,
) -> SkellamPlan:
    """The finest power-of-two ``scale`` (and its noise) for which a round's sum cannot
    wrap modulo ``2**32``: ``clients`` encoded updates (each coordinate at most ``rint(
    scale clip)``) plus the noise of ``clients`` shares stay within ``2**31 - 1`` except
    with probability :data:`WRAP_PROBABILITY` over all ``dim x rounds`` coordinates. The
    noise variance is calibrated to the budget at that scale (:func:`skellam_variance`).

    Raises:
        ConfigError: a budget outside the calibrated range
            (:func:`~fedrank.privacy.accounting.check_budget`); no scale both fits and
            keeps rounding below :data:`MAX_ROUNDING_SHARE` of the sensitivity (too many
            clients, or too many coordinates, for 32-bit sums).
    """
    from fedrank.privacy.accounting import check_budget

    epsilon, delta, rounds = check_budget(epsilon, delta, rounds)
    if not 2 <= threshold <= clients:
        raise ConfigError(f"threshold must be in 2..clients ({clients}), got {threshold}")
    per_coordinate = WRAP_PROBABILITY / (dim * rounds)
    k = math.floor(math.log2(MAX_ABS_SUM / clients / clip))
    while True:
        scale = 2.0**k
        l1, l2 = sensitivities(scale, clip, dim)
        if math.sqrt(dim) / 2.0 > MAX_ROUNDING_SHARE * l2:
            raise ConfigError(
                f"distributed noise for {clients} clients of {dim} coordinates clipped to "
                f"{clip:g} does not fit 32-bit secure aggregation: at the largest scale that "
                f"fits ({scale:g}) rounding would be more than {MAX_ROUNDING_SHARE:.0%} of "
                "the sensitivity; use fewer clients per round or fewer coordinates"
            )
        variance = skellam_variance(epsilon, delta, rounds, l1, l2)
        headroom = tail_bound(variance * clients / threshold, per_coordinate)
        if clients * round(scale * clip) + headroom <= MAX_ABS_SUM:
            return SkellamPlan(
                epsilon, delta, rounds, clip, dim, clients, threshold, scale, variance, l1, l2
            )
        k -= 1
