"""Federated frecency (Hartmann et al., *Federated Learning for Ranking Browser History
Suggestions*, Sections 4-5): the chain of the system, built once from its config section.

* Clients estimate the gradient of the pointwise SVM loss by central finite differences
  (Sec. 5.4, :class:`~fedrank.estimators.finite_difference.FiniteDifferenceEstimator`) and
  send it in full or as its signs (Sec. 5.3, :class:`~fedrank.privacy.sign.SignCompressor`).
* The server aggregates with the gated weighted mean
  (:class:`~fedrank.aggregators.gated_mean.GatedMean`) or the sign vote
  (:class:`~fedrank.aggregators.sign_vote.SignVote`), steps Rprop (Sec. 5.3; SGD and Adam
  as the paper's foils) on the aggregate -- the clients' gradients point uphill, as every
  optimizer here expects -- and applies the safeguards (Sec. 5.6).
* Against poisoning (beyond the paper): full gradients can instead be aggregated by the
  coordinate-wise median or trimmed mean (Yin et al. 2018), and bounded in L2 norm, fixed
  or adaptively (Andrew et al. 2021): ``aggregator``, ``trim``, ``norm_bound``,
  ``norm_quantile`` (:func:`~fedrank.strategies.base.build_aggregator`). Sign messages
  are votes already (one per client and weight) and keep the sign vote.

Two settings: ``paper`` (the text: Rprop with Igel & Huesken's factors, the Sec. 5.6
safeguards; and our significance gate of :data:`PAPER_SIGNIFICANCE_Z` = 1 standard error)
and ``mozilla-deployed`` (the study's Scala server: Rprop eta+ 2.0, eta- 0.6, steps in
[1, 3] starting at 2, non-negativity by shifting, only the cutoffs ordered, the plain
mean, integer weights published:
:func:`~fedrank.models.frecency.safeguards.publish_integers`).

:class:`FrecencyConfig` is the one validated section: the server's ``[frecency]`` table and
the learning part of a simulated study (:class:`~fedrank.experiments.frecency.study.
FrecencyStudyConfig` extends it).
"""

from __future__ import annotations

import base64
import numbers
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import numpy as np

from fedrank.aggregators.gated_mean import GatedMean
from fedrank.aggregators.sign_vote import SignVote
from fedrank.core.codec import pack_signs
from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.models.frecency.safeguards import deployed_frecency_safeguards, publish_integers
from fedrank.models.frecency.scorer import MODELS, PageScorer, page_scorer
from fedrank.optim.adam import Adam
from fedrank.optim.rprop import Rprop
from fedrank.optim.sgd import SGD
from fedrank.privacy.sign import RandomizedSigns, SignCompressor
from fedrank.strategies.base import (
    ROBUST_AGGREGATORS,
    Strategy,
    build_aggregator,
    check_aggregation,
)

SETTINGS: tuple[str, ...] = ("paper", "mozilla-deployed")
MESSAGES: tuple[str, ...] = ("full", "sign")
OPTIMIZERS: tuple[str, ...] = ("rprop", "sgd", "adam")
SCORE_SCALES: tuple[str, ...] = ("log", "raw")
#: ``gated-mean`` (the paper's mean, gated by ``significance_z``; the sign vote for sign
#: messages), or a robust statistic of full gradients.
AGGREGATORS: tuple[str, ...] = ("gated-mean", *ROBUST_AGGREGATORS)

#: The ``paper`` setting's gate in standard errors (beyond the paper). A share ``f`` of
#: sign-flipping clients shrinks every weight's mean by ``1 - 2f`` and leaves its spread,
#: so a gate of ``z`` acts like ``z / (1 - 2f)`` on the honest signal: 2 became 3.3 at 20%
#: and stopped most steps (0.43 of the clean held-out gain kept, six seeds); at 1 the
#: study keeps 0.87, and the clean runs learn no less (docs/service.md, Poisoning). The
#: gate was 2 until 2026-11-27.
PAPER_SIGNIFICANCE_Z = 1.0

#: Rprop hyperparameters of each setting: the paper's text (Sec. 5.3, Igel & Huesken's
#: usual factors, steps bounded by the safeguards' 3 points) and the deployed server's
#: (telemetry-streaming: eta+ 2.0, eta- 0.6, steps in [1, 3] starting at 2).
RPROP_SETTINGS: dict[str, dict[str, float]] = {
    "paper": {"eta_plus": 1.2, "eta_minus": 0.5, "step_init": 1.0, "step_min": 1e-3,
              "step_max": 3.0},
    "mozilla-deployed": {"eta_plus": 2.0, "eta_minus": 0.6, "step_init": 2.0, "step_min": 1.0,
                         "step_max": 3.0},
}  # fmt: skip


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (np.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a finite number > 0, got {value}")


@dataclass(frozen=True)
class FrecencyConfig:
    """The federated frecency learning settings, with the paper's names and defaults.

    Attributes:
        model: the frecency model tuned: ``classic`` (22 weights) or ``modern``.
        setting: ``paper`` or ``mozilla-deployed`` (module docstring).
        message: ``full`` float gradients or ``sign`` (2 bits per weight, Sec. 5.3).
        optimizer: ``rprop`` (the paper), ``sgd`` or ``adam``.
        significance_z: the gated mean's and the sign vote's per-weight gate in standard
            errors (``None``: :data:`PAPER_SIGNIFICANCE_Z` = 1 under ``paper``, 0 -- the
            plain mean -- under ``mozilla-deployed``); unused by ``median`` and ``trimmed-mean``.
        aggregator: ``gated-mean`` (default; the sign vote for sign messages), ``median``
            or ``trimmed-mean`` (coordinate-wise, unweighted: Yin et al. 2018; full
            messages only).
        trim: the trimmed mean's fraction dropped from each end, in [0, 0.5) (0.1).
        norm_bound: every full gradient is scaled down to this L2 norm before aggregation
            (0, the default: not bounded); with ``norm_quantile`` the first iteration's bound.
        norm_quantile: adapt the bound every iteration towards this quantile of the
            gradient norms, in (0, 1) (Andrew et al. 2021; ``None``: a fixed bound).
        max_rows: most gradients one iteration's median or trimmed mean holds (it keeps
            them all, exactly: memory ``max_rows x d x 8`` bytes).
        eta_plus, eta_minus, step_init, step_min, step_max: Rprop (``None``: the setting's,
            :data:`RPROP_SETTINGS`).
        learning_rate: SGD / Adam step size.
        max_change: the ``paper`` safeguard's bound on a weight's change per iteration.
        eps, scheme: the clients' finite differences (Sec. 5.4).
        delta, score_scale: the clients' SVM margin and the scale the loss is computed on
            (``None``: the model's defaults).
        decay_rate: classic frecency's daily decay, applied by control clients (0.975).
        sign_epsilon: sign messages only: randomized response on every sign on the device,
            ``sign_epsilon``-LDP per weight (:class:`~fedrank.privacy.sign.RandomizedSigns`;
            ``None``: the plain signs, no guarantee).
    """

    model: str = "classic"
    setting: str = "paper"
    message: str = "full"
    optimizer: str = "rprop"
    significance_z: float | None = None
    aggregator: str = "gated-mean"
    trim: float = 0.1
    norm_bound: float = 0.0
    norm_quantile: float | None = None
    max_rows: int = 100_000
    eta_plus: float | None = None
    eta_minus: float | None = None
    step_init: float | None = None
    step_min: float | None = None
    step_max: float | None = None
    learning_rate: float = 1.0
    max_change: float = 3.0
    eps: float = 1.0
    scheme: Literal["central", "forward"] = "central"
    delta: float | None = None
    score_scale: str | None = None
    decay_rate: float = 0.975
    sign_epsilon: float | None = None

    def __post_init__(self) -> None:
        choices = (
            ("model", MODELS),
            ("setting", SETTINGS),
            ("message", MESSAGES),
            ("optimizer", OPTIMIZERS),
            ("scheme", ("central", "forward")),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}"
                )
        if self.setting == "mozilla-deployed" and self.model != "classic":
            raise ConfigError("the deployed server tuned classic frecency: use model classic")
        if self.score_scale is not None and self.score_scale not in SCORE_SCALES:
            raise ConfigError(
                f"score_scale must be one of {', '.join(SCORE_SCALES)}, got {self.score_scale!r}"
            )
        z = self.significance_z
        if z is not None and (
            isinstance(z, bool)
            or not isinstance(z, numbers.Real)
            or not (np.isfinite(z) and z >= 0)
        ):
            raise ConfigError(f"significance_z must be finite and >= 0 (a number), got {z!r}")
        if self.delta is not None and not (np.isfinite(self.delta) and self.delta >= 0):
            raise ConfigError(
                f"delta (the SVM margin) must be a finite number >= 0, got {self.delta}"
            )
        for name in ("eps", "max_change", "learning_rate", "step_init", "step_min", "step_max"):
            _positive(name, getattr(self, name))
        if not 0 < self.decay_rate <= 1:
            raise ConfigError(f"decay_rate must be in (0, 1], got {self.decay_rate}")
        check_aggregation(
            self.aggregator, AGGREGATORS, self.trim, self.norm_bound, self.norm_quantile,
            self.max_rows,
        )  # fmt: skip
        if self.message == "sign" and self.aggregator != "gated-mean":
            raise ConfigError(
                f"aggregator {self.aggregator} needs full gradients (message = full); sign "
                "messages are aggregated by the sign vote: use aggregator = gated-mean"
            )
        if self.sign_epsilon is not None:
            if self.message != "sign":
                raise ConfigError(
                    "sign_epsilon randomizes sign messages: set message = sign, or drop "
                    "sign_epsilon (central DP of full gradients: [privacy] / --dp-epsilon)"
                )
            RandomizedSigns(self.sign_epsilon)  # validates it
        if self.message == "sign" and self.norm_bound:
            raise ConfigError(
                "norm_bound applies to full gradients; sign messages are votes of -1, 0, +1 "
                "(one per client and weight, bounded already): set norm_bound = 0, or use "
                "message = full"
            )

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> FrecencyConfig:
        """The section a server serves its clients (``config`` of ``GET /v1/model``): its
        keys of this class, other keys (rounds, branch) ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in view.items() if k in names})

    def resolved(self) -> Any:
        """This configuration (of its own class) with every ``None`` learning default
        filled in: the model's loss scale and margin, the setting's Rprop hyperparameters
        and gate. The one place where those defaults are applied."""
        scorer = page_scorer(self.model)
        scale = scorer.default_score_scale if self.score_scale is None else self.score_scale
        delta = scorer.default_delta(scale) if self.delta is None else float(self.delta)
        rprop = {k: v if getattr(self, k) is None else getattr(self, k)
                 for k, v in RPROP_SETTINGS[self.setting].items()}  # fmt: skip
        z = self.significance_z
        if z is None:
            z = PAPER_SIGNIFICANCE_Z if self.setting == "paper" else 0.0
        return replace(self, score_scale=scale, delta=delta, significance_z=z, **rprop)


class FrecencyStrategy(Strategy):
    """The federated frecency chain for one :class:`FrecencyConfig` (module docstring)."""

    name = "frecency"

    def __init__(self, config: FrecencyConfig) -> None:
        c = config.resolved()
        self.config = c
        self.scorer: type[PageScorer] = page_scorer(c.model)
        self.dim = len(self.scorer.names)
        z = float(c.significance_z)
        if c.message == "full":
            self.aggregator = build_aggregator(
                GatedMean(self.dim, z=z), c.aggregator, self.dim, c.trim, c.norm_bound,
                c.norm_quantile, c.max_rows,
            )  # fmt: skip
        else:
            self.aggregator = SignVote(self.dim, z=z)
        if c.optimizer == "rprop":
            self.optimizer = Rprop(c.eta_plus, c.eta_minus, c.step_init, c.step_min, c.step_max)
        elif c.optimizer == "sgd":
            self.optimizer = SGD(learning_rate=c.learning_rate)
        else:
            self.optimizer = Adam(learning_rate=c.learning_rate)
        if c.setting == "mozilla-deployed":
            self.constraints = deployed_frecency_safeguards()
        else:
            self.constraints = self.scorer.safeguards(max_change=c.max_change)
        self.estimator = FiniteDifferenceEstimator(eps=c.eps, scheme=c.scheme)
        self.privatizer: SignCompressor | RandomizedSigns | None = None
        if c.message == "sign":
            self.privatizer = (
                SignCompressor(with_zero=True)
                if c.sign_epsilon is None
                else RandomizedSigns(c.sign_epsilon)
            )

    def message_epsilon(self) -> float | None:
        """The local DP of one client message: ``sign_epsilon`` per weight, composed over
        the message's weights (basic composition, as the privacy report counts it);
        ``None`` without randomized signs."""
        if self.config.sign_epsilon is None:
            return None
        return float(self.config.sign_epsilon) * self.dim

    def initial_params(self) -> np.ndarray:
        """Firefox's default weights (a safeguard of Sec. 5.6: start from what ships)."""
        return self.scorer.defaults()

    def parameter_names(self) -> list[str]:
        return list(self.scorer.names)

    def publish(self, params: np.ndarray) -> np.ndarray:
        """Integer weights under ``mozilla-deployed`` (the Scala sink's rounding), the
        server's own weights otherwise."""
        return publish_integers(params) if self.config.setting == "mozilla-deployed" else params

    # ------------------------------------------------------------------ client half

    def privatize(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The clients' messages from their ``(m, d)`` gradients: unchanged, their signs, or
        their randomized signs (``sign_epsilon``)."""
        if self.privatizer is None:
            return updates
        return self.privatizer.privatize_batch(updates, rng)

    def encode(self, update: np.ndarray, n: int) -> dict[str, Any]:
        """One client's JSON payload for the server: ``{"gradient", "n"}`` or, for sign
        messages, ``{"signs": base64 of 2 bits per weight, "n"}`` (the forms the server's
        frecency workload parses)."""
        vec = np.asarray(update, dtype=np.float64)
        if vec.shape != (self.dim,):
            raise ConfigError(
                f"a {self.config.model} update has {self.dim} entries, got shape {vec.shape}"
            )
        if self.config.message == "sign":
            return {"signs": base64.b64encode(pack_signs(vec)).decode(), "n": int(n)}
        return {"gradient": vec.tolist(), "n": int(n)}

    def client_payload(
        self, gradient: np.ndarray, n: int, rng: np.random.Generator
    ) -> dict[str, Any]:
        """The client half after estimation: privatize one client's mean gradient (its
        signs for sign messages), then encode it with its number of searches ``n``."""
        return self.encode(self.privatize(np.asarray(gradient)[None, :], rng)[0], n)
