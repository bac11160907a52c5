"""Mergeable aggregators: commutative monoids over client messages (ARCHITECTURE.md, Sec. 2).

* :class:`WeightedMean`: FedAvg weighted mean (paper Section 3.1).
* :class:`GatedMean`: weighted mean that zeroes coordinates not significantly non-zero.
* :class:`SignVote`: most common sign per weight (paper Section 5.3), optionally gated.
* :class:`MetricMean`: weighted mean of the metrics that travel with messages.

Each has ``zero`` / ``accumulate`` / ``merge`` / ``finalize``, a vectorized
``accumulate_batch`` for simulations with thousands of clients per call, and exact JSON state
round trips.
"""

from fedrank.aggregators.gated_mean import GatedMean, GatedMeanState
from fedrank.aggregators.mean import WeightedMean, WeightedMeanState
from fedrank.aggregators.metrics import MetricMean, MetricMeanState
from fedrank.aggregators.sign_vote import SignVote, SignVoteState

__all__ = [
    "GatedMean",
    "GatedMeanState",
    "MetricMean",
    "MetricMeanState",
    "SignVote",
    "SignVoteState",
    "WeightedMean",
    "WeightedMeanState",
]
