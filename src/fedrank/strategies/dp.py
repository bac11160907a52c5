"""Central differential privacy for any vector strategy: clip, take the unweighted mean, add
Gaussian noise (DP-FedAvg: McMahan, Ramage, Talwar & Zhang 2018, "Learning Differentially
Private Recurrent Language Models", ICLR, Algorithm 1; the Gaussian mechanism of Abadi et
al. 2016; in the shape of Flower's ``DifferentialPrivacyServerSideFixedClipping``).

:class:`DPStrategy` wraps a strategy of vector updates (federated frecency, FedAvg) and keeps
the :class:`~fedrank.strategies.base.Strategy` interface, so the same wrapper runs in a
simulation and in the server. Of the inner strategy it keeps the model, the optimizer chain
and the constraints; it replaces the aggregation:

1. every update is clipped to L2 norm ``clip`` (``C``) by
   :class:`~fedrank.aggregators.norm_bounded.NormBounded` with a fixed bound (the clipping
   of Andrew et al. 2021 without the adaptive part, whose norm count would need noise too);
2. the clipped updates are averaged *unweighted*: the inner weighted or gated mean is not
   used. A weighted mean ``sum n_i u_i / sum n_i`` lets one user move it by
   ``n_i C / sum n_j``, which depends on the (self-reported) weights of everyone, so no
   fixed noise covers it; the gate of :class:`~fedrank.aggregators.gated_mean.GatedMean`
   reads the updates' variance, which the noise does not protect;
3. :meth:`DPStrategy.server_step` adds ``N(0, (z C / m)^2)`` per coordinate to the mean of
   the round's ``m`` updates (:class:`~fedrank.privacy.gaussian.GaussianSumMechanism`)
   before the optimizer: the sum of the clipped updates plus ``N(0, (z C)^2)``, divided by
   ``m``.

Adjacency: add or remove one user, who sends at most one update per round (in the frecency
study a client's message is the mean gradient of its own searches of the iteration, one per
user). Then the sum's sensitivity is ``C`` and each round is ``dp_accounting``'s
``GaussianDpEvent(z)``; a run of ``T`` rounds is their composition
(:meth:`DPStrategy.guarantee`; :mod:`fedrank.privacy.accounting`). The number ``m`` of a
round's updates is treated as public (it is not noised; the server sees it, and a
simulation's results list it); for neighbours with the same participants (replace-one) the
guarantee is that of multiplier ``z / 2`` (``adjacency="replace-one"``).

The noise comes from a seeded ``numpy.random.Generator`` (reproducible; one draw of ``d``
normals per :meth:`~DPStrategy.server_step`, empty rounds included). A deployment needs a
cryptographically secure source (docs/privacy.md). ``server_step`` is the only place the
noise is drawn: call it once per round, and publish only what it returns (the aggregator
state holds the exact sum, for the trusted server's eyes: stored, never served).
"""

from __future__ import annotations

from dataclasses import dataclass
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
    ACCOUNTANTS,
    PrivacyGuarantee,
    gaussian_epsilon,
    gaussian_noise_multiplier,
)
from fedrank.privacy.gaussian import GaussianSumMechanism
from fedrank.strategies.base import ServerStep, Strategy

#: The inner aggregators whose role the DP mean takes over: the means and the sign vote.
_MEANS = (WeightedMean, GatedMean, SignVote)


@dataclass(frozen=True)
class DPConfig:
    """A privacy budget for a training run of central DP.

    Attributes:
        epsilon: the per-user budget over the whole run (> 0).
        delta: its failure probability, in (0, 1); well below one over the number of users
            (e.g. 1e-6 for 10,000 users).
        clip: ``C``, the L2 bound of every update (> 0); near the typical update norm.
        accountant: ``pld`` (tight, the default) or ``rdp`` (a looser bound, Mironov 2017).
    """

    epsilon: float
    delta: float
    clip: float
    accountant: str = "pld"

    def __post_init__(self) -> None:
        check_hyperparameter("epsilon (the per-user privacy budget)", self.epsilon)
        check_hyperparameter(
            "delta (the budget's failure probability; well below 1 / users)",
            self.delta,
            high=1.0,
            high_inclusive=False,
        )
        check_hyperparameter("clip (the L2 bound C of every update)", self.clip)
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(
                f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}"
            )

    def noise_multiplier(self, rounds: int, sampling_rate: float = 1.0) -> float:
        """The smallest noise multiplier that keeps ``rounds`` rounds within the budget
        (:func:`~fedrank.privacy.accounting.gaussian_noise_multiplier`)."""
        return gaussian_noise_multiplier(
            self.epsilon, self.delta, rounds, sampling_rate, self.accountant
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


class DPStrategy(Strategy):
    """Central DP of a vector strategy (module docstring).

    Args:
        inner: the strategy wrapped (its model, optimizer chain and constraints are used).
        noise_multiplier: ``z``: the noise's standard deviation over ``clip`` on the sum.
        clip: ``C``: every update is scaled down to this L2 norm.
        rng: the noise's generator, or a seed for one (an int or a ``SeedSequence``).

    ``accumulate`` folds updates with weight 1 each, whatever their ``n``.
    """

    name = "dp"

    def __init__(
        self,
        inner: Strategy,
        noise_multiplier: float,
        clip: float,
        rng: np.random.Generator | np.random.SeedSequence | int,
    ) -> None:
        self.mechanism = GaussianSumMechanism(clip, noise_multiplier)
        _check_inner(inner, self.mechanism.clip)
        if not isinstance(rng, np.random.Generator | np.random.SeedSequence | int | np.integer):
            raise ConfigError(
                f"rng must be a numpy Generator or a seed (int or SeedSequence), got {rng!r}"
            )
        self.inner = inner
        self.dim = inner.dim
        self.aggregator = NormBounded(WeightedMean(inner.dim), bound=self.mechanism.clip)
        self.optimizer = inner.optimizer
        self.constraints = inner.constraints
        self.rng_ = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    @classmethod
    def for_budget(
        cls,
        inner: Strategy,
        config: DPConfig,
        rounds: int,
        rng: np.random.Generator | np.random.SeedSequence | int,
        sampling_rate: float = 1.0,
    ) -> DPStrategy:
        """The wrapper whose noise keeps ``rounds`` rounds within ``config``'s budget
        (:meth:`DPConfig.noise_multiplier`)."""
        return cls(inner, config.noise_multiplier(rounds, sampling_rate), config.clip, rng)

    def __repr__(self) -> str:
        return (
            f"DPStrategy({self.inner.name}, noise_multiplier="
            f"{self.mechanism.noise_multiplier:g}, clip={self.mechanism.clip:g})"
        )

    def use_rng(self, rng: np.random.Generator) -> None:
        """Draw the noise from ``rng`` from now on (the server gives each close its own:
        :mod:`fedrank.server.privacy`)."""
        if not isinstance(rng, np.random.Generator):
            raise ConfigError(f"rng must be a numpy Generator, got {rng!r}")
        self.rng_ = rng

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.noise_multiplier

    @property
    def clip(self) -> float:
        return self.mechanism.clip

    def noise_std(self, count: int) -> float:
        """The noise's standard deviation per coordinate of the mean of ``count`` updates:
        ``z C / count``."""
        return self.mechanism.mean_std(count)

    # ------------------------------------------------------------------ the inner model

    def initial_params(self) -> np.ndarray:
        return self.inner.initial_params()

    def parameter_names(self) -> list[str] | None:
        return self.inner.parameter_names()

    def publish(self, params: np.ndarray) -> np.ndarray:
        return self.inner.publish(params)

    def init(self, params: np.ndarray) -> Any:
        return self.inner.init(params)

    # ------------------------------------------------------------------ server half

    def accumulate(self, state: NormBoundedState, batch: MessageBatch) -> NormBoundedState:
        """Clip every update of ``batch`` to ``clip`` and fold it in with weight 1."""
        if batch.size == 0:
            return state
        mat, _ = vector_columns(batch, self.dim)
        ones = MessageBatch.of_vectors(mat, np.ones(mat.shape[0]))
        return self.aggregator.accumulate_batch(state, ones)

    def noisy_aggregate(self, state: NormBoundedState) -> np.ndarray:
        """The round's unweighted mean of clipped updates plus ``N(0, (z C / m)^2)`` per
        coordinate (draws the round's noise)."""
        self.aggregator.check_consistent(state)
        return self.mechanism.noisy_mean(state.inner.weighted_sum, state.count, self.rng_)

    def server_step(
        self, state: NormBoundedState, params: np.ndarray, opt_state: Any
    ) -> ServerStep:
        """:meth:`noisy_aggregate`, then the inner optimizer chain and constraints (as
        :meth:`Strategy.server_step`). The returned ``aggregate`` is the noisy one; the
        exact mean never leaves this method. Draws from the generator: not pure.

        Raises:
            SafeguardError: if the projected model does not satisfy the constraints.
        """
        return self.step_from(self.noisy_aggregate(state), params, opt_state)

    # ------------------------------------------------------------------ accounting

    def guarantee(
        self, delta: float, rounds: int, sampling_rate: float = 1.0, accountant: str = "pld"
    ) -> PrivacyGuarantee:
        """Each user's ``(epsilon, delta)`` over ``rounds`` rounds in which it sends at most
        one update each (add-or-remove adjacency)."""
        return self.mechanism.guarantee(delta, rounds, sampling_rate, accountant)

    def run_privacy(
        self, config: DPConfig, rounds: int, counts: list[int] | None = None
    ) -> dict[str, Any]:
        """What a run's JSON records under ``privacy``: the per-user guarantee over
        ``rounds`` rounds (:class:`~fedrank.privacy.accounting.PrivacyGuarantee` keys, by
        ``config.accountant``), the budget asked for, the other accountant's epsilon, the
        replace-one epsilon, and -- given each round's number of updates ``counts`` -- the
        noise's standard deviation on each round's mean."""
        g = self.guarantee(config.delta, rounds, 1.0, config.accountant)
        other = "rdp" if config.accountant == "pld" else "pld"
        z, delta = self.noise_multiplier, config.delta
        out: dict[str, Any] = {
            **g.to_json(),
            "target_epsilon": config.epsilon,
            "accountant": config.accountant,
            f"epsilon_{other}": gaussian_epsilon(z, delta, rounds, 1.0, other),
            "adjacency": "add-or-remove one user (one clipped update per user and round)",
            "epsilon_replace_one": gaussian_epsilon(
                z, delta, rounds, 1.0, config.accountant, adjacency="replace-one"
            ),
            "aggregate": "unweighted mean of updates clipped to L2 norm clip, plus "
            "N(0, (noise_multiplier * clip / m)^2) per coordinate",
        }
        if counts is not None:
            out["noise_std_per_iteration"] = [self.noise_std(m) for m in counts]
        return out
