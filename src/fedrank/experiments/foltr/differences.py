"""The antithetic differences ``|f+ - f-|`` a FOLtR-ES server receives over a run: what an
operator reads to choose ``[foltr_es] difference_bound``
(:class:`~fedrank.aggregators.es_gradient.ESGradient`; docs/service.md, Robust
aggregation). A client that lies about its metrics reports 1; the bound is worth setting
where few honest reports reach it.

Kept as counts on a grid of 0.001 (memory ``O(1)`` however long the run), so the
quantiles and shares are exact to 0.001.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrank.core.message import MessageBatch

#: Grid steps per unit of difference (resolution 1 / BINS).
BINS = 1000
#: The bounds whose share of reports within them the report lists.
SHARE_BOUNDS = (0.25, 0.5, 0.75)


class ReportDifferences:
    """Counts of ``|f+ - f-|`` of the antithetic reports folded by :meth:`add`."""

    def __init__(self) -> None:
        self.counts = np.zeros(BINS + 1, dtype=np.int64)

    def add(self, batch: MessageBatch) -> None:
        """Count a batch's reports (plain reports, without an antithetic metric, have no
        difference and are not counted)."""
        if batch.size == 0 or batch.antithetic is None or batch.metric is None:
            return
        diff = np.abs(np.asarray(batch.metric, np.float64) - batch.antithetic)
        grid = np.minimum(np.rint(diff * BINS).astype(np.int64), BINS)  # |f+ - f-| <= 1
        self.counts += np.bincount(grid, minlength=BINS + 1)

    def quantile(self, q: float) -> float:
        """The smallest grid value with at least a share ``q`` of the reports at or
        below it (``nan`` before any report)."""
        n = int(self.counts.sum())
        if n == 0:
            return float("nan")
        return float(np.searchsorted(np.cumsum(self.counts), q * n) / BINS)

    def share_within(self, bound: float) -> float:
        """The share of the reports whose difference is at most ``bound``."""
        n = int(self.counts.sum())
        top = int(round(bound * BINS))
        return float(self.counts[: top + 1].sum() / n) if n else float("nan")

    def to_json(self) -> dict[str, Any]:
        """``reports``, the ``median`` / ``p90`` / ``p99`` difference, the share within
        each of :data:`SHARE_BOUNDS` and the share of differences of 1 (the liar's)."""
        n = int(self.counts.sum())
        if n == 0:
            return {"reports": 0}
        return {
            "reports": n,
            "median": self.quantile(0.5),
            "p90": self.quantile(0.9),
            "p99": self.quantile(0.99),
            "share_within": {f"{b:g}": self.share_within(b) for b in SHARE_BOUNDS},
            "share_of_one": float(self.counts[BINS] / n),
        }
