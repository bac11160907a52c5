"""The baselines of FOLtR-ES's Table 3 on one LETOR fold (Kharitonov, WSDM 2019, Sections 5
and 6.3), plus LambdaMART.

"Since the MSE and SVMRank baselines are trained on the entire training set, we simply report
their average performance": each baseline is fit once on the fold's training queries (with
relevance labels), and its final ranking of every training and test query is scored as the
paper scores FOLtR-ES's final models: the exact expectation of MaxRR under each click model,
averaged over all queries (:func:`fedrank.metrics.evaluate.evaluate`), plus nDCG@10. The
reference implementation's numbers for MSE and RankingSVM on MQ2007/MQ2008 are in
facebookresearch/foltr-es ``baselines.json``; see ``tests/baselines`` for how ours compare.

:func:`run_baselines` returns a JSON-ready dict::

    {"data": {"name", "train_queries", "test_queries", "n_features"},
     "<baseline>": {"expected_maxrr": {"<click model>": {"train": x, "test": y}, ...},
                    "ndcg10": {"train": x, "test": y},
                    "fit_seconds": s},
     ...}
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from fedrank.baselines import LambdaMART, MSERanker, RankingSVM
from fedrank.data.letor.split import LetorFold, LetorSplit
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError
from fedrank.metrics.evaluate import evaluate
from fedrank.models.click_models import CLICK_MODEL_NAMES, click_model, grades_of

__all__ = ["BASELINES", "PAPER_CLICK_MODELS", "Baseline", "make_baseline", "run_baselines"]

#: Baselines :func:`run_baselines` knows, in report order.
BASELINES: tuple[str, ...] = ("mse", "ranking_svm", "lambdamart")

#: The click models of the paper's Table 1, the default of :func:`run_baselines`.
PAPER_CLICK_MODELS: tuple[str, ...] = ("perfect", "navigational", "informational")


class Baseline(Protocol):
    """What :func:`run_baselines` needs of a baseline."""

    def fit(self, split: LetorSplit, vali: LetorSplit | None = None) -> Baseline: ...

    def score(self, features: np.ndarray) -> np.ndarray: ...


_FACTORIES: dict[str, Callable[[int], Baseline]] = {
    "mse": lambda seed: MSERanker(),
    "ranking_svm": lambda seed: RankingSVM(C=1000.0, random_state=seed),
    "lambdamart": lambda seed: LambdaMART(random_state=seed),
}


def make_baseline(name: str, *, seed: int = 0) -> Baseline:
    """An unfitted baseline by name (:data:`BASELINES`) with the paper's settings (RankingSVM
    C = 10^3; MSE without regularization) and the given seed (unused by MSE).

    Raises:
        ConfigError: unknown name.
    """
    if name not in _FACTORIES:
        raise ConfigError(f"unknown baseline {name!r}; choose among {', '.join(BASELINES)}")
    return _FACTORIES[name](seed)


def _names(values: Sequence[str], what: str, known: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        raise ConfigError(
            f"{what} must be a sequence of names such as ({values!r},), not the string {values!r}"
        )
    names = list(values)
    if not names:
        raise ConfigError(f"{what} is empty; give at least one of {', '.join(known)}")
    for name in names:
        if name not in known:
            raise ConfigError(f"unknown {what[:-1]} {name!r}; choose among {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{what} lists a name twice: {names}; give each once")
    return names


def run_baselines(
    fold: LetorFold,
    click_models: Sequence[str] = PAPER_CLICK_MODELS,
    *,
    seed: int = 0,
    which: Sequence[str] = BASELINES,
) -> dict[str, Any]:
    """Fit each baseline in ``which`` on ``fold.train`` (LambdaMART stops early on
    ``fold.vali`` when there is one) and evaluate it on ``fold.train`` and ``fold.test``:
    mean expected MaxRR under each click model (built for the grades of the training labels)
    and mean nDCG@10. Returns the dict described in the module docstring, with the baselines
    in the order of ``which``; ``fit_seconds`` is wall-clock time.

    Raises:
        ConfigError: an unknown, repeated or missing baseline or click model name.
        DataFormatError: the labels exceed the grades the click models cover.
    """
    baselines = _names(which, "baselines", BASELINES)
    model_names = _names(click_models, "click models", CLICK_MODEL_NAMES)
    n_grades = grades_of(fold.train.labels)
    models = {name: click_model(name, n_grades) for name in model_names}
    banks = {"train": QueryBank(fold.train), "test": QueryBank(fold.test)}
    report: dict[str, Any] = {
        "data": {
            "name": fold.name,
            "train_queries": fold.train.n_queries,
            "test_queries": fold.test.n_queries,
            "n_features": fold.train.n_features,
        }
    }
    for name in baselines:
        baseline = make_baseline(name, seed=seed)
        start = time.perf_counter()
        baseline.fit(fold.train, fold.vali)
        fit_seconds = time.perf_counter() - start
        quality = {split: evaluate(bank, baseline.score, models) for split, bank in banks.items()}
        report[name] = {
            "expected_maxrr": {
                model: {split: quality[split][model] for split in banks} for model in model_names
            },
            "ndcg10": {split: quality[split]["ndcg"] for split in banks},
            "fit_seconds": fit_seconds,
        }
    return report
