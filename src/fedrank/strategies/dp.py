"""Central differential privacy for any vector strategy: clip, take the unweighted mean, add
Gaussian noise (DP-FedAvg: McMahan, Ramage, Talwar & Zhang 2018, "Learning Differentially
Private Recurrent Language Models", ICLR, Algorithm 1; the Gaussian mechanism of Abadi et
al. 2016; in the shape of Flower's ``DifferentialPrivacyServerSideFixedClipping``).

:class:`DPStrategy` wraps a strategy of vector updates (federated frecency, FedAvg) and keeps
the :class:`~fedrank.strategies.base.Strategy` interface, so the same wrapper runs in a
simulation and in the server. Of the inner strategy it keeps the model, the optimizer chain
and the constraints; it replaces the aggregation:

1. every update is clipped to L2 norm ``clip`` (``C``) by
   :class:`~fedrank.aggregators.norm_bounded.NormBounded`: a fixed bound, or with
   ``adaptive`` one that follows a quantile of the update norms, estimated privately from
   the noised count of updates within it (Andrew et al. 2021,
   :mod:`fedrank.privacy.adaptive_clip`; the round's two releases together are as private
   as one Gaussian mechanism of the budget's multiplier ``z``, so the updates' noise
   multiplier grows a little, to ``z_u``);
2. the clipped updates are averaged *unweighted*: the inner weighted or gated mean is not
   used. A weighted mean ``sum n_i u_i / sum n_i`` lets one user move it by
   ``n_i C / sum n_j``, which depends on the (self-reported) weights of everyone, so no
   fixed noise covers it; the gate of :class:`~fedrank.aggregators.gated_mean.GatedMean`
   reads the updates' variance, which the noise does not protect;
3. :meth:`DPStrategy.server_step` adds ``N(0, (z C / m)^2)`` per coordinate to the mean of
   the round's ``m`` updates (:class:`~fedrank.privacy.gaussian.GaussianSumMechanism`)
   before the optimizer: the sum of the clipped updates plus ``N(0, (z C)^2)``, divided by
   ``m`` (adaptive: ``z_u`` and the round's clip ``C_t``; :meth:`DPStrategy.next_zero`
   then draws the count's noise and sets ``C_{t+1}``). With a fixed ``denominator`` ``W``
   (McMahan et al. 2018's fixed-denominator estimator), the noised sum is divided by ``W``
   instead of ``m``, every round (an empty one steps on its noise alone): the released
   aggregate is then a function of the noised sum only, so a user's participation is
   protected as well as its update, without taking ``m`` as public.

Adjacency: add or remove one user, who sends at most one update per round (in the frecency
study a client's message is the mean gradient of its own searches of the iteration, one per
user). Then the sum's sensitivity is ``C`` and each round is ``dp_accounting``'s
``GaussianDpEvent(z)``; a run of ``T`` rounds is their composition
(:meth:`DPStrategy.guarantee`; :mod:`fedrank.privacy.accounting`). The number ``m`` of a
round's updates is treated as public unless ``denominator`` is set (it is not noised; the
server sees it, and a simulation's results list it); for neighbours with the same
participants (replace-one) the guarantee is that of multiplier ``z / 2``
(``adjacency="replace-one"``).

The noise comes from a seeded ``numpy.random.Generator`` (reproducible; one draw of ``d``
normals per :meth:`~DPStrategy.server_step`, empty rounds included), or, for a deployment,
from a :class:`~fedrank.privacy.discrete_gaussian.KeyStream` given to :meth:`DPStrategy.
use_rng`: the discrete Gaussian on a lattice, sampled exactly from a CSPRNG (docs/privacy.md,
"Noise source"). ``server_step`` is the only place the
noise is drawn: call it once per round, and publish only what it returns (the aggregator
state holds the exact sum, for the trusted server's eyes: stored, never served).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrank.aggregators.es_gradient import ESGradient
from fedrank.aggregators.gated_mean import GatedMean
from fedrank.aggregators.mean import WeightedMean, vector_columns
from fedrank.aggregators.norm_bounded import NormBounded, NormBoundedState
from fedrank.aggregators.sign_vote import SignVote
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.accounting import (
    PrivacyGuarantee,
    gaussian_epsilon,
)
from fedrank.privacy.adaptive_clip import AdaptiveClip
from fedrank.privacy.discrete_gaussian import KeyStream
from fedrank.privacy.gaussian import GaussianSumMechanism
from fedrank.strategies.base import ServerStep, Strategy, WrappedStrategy

#: The inner aggregators whose role the DP mean takes over: the means and the sign vote.
_MEANS = (WeightedMean, GatedMean, SignVote)


def check_denominator(value: float) -> float:
    """``W`` stands for a number of updates: a finite number >= 1."""
    return check_hyperparameter(
        "denominator (W: the fixed number each round's noised sum is divided by, about the "
        "expected updates per round)",
        value,
        low=1.0,
        low_inclusive=True,
    )


def _check_inner(inner: Strategy, clip: float) -> None:
    """Refuse strategies whose aggregation the DP mean cannot stand in for."""
    agg = inner.aggregator
    if isinstance(agg, ESGradient):
        raise ConfigError(
            f"DPStrategy wraps strategies of vector updates (frecency, fedavg); {inner.name} "
            "messages are seeds and metrics: privatize them on the device with randomized "
            "response (p)"
        )
    if isinstance(agg, NormBounded):
        if agg.adaptive:
            raise ConfigError(
                "DPStrategy clips at a fixed bound; the inner strategy adapts its norm bound "
                "(norm_quantile), whose norm counts would need noise too (Andrew et al. "
                "2021): drop norm_quantile"
            )
        if agg.bound != clip:
            raise ConfigError(
                f"the inner strategy bounds updates at norm_bound = {agg.bound:g}, the DP clip "
                f"is {clip:g}: set norm_bound = 0 or equal to the clip"
            )
        agg = agg.inner
    if not isinstance(agg, _MEANS):
        raise ConfigError(
            f"DPStrategy replaces a mean by the unweighted mean of clipped updates; the inner "
            f"aggregator is {agg!r} (a robust statistic's sensitivity is not accounted here): "
            "use the strategy's mean (aggregator gated-mean or mean)"
        )


class DPStrategy(WrappedStrategy):
    """Central DP of a vector strategy (module docstring).

    Args:
        inner: the strategy wrapped (its model, optimizer chain and constraints are used).
        noise_multiplier: ``z``: the noise's standard deviation over ``clip`` on the sum
            (with ``adaptive``: the multiplier of the round's two releases together, which
            the accountant uses; the sum gets ``z_u``).
        clip: ``C``: every update is scaled down to this L2 norm (adaptive: in round 1).
        rng: the noise's generator, or a seed for one (an int or a ``SeedSequence``).
        adaptive: a clip that follows a quantile of the update norms, privately; ``None``
            (default): a fixed clip.
        denominator: ``W``: divide the noised sum by this fixed number, not by the round's
            count (participation protected; module docstring); ``None``: the count.

    ``accumulate`` folds updates with weight 1 each, whatever their ``n``.
    """

    name = "dp"

    def __init__(
        self,
        inner: Strategy,
        noise_multiplier: float,
        clip: float,
        rng: np.random.Generator | np.random.SeedSequence | int,
        adaptive: AdaptiveClip | None = None,
        denominator: float | None = None,
    ) -> None:
        self.adaptive = adaptive
        self.denominator = None if denominator is None else check_denominator(denominator)
        self.budget_multiplier = check_hyperparameter("noise_multiplier", noise_multiplier)
        update = (
            noise_multiplier
            if adaptive is None
            else adaptive.update_noise_multiplier(noise_multiplier)
        )
        self.mechanism = GaussianSumMechanism(clip, update)
        _check_inner(inner, self.mechanism.clip)
        if not isinstance(rng, np.random.Generator | np.random.SeedSequence | int | np.integer):
            raise ConfigError(
                f"rng must be a numpy Generator or a seed (int or SeedSequence), got {rng!r}"
            )
        self.inner = inner
        self.dim = inner.dim
        self.aggregator = NormBounded(
            WeightedMean(inner.dim),
            bound=self.mechanism.clip,
            quantile=None if adaptive is None else adaptive.quantile,
            eta=0.2 if adaptive is None else adaptive.eta,
        )
        self.clips: list[float] = []  # the clip of every round stepped, in order
        self.optimizer = inner.optimizer
        self.constraints = inner.constraints
        self.rng_: np.random.Generator | KeyStream = (
            rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        )
        self.count_rng_: np.random.Generator | None = None

    def __repr__(self) -> str:
        adaptive = "" if self.adaptive is None else f", adaptive={self.adaptive}"
        return (
            f"DPStrategy({self.inner.name}, noise_multiplier="
            f"{self.noise_multiplier:g}, clip={self.mechanism.clip:g}{adaptive})"
        )

    def use_rng(
        self, rng: np.random.Generator | KeyStream, count_rng: np.random.Generator | None = None
    ) -> None:
        """Draw the noise from ``rng`` from now on (a
        :class:`~fedrank.privacy.discrete_gaussian.KeyStream`: the secure discrete noise, fixed
        clip only), and the adaptive clip's count noise from ``count_rng`` (``None``: from
        ``rng`` too, after the round's update noise). The server gives each close its own
        pair (:mod:`fedrank.server.privacy`), so that a restart can replay a closed round's
        count release exactly."""
        if isinstance(rng, KeyStream):
            if self.adaptive is not None or count_rng is not None:
                raise ConfigError(
                    "the secure discrete noise covers the updates' sum only: the adaptive "
                    "clip's count noise is numpy's; use a fixed clip"
                )
        elif not isinstance(rng, np.random.Generator):
            raise ConfigError(f"rng must be a numpy Generator or a KeyStream, got {rng!r}")
        if count_rng is not None and not isinstance(count_rng, np.random.Generator):
            raise ConfigError(f"count_rng must be a numpy Generator, got {count_rng!r}")
        self.rng_ = rng
        self.count_rng_ = count_rng

    @property
    def noise_multiplier(self) -> float:
        """``z``: the multiplier of a round's releases together (what the accountant
        uses)."""
        return self.budget_multiplier

    @property
    def update_noise_multiplier(self) -> float:
        """``z_u``: the multiplier of the noise on the updates' sum (``z`` for a fixed
        clip)."""
        return self.mechanism.noise_multiplier

    @property
    def clip(self) -> float:
        return self.mechanism.clip

    def noise_std(self, count: int, clip: float | None = None) -> float:
        """The noise's standard deviation per coordinate of the mean of ``count`` updates
        clipped to ``clip`` (default: the first round's): ``z_u C / count``, or ``z_u C /
        W`` with a fixed denominator."""
        return self._mechanism(clip).mean_std(count, self.denominator)

    def _mechanism(self, clip: float | None) -> GaussianSumMechanism:
        if clip is None or clip == self.mechanism.clip:
            return self.mechanism
        return GaussianSumMechanism(clip, self.mechanism.noise_multiplier)

    # ------------------------------------------------------------------ server half

    def accumulate(self, state: NormBoundedState, batch: MessageBatch) -> NormBoundedState:
        """Clip every update of ``batch`` to ``clip`` and fold it in with weight 1."""
        if batch.size == 0:
            return state
        mat, _ = vector_columns(batch, self.dim)
        ones = MessageBatch.of_vectors(mat, np.ones(mat.shape[0]))
        return self.aggregator.accumulate_batch(state, ones)

    def noisy_aggregate(self, state: NormBoundedState) -> np.ndarray:
        """The round's unweighted mean of clipped updates plus ``N(0, (z_u C_t / m)^2)`` per
        coordinate, ``C_t`` the round's clip (draws the round's noise); with a fixed
        denominator ``W``, the sum plus ``N(0, (z_u C_t)^2)`` over ``W``."""
        self.aggregator.check_consistent(state)
        mechanism = self._mechanism(state.bound)
        return mechanism.noisy_mean(
            state.inner.weighted_sum, state.count, self.rng_, self.denominator
        )

    def next_zero(self, state: NormBoundedState) -> NormBoundedState:
        """The next round's empty aggregate: with an adaptive clip, its clip from this
        round's noised count of updates within the clip (draws one normal; call it once
        per round, after :meth:`server_step`, as every runner does), clamped to the
        aggregator's ``[min_bound, max_bound]``; a fixed clip stays."""
        self.aggregator.check_consistent(state)
        if self.adaptive is None:
            return self.aggregator.zero()
        agg = self.aggregator
        rng = self.rng_ if self.count_rng_ is None else self.count_rng_
        assert isinstance(rng, np.random.Generator)  # use_rng refuses a KeyStream here
        clip = self.adaptive.next_clip(
            state.bound, state.within, state.count, rng, agg.min_bound, agg.max_bound
        )
        return NormBoundedState(agg.inner.zero(), clip, 0, 0)

    def server_step(
        self, state: NormBoundedState, params: np.ndarray, opt_state: Any
    ) -> ServerStep:
        """:meth:`noisy_aggregate`, then the inner optimizer chain and constraints (as
        :meth:`Strategy.server_step`). The returned ``aggregate`` is the noisy one; the
        exact mean never leaves this method. Draws from the generator: not pure.

        Raises:
            SafeguardError: if the projected model does not satisfy the constraints.
        """
        step = self.step_from(self.noisy_aggregate(state), params, opt_state)
        self.clips.append(float(state.bound))
        return step

    # ------------------------------------------------------------------ accounting

    def guarantee(
        self, delta: float, rounds: int, sampling_rate: float = 1.0, accountant: str = "pld"
    ) -> PrivacyGuarantee:
        """Each user's ``(epsilon, delta)`` over ``rounds`` rounds in which it sends at most
        one update each (add-or-remove adjacency)."""
        return GaussianSumMechanism(self.clip, self.noise_multiplier).guarantee(
            delta, rounds, sampling_rate, accountant
        )

    def run_privacy(
        self,
        target_epsilon: float,
        delta: float,
        accountant: str,
        rounds: int,
        counts: list[int] | None = None,
    ) -> dict[str, Any]:
        """What a run's JSON records under ``privacy``: the per-user guarantee over
        ``rounds`` rounds (:class:`~fedrank.privacy.accounting.PrivacyGuarantee` keys, by
        ``accountant``), the budget asked for (``target_epsilon`` at ``delta``), the other
        accountant's epsilon, the replace-one epsilon, and -- given each round's number of
        updates ``counts`` -- the noise's standard deviation on each round's mean."""
        g = self.guarantee(delta, rounds, 1.0, accountant)
        other = "rdp" if accountant == "pld" else "pld"
        z = self.noise_multiplier
        out: dict[str, Any] = {
            **g.to_json(),
            "target_epsilon": target_epsilon,
            "accountant": accountant,
            f"epsilon_{other}": gaussian_epsilon(z, delta, rounds, 1.0, other),
            "adjacency": "add-or-remove one user (one clipped update per user and round)",
            "epsilon_replace_one": gaussian_epsilon(
                z, delta, rounds, 1.0, accountant, adjacency="replace-one"
            ),
            "aggregate": "unweighted mean of updates clipped to L2 norm clip, plus "
            "N(0, (noise_multiplier * clip / m)^2) per coordinate",
        }
        if self.adaptive is not None:
            a = self.adaptive
            out["aggregate"] = (
                "unweighted mean of updates clipped to L2 norm clip_t, plus "
                "N(0, (update_noise_multiplier * clip_t / m)^2) per coordinate; clip_t "
                "follows the clip_quantile of the update norms from the count of updates "
                "within it plus N(0, count_noise^2) (Andrew et al. 2021)"
            )
            out.update(
                clip_quantile=a.quantile,
                count_noise=a.count_noise,
                clip_eta=a.eta,
                update_noise_multiplier=self.update_noise_multiplier,
                clip_per_iteration=list(self.clips),
            )
        if self.denominator is not None:
            out["denominator"] = self.denominator
            out["aggregate"] += (
                "; with the fixed denominator: the noised sum divided by denominator, not by m"
            )
            out["adjacency"] = (
                "add-or-remove one user (one clipped update per user and round); the model "
                "depends on the noised sums only (fixed denominator), so participation is "
                "protected too"
            )
        if counts is not None and self.adaptive is None:
            out["noise_std_per_iteration"] = [self.noise_std(m) for m in counts]
        elif counts is not None:
            if len(counts) != len(self.clips):
                raise ConfigError(
                    f"got the update counts of {len(counts)} rounds, but {len(self.clips)} "
                    "rounds were stepped: the noise of each depends on its clip"
                )
            out["noise_std_per_iteration"] = [
                self.noise_std(m, c) for m, c in zip(counts, self.clips, strict=True)
            ]
        return out
