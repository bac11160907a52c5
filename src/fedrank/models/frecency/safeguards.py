"""The safeguards of federated frecency (Mozilla paper Section 5.6): the constraint chains
applied to the frecency weights after every optimizer step, and the deployed server's
publication of integer weights. Built from the generic constraints of
:mod:`fedrank.optim.constraints`."""

from __future__ import annotations

import numpy as np

from fedrank.errors import DataFormatError
from fedrank.models.frecency.modern import MODERN_WEIGHT_NAMES
from fedrank.models.frecency.weights import (
    BUCKET_WEIGHT_SLICE,
    CUTOFF_SLICE,
    N_CLASSIC_WEIGHTS,
)
from fedrank.optim.constraints import (
    ConstraintChain,
    IncreasingByRaising,
    LowerBound,
    NonIncreasing,
    NonNegative,
    ShiftNonNegative,
    StepBound,
    StrictlyIncreasing,
)

#: The deployed server's sink: state, iteration and publication of the model.
SCALA_SINK = (
    "src/main/scala/com/mozilla/telemetry/learning/federated/"
    "FederatedLearningSearchOptimizerS3Sink.scala"
)

#: The largest and smallest value of a Scala/Java ``Int``.
_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)


def frecency_safeguards(max_change: float = 3.0) -> ConstraintChain:
    """Section 5.6 safeguards for the 22 classic frecency weights
    (:mod:`fedrank.models.frecency.weights` order).

    In order: every weight non-negative; bucket weights non-increasing from the newest bucket
    to the default bucket; the four bucket cutoffs (days) increasing by at least 1 day,
    starting at 0 or later; every weight within ``max_change`` of its previous value.
    """
    return ConstraintChain(
        NonNegative(),
        NonIncreasing(BUCKET_WEIGHT_SLICE),
        StrictlyIncreasing(CUTOFF_SLICE, min_gap=1.0, lower=0.0),
        StepBound(max_change),
        dim=N_CLASSIC_WEIGHTS,
    )


def modern_frecency_safeguards(max_change: float = 3.0) -> ConstraintChain:
    """Safeguards for the 5 modern frecency weights in :data:`MODERN_WEIGHT_NAMES` order
    ``[lowWeight, mediumWeight, highWeight, veryHighWeight, halfLifeDays]``.

    In order: all non-negative; ``halfLifeDays >= 1``; ``lowWeight <= mediumWeight <=
    highWeight <= veryHighWeight`` (non-increasing over the reversed indices); every weight
    within ``max_change`` of its previous value.
    """
    half_life = MODERN_WEIGHT_NAMES.index("halfLifeDays")
    return ConstraintChain(
        NonNegative(),
        LowerBound(1.0, [half_life]),
        NonIncreasing([3, 2, 1, 0]),
        StepBound(max_change),
        dim=len(MODERN_WEIGHT_NAMES),
    )


def deployed_frecency_safeguards(first_cutoff_lower: float | None = 1.0) -> ConstraintChain:
    """The safeguards of the study's deployed server for the 22 classic frecency weights
    (:mod:`fedrank.models.frecency.weights` order), applied after every Rprop step.

    ``applyConstraints`` in ``FederatedLearningRPropOptimizer.scala`` of
    ``mozilla/telemetry-streaming`` (revision 460154e), in its order:

    1. :class:`ShiftNonNegative` over all 22 weights: if any weight is negative, every
       weight is raised by minus the smallest one (a shift, not clipping);
    2. :class:`IncreasingByRaising` on the four bucket cutoffs, *after* the shift: first
       cutoff ``>= first_cutoff_lower`` (1 day; ``None`` reproduces the earlier revision
       5c9abf3, which had no such line), then each cutoff raised to at least the previous one
       plus 1 day. Values are only raised, so the shift's non-negativity is kept.

    Unlike the paper's Section 5.6 (:func:`frecency_safeguards`) there is no ordering of the
    bucket weights and no bound on the change per iteration: the Rprop step (at most 3) is
    bounded, but the shift and the cutoff ordering can then move weights further. The server
    keeps these doubles as its state and publishes them rounded (:func:`publish_integers`).
    """
    return ConstraintChain(
        ShiftNonNegative(),
        IncreasingByRaising(CUTOFF_SLICE, min_gap=1.0, lower=first_cutoff_lower),
        dim=N_CLASSIC_WEIGHTS,
    )


def publish_integers(params: np.ndarray) -> np.ndarray:
    """The model as the deployed server published it: each weight rounded to an integer.

    ``FederatedLearningSearchOptimizerS3Sink.scala`` (``mozilla/telemetry-streaming``)
    writes ``newWeights.map(math.round(_).toInt)`` to ``latest.json`` while its state keeps
    the unrounded doubles. Scala's ``math.round(Double)`` is Java's ``Math.round``: the
    nearest integer with ties rounded up, towards positive infinity (``0.5 -> 1``, ``2.5 ->
    3``, ``-0.5 -> 0``, ``-2.5 -> -2``), not numpy's ties-to-even ``rint``; computed exactly
    (``0.49999999999999994 -> 0``, as in Java 7 and later).

    Returns float64 integers of the shape of ``params`` (``-0.0`` written as ``0.0``, since an
    ``Int`` has no sign of zero); the input is not modified.

    Raises:
        DataFormatError: if a value is not finite, or rounds outside Scala's ``Int`` range
            ``[-2**31, 2**31 - 1]`` (where ``.toInt`` would silently wrap around).
    """
    x = np.asarray(params)
    if x.dtype.kind not in "fiub":
        raise DataFormatError(f"params must be numeric, got dtype {x.dtype}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise DataFormatError(
            "params must be finite to be published; a NaN or infinite weight means the "
            "optimization diverged"
        )
    nearest = np.rint(x)  # exact; ties go to even
    # x - nearest is exact (|x - nearest| <= 0.5); a tie rounded down must go up instead.
    rounded = np.where(x - nearest == 0.5, nearest + 1.0, nearest) + 0.0
    if rounded.size and (rounded.max() > _INT_MAX or rounded.min() < _INT_MIN):
        raise DataFormatError(
            f"a weight rounds to {rounded.max() if rounded.max() > _INT_MAX else rounded.min()}, "
            f"outside the Int range [{_INT_MIN}, {_INT_MAX}] of the published model; "
            "the weights diverged"
        )
    return rounded
