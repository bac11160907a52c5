"""Rankers trained on relevance labels, the reference points of FOLtR-ES (Kharitonov, WSDM
2019, Section 5 "Baselines" and Table 3): MSE (least-squares regression), RankingSVM
(svm_rank's objective) and, beyond the paper, LambdaMART (LightGBM lambdarank).

Each is a small scikit-learn-style class: the constructor stores parameters,
``fit(split, vali=None)`` learns from a :class:`~fedrank.data.letor.LetorSplit` and sets
attributes ending in ``_``, and ``score(features)`` maps documents ``(..., n_features)`` to
scores ``(...)``, so ``model.score`` is a scorer for :func:`fedrank.metrics.evaluate.evaluate`.
"""

from fedrank.baselines.lambdamart import LambdaMART
from fedrank.baselines.mse import MSERanker
from fedrank.baselines.ranking_svm import RankingSVM, ranking_pairs

__all__ = ["LambdaMART", "MSERanker", "RankingSVM", "ranking_pairs"]
