"""Mergeable aggregators: commutative monoids over client messages (docs/architecture.md).

* :class:`WeightedMean`: FedAvg weighted mean (paper Section 3.1).
* :class:`GatedMean`: weighted mean that zeroes coordinates not significantly non-zero.
* :class:`SignVote`: most common sign per weight (paper Section 5.3), optionally gated.
* :class:`MetricMean`: weighted mean of the metrics that travel with messages.
* :class:`TrimmedMean`, :class:`CoordinateMedian`: coordinate-wise robust statistics (Yin et
  al. 2018), unweighted; exactly mergeable, their state keeps every client's values.
* :class:`NormBounded`: clips every update to a fixed or adaptive L2 bound (Andrew et al.
  2021) before an inner aggregator folds it in.

Each has ``zero`` / ``accumulate`` / ``merge`` / ``finalize``, a vectorized
``accumulate_batch`` for simulations with thousands of clients per call, and exact JSON state
round trips. Every one merges exactly -- states from any order of messages or any tree of
proxies give the same aggregate (to float summation order for the sums; bit for bit for the
integer votes and the robust statistics); none approximates.
"""

from fedrank.aggregators.gated_mean import GatedMean, GatedMeanState
from fedrank.aggregators.mean import WeightedMean, WeightedMeanState
from fedrank.aggregators.metrics import MetricMean, MetricMeanState
from fedrank.aggregators.norm_bounded import NormBounded, NormBoundedState
from fedrank.aggregators.robust import CoordinateMedian, SortedColumnsState, TrimmedMean
from fedrank.aggregators.sign_vote import SignVote, SignVoteState

__all__ = [
    "CoordinateMedian",
    "GatedMean",
    "GatedMeanState",
    "MetricMean",
    "MetricMeanState",
    "NormBounded",
    "NormBoundedState",
    "SignVote",
    "SignVoteState",
    "SortedColumnsState",
    "TrimmedMean",
    "WeightedMean",
    "WeightedMeanState",
]
