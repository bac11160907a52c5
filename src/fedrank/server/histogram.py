"""A Prometheus-style latency histogram (cumulative buckets, sum, count), thread-safe.

The writer thread observes how long each group commit takes; ``/metrics`` exposes it as
``fedrank_store_commit_seconds``, so an operator can tell a slow disk (commits of tens or
hundreds of milliseconds: every acknowledgement waits for one) from a slow server.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

#: Upper bounds in seconds (Prometheus' default latency buckets, from 1 ms).
COMMIT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


@dataclass(frozen=True)
class HistogramView:
    """``cumulative[i]`` observations were <= ``bounds[i]``; ``count`` includes the rest."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    total: float
    count: int


class Histogram:
    """Counts of observations per bucket; ``observe`` from any thread."""

    def __init__(self, bounds: tuple[float, ...] = COMMIT_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"bucket bounds must be distinct and increasing, got {bounds}")
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self._total = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count one observation (``value`` in seconds)."""
        k = bisect.bisect_left(self.bounds, value)  # first bound >= value: le semantics
        with self._lock:
            self._counts[k] += 1
            self._total += value

    def view(self) -> HistogramView:
        """A consistent copy: cumulative counts per bound, the sum and the count."""
        with self._lock:
            counts, total = list(self._counts), self._total
        cumulative, running = [], 0
        for c in counts[:-1]:
            running += c
            cumulative.append(running)
        return HistogramView(self.bounds, tuple(cumulative), total, running + counts[-1])
