"""nDCG@k with graded labels (Jarvelin and Kekalainen 2002), as LETOR evaluations use it.

``DCG@k = sum_{i<k} (2**rel_i - 1) / log2(i + 2)`` over the ranked list, divided by the DCG
of the ideal ordering of *all* the query's documents. A query without any relevant
document has no ideal DCG; its nDCG is undefined (NaN here) and :func:`mean_ndcg` leaves it
out of the mean, as the FPDGD reference evaluation does.
"""

from __future__ import annotations

import numpy as np


def ndcg_at_k(ranked: np.ndarray, labels: np.ndarray, k: int = 10) -> np.ndarray:
    """``(I,)`` nDCG@k of ranked grade lists ``ranked`` (``(I, >= k)``, ``-1`` = empty)
    given each query's grades ``labels`` (``(I, W)``, ``-1`` = padding). NaN where the
    query has no relevant document."""
    discounts = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    top = np.asarray(ranked)[:, :k]
    gains = np.where(top > 0, np.exp2(np.maximum(top, 0)) - 1.0, 0.0)
    dcg = gains @ discounts[: top.shape[1]]
    ideal = -np.sort(-np.asarray(labels), axis=1)[:, :k]
    ideal_gains = np.where(ideal > 0, np.exp2(np.maximum(ideal, 0)) - 1.0, 0.0)
    idcg = ideal_gains @ discounts[: ideal.shape[1]]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(idcg > 0, dcg / idcg, np.nan)


def mean_ndcg(values: np.ndarray) -> float:
    """Mean over queries with a defined nDCG (NaN if there is none)."""
    finite = np.asarray(values)[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")
