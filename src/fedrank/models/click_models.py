"""Click models that simulate users on LETOR-style data (FOLtR-ES, Section 5).

The paper simulates users with the cascade click model (CCM, Guo, Liu and Wang, WSDM 2009):
"we cut top ten results from the ranked list ... examine the results from top to bottom,
one-by-one. When a document with relevance label r is examined, we sample a clicking event
with probability of P(c|r). After a click, the user stops with probability P(s|r) and
continues otherwise." Table 1 gives three instantiations (from Hofmann et al., WSDM 2013):

============== ================== ==================
model          P(click | r=0,1,2)  P(stop | r=0,1,2)
============== ================== ==================
perfect        0.0, 0.5, 1.0       0.0, 0.0, 0.0
navigational   0.05, 0.5, 0.95     0.2, 0.5, 0.9
informational  0.4, 0.7, 0.9       0.1, 0.3, 0.5
============== ================== ==================

Datasets with five grades (0-4: MSLR, Yahoo!, the LightGBM sample) use the five-grade
instantiations of the OLTR literature (Oosterhuis and de Rijke, WWW 2018, Table 2):
perfect 0.0/0.2/0.4/0.8/1.0 (never stops), navigational 0.05/0.3/0.5/0.7/0.95 (stops
0.2/0.3/0.5/0.7/0.9), informational 0.4/0.6/0.7/0.8/0.9 (stops 0.1/0.2/0.3/0.4/0.5).

As an extra, :class:`PositionBasedModel` (Craswell et al., WSDM 2008): position ``k``
(0-based) is examined with probability ``(1 / (k + 1)) ** eta`` independently of the other
positions, and an examined document is clicked with its grade's attraction probability.
The ``position-based`` preset uses the navigational click probabilities as attractions and
``eta = 1``.

Both models expose the per-position *first-click hazard*: the probability that position
``k`` is clicked given no click above it. Before the first click a CCM user examines every
position and stops nowhere, so the hazard is ``P(c | r)``; for the PBM it is
``e_k * a(r)``. The exact distribution of the first click position follows from it, and
with it the exact expected MaxRR (:mod:`fedrank.metrics.maxrr`). A model whose hazard does
not depend on the position (:attr:`position_free_hazard`) lets the simulator find the first
click without sorting the whole list (see :mod:`fedrank.estimators.evolution_strategies`).

Ranked lists are ``(I, K)`` integer arrays of relevance grades, best first, with ``-1`` in
slots that hold no document (a query with fewer than ``K`` documents).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

#: Positions a simulated user examines (the paper: "we cut top ten results").
DEFAULT_DEPTH = 10

_THREE_GRADE = {
    "perfect": ((0.0, 0.5, 1.0), (0.0, 0.0, 0.0)),
    "navigational": ((0.05, 0.5, 0.95), (0.2, 0.5, 0.9)),
    "informational": ((0.4, 0.7, 0.9), (0.1, 0.3, 0.5)),
}
_FIVE_GRADE = {
    "perfect": ((0.0, 0.2, 0.4, 0.8, 1.0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    "navigational": ((0.05, 0.3, 0.5, 0.7, 0.95), (0.2, 0.3, 0.5, 0.7, 0.9)),
    "informational": ((0.4, 0.6, 0.7, 0.8, 0.9), (0.1, 0.2, 0.3, 0.4, 0.5)),
}

#: Names accepted by :func:`click_model`.
CLICK_MODEL_NAMES: tuple[str, ...] = ("perfect", "navigational", "informational", "position-based")


def _probabilities(name: str, values: tuple[float, ...] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ConfigError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.all((arr >= 0) & (arr <= 1)):
        raise ConfigError(f"{name} must be probabilities in [0, 1], got {arr.tolist()}")
    return arr


def check_ranked_labels(ranked: np.ndarray, n_grades: int) -> np.ndarray:
    """``ranked`` as a 2-D int array of grades in ``[-1, n_grades)``."""
    arr = np.asarray(ranked)
    if arr.ndim != 2:
        raise DataFormatError(f"ranked labels must have shape (I, K), got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise DataFormatError(f"ranked labels must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < -1 or arr.max() >= n_grades):
        raise DataFormatError(
            f"ranked labels must be relevance grades 0..{n_grades - 1} (or -1 for an empty "
            f"slot); got values in [{arr.min()}, {arr.max()}]. Use a click model with as many "
            "grades as the dataset"
        )
    return arr


@dataclass(frozen=True)
class CascadeClickModel:
    """The cascade click model of FOLtR-ES Section 5.

    Args:
        name: display name.
        click_prob: ``P(click | r)`` per grade ``r``.
        stop_prob: ``P(stop | r)`` after a click on a document of grade ``r``.
        depth: positions examined (10).
    """

    name: str
    click_prob: np.ndarray
    stop_prob: np.ndarray
    depth: int = DEFAULT_DEPTH
    position_free_hazard: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        click = _probabilities("click_prob", self.click_prob)
        stop = _probabilities("stop_prob", self.stop_prob)
        if click.shape != stop.shape:
            raise ConfigError(
                f"click_prob and stop_prob need one value per grade each; got {click.size} "
                f"and {stop.size}"
            )
        if self.depth < 1:
            raise ConfigError(f"depth must be >= 1, got {self.depth}")
        object.__setattr__(self, "click_prob", click)
        object.__setattr__(self, "stop_prob", stop)

    @property
    def n_grades(self) -> int:
        return int(self.click_prob.size)

    def attraction(self, labels: np.ndarray) -> np.ndarray:
        """``P(click | r)`` of each label (0 for ``-1``, an empty slot)."""
        lab = np.asarray(labels)
        return np.where(lab >= 0, self.click_prob[np.maximum(lab, 0)], 0.0)

    def hazard(self, ranked: np.ndarray) -> np.ndarray:
        """``(I, depth)``: P(click at position k | no click above k)."""
        arr = check_ranked_labels(ranked, self.n_grades)[:, : self.depth]
        return _pad_to_depth(self.attraction(arr), self.depth)

    def simulate(self, ranked: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicks ``(I, K)`` (bool) of users scanning each list top-down, vectorized over
        lists (a loop over the ``depth`` positions only)."""
        return self.clicks_from_coins(ranked, rng.random(coin_shape(self, ranked)))

    def clicks_from_coins(self, ranked: np.ndarray, coins: np.ndarray) -> np.ndarray:
        """:meth:`simulate` with the user's uniforms given: ``coins[:, 0, k]`` decides a
        click at position ``k``, ``coins[:, 1, k]`` a stop after it (:func:`coin_shape`)."""
        arr = check_ranked_labels(ranked, self.n_grades)
        n, k = arr.shape
        clicks = np.zeros((n, k), dtype=bool)
        active = np.ones(n, dtype=bool)
        for pos in range(min(k, self.depth)):
            lab = arr[:, pos]
            grade = np.maximum(lab, 0)
            click = active & (lab >= 0) & (coins[:, 0, pos] < self.click_prob[grade])
            clicks[:, pos] = click
            active &= ~(click & (coins[:, 1, pos] < self.stop_prob[grade]))
        return clicks


@dataclass(frozen=True)
class PositionBasedModel:
    """Position-based click model: position ``k`` is examined with probability
    ``examination[k]``, independently; an examined document of grade ``r`` is clicked with
    probability ``attraction_prob[r]``."""

    name: str
    attraction_prob: np.ndarray
    examination: np.ndarray
    position_free_hazard: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "attraction_prob", _probabilities("attraction_prob", self.attraction_prob)
        )
        object.__setattr__(self, "examination", _probabilities("examination", self.examination))

    @property
    def depth(self) -> int:
        return int(self.examination.size)

    @property
    def n_grades(self) -> int:
        return int(self.attraction_prob.size)

    def attraction(self, labels: np.ndarray) -> np.ndarray:
        lab = np.asarray(labels)
        return np.where(lab >= 0, self.attraction_prob[np.maximum(lab, 0)], 0.0)

    def hazard(self, ranked: np.ndarray) -> np.ndarray:
        arr = check_ranked_labels(ranked, self.n_grades)[:, : self.depth]
        probs = self.attraction(arr) * self.examination[None, : arr.shape[1]]
        return _pad_to_depth(probs, self.depth)

    def simulate(self, ranked: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.clicks_from_coins(ranked, rng.random(coin_shape(self, ranked)))

    def clicks_from_coins(self, ranked: np.ndarray, coins: np.ndarray) -> np.ndarray:
        """Clicks from the user's uniforms: ``coins[:, 0, k]`` decides whether position
        ``k`` is examined, ``coins[:, 1, k]`` whether its document attracts."""
        arr = check_ranked_labels(ranked, self.n_grades)
        n, k = arr.shape
        clicks = np.zeros((n, k), dtype=bool)
        d = min(k, self.depth)
        examined = coins[:, 0, :d] < self.examination[None, :d]
        attracted = coins[:, 1, :d] < self.attraction(arr[:, :d])
        clicks[:, :d] = examined & attracted
        return clicks


ClickModel = CascadeClickModel | PositionBasedModel


def coin_shape(model: ClickModel, ranked: np.ndarray) -> tuple[int, int, int]:
    """``(I, 2, d)``: the uniforms a user needs to scan ``I`` lists of ``K`` documents,
    two per position it may examine (``d = min(K, depth)``)."""
    n, k = np.shape(ranked)
    return (n, 2, min(k, model.depth))


def _pad_to_depth(probs: np.ndarray, depth: int) -> np.ndarray:
    if probs.shape[1] >= depth:
        return probs
    return np.pad(probs, ((0, 0), (0, depth - probs.shape[1])))


def first_click_distribution(model: ClickModel, ranked: np.ndarray) -> np.ndarray:
    """``(I, depth + 1)``: probability that the first click is at position ``k`` (columns
    ``0..depth-1``) or that there is no click in the top ``depth`` (last column)."""
    hazard = model.hazard(ranked)
    survive = np.cumprod(1.0 - hazard, axis=1)
    before = np.concatenate([np.ones((hazard.shape[0], 1)), survive[:, :-1]], axis=1)
    return np.concatenate([hazard * before, survive[:, -1:]], axis=1)


def click_model(name: str, n_grades: int = 3, depth: int = DEFAULT_DEPTH) -> ClickModel:
    """A preset by name (:data:`CLICK_MODEL_NAMES`) for data with ``n_grades`` grades
    (3: labels 0-2, as MQ2007/MQ2008/OHSUMED; 5: labels 0-4)."""
    if n_grades not in (3, 5):
        raise ConfigError(
            f"click models are defined for 3 grades (labels 0-2) or 5 grades (labels 0-4); "
            f"the data has {n_grades} grades"
        )
    table = _THREE_GRADE if n_grades == 3 else _FIVE_GRADE
    if name == "position-based":
        attraction, _ = table["navigational"]
        examination = 1.0 / np.arange(1, depth + 1, dtype=np.float64)
        return PositionBasedModel(name, np.asarray(attraction), examination)
    if name not in table:
        raise ConfigError(
            f"unknown click model {name!r}; choose one of {', '.join(CLICK_MODEL_NAMES)}"
        )
    click, stop = table[name]
    return CascadeClickModel(name, np.asarray(click), np.asarray(stop), depth)


def grades_of(labels: np.ndarray) -> int:
    """The click-model grade count for data whose largest label is ``max(labels)``."""
    top = int(np.max(labels)) if np.size(labels) else 0
    if top <= 2:
        return 3
    if top <= 4:
        return 5
    raise DataFormatError(
        f"relevance labels go up to {top}; click models cover labels 0-2 or 0-4 only"
    )
