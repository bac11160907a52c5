"""The privacy factory: one :class:`PrivacyConfig` turns any strategy of vector updates
into its private form, for every runner and the server (docs/privacy.md).

* ``mode = "central"``: :class:`~fedrank.strategies.dp.DPStrategy` (DP-FedAvg, McMahan et
  al. 2018): every update clipped, the unweighted mean, Gaussian noise calibrated so that
  each user's ``(epsilon, delta)`` over the planned rounds stays within the budget; an
  adaptive clip (Andrew et al. 2021) and a fixed denominator on request.
* ``mode = "distributed"``: :class:`~fedrank.strategies.distributed_dp.
  DistributedDPStrategy`, what a secure round with the clients' Skellam shares releases
  (Agarwal, Kairouz & Liu 2021), emulated in one process; the service runs the real
  protocol (``[secagg]``) and takes only the plan from here.

The frecency study, FPDGD training, the FedPS runner and the server's privacy ledger
(:mod:`fedrank.server.privacy`) all build their private strategy with :func:`private` and
record it with :func:`run_record`.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from fedrank.core.validation import Accepts, Interval, Options, Rule, Validated
from fedrank.errors import ConfigError
from fedrank.privacy.accounting import ACCOUNTANTS, gaussian_noise_multiplier
from fedrank.privacy.adaptive_clip import AdaptiveClip
from fedrank.privacy.skellam import SkellamPlan
from fedrank.strategies.base import Strategy
from fedrank.strategies.distributed_dp import DistributedDPStrategy
from fedrank.strategies.dp import DPStrategy


@dataclass(frozen=True)
class PrivacyConfig(Validated):
    """A privacy budget for a training run: central DP (:class:`~fedrank.strategies.dp.
    DPStrategy`) or distributed DP (:class:`~fedrank.strategies.distributed_dp.
    DistributedDPStrategy` in a simulation, the clients' Skellam shares under secure
    aggregation in the service).

    Attributes:
        epsilon: the per-user budget over the whole run (> 0).
        delta: its failure probability, in (0, 1); well below one over the number of users
            (e.g. 1e-6 for 10,000 users).
        clip: ``C``, the L2 bound of every update (> 0); near the typical update norm.
            With ``clip_quantile``, the first round's clip.
        accountant: ``pld`` (tight, the default) or ``rdp`` (a looser bound, Mironov 2017).
        clip_quantile: ``gamma``: the clip follows this quantile of the update norms,
            estimated privately (:class:`~fedrank.privacy.adaptive_clip.AdaptiveClip`);
            ``None`` (default): a fixed clip.
        count_noise: ``sigma_b`` of the adaptive clip; ``None``: Andrew et al.'s choice,
            the expected number of updates per round over 20 (the runner knows it).
        clip_eta: the adaptive clip's learning rate (Andrew et al.: 0.2).
        denominator: ``W``: divide each round's noised sum by this fixed number (about the
            expected updates per round) instead of the round's count
            (:class:`~fedrank.strategies.dp.DPStrategy`); ``None`` (default): the count.
        mode: ``central`` or ``distributed``: the clients add Skellam noise
            under secure aggregation (:mod:`fedrank.strategies.distributed_dp`; Renyi DP,
            no adaptive clip, no denominator).
        threshold: ``distributed``: the share of the reporting users whose noise shares a
            round's sum must hold (the secure-aggregation threshold ``t``), in (0, 1].
    """

    epsilon: float
    delta: float
    clip: float
    accountant: str = "pld"
    clip_quantile: float | None = None
    count_noise: float | None = None
    clip_eta: float = 0.2
    denominator: float | None = None
    mode: str = "central"
    threshold: float = 0.5

    ACCEPTS = {
        "epsilon": Accepts(
            Interval(Real, 0, None, closed="neither"), note="the per-user privacy budget"
        ),
        "delta": Accepts(
            Interval(Real, 0, 1, closed="neither"),
            note="the budget's failure probability; well below 1 / users",
        ),
        "clip": Accepts(
            Interval(Real, 0, None, closed="neither"), note="the L2 bound C of every update"
        ),
        "accountant": Options(*ACCOUNTANTS),
        "clip_quantile": Accepts(
            Interval(Real, 0, 1, closed="neither"),
            None,
            note="gamma, the quantile of the update norms the clip follows",
        ),
        "count_noise": Accepts(
            Interval(Real, 0, None, closed="neither"),
            None,
            note="sigma_b, the noise on the count of updates within the clip",
        ),
        "clip_eta": Accepts(
            Interval(Real, 0, None, closed="neither"), note="the adaptive clip's learning rate"
        ),
        "denominator": Accepts(
            Interval(Real, 1, None),
            None,
            note="W: the fixed number each round's noised sum is divided by, about the "
            "expected updates per round",
        ),
        "mode": Options("central", "distributed"),
        "threshold": Interval(Real, 0, 1, closed="right"),
    }
    RULES = (
        Rule(
            lambda c: c.count_noise is None or c.clip_quantile is not None,
            "count_noise belongs to the adaptive clip: give clip_quantile too",
        ),
        Rule(
            lambda c: c.mode == "central" or (c.clip_quantile is None and c.denominator is None),
            "distributed DP clips to a fixed bound and divides the decoded sum by its "
            "contributors: drop clip_quantile and denominator (central DP's)",
        ),
    )

    def adaptive(self, expected_updates: int) -> AdaptiveClip | None:
        """The adaptive clip (``None``: a fixed one); its count noise ``count_noise``, or
        ``expected_updates / 20`` when that is ``None``."""
        if self.clip_quantile is None:
            return None
        if self.count_noise is None and expected_updates < 1:
            raise ConfigError(
                f"the adaptive clip's default count noise is the expected number of updates "
                f"per round over 20; got {expected_updates} expected updates: give count_noise"
            )
        sigma = expected_updates / 20.0 if self.count_noise is None else self.count_noise
        return AdaptiveClip(self.clip_quantile, sigma, self.clip_eta)

    def noise_multiplier(self, rounds: int, sampling_rate: float = 1.0) -> float:
        """The smallest noise multiplier that keeps ``rounds`` rounds within the budget
        (:func:`~fedrank.privacy.accounting.gaussian_noise_multiplier`)."""
        return gaussian_noise_multiplier(
            self.epsilon, self.delta, rounds, sampling_rate, self.accountant
        )

    def skellam_plan(
        self, rounds: int, dim: int, clients: int, threshold: int | None = None
    ) -> SkellamPlan:
        """Distributed DP's noise plan (:func:`fedrank.privacy.skellam.plan`) for ``rounds``
        secure rounds of ``clients`` updates of ``dim`` coordinates, with the secure sum's
        ``threshold`` (default: this config's share of ``clients``, at least 2)."""
        from fedrank.privacy import skellam

        t = skellam.share_threshold(self.threshold, clients) if threshold is None else threshold
        if clients < t:
            raise ConfigError(
                f"distributed DP needs at least {t} reporting clients per round (the secure "
                f"sum's threshold); got {clients}"
            )
        return skellam.plan(self.epsilon, self.delta, rounds, self.clip, dim, clients, t)


def private(
    strategy: Strategy,
    privacy: PrivacyConfig | None,
    *,
    rounds: int,
    rng: np.random.Generator | np.random.SeedSequence | int,
    sampling_rate: float = 1.0,
    expected_updates: int = 0,
    clients: int | None = None,
    noise_multiplier: float | None = None,
) -> Strategy:
    """``strategy`` under ``privacy`` (``None``: itself).

    Args:
        strategy: a strategy of vector updates (frecency, FedAvg, FPDGD).
        privacy: the budget and mode.
        rounds: the rounds the budget covers (each user in each with probability
            ``sampling_rate``).
        rng: the noise's generator, or a seed for one.
        sampling_rate: central DP: the probability that a user takes part in a round
            (Poisson sampling: amplification by subsampling); 1: every user in every round.
        expected_updates: central DP: updates per round, for an adaptive clip's default
            count noise (:meth:`PrivacyConfig.adaptive`).
        clients: distributed DP: the clients who report in a round (the plan's ``K``).
        noise_multiplier: central DP: this multiplier instead of the budget's (a server
            computes it once and caches it).
    """
    if privacy is None:
        return strategy
    if privacy.mode == "distributed":
        if clients is None:
            raise ConfigError("distributed DP's plan needs the clients who report per round")
        return DistributedDPStrategy(
            strategy, privacy.skellam_plan(rounds, strategy.dim, clients), rng
        )
    z = (
        privacy.noise_multiplier(rounds, sampling_rate)
        if noise_multiplier is None
        else noise_multiplier
    )
    return DPStrategy(
        strategy, z, privacy.clip, rng, privacy.adaptive(expected_updates), privacy.denominator
    )


def run_record(
    strategy: Strategy,
    privacy: PrivacyConfig,
    rounds: int,
    counts: list[int] | None = None,
    system: str = "fedavg",
) -> dict[str, Any]:
    """The ``privacy`` object of a run's JSON for a strategy :func:`private` built: the
    per-user guarantee over ``rounds`` rounds and how each round was noised (``counts``:
    each round's number of updates, for central DP's noise per round; ``system``: the label
    of distributed DP's record)."""
    if isinstance(strategy, DPStrategy):
        return strategy.run_privacy(
            privacy.epsilon, privacy.delta, privacy.accountant, rounds, counts
        )
    if isinstance(strategy, DistributedDPStrategy):
        return strategy.run_privacy(rounds, system)
    raise ConfigError(f"{strategy!r} is not a private strategy of this factory")
