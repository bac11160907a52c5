"""What the writer keeps of the open iteration besides the round's aggregate: its number,
when it opened, how many updates it holds, each study branch's counts and metric summaries
(the per-branch summaries of Fig. 4 and 6 of the Mozilla paper, docs/service.md), and the
ids a resend could still repeat (:class:`~fedrank.server.recent_ids.RecentIds`); and the
:class:`Snapshot` readers see.

The writer thread folds and advances; request handlers read the summaries and the ids, so
the branch statistics are replaced and read under a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrank.aggregators.metrics import MetricMean
from fedrank.server.messages import PING, Messages, pick
from fedrank.server.recent_ids import RecentIds


@dataclass(frozen=True)
class Snapshot:
    """What readers see; replaced (never mutated) by the writer."""

    version: int
    iteration: int
    params: np.ndarray
    opened_at: float
    updates_in_iteration: int
    paused: bool = False
    #: The open iteration's norm bound (``[frecency]`` / ``[fedavg]`` ``norm_bound``, adapted
    #: at every close with ``norm_quantile``); ``None`` without one. A proxy folds its
    #: clients' messages from ``NormBounded`` states with this bound.
    norm_bound: float | None = None
    #: The ``[privacy]`` budget is spent: no more updates, check-ins or closes.
    budget_spent: bool = False


class Iteration:
    """The open iteration's bookkeeping (module docstring).

    Args:
        number: the open iteration.
        opened_at: when it opened (UNIX seconds).
        ids: the ids stored in the iterations a resend could still reach; ``number`` is
            opened in it.
    """

    def __init__(self, number: int, opened_at: float, ids: RecentIds) -> None:
        self.number = number
        self.opened_at = opened_at
        self.ids = ids
        self.ids.open(number)
        #: Updates in the iteration: a proxy's aggregate counts its ``count``, a ping none.
        self.updates = 0
        self.metric_mean = MetricMean()
        self._lock = threading.Lock()  # guards the branch statistics
        self._branches: dict[str, dict[str, Any]] = {}

    def fold(self, msgs: Messages, accepted: np.ndarray) -> None:
        """Count the stored messages at positions ``accepted`` (non-empty) in: the
        iteration's updates, their branches' counts and metrics, their ids."""
        everything = accepted.size == len(msgs)
        counts = msgs.counts[accepted]
        not_ping = msgs.kind_codes[accepted] != PING
        self.updates += int(counts[not_ping].sum())
        index = accepted.tolist()
        branches = pick(msgs.branches, index, everything)
        metrics = pick(msgs.metrics, index, everything)
        groups = set(branches)
        with self._lock:
            if len(groups) == 1:  # the usual batch: one branch
                self._fold_branch(branches[0], metrics, int(counts[not_ping].sum()))
            else:
                for branch in groups:
                    mine = np.array([b == branch for b in branches], dtype=bool)
                    self._fold_branch(
                        branch,
                        [mt for mt, take in zip(metrics, mine, strict=True) if take],
                        int(counts[mine & not_ping].sum()),
                    )
        self.ids.add(self.number, pick(msgs.ids, index, everything))

    def _fold_branch(self, branch: str, metrics: list[dict[str, float]], updates: int) -> None:
        stats = self._branches.setdefault(
            branch, {"messages": 0, "updates": 0, "metrics": self.metric_mean.zero()}
        )
        stats["messages"] += len(metrics)
        stats["updates"] += updates
        if not any(metrics):
            return
        names = {name for mt in metrics for name in mt}
        columns = {name: np.array([mt.get(name, np.nan) for mt in metrics]) for name in names}
        stats["metrics"] = self.metric_mean.accumulate_batch(
            stats["metrics"], columns, np.ones(len(metrics))
        )

    def branch_summary(self) -> dict[str, Any]:
        """Per branch: messages, updates and the mean of each metric so far."""
        with self._lock:
            return {
                name: {
                    "messages": s["messages"],
                    "updates": s["updates"],
                    "metrics": self.metric_mean.finalize(s["metrics"]),
                }
                for name, s in self._branches.items()
            }

    def summary(self, model_version: int) -> dict[str, Any]:
        """The open iteration's entry of ``GET /v1/summary`` (it serves ``model_version``)."""
        return {
            "iteration": self.number,
            "model_version": model_version,
            "opened_at": self.opened_at,
            "closed_at": None,
            "n_updates": self.updates,
            "branches": self.branch_summary(),
        }

    def advance(self, now: float) -> None:
        """The iteration closed: the next one opens at ``now``, empty."""
        self.number += 1
        self.opened_at = now
        self.ids.open(self.number)
        with self._lock:
            self._branches = {}
        self.updates = 0
