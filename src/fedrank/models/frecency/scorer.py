"""The page scorer of a frecency model: what federated frecency tunes (Mozilla paper Sec.
5). A :class:`PageScorer` scores pages' visit histories under any parameter vector and knows
what the study needs of its model: parameter names, Firefox's defaults, the safeguards
(Sec. 5.6), the loss scale and margin, and the control branch's stored frecency. Two
models: :class:`ClassicScorer` (Firefox 62-68's 22 weights, the paper's model) and
:class:`ModernScorer` (Firefox 128+'s decay-based frecency, 5 parameters). The simulator,
the server and the client SDK all score through it."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.frecency.classic import ClassicFrecency, bucket_of, effective_cutoffs
from fedrank.models.frecency.history import PageHistories
from fedrank.models.frecency.modern import (
    MODERN_WEIGHT_NAMES,
    ModernFrecency,
    modern_samples_from_histories,
)
from fedrank.models.frecency.safeguards import frecency_safeguards, modern_frecency_safeguards
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, CUTOFF_SLICE, classic_defaults
from fedrank.optim.constraints import ConstraintChain

#: The simulated study's first day for modern frecency, as a day number (days since
#: 1970-01-01; 20,000 is 2024-10-04). Rankings do not depend on it.
NOW_DAY = 20_000

#: Smallest ``halfLifeDays`` the modern scorer evaluates (see :class:`ModernScorer`).
MIN_HALF_LIFE_DAYS = 1e-3
_HALF_LIFE = MODERN_WEIGHT_NAMES.index("halfLifeDays")


class PageScorer(ABC):
    """The page scorer of a frecency model: scores of pages' histories under any
    parameters, with what the study needs to know about the model.

    Class attributes: ``model`` (its name), ``names`` (parameter names in vector order),
    ``default_score_scale`` and ``default_deltas`` (the loss settings the study uses unless
    told otherwise: the scale, and the margin on each scale); class methods
    :meth:`default_delta`, :meth:`defaults`, :meth:`safeguards` and :meth:`to_dict`.
    """

    model: ClassVar[str]
    names: ClassVar[tuple[str, ...]]
    default_score_scale: ClassVar[str]
    default_deltas: ClassVar[dict[str, float]]
    #: Scores read the calendar day of ``now`` besides the pages' ages (see
    #: :meth:`fresh_age_limits`).
    reads_day: ClassVar[bool] = False

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
    def fresh(self, params: np.ndarray, pages: PageHistories, now: float) -> np.ndarray:
        """Frecency computed now (``CALCULATE_FRECENCY``): ``(m,)`` for one parameter
        vector, ``(P, m)`` for ``(P, d)`` rows."""

    @abstractmethod
    def stored(
        self, pages: PageHistories, now: float, decay_rate: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The control branch's stored frecency (default parameters) and its undecayed
        value (what origin frecency sums)."""

    def fresh_age_limits(
        self, params: np.ndarray, pages: PageHistories
    ) -> tuple[np.ndarray, np.ndarray]:
        """How long the :meth:`fresh` scores under one parameter vector stay what they
        are: ``(row_limits (n, V), bookmark_limits (n,))``, the largest whole-day age of
        every row and of every page's newest bookmark at which the score is unchanged. While
        the histories stay the same, no age exceeds its limit and (when :attr:`reads_day`)
        the day of ``now`` stays the same, the scores are the same (a simulator may keep
        them). Default: the current ages (any older age may change a score)."""
        return pages.visit_age_days, pages.bookmark_age_days

    def stored_age_limits(self, pages: PageHistories) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`fresh_age_limits` of :meth:`stored`: the current ages (the stored
        value decays once per whole day of its newest row)."""
        return pages.visit_age_days, pages.bookmark_age_days


class ClassicScorer(PageScorer):
    """Classic frecency (:class:`ClassicFrecency`, Firefox's integer result). Loss
    defaults: ``log`` scale (classic frecency is a number of points, so a common factor on
    the weights would otherwise shrink the loss), margin 0.1 (the chosen page should score
    ~10% above the others). The control branch stores the score as of the page's newest
    visit and decays it daily (:meth:`ClassicFrecency.decayed_score`)."""

    model = "classic"
    names = CLASSIC_WEIGHT_NAMES
    default_score_scale = "log"
    default_deltas = {"log": 0.1, "raw": 0.1}

    def __init__(self, frecency: ClassicFrecency | None = None) -> None:
        self.frecency = frecency or ClassicFrecency()

    @classmethod
    def defaults(cls) -> np.ndarray:
        return classic_defaults()

    @classmethod
    def safeguards(cls, max_change: float = 3.0) -> ConstraintChain:
        return frecency_safeguards(max_change=max_change)

    def fresh(self, params: np.ndarray, pages: PageHistories, now: float) -> np.ndarray:
        return np.asarray(self.frecency.score(params, pages), dtype=np.float64)

    def fresh_age_limits(
        self, params: np.ndarray, pages: PageHistories
    ) -> tuple[np.ndarray, np.ndarray]:
        """A row's weight changes only when its age passes the cutoff of its bucket (the
        last bucket never changes); an unvisited bookmark scores without an age."""
        return self.age_limits(params, pages.visit_age_days), np.full(pages.n_pages, np.inf)

    @staticmethod
    def age_limits(params: np.ndarray, age: np.ndarray) -> np.ndarray:
        """The row limits of :meth:`fresh_age_limits` for rows of ages ``age``."""
        cutoffs = effective_cutoffs(np.asarray(params, dtype=np.float64)[CUTOFF_SLICE])
        return np.append(np.floor(cutoffs), np.inf)[bucket_of(age, cutoffs)]

    def stored(
        self, pages: PageHistories, now: float, decay_rate: float
    ) -> tuple[np.ndarray, np.ndarray]:
        decayed, undecayed = self.frecency.stored_scores(self.defaults(), pages, decay_rate)
        return np.asarray(decayed, np.float64), np.asarray(undecayed, np.float64)


class ModernScorer(PageScorer):
    """Modern frecency (:class:`ModernFrecency`, Firefox's integer result) on samples built
    from the histories with :func:`~fedrank.models.frecency.modern.
    modern_samples_from_histories` on day ``NOW_DAY + floor(now)``. Without interactions
    only the low, medium and high classes occur, so ``veryHighWeight`` never changes a
    score.

    Loss defaults: ``raw`` scale, margin 6 days. A modern score is a day number plus
    ``ln(s) / lambda``: multiplying the four class weights by ``c`` shifts every score by
    ``ln(c) / lambda``, so the raw hinge loss is already free of their scale, while
    ``log1p`` of ~20,000 would squash the differences. ``halfLifeDays`` multiplies the
    ``ln(s) / lambda`` part: a small margin rewards a shorter half-life without a better
    ranking, a large one a longer half-life; six days (about the standard deviation of the
    users' preference noise, ``sqrt(30)`` days) keeps the defaults in place under the
    ``paper`` preset (``docs/frecency.md``). On the ``log`` scale the default margin is the
    same 6 days near :data:`NOW_DAY`.

    Modern frecency has no daily decay job (the decay is in its formula): the stored value
    is the fresh default score. A finite-difference row can take ``halfLifeDays`` to zero
    or below, where Firefox's formula is undefined; such rows are scored at
    :data:`MIN_HALF_LIFE_DAYS` (pages ranked by their newest sample).
    """

    model = "modern"
    reads_day = True
    names = MODERN_WEIGHT_NAMES
    default_score_scale = "raw"
    default_deltas = {"raw": 6.0, "log": math.log1p(NOW_DAY + 6.0) - math.log1p(NOW_DAY)}

    def __init__(self, frecency: ModernFrecency | None = None) -> None:
        self.frecency = frecency or ModernFrecency()

    @classmethod
    def defaults(cls) -> np.ndarray:
        return ModernFrecency.defaults()

    @classmethod
    def safeguards(cls, max_change: float = 3.0) -> ConstraintChain:
        return modern_frecency_safeguards(max_change=max_change)

    def fresh(self, params: np.ndarray, pages: PageHistories, now: float) -> np.ndarray:
        samples = modern_samples_from_histories(pages, now_day=NOW_DAY + math.floor(now))
        rows = np.array(params, dtype=np.float64)  # a copy: the half-life may be raised
        half_life = rows[..., _HALF_LIFE]
        rows[..., _HALF_LIFE] = np.where(
            half_life < MIN_HALF_LIFE_DAYS, MIN_HALF_LIFE_DAYS, half_life
        )
        return np.asarray(self.frecency.score(rows, samples), dtype=np.float64)

    def stored(
        self, pages: PageHistories, now: float, decay_rate: float
    ) -> tuple[np.ndarray, np.ndarray]:
        scores = self.fresh(self.defaults(), pages, now)
        return scores, scores


#: The page scorer of every frecency model the study can tune.
PAGE_SCORERS: dict[str, type[PageScorer]] = {"classic": ClassicScorer, "modern": ModernScorer}
MODELS: tuple[str, ...] = tuple(PAGE_SCORERS)


def page_scorer(model: str) -> type[PageScorer]:
    """The :class:`PageScorer` class of ``model`` (``classic`` or ``modern``)."""
    if model not in PAGE_SCORERS:
        raise ConfigError(f"unknown frecency model {model!r}; choose one of {', '.join(MODELS)}")
    return PAGE_SCORERS[model]
