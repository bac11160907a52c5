"""Offline evaluation of a ranker on every query of a split (FOLtR-ES, Section 6.3).

"we take the 'final' model ... get the ranked lists for all queries in the training and
test sets ... apply the user click model that was used for training to calculate the
expectation of the MaxRR metric for these ranked lists. Finally, we average these values
over all queries." :func:`evaluate` does that exactly (no click sampling) and also reports
nDCG@10 with the relevance labels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fedrank.data.query_bank import QueryBank
from fedrank.metrics.maxrr import expected_maxrr
from fedrank.metrics.ndcg import mean_ndcg, ndcg_at_k
from fedrank.metrics.ranking import ranked_labels
from fedrank.models.click_models import ClickModel

#: ``scorer(features (I, W, n_features)) -> scores (I, W)``.
Scorer = Callable[[np.ndarray], np.ndarray]


def per_query_quality(
    bank: QueryBank, scorer: Scorer, click_models: Mapping[str, ClickModel], k: int = 10
) -> dict[str, np.ndarray]:
    """Per-query expected MaxRR under each click model (key = model name) and nDCG@k
    (key ``"ndcg"``), each ``(n_queries,)`` in the split's query order."""
    depth = max([k, *(m.depth for m in click_models.values())])
    out = {name: np.zeros(bank.n_queries) for name in click_models}
    out["ndcg"] = np.zeros(bank.n_queries)
    for group in bank.all_queries():
        labels = group.labels()
        ranked = ranked_labels(scorer(group.features()), labels, depth)
        for name, model in click_models.items():
            out[name][group.interactions] = expected_maxrr(model, ranked)
        out["ndcg"][group.interactions] = ndcg_at_k(ranked, labels, k)
    return out


def evaluate(
    bank: QueryBank, scorer: Scorer, click_models: Mapping[str, ClickModel], k: int = 10
) -> dict[str, float]:
    """Mean expected MaxRR per click model (over all queries) and mean nDCG@k (over the
    queries that have a relevant document), keys as in :func:`per_query_quality`."""
    per_query = per_query_quality(bank, scorer, click_models, k)
    result = {name: float(per_query[name].mean()) for name in click_models}
    result["ndcg"] = mean_ndcg(per_query["ndcg"])
    return result
