"""Rankers of FedPS candidate lists that learn nothing from text: the trivial explanations a
learned personalized model must beat (FedPS Sec. 4.2 lists BM25 and P-Click; the others are
ours).

Every ranker here reads only a list's columns -- the search engine's order, the
click-history features of :data:`fedrank.retrieval.candidates.FEATURE_NAMES` -- and no word
of a query or document. If one of them comes close to a learned model, the benchmark
measures its own construction or the click history, not what the model learns from text.

* :func:`rule_scores` for the rules. Each is a *lexicographic* order: candidates are
  compared on the first key, ties on the next, and the search engine's order (BM25, then
  document id) breaks every remaining tie, so no rule is judged on
  :mod:`fedrank.metrics.relevance`'s pessimistic tie-breaking:

  - ``original``: the engine's order (BM25 descending; FedPS Table 3 "Original Rank");
  - ``ascending``: the reverse ("least matching first"; it must lose to ``original`` on
    lists where relevant and irrelevant candidates come from one process);
  - ``popularity``: all users' background clicks on the document;
  - ``user_prior``: the user's own earlier clicks on the document, any query;
  - ``pclick``: P-Click (Dou et al. 2007 [19]): the user's earlier clicks on the document for
    the same query;
  - ``rule``: "the user clicked it before" first, then "BM25 = 0", then popularity (the
    audit's no-learning rule that scored 0.712 MAP on the old lists).

* :class:`GBDTRanker`: LightGBM lambdarank (LambdaMART) on the hand features alone, tuned on
  the validation lists: the strongest learner without text.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedrank.errors import ConfigError, DataFormatError
from fedrank.metrics.relevance import per_query_table
from fedrank.retrieval.candidates import FEATURE_NAMES, RankingSamples

if TYPE_CHECKING:
    import lightgbm

__all__ = ["RULES", "GBDTRanker", "lexicographic_scores", "rule_scores"]

RULES: tuple[str, ...] = ("original", "ascending", "popularity", "user_prior", "pclick", "rule")

_F = {name: i for i, name in enumerate(FEATURE_NAMES)}


def lexicographic_scores(keys: Sequence[np.ndarray], mask: np.ndarray) -> np.ndarray:
    """``(Q, C)`` float scores that order each row by ``keys`` (each ``(Q, C)``, larger is
    better, the first key most important), ties broken by column (the engine's order);
    ``-inf`` at padding. The scores are ranks, so they never tie within a row."""
    m = np.asarray(mask, dtype=bool)
    n_rows, width = m.shape
    columns = np.broadcast_to(np.arange(width), (n_rows, width))
    # np.lexsort: the last key is the primary one; sort ascending on the negated keys.
    order = np.lexsort(
        (columns, *(-np.asarray(k, dtype=np.float64) for k in reversed(keys)), ~m), axis=-1
    )
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(width), axis=1)
    return np.where(m, -rank.astype(np.float64), -np.inf)


def rule_scores(samples: RankingSamples, rule: str) -> np.ndarray:
    """``(Q, C)`` scores of ``rule`` (one of :data:`RULES`) on ``samples``."""
    f, mask = samples.features, samples.mask
    width = mask.shape[1]
    column = np.broadcast_to(np.arange(width, dtype=np.float64), mask.shape)
    keys: dict[str, list[np.ndarray]] = {
        "original": [],
        "ascending": [column],
        "popularity": [f[..., _F["log_global_clicks"]]],
        "user_prior": [f[..., _F["log_doc_clicks"]]],
        "pclick": [f[..., _F["log_pclick"]]],
        "rule": [
            f[..., _F["log_doc_clicks"]] > 0,
            samples.bm25 == 0,
            f[..., _F["log_global_clicks"]],
        ],
    }
    if rule not in keys:
        raise ConfigError(f"unknown rule {rule!r}; choose one of {RULES}")
    return lexicographic_scores(keys[rule], mask)


def _flatten(samples: Sequence[RankingSamples]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and query sizes of every valid candidate, query by query."""
    feats, labels, sizes = [], [], []
    for s in samples:
        feats.append(s.features[s.mask])
        labels.append(s.labels[s.mask])
        sizes.append(s.mask.sum(axis=1))
    if not feats:
        raise DataFormatError("no samples to train the GBDT ranker on")
    return (
        np.concatenate(feats).astype(np.float64),
        np.concatenate(labels).astype(np.float64),
        np.concatenate(sizes).astype(np.int64),
    )


@dataclass(frozen=True)
class GBDTChoice:
    """One point of the tuning grid and its validation MAP."""

    num_leaves: int
    learning_rate: float
    min_data_in_leaf: int
    best_iteration: int
    valid_map: float


class GBDTRanker:
    """LightGBM lambdarank on the hand features (no text), tuned on validation MAP.

    Every grid point (``num_leaves`` x ``learning_rate`` x ``min_data_in_leaf``) trains up
    to ``max_rounds`` trees with early stopping on LightGBM's validation MAP, then is scored
    with :func:`fedrank.metrics.relevance.per_query_table`'s MAP; the best point is kept.
    Deterministic for a ``seed`` (``deterministic=True``, fixed threads, row-wise).

    Attributes (after :meth:`fit`): ``booster_``, ``choice_`` (:class:`GBDTChoice`),
    ``grid_`` (every point's :class:`GBDTChoice`).
    """

    def __init__(
        self,
        *,
        num_leaves: Sequence[int] = (15, 63),
        learning_rate: Sequence[float] = (0.05, 0.2),
        min_data_in_leaf: Sequence[int] = (20, 200),
        max_rounds: int = 500,
        early_stopping_rounds: int = 30,
        seed: int = 0,
        n_jobs: int = 2,
    ) -> None:
        if max_rounds < 1 or early_stopping_rounds < 1:
            raise ConfigError("max_rounds and early_stopping_rounds must be >= 1")
        self.num_leaves = tuple(num_leaves)
        self.learning_rate = tuple(learning_rate)
        self.min_data_in_leaf = tuple(min_data_in_leaf)
        self.max_rounds = max_rounds
        self.early_stopping_rounds = early_stopping_rounds
        self.seed = seed
        self.n_jobs = n_jobs

    def fit(self, train: Sequence[RankingSamples], valid: Sequence[RankingSamples]) -> GBDTRanker:
        import lightgbm  # here: the rule rankers and the run settings do without its import

        x, y, groups = _flatten(train)
        xv, yv, groups_v = _flatten(valid)
        train_set = lightgbm.Dataset(
            x, y, group=groups, feature_name=list(FEATURE_NAMES), free_raw_data=False
        )
        valid_set = lightgbm.Dataset(xv, yv, group=groups_v, reference=train_set)
        best: tuple[float, GBDTChoice, lightgbm.Booster] | None = None
        grid = []
        for leaves, rate, leaf_data in itertools.product(
            self.num_leaves, self.learning_rate, self.min_data_in_leaf
        ):
            params = {
                "objective": "lambdarank",
                "metric": "map",
                "eval_at": [50],
                "num_leaves": leaves,
                "learning_rate": rate,
                "min_data_in_leaf": leaf_data,
                "seed": self.seed,
                "deterministic": True,
                "force_row_wise": True,
                "num_threads": self.n_jobs,
                "verbosity": -1,
            }
            booster = lightgbm.train(
                params,
                train_set,
                num_boost_round=self.max_rounds,
                valid_sets=[valid_set],
                callbacks=[lightgbm.early_stopping(self.early_stopping_rounds, verbose=False)],
            )
            self.booster_ = booster
            valid_map = float(np.nanmean(self.per_query(valid)[:, 0]))
            choice = GBDTChoice(leaves, rate, leaf_data, int(booster.best_iteration), valid_map)
            grid.append(choice)
            if best is None or valid_map > best[0]:
                best = (valid_map, choice, booster)
        assert best is not None
        self.grid_ = grid
        self.choice_ = best[1]
        self.booster_ = best[2]
        return self

    def scores(self, samples: RankingSamples) -> np.ndarray:
        """``(Q, C)`` scores (``-inf`` at padding)."""
        if not hasattr(self, "booster_"):
            raise ConfigError("GBDTRanker is not fitted; call fit(train, valid) first")
        out = np.full(samples.mask.shape, -np.inf)
        if samples.mask.any():
            out[samples.mask] = self.booster_.predict(
                samples.features[samples.mask].astype(np.float64),
                num_iteration=self.booster_.best_iteration or None,
            )
        return out

    def per_query(self, samples: Sequence[RankingSamples]) -> np.ndarray:
        """``(Q, 3)`` AP, RR and P@1 of every query of ``samples``, in order."""
        rows = [per_query_table(self.scores(s), s.labels, s.mask) for s in samples if s.n_queries]
        return np.concatenate(rows) if rows else np.zeros((0, 3))
