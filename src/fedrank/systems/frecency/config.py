"""Federated frecency's settings (Hartmann et al., *Federated Learning for Ranking Browser
History Suggestions*, Sections 4-5), with the paper's names and defaults: the server's
``[frecency]`` table and the learning part of a simulated study
(:class:`~fedrank.experiments.frecency.study.FrecencyStudyConfig` extends it).

Two settings: ``paper`` (the text: Rprop with Igel & Huesken's factors, the Sec. 5.6
safeguards; and our significance gate of :data:`PAPER_SIGNIFICANCE_Z` = 1 standard error)
and ``mozilla-deployed`` (the study's Scala server: Rprop eta+ 2.0, eta- 0.6, steps in
[1, 3] starting at 2, non-negativity by shifting, only the cutoffs ordered, the plain
mean, integer weights published:
:func:`~fedrank.models.frecency.safeguards.publish_integers`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Real
from typing import Any, Literal

from fedrank.core.validation import Accepts, Interval, Options, Rule, Validated
from fedrank.models.frecency.scorer import MODELS, page_scorer
from fedrank.strategies.base import AGGREGATION_RULES, ROBUST_AGGREGATORS, aggregation_accepts

SETTINGS: tuple[str, ...] = ("paper", "mozilla-deployed")
MESSAGES: tuple[str, ...] = ("full", "sign")
OPTIMIZERS: tuple[str, ...] = ("rprop", "sgd", "adam")
SCORE_SCALES: tuple[str, ...] = ("log", "raw")
#: ``gated-mean`` (the paper's mean, gated by ``significance_z``; the sign vote for sign
#: messages), or a robust statistic of full gradients.
AGGREGATORS: tuple[str, ...] = ("gated-mean", *ROBUST_AGGREGATORS)

#: The ``paper`` setting's gate in standard errors (beyond the paper). A share ``f`` of
#: sign-flipping clients shrinks every weight's mean by ``1 - 2f`` and leaves its spread,
#: so a gate of ``z`` acts like ``z / (1 - 2f)`` on the honest signal: a gate of 2 acts like
#: 3.3 under a fifth of flipping clients and stops most steps, a gate of 1 keeps most of the
#: clean gain (docs/service.md, "Poisoning: attacks and defenses", has the figures).
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


#: A finite number > 0 (the step sizes and the finite-difference epsilon).
_POSITIVE = Interval(Real, 0, None, closed="neither")


@dataclass(frozen=True)
class FrecencyConfig(Validated):
    """The federated frecency learning settings, with the paper's names and defaults.

    Attributes:
        model: the frecency model tuned: ``classic`` (22 weights) or ``modern``.
        setting: ``paper`` (the text: Rprop with Igel & Huesken's factors, the Sec. 5.6
            safeguards) or ``mozilla-deployed`` (the study's Scala server; module docstring).
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
        eta_plus: Rprop's factor on a step whose gradient kept its sign (Eq. 2; ``None``:
            the setting's, :data:`RPROP_SETTINGS`).
        eta_minus: Rprop's factor on a step whose gradient changed sign (``None``: the
            setting's).
        step_init: Rprop's first step (``None``: the setting's).
        step_min: Rprop's smallest step (``None``: the setting's).
        step_max: Rprop's largest step (``None``: the setting's).
        learning_rate: SGD / Adam step size.
        max_change: the ``paper`` safeguard's bound on a weight's change per iteration.
        eps: the clients' finite-difference epsilon (Sec. 5.4).
        scheme: the clients' finite differences, ``central`` or ``forward`` (Sec. 5.4).
        delta: the clients' SVM margin (``None``: the model's default).
        score_scale: the scale the clients' loss is computed on, ``log`` or ``raw``
            (``None``: the model's default).
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

    ACCEPTS = {
        "model": Options(*MODELS),
        "setting": Options(*SETTINGS),
        "message": Options(*MESSAGES),
        "optimizer": Options(*OPTIMIZERS),
        "significance_z": Accepts(Interval(Real, 0, None), None),
        **aggregation_accepts(AGGREGATORS),
        "eta_plus": Accepts(Interval(Real, 1, None, closed="neither"), None),
        "eta_minus": Accepts(Interval(Real, 0, 1, closed="neither"), None),
        "step_init": Accepts(_POSITIVE, None),
        "step_min": Accepts(_POSITIVE, None),
        "step_max": Accepts(_POSITIVE, None),
        "learning_rate": _POSITIVE,
        "max_change": _POSITIVE,
        "eps": _POSITIVE,
        "scheme": Options("central", "forward"),
        "delta": Accepts(Interval(Real, 0, None), None, note="the SVM margin"),
        "score_scale": Accepts(Options(*SCORE_SCALES), None),
        "decay_rate": Interval(Real, 0, 1, closed="right"),
        "sign_epsilon": Accepts(
            Interval(Real, 0, None, closed="neither"), None, note="randomized response per weight"
        ),
    }
    RULES = (
        Rule(
            lambda c: c.setting != "mozilla-deployed" or c.model == "classic",
            "the deployed server tuned classic frecency: use model classic",
        ),
        *AGGREGATION_RULES,
        Rule(
            lambda c: c.message != "sign" or c.aggregator == "gated-mean",
            "aggregator {aggregator} needs full gradients (message = full); sign messages are "
            "aggregated by the sign vote: use aggregator = gated-mean",
        ),
        Rule(
            lambda c: c.sign_epsilon is None or c.message == "sign",
            "sign_epsilon randomizes sign messages: set message = sign, or drop sign_epsilon "
            "(central DP of full gradients: [privacy] / --dp-epsilon)",
        ),
        Rule(
            lambda c: c.message != "sign" or not c.norm_bound,
            "norm_bound applies to full gradients; sign messages are votes of -1, 0, +1 (one "
            "per client and weight, bounded already): set norm_bound = 0, or use message = full",
        ),
    )

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
