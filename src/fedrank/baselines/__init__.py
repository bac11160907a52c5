"""Rankers trained on relevance labels, the reference points of FOLtR-ES (Kharitonov, WSDM
2019, Section 5 "Baselines" and Table 3): MSE (least-squares regression), RankingSVM
(svm_rank's objective) and, beyond the paper, LambdaMART (LightGBM lambdarank).

Each is a small scikit-learn-style class: the constructor stores parameters,
``fit(split, vali=None)`` learns from a :class:`~fedrank.data.letor.split.LetorSplit` and sets
attributes ending in ``_``, and ``score(features)`` maps documents ``(..., n_features)`` to
scores ``(...)``, so ``model.score`` is a scorer for :func:`fedrank.metrics.evaluate.evaluate`.

The classes are imported on first use (PEP 562), so that importing a light module of this
package (:mod:`fedrank.baselines.list_rankers`' rule rankers) does not import LightGBM and
scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedrank.baselines.lambdamart import LambdaMART
    from fedrank.baselines.mse import MSERanker
    from fedrank.baselines.ranking_svm import RankingSVM, ranking_pairs

_MODULE_OF = {
    "LambdaMART": "fedrank.baselines.lambdamart",
    "MSERanker": "fedrank.baselines.mse",
    "RankingSVM": "fedrank.baselines.ranking_svm",
    "ranking_pairs": "fedrank.baselines.ranking_svm",
}

__all__ = ["LambdaMART", "MSERanker", "RankingSVM", "ranking_pairs"]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
