"""The simulated world of the frecency study (Mozilla paper, Sections 6.1-6.2).

A :class:`FrecencyWorld` holds the users (their synthetic histories and hidden
preferences), their study branch, and the URL bar. It turns a model's weights into searches
(what each user typed, saw and chose) and turns the treatment users' searches into client
messages with the finite-difference estimator. Everything is vectorized over users and
searches: one call simulates every search of an iteration.

The frecency model is either Firefox's *classic* frecency (22 weights, the one the paper
tuned) or today's *modern* frecency (5 parameters, Firefox 128+); a :class:`PageScorer`
hides the difference: it scores the population's pages under any parameters and knows the
model's parameter names, defaults, safeguards, default loss settings and control branch.

Branches (paper Sec. 6.2): ``treatment`` uses the model being trained, recomputed every
iteration; ``control`` uses Firefox's default weights with the cached, daily-decayed scores;
``control-no-decay`` uses the default weights recomputed without decay. Modern frecency has
no daily decay job (the decay is in its formula: the stored value is the day on which the
decayed score falls to 1), so for ``modern`` both control branches use the default
parameters' scores and ``control-no-decay`` is a second control group.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedrank.data.synthetic_history import HistoryConfig, Population, generate_population
from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.classic import ClassicFrecency
from fedrank.models.frecency.history import PageHistories
from fedrank.models.frecency.modern import (
    MODERN_WEIGHT_NAMES,
    ModernFrecency,
    modern_samples_from_histories,
)
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, classic_defaults
from fedrank.optim.constraints import (
    ConstraintChain,
    frecency_safeguards,
    modern_frecency_safeguards,
)
from fedrank.simulation.intent import sample_intents
from fedrank.simulation.urlbar import SearchBatch, simulate_searches

BRANCHES: tuple[str, ...] = ("treatment", "control", "control-no-decay")
TREATMENT, CONTROL, CONTROL_NO_DECAY = range(3)

#: The simulated "today" of modern frecency, as a day number (days since 1970-01-01;
#: 20,000 is 2024-10-04). A visit ``a`` days old happened on day ``NOW_DAY - floor(a)``.
#: Rankings do not depend on it: it shifts every modern score by the same amount.
NOW_DAY = 20_000

#: Smallest ``halfLifeDays`` the modern scorer evaluates (see :class:`ModernScorer`).
MIN_HALF_LIFE_DAYS = 1e-3
_HALF_LIFE = MODERN_WEIGHT_NAMES.index("halfLifeDays")


class PageScorer(ABC):
    """The page scorer of a frecency model: the scores of a population's pages under any
    parameters, with what the study needs to know about the model.

    Class attributes (usable without pages): ``model`` (its name), ``names`` (parameter
    names in vector order), ``default_score_scale`` and ``default_deltas`` (the loss
    settings the study uses unless told otherwise: the scale, and the margin on each
    scale); class methods :meth:`default_delta`, :meth:`defaults`, :meth:`safeguards` and
    :meth:`to_dict`.
    """

    model: ClassVar[str]
    names: ClassVar[tuple[str, ...]]
    default_score_scale: ClassVar[str]
    default_deltas: ClassVar[dict[str, float]]

    @classmethod
    def default_delta(cls, score_scale: str | None = None) -> float:
        """The default margin on ``score_scale`` (``None``: the default scale)."""
        scale = cls.default_score_scale if score_scale is None else score_scale
        if scale not in cls.default_deltas:
            raise ConfigError(
                f"unknown score scale {scale!r}; choose one of {', '.join(cls.default_deltas)}"
            )
        return cls.default_deltas[scale]

    @classmethod
    @abstractmethod
    def defaults(cls) -> np.ndarray:
        """Firefox's default parameters, in :attr:`names` order (a fresh copy)."""

    @classmethod
    @abstractmethod
    def safeguards(cls, max_change: float = 3.0) -> ConstraintChain:
        """The safeguards applied after every optimizer step (Sec. 5.6)."""

    @classmethod
    def to_dict(cls, params: np.ndarray) -> dict[str, float]:
        """``{name: value}`` of a parameter vector, in :attr:`names` order."""
        vec = np.asarray(params, dtype=np.float64)
        if vec.shape != (len(cls.names),):
            raise ConfigError(
                f"a {cls.model} frecency parameter vector has {len(cls.names)} entries, got "
                f"shape {vec.shape}"
            )
        return {name: float(v) for name, v in zip(cls.names, vec, strict=True)}

    @abstractmethod
    def score(self, params: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Scores of every page (``index=None``) or of the pages at ``index`` (flattened):
        ``(m,)`` for one parameter vector, ``(P, m)`` for ``(P, d)`` rows (float64)."""

    @abstractmethod
    def control_scores(self, decay_rate: float) -> np.ndarray:
        """``(n,)``: the scores the ``control`` branch sees (default parameters)."""


class ClassicScorer(PageScorer):
    """Classic frecency (:class:`ClassicFrecency`, Firefox's integer rounding by default) on
    the pages' visit histories. Loss defaults: ``log`` scale (classic frecency is a number
    of points, so a common factor on the weights would otherwise shrink the loss), margin
    0.1 (the chosen page should score ~10% above the others; 0.1 points on the ``raw``
    scale, as before the margin depended on the model). The control branch sees the
    cached, daily-decayed scores of the defaults (:meth:`ClassicFrecency.decayed_score`).
    """

    model = "classic"
    names = CLASSIC_WEIGHT_NAMES
    default_score_scale = "log"
    default_deltas = {"log": 0.1, "raw": 0.1}

    def __init__(self, pages: PageHistories, frecency: ClassicFrecency | None = None) -> None:
        self.pages = pages
        self.frecency = frecency or ClassicFrecency()

    @classmethod
    def defaults(cls) -> np.ndarray:
        return classic_defaults()

    @classmethod
    def safeguards(cls, max_change: float = 3.0) -> ConstraintChain:
        return frecency_safeguards(max_change=max_change)

    def score(self, params: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        pages = self.pages if index is None else self.pages.take(index)
        return np.asarray(self.frecency.score(params, pages), dtype=np.float64)

    def control_scores(self, decay_rate: float) -> np.ndarray:
        return np.asarray(
            self.frecency.decayed_score(self.defaults(), self.pages, decay_rate=decay_rate),
            dtype=np.float64,
        )


class ModernScorer(PageScorer):
    """Modern frecency (:class:`ModernFrecency`, Firefox's integer result by default) on
    samples built once for the whole population with
    :func:`~fedrank.models.frecency.modern.modern_samples_from_histories` on day
    :data:`NOW_DAY`. Synthetic histories have no interactions, so only the low, medium and
    high classes occur and ``veryHighWeight`` never changes a score.

    Loss defaults: ``raw`` scale, margin 6 days. A modern score is a day number (about
    :data:`NOW_DAY`) plus ``ln(s) / lambda``: multiplying the four class weights by ``c``
    only shifts every score by ``ln(c) / lambda``, so the raw hinge loss is already free of
    their scale, while ``log1p`` of ~20,000 would squash the differences between pages to
    ~1e-3. ``halfLifeDays`` is different: it multiplies the ``ln(s) / lambda`` part of
    every score, so it scales most score differences. A small margin then rewards a
    shorter half-life (smaller violations, same ranking) and a large one a longer
    half-life (wider gaps). With a margin of 1 day the study (``paper`` preset: the users'
    hidden preference *is* the defaults) drove ``halfLifeDays`` from 30 to ~15 and the
    treatment branch typed significantly *more* characters than control; margins of 2, 4,
    8 and 16 days ended at ~18, ~25, 34 and ~70. At 6 days the defaults stay put (30 +- 1
    over seeds 0-3) and the ``shifted`` preset's half-life is recovered (20.1-20.5 for 20).
    Six days is about the standard deviation of the users' preference noise (``sqrt(30)``
    days) and, at the default half-life, a score ratio of ~1.15: the chosen page should
    outlast the others by about a week, like the 10% ratio of the classic ``log`` margin.

    On the ``log`` scale (not recommended) the default margin is the same 6 days near
    :data:`NOW_DAY`: ``log1p(NOW_DAY + 6) - log1p(NOW_DAY)``, about 3e-4.

    Modern frecency has no daily decay job: ``control_scores`` are the defaults' scores,
    whatever ``decay_rate``.

    A finite-difference perturbation can take ``halfLifeDays`` to zero or below (the
    safeguards allow 1 day and the default ``eps`` is 1), where Firefox's formula is
    undefined; such rows are scored at :data:`MIN_HALF_LIFE_DAYS` instead, i.e. in the
    limit of a vanishing half-life (pages ranked by their newest sample), so that the
    gradient still points the right way instead of the study failing.
    """

    model = "modern"
    names = MODERN_WEIGHT_NAMES
    default_score_scale = "raw"
    default_deltas = {"raw": 6.0, "log": math.log1p(NOW_DAY + 6.0) - math.log1p(NOW_DAY)}

    def __init__(
        self,
        pages: PageHistories,
        frecency: ModernFrecency | None = None,
        now_day: int = NOW_DAY,
    ) -> None:
        self.samples = modern_samples_from_histories(pages, now_day=now_day)
        self.frecency = frecency or ModernFrecency()

    @classmethod
    def defaults(cls) -> np.ndarray:
        return ModernFrecency.defaults()

    @classmethod
    def safeguards(cls, max_change: float = 3.0) -> ConstraintChain:
        return modern_frecency_safeguards(max_change=max_change)

    def score(self, params: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        samples = self.samples if index is None else self.samples.take(index)
        rows = np.array(params, dtype=np.float64)  # a copy: the half-life may be raised
        half_life = rows[..., _HALF_LIFE]
        rows[..., _HALF_LIFE] = np.where(
            half_life < MIN_HALF_LIFE_DAYS, MIN_HALF_LIFE_DAYS, half_life
        )
        return np.asarray(self.frecency.score(rows, samples), dtype=np.float64)

    def control_scores(self, decay_rate: float) -> np.ndarray:
        return self.score(self.defaults())


#: The page scorer of every frecency model the study can tune.
PAGE_SCORERS: dict[str, type[PageScorer]] = {"classic": ClassicScorer, "modern": ModernScorer}
MODELS: tuple[str, ...] = tuple(PAGE_SCORERS)


def page_scorer(model: str) -> type[PageScorer]:
    """The :class:`PageScorer` class of ``model`` (``classic`` or ``modern``)."""
    if model not in PAGE_SCORERS:
        raise ConfigError(f"unknown frecency model {model!r}; choose one of {', '.join(MODELS)}")
    return PAGE_SCORERS[model]


def assign_branches(
    n_users: int, shares: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """Branch index of every user: an exact split by ``shares`` (paper: 60/20/20), in random
    order."""
    if len(shares) != 3 or min(shares) < 0 or not np.isclose(sum(shares), 1.0):
        raise ConfigError(
            f"branch shares must be three non-negative numbers summing to 1, got {shares}"
        )
    counts = np.floor(np.asarray(shares) * n_users).astype(np.int64)
    counts[0] += n_users - counts.sum()
    return rng.permutation(np.repeat(np.arange(3), counts))


@dataclass(frozen=True)
class ClientReports:
    """The messages of the clients that searched in one iteration (vectorized form)."""

    users: np.ndarray  # (C,) user ids
    updates: np.ndarray  # (C, d) mean gradient per client
    n: np.ndarray  # (C,) searches behind each update
    loss: np.ndarray  # (C,) mean loss per client


class FrecencyWorld:
    """Users, their histories and preferences, their branches, and the URL bar.

    Args:
        n_users: number of users.
        hidden: the hidden weights of the users' true preference.
        rng: randomness for the population and branch assignment.
        history: synthetic history configuration.
        shares: treatment / control / control-no-decay shares.
        k: suggestions shown (``k``, default 10).
        noise_var: variance of the Gaussian noise on the users' preference (paper: 30).
        decay_rate: Firefox's daily frecency decay for the classic control branch (0.975;
            modern frecency has no decay job, see :class:`ModernScorer`).
        delta: the SVM margin ``Delta`` (on the ``score_scale``); ``None``: the model's
            default on that scale (:meth:`PageScorer.default_delta`).
        score_scale: ``"log"`` or ``"raw"``, see
            :func:`fedrank.losses.pointwise_svm.scaled_scores`; ``None``: the model's
            default (:attr:`PageScorer.default_score_scale`: log for classic, raw for modern).
        attention_depth: suggestions the simulated user scans after every keystroke.
        intent: how the wanted page is chosen (``first-letter``, ``topic`` or ``proportional``, see
            :func:`fedrank.simulation.intent.sample_intents`).
        model: the frecency model, ``"classic"`` (default) or ``"modern"``, or a
            :class:`PageScorer` class (its constructor gets the population's histories).
            ``hidden`` is in that model's parameters. The users' true preference is the
            hidden model's score plus noise (modern: a day number, so the noise is in
            days). With modern scores all near :data:`NOW_DAY`, the cue page that
            :func:`~fedrank.simulation.intent.sample_intents` draws in proportion to the
            score is close to uniform over a user's scored pages; the wanted page is still
            the one with the highest noisy score among the pages in question.
    """

    def __init__(
        self,
        n_users: int,
        hidden: np.ndarray,
        rng: np.random.Generator,
        *,
        history: HistoryConfig | None = None,
        shares: tuple[float, float, float] = (0.6, 0.2, 0.2),
        k: int = 10,
        noise_var: float = 30.0,
        decay_rate: float = 0.975,
        delta: float | None = None,
        score_scale: str | None = None,
        attention_depth: int | None = 3,
        intent: str = "first-letter",
        model: str | type[PageScorer] = "classic",
    ) -> None:
        if n_users < 3:
            raise ConfigError(f"the study needs at least 3 users (one per branch), got {n_users}")
        scorer_class = page_scorer(model) if isinstance(model, str) else model
        self.population: Population = generate_population(n_users, rng, history or HistoryConfig())
        self.scorer: PageScorer = scorer_class(self.population.pages)
        self.branch = assign_branches(n_users, shares, rng)
        self.k = k
        self.noise_var = noise_var
        self.score_scale = scorer_class.default_score_scale if score_scale is None else score_scale
        scaled_scores(np.zeros(1), self.score_scale)  # validates the name
        self.delta = scorer_class.default_delta(self.score_scale) if delta is None else delta
        self.attention_depth = attention_depth
        self.intent = intent
        self.hidden = np.asarray(hidden, dtype=np.float64)
        self.true_scores = self.scorer.score(self.hidden)
        self.control_scores = self.scorer.control_scores(decay_rate)
        self.no_decay_scores = self.scorer.score(self.scorer.defaults())
        self.page_branch = self.branch[self.population.page_user]

    @property
    def n_users(self) -> int:
        return int(self.branch.size)

    def users_of(self, branch: int) -> np.ndarray:
        return np.flatnonzero(self.branch == branch)

    def page_scores(self, theta: np.ndarray) -> np.ndarray:
        """The score every page has in its owner's URL bar when treatment uses ``theta``."""
        treatment = self.scorer.score(theta)
        return np.select(
            [self.page_branch == TREATMENT, self.page_branch == CONTROL],
            [treatment, self.control_scores],
            self.no_decay_scores,
        )

    def search(
        self, users: np.ndarray, theta: np.ndarray, rng: np.random.Generator
    ) -> tuple[SearchBatch, np.ndarray]:
        """One search per entry of ``users``: each wants a page (drawn from the hidden
        preference) and types until the URL bar shows it. Returns the batch and the score
        of every page under its owner's branch model."""
        scores = self.page_scores(theta)
        targets, first_slot = sample_intents(
            self.population, users, self.true_scores, rng, self.noise_var, self.intent
        )
        batch = simulate_searches(
            self.population, users, targets, scores,
            k=self.k, attention_depth=self.attention_depth, first_slot=first_slot,
        )  # fmt: skip
        return batch, scores

    def branch_losses(self, batch: SearchBatch, scores: np.ndarray) -> np.ndarray:
        """SVM loss of every search under the model its user's branch ran (NaN where the
        target was never shown)."""
        valid = batch.shown >= 0
        shown_scores = scaled_scores(scores[np.where(valid, batch.shown, 0)], self.score_scale)
        selected = np.where(batch.found, batch.selected_rank, 0)
        loss = pointwise_svm_loss(shown_scores, selected, valid | ~batch.found[:, None], self.delta)
        return np.where(batch.found, loss, np.nan)

    def client_reports(
        self,
        batch: SearchBatch,
        theta: np.ndarray,
        estimator: FiniteDifferenceEstimator,
        branch: int = TREATMENT,
    ) -> ClientReports:
        """The finite-difference messages of the ``branch`` users who searched in ``batch``.

        Each client sends the mean gradient of the SVM loss over its own searches (in which
        the target was shown), with the number of those searches as its weight ``n_i``.
        """
        keep = batch.found & (self.branch[batch.user] == branch)
        shown = batch.shown[keep]
        valid = shown >= 0
        selected = batch.selected_rank[keep]
        users, client = np.unique(batch.user[keep], return_inverse=True)
        flat_index = np.where(valid, shown, 0).reshape(-1)
        n_searches, k = shown.shape

        def objective(rows: np.ndarray) -> np.ndarray:
            scores = scaled_scores(self.scorer.score(rows, flat_index), self.score_scale)
            return pointwise_svm_loss(
                scores.reshape(rows.shape[0], n_searches, k), selected, valid, self.delta
            )

        updates, n, loss = estimator.estimate_clients(theta, objective, client, users.size)
        return ClientReports(users=users, updates=updates, n=n, loss=loss)
