"""LambdaMART (LightGBM lambdarank): the strongest centralized reference, beyond the paper.

Kharitonov (WSDM 2019), Section 5, leaves gradient boosted trees out on purpose: "The
state-of-the-art performance in offline learning to rank is achieved by gradient boosted
regression trees (GBRT) ... As GBRT rankers rely on a completely different class of the
models and a usage scenario, we do not consider a GBRT baseline." We add one anyway, as an
upper reference for what a centralized learner with relevance labels reaches on the same
queries: LambdaMART (Burges, "From RankNet to LambdaRank to LambdaMART: An Overview",
Microsoft Research TR-2010-82), i.e. boosted regression trees fit to the LambdaRank gradients
of nDCG, as implemented by LightGBM (Ke et al., NeurIPS 2017) with ``objective="lambdarank"``.

Training uses LightGBM's native ``lightgbm.train`` (the model ``LGBMRanker`` wraps): its
arguments are stable across LightGBM 4.x, whereas ``LGBMRanker.fit``'s ``eval_set`` is
deprecated from 4.7 on. Defaults: at most 300 boosting rounds, learning rate 0.05, 31 leaves
per tree, 20 documents per leaf (LightGBM's default). With a validation split, training stops
when its nDCG@10 has not improved for 50 rounds and the best round is kept (on MQ2008 Fold1
that is round 16); without one, all 300 rounds are used. Runs are reproducible bit for bit:
``deterministic=True``, ``force_row_wise=True``, a fixed thread count and the given seed.
Queries are given to LightGBM as group sizes (:attr:`LetorSplit.query_sizes`); labels 0-4
are within lambdarank's default label gains.
"""

from __future__ import annotations

import numbers
from typing import Any

import lightgbm
import numpy as np

from fedrank.baselines._checks import check_score_features, check_training_splits
from fedrank.data.letor.split import LetorSplit
from fedrank.errors import ConfigError

__all__ = ["LambdaMART"]


class LambdaMART:
    """LightGBM lambdarank ranker (see the module docstring).

    Args:
        n_estimators: maximum number of boosting rounds; all of them without ``vali`` (300).
        learning_rate: shrinkage (0.05).
        num_leaves: leaves per tree (31).
        min_child_samples: minimum documents per leaf (20).
        early_stopping_rounds: with ``vali``, stop when its nDCG@``eval_at`` has not improved
            for this many rounds (50).
        eval_at: cut-off of the validation nDCG (10).
        n_jobs: LightGBM threads (2); fixed so that results do not depend on the machine.
        random_state: LightGBM ``seed`` (0).

    Attributes (after :meth:`fit`):
        booster_: the trained ``lightgbm.Booster``.
        best_iteration_: int; the number of rounds used for scoring.
        best_score_: float or None; validation nDCG@``eval_at`` at ``best_iteration_`` (as
            LightGBM computes it: a query without relevant documents counts as 1), None
            without ``vali``.
        n_features_in_: int.
    """

    def __init__(
        self,
        n_estimators: int = 300,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        min_child_samples: int = 20,
        *,
        early_stopping_rounds: int = 50,
        eval_at: int = 10,
        n_jobs: int = 2,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.early_stopping_rounds = early_stopping_rounds
        self.eval_at = eval_at
        self.n_jobs = n_jobs
        self.random_state = random_state

    def __repr__(self) -> str:
        params = ", ".join(f"{name}={value!r}" for name, value in self._params().items())
        return f"LambdaMART({params})"

    def _params(self) -> dict[str, Any]:
        return {
            "n_estimators": self.n_estimators,
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_child_samples": self.min_child_samples,
            "early_stopping_rounds": self.early_stopping_rounds,
            "eval_at": self.eval_at,
            "n_jobs": self.n_jobs,
            "random_state": self.random_state,
        }

    def _check_params(self) -> None:
        minimum = {
            "n_estimators": 1,
            "num_leaves": 2,
            "min_child_samples": 1,
            "early_stopping_rounds": 1,
            "eval_at": 1,
            "n_jobs": 1,
            "random_state": 0,
        }
        for name, low in minimum.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ConfigError(f"LambdaMART {name} must be an int >= {low}, got {value!r}")
        rate = self.learning_rate
        if not isinstance(rate, numbers.Real) or not np.isfinite(rate) or rate <= 0:
            raise ConfigError(f"LambdaMART learning_rate must be a positive number, got {rate!r}")

    def fit(self, split: LetorSplit, vali: LetorSplit | None = None) -> LambdaMART:
        """Train on ``split``; with ``vali``, stop early on its nDCG@``eval_at``.

        Raises:
            ConfigError: a parameter is invalid.
            DataFormatError: ``split`` has no documents, or ``vali`` has another width.
        """
        self._check_params()
        check_training_splits(split, vali, "LambdaMART")
        params = {
            "objective": "lambdarank",
            "metric": "ndcg",
            "eval_at": [int(self.eval_at)],
            "learning_rate": float(self.learning_rate),
            "num_leaves": int(self.num_leaves),
            "min_data_in_leaf": int(self.min_child_samples),
            "seed": int(self.random_state),
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": int(self.n_jobs),
            "verbosity": -1,
        }
        train_set = lightgbm.Dataset(
            split.features, label=split.labels, group=split.query_sizes, params=params
        )
        valid_sets, callbacks = None, None
        if vali is not None:
            valid_sets = [
                lightgbm.Dataset(
                    vali.features, label=vali.labels, group=vali.query_sizes, reference=train_set
                )
            ]
            callbacks = [
                lightgbm.early_stopping(
                    int(self.early_stopping_rounds), first_metric_only=True, verbose=False
                )
            ]
        booster = lightgbm.train(
            params,
            train_set,
            num_boost_round=int(self.n_estimators),
            valid_sets=valid_sets,
            valid_names=None if vali is None else ["vali"],
            callbacks=callbacks,
        )
        self.booster_ = booster
        if vali is None:
            self.best_iteration_ = int(booster.current_iteration())
            self.best_score_: float | None = None
        else:
            self.best_iteration_ = int(booster.best_iteration) or int(booster.current_iteration())
            self.best_score_ = float(booster.best_score["vali"][f"ndcg@{int(self.eval_at)}"])
        self.n_features_in_ = split.n_features
        return self

    def score(self, features: np.ndarray) -> np.ndarray:
        """Float64 scores ``(...)`` of documents ``(..., n_features)`` from the first
        ``best_iteration_`` trees.

        Raises:
            NotFittedError: called before :meth:`fit`.
            DataFormatError: ``features`` does not have ``n_features_in_`` columns.
        """
        x = check_score_features(features, getattr(self, "n_features_in_", None), "LambdaMART")
        rows = x.reshape(-1, self.n_features_in_)
        if rows.shape[0] == 0:
            return np.zeros(x.shape[:-1])
        scores = self.booster_.predict(
            rows, num_iteration=self.best_iteration_, num_threads=int(self.n_jobs)
        )
        return np.asarray(scores, dtype=np.float64).reshape(x.shape[:-1])
