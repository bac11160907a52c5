"""MAP, MRR and P@1 over candidate lists with binary click labels (FedPS Sec. 4.1,
"Evaluation Metrics": "with the clicked documents as relevant and other candidate documents
as irrelevant, we choose three common metrics ... MAP, MRR and P@1").

Conventions, all vectorized over a batch of ``Q`` candidate lists of width ``C``:

* **Relevance** is ``label > 0`` on a valid slot (``mask``); padded slots are never ranked.
* **Ties are broken pessimistically**: among candidates with equal scores the irrelevant
  ones are ranked first. A model therefore gains nothing from ties; a constant scorer gets
  the worst value any ordering of the list could get (not the expected value of a random
  ordering). Among tied relevant candidates the order does not change any of the metrics.
* **Queries without a relevant valid candidate are excluded**: their per-query values are
  NaN and the means leave them out (every metric here is undefined for them); the means
  report how many queries they cover as ``n_queries``.

``AP = (1 / R) sum_{k: rel_k} P@k`` with ``R`` the query's number of relevant candidates,
``RR = 1 / (rank of the first relevant candidate)``, ``P@1 = rel_1``.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import DataFormatError

METRIC_NAMES: tuple[str, ...] = ("map", "mrr", "p@1")


def _check(scores: object, labels: object, mask: object) -> tuple[np.ndarray, ...]:
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    m = np.asarray(mask)
    if s.ndim != 2 or y.shape != s.shape or m.shape != s.shape:
        raise DataFormatError(
            f"expected scores, labels and mask of one shape (Q, C), got scores {s.shape}, "
            f"labels {y.shape}, mask {m.shape}"
        )
    if m.dtype != np.bool_:
        raise DataFormatError(f"mask must be a bool array, got dtype {m.dtype}")
    if np.isnan(s[m]).any():
        raise DataFormatError("scores of valid candidates contain NaN")
    return s, y, m


def ranked_relevance(scores: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``(Q, C)`` bool: relevance of the candidates in ranked order (best first), ties
    broken pessimistically, padded slots last (and False)."""
    s, y, m = _check(scores, labels, mask)
    relevant = (y > 0) & m
    keyed = np.where(m, s, 0.0)
    # np.lexsort: the last key is the primary one. Valid slots first, then higher scores,
    # then irrelevant before relevant among equal scores.
    order = np.lexsort((relevant, -keyed, ~m), axis=-1)
    return np.take_along_axis(relevant, order, axis=1)


def per_query_map_mrr_p1(
    scores: np.ndarray, labels: np.ndarray, mask: np.ndarray
) -> dict[str, np.ndarray]:
    """``{"map", "mrr", "p@1"}`` -> ``(Q,)`` float64 per-query AP, RR and P@1 (NaN for
    queries without a relevant valid candidate)."""
    rel = ranked_relevance(scores, labels, mask)
    n_queries, width = rel.shape
    n_relevant = rel.sum(axis=1)
    has_relevant = n_relevant > 0
    if width == 0:
        empty = np.full(n_queries, np.nan)
        return {name: empty.copy() for name in METRIC_NAMES}
    positions = np.arange(1, width + 1, dtype=np.float64)
    precision = np.cumsum(rel, axis=1) / positions
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.where(has_relevant, (precision * rel).sum(axis=1) / n_relevant, np.nan)
    first = np.argmax(rel, axis=1)
    rr = np.where(has_relevant, 1.0 / (first + 1.0), np.nan)
    p1 = np.where(has_relevant, rel[:, 0].astype(np.float64), np.nan)
    return {"map": ap, "mrr": rr, "p@1": p1}


def per_query_table(scores: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``(Q, 3)`` float64: the columns of :func:`per_query_map_mrr_p1` in
    :data:`METRIC_NAMES` order (AP, RR, P@1; NaN rows for queries without a relevant
    candidate)."""
    values = per_query_map_mrr_p1(scores, labels, mask)
    return np.stack([values[name] for name in METRIC_NAMES], axis=1)


def map_mrr_p1(scores: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """Means of :func:`per_query_map_mrr_p1` over the queries with at least one relevant
    valid candidate: ``{"map", "mrr", "p@1"}`` (NaN if there is none) and ``"n_queries"``
    (how many queries the means cover).

    Args:
        scores: ``(Q, C)`` scores, higher is better; values in padded slots are ignored
            (``-inf`` is fine).
        labels: ``(Q, C)`` labels, ``> 0`` = relevant (clicked).
        mask: ``(Q, C)`` bool, valid candidates.
    """
    values = per_query_map_mrr_p1(scores, labels, mask)
    counted = np.isfinite(values["map"])
    n = int(counted.sum())
    means: dict[str, float] = {
        name: float(values[name][counted].mean()) if n else float("nan") for name in METRIC_NAMES
    }
    means["n_queries"] = n
    return means
