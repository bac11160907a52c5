"""Generic safeguards applied to the parameters after every optimizer step (Mozilla paper
Section 5.6); the frecency chains built from them are in
:mod:`fedrank.models.frecency.safeguards`.

The model is used by real users while it trains, so each iteration may only move it a little
and it must keep the meaning of its weights:

* "updates are bounded so that the model slowly converges": :class:`StepBound`;
* "the value of each time bucket weight is bounded to be smaller than the values of newer
  time buckets": :class:`NonIncreasing`;
* "we force all weights to be nonnegative": :class:`NonNegative`;
* ordered values with a minimum gap (the bucket cutoffs, in days):
  :class:`StrictlyIncreasing`.

The study's deployed server (Scala, ``mozilla/telemetry-streaming``) differs from that text;
:class:`ShiftNonNegative` and :class:`IncreasingByRaising` reproduce its rules.

Every constraint has ``project(params, previous) -> params`` (a feasible point near
``params``; ``previous`` are the parameters before the step) and ``holds(params, previous)``
(checked with the absolute tolerance :data:`TOLERANCE`). ``project`` leaves points for which
``holds`` is true unchanged and never mutates its inputs. :class:`ConstraintChain` applies
several in order.

Why a chain like the frecency one returns a point satisfying *all* its constraints, although
each projection only looks at its own: the order constraints project within the
non-negative orthant (averages and upward shifts of non-negative values stay non-negative),
and :class:`StepBound` comes last. Clipping is monotone: with ``x`` and the feasible
``previous`` both ordered, ``clip(x_k, p_k - m, p_k + m)`` is ordered the same way, and if
``x_{k+1} >= x_k + g`` and ``p_{k+1} >= p_k + g`` then the clipped values keep a gap of at
least ``g``; ``x >= 0`` and ``p >= 0`` give a clipped value ``>= 0``. Rounding adds errors of
the order of ``ulp(|previous| + max_change)``, far below :data:`TOLERANCE` for weights of
realistic size (|previous| + max_change below about 1e6).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from fedrank.core.protocols import Constraint
from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim.serialization import check_hyperparameter

#: Absolute tolerance of the ``holds`` checks (the deployed server's rules, which have no
#: tolerance, check exactly what their ``project`` enforces).
TOLERANCE = 1e-9

Indices = slice | Sequence[int] | np.ndarray | None


def _store_indices(indices: Indices, *, ordered: bool) -> slice | tuple[int, ...] | None:
    """Validate ``indices`` at construction; sequences become tuples of ints."""
    if indices is None or isinstance(indices, slice):
        return indices
    arr = np.asarray(indices)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ConfigError(
            f"indices must be None, a slice or a 1-D sequence of ints, got {indices!r}"
        )
    out = tuple(int(i) for i in arr)
    if len(set(out)) != len(out):
        raise ConfigError(f"indices must not repeat, got {out}")
    if ordered and len(out) < 2:
        raise ConfigError(f"an order constraint needs at least 2 indices, got {out}")
    return out


def _resolve(indices: slice | tuple[int, ...] | None, dim: int) -> np.ndarray:
    """Integer positions of ``indices`` in a vector of length ``dim``."""
    if indices is None:
        return np.arange(dim)
    if isinstance(indices, slice):
        stop = indices.stop
        if stop is not None and stop > dim:
            raise ConfigError(
                f"constraint indices {indices} need a parameter vector of length >= {stop}, "
                f"got length {dim}"
            )
        return np.arange(dim)[indices]
    positions = np.asarray(indices, dtype=np.int64)
    if positions.size and (positions.max() >= dim or positions.min() < -dim):
        raise ConfigError(
            f"constraint indices {indices} are out of range for parameters of length {dim}"
        )
    return positions


def _check_pair(params: np.ndarray, previous: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(params, previous)`` as float64 vectors of the same length, finite."""
    p = np.asarray(params, dtype=np.float64)
    q = np.asarray(previous, dtype=np.float64)
    if p.ndim != 1:
        raise ConfigError(f"params must be a 1-D vector, got shape {p.shape}")
    if q.shape != p.shape:
        raise ConfigError(f"previous must have the shape of params {p.shape}, got {q.shape}")
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
        raise DataFormatError(
            "params and previous must be finite; a NaN or infinite proposal cannot be "
            "projected onto the safeguards"
        )
    return p, q


def _indices_repr(indices: slice | tuple[int, ...] | None) -> str:
    if isinstance(indices, slice):
        return f"slice({indices.start}, {indices.stop}, {indices.step})"
    return repr(indices)


def isotonic_nonincreasing(values: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``values`` onto non-increasing sequences (pool adjacent
    violators, O(K)). The output is exactly non-increasing in floating point and stays within
    ``[min(values), max(values)]`` (no overflow on huge inputs)."""
    y = np.asarray(values, dtype=np.float64)
    means: list[float] = []
    weights: list[float] = []
    lengths: list[int] = []
    for v in y.tolist():
        means.append(v)
        weights.append(1.0)
        lengths.append(1)
        while len(means) > 1 and means[-2] < means[-1]:
            hi, w_hi, n_hi = means.pop(), weights.pop(), lengths.pop()
            lo, w_lo = means[-1], weights[-1]
            total = w_lo + w_hi
            pooled = lo * (w_lo / total) + hi * (w_hi / total)
            means[-1] = min(max(pooled, lo), hi)  # a convex combination, guarded against rounding
            weights[-1] = total
            lengths[-1] += n_hi
    return np.repeat(np.array(means, dtype=np.float64), lengths)


def isotonic_nondecreasing(values: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``values`` onto non-decreasing sequences."""
    return -isotonic_nonincreasing(-np.asarray(values, dtype=np.float64))


class StepBound:
    """``|params - previous| <= max_change`` on ``indices`` (all weights by default).

    Section 5.6: "updates are bounded so that the model slowly converges to an optimum".
    ``project`` clips each weight into ``[previous - max_change, previous + max_change]``.
    """

    def __init__(self, max_change: float = 3.0, indices: Indices = None) -> None:
        self.max_change = check_hyperparameter("max_change", max_change, low=0.0)
        self.indices = _store_indices(indices, ordered=False)

    def __repr__(self) -> str:
        return f"StepBound(max_change={self.max_change}, indices={_indices_repr(self.indices)})"

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, q = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        out = p.copy()
        out[idx] = np.clip(p[idx], q[idx] - self.max_change, q[idx] + self.max_change)
        return out

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        p, q = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        with np.errstate(over="ignore"):  # a difference of huge values is inf: still right
            return bool(np.all(np.abs(p[idx] - q[idx]) <= self.max_change + TOLERANCE))


class LowerBound:
    """``params[indices] >= lower``; ``project`` raises values below it to ``lower``."""

    def __init__(self, lower: float, indices: Indices = None) -> None:
        self.lower = check_hyperparameter("lower", lower, low=-np.inf)
        self.indices = _store_indices(indices, ordered=False)

    def __repr__(self) -> str:
        return f"LowerBound(lower={self.lower}, indices={_indices_repr(self.indices)})"

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, _ = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        out = p.copy()
        out[idx] = np.maximum(p[idx], self.lower)
        return out

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        p, _ = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        return bool(np.all(p[idx] >= self.lower - TOLERANCE))


class NonNegative(LowerBound):
    """``params[indices] >= 0`` (Section 5.6: "visits can never be worth a negative number of
    points")."""

    def __init__(self, indices: Indices = None) -> None:
        super().__init__(0.0, indices)

    def __repr__(self) -> str:
        return f"NonNegative(indices={_indices_repr(self.indices)})"


class NonIncreasing:
    """``params[indices]`` non-increasing in the order given (newest bucket first).

    Section 5.6: "the value of each time bucket weight is bounded to be smaller than the values
    of newer time buckets". ``project`` is the exact Euclidean projection (isotonic regression
    by pool adjacent violators). Pass the indices reversed for a non-decreasing constraint.
    """

    def __init__(self, indices: Indices) -> None:
        if indices is None:
            raise ConfigError("NonIncreasing needs the indices of the ordered weights")
        self.indices = _store_indices(indices, ordered=True)

    def __repr__(self) -> str:
        return f"NonIncreasing(indices={_indices_repr(self.indices)})"

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, _ = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        out = p.copy()
        if not self._holds(p, idx):
            out[idx] = isotonic_nonincreasing(p[idx])
        return out

    @staticmethod
    def _holds(p: np.ndarray, idx: np.ndarray) -> bool:
        with np.errstate(over="ignore"):  # a difference of huge values is +-inf: still right
            return bool(np.all(np.diff(p[idx]) <= TOLERANCE))

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        p, _ = _check_pair(params, previous)
        return self._holds(p, _resolve(self.indices, p.size))


class StrictlyIncreasing:
    """``params[indices]`` increasing with gaps ``>= min_gap`` and the first ``>= lower``.

    Used for the bucket cutoffs in days (gap 1 day, lower 0). ``project`` computes the exact
    Euclidean projection in real arithmetic: substituting ``y_k = x_k - k * min_gap`` turns
    the feasible set into non-decreasing sequences with ``y_0 >= lower``, whose projection is
    the isotonic regression clipped below at ``lower``; shifting back gives the result. A
    final pass then nudges values by a few ulps where rounding left a gap a hair short (this
    only matters for huge magnitudes, where ``x + min_gap`` rounds to ``x``). Feasible points
    are returned unchanged. ``min_gap`` must lie in (0, 1e12] and ``lower`` in [-1e12, 1e12],
    which keeps the shifted values finite for every finite input.
    """

    def __init__(self, indices: Indices, min_gap: float = 1.0, lower: float = 0.0) -> None:
        if indices is None:
            raise ConfigError("StrictlyIncreasing needs the indices of the ordered weights")
        self.indices = _store_indices(indices, ordered=True)
        self.min_gap = check_hyperparameter("min_gap", min_gap, low=0.0, high=1e12)
        self.lower = check_hyperparameter("lower", lower, low=-1e12, high=1e12, low_inclusive=True)

    def __repr__(self) -> str:
        return (
            f"StrictlyIncreasing(indices={_indices_repr(self.indices)}, min_gap={self.min_gap}, "
            f"lower={self.lower})"
        )

    def _holds(self, x: np.ndarray) -> bool:
        with np.errstate(over="ignore"):  # a difference of huge values is +-inf: still right
            gaps_ok = bool(np.all(np.diff(x) >= self.min_gap - TOLERANCE))
        return gaps_ok and bool(x[0] >= self.lower - TOLERANCE)

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        p, _ = _check_pair(params, previous)
        return self._holds(p[_resolve(self.indices, p.size)])

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, _ = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        out = p.copy()
        x = p[idx]
        if self._holds(x):
            return out
        offsets = self.min_gap * np.arange(x.size, dtype=np.float64)
        y = np.maximum(isotonic_nondecreasing(x - offsets), self.lower)
        out[idx] = self._repair(y + offsets)
        return out

    def _repair(self, z: np.ndarray) -> np.ndarray:
        """Make the float gaps and lower bound hold exactly (moves values by a few ulps)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self._repair_unchecked(z.copy(), self.min_gap)

    def _repair_unchecked(self, z: np.ndarray, gap: float) -> np.ndarray:
        z[0] = max(z[0], self.lower)
        for k in range(1, z.size):
            need = z[k - 1] + gap
            while need - z[k - 1] < gap:
                need = np.nextafter(need, np.inf)
            z[k] = max(z[k], need)
        if np.all(np.isfinite(z)):
            return z
        # The values ran past the largest float: rebuild downward from the top instead.
        z[-1] = min(z[-1], np.finfo(np.float64).max)
        for k in range(z.size - 2, -1, -1):
            need = z[k + 1] - gap
            while z[k + 1] - need < gap:
                need = np.nextafter(need, -np.inf)
            z[k] = min(z[k], need)
        return z


#: The deployed server's Rprop step and safeguards (``mozilla/telemetry-streaming``, commit
#: 460154e).
SCALA_OPTIMIZER = (
    "src/main/scala/com/mozilla/telemetry/learning/federated/FederatedLearningRPropOptimizer.scala"
)


def _java_max(a: float, b: float) -> float:
    """Java's ``Math.max`` on two non-NaN doubles: the larger one, and ``+0.0`` for
    ``max(-0.0, +0.0)`` (Python's ``max`` would return its first argument)."""
    if a == b == 0.0:
        return a + b  # -0.0 only if both are -0.0
    return a if a > b else b


class ShiftNonNegative:
    """All weights in ``indices`` shifted up together until the smallest is 0.

    The deployed server's non-negativity rule, instead of the clipping of
    :class:`NonNegative` (``applyConstraints`` in ``FederatedLearningRPropOptimizer.scala``
    of ``mozilla/telemetry-streaming``, revisions 5c9abf3 and 460154e)::

        val nonNegativeWeights = (weights.min match {
          case min if min < 0 => weights.map(_ - min)
          case _ => weights
        }).toBuffer

    If the smallest value ``m`` over ``indices`` (all 22 weights on the server) is negative,
    ``project`` subtracts ``m`` from every value in ``indices``, not only from the negative
    one; otherwise it returns the values unchanged. In floating point this is bit for bit the
    Scala result, and the smallest value becomes exactly ``0.0``.

    ``holds`` is exact (every value ``>= 0``, no :data:`TOLERANCE`): the server shifts for
    any negative value, however small, so a tolerance would let ``project`` move points that
    ``holds`` calls feasible. Projected points satisfy it exactly.

    Raises :class:`DataFormatError` when the shift overflows float64 (values apart by more
    than about 1.8e308), where the Scala code would produce infinities.
    """

    def __init__(self, indices: Indices = None) -> None:
        self.indices = _store_indices(indices, ordered=False)

    def __repr__(self) -> str:
        return f"ShiftNonNegative(indices={_indices_repr(self.indices)})"

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, _ = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        out = p.copy()
        if idx.size == 0:
            return out
        low = p[idx].min()
        if low < 0:
            with np.errstate(over="ignore"):
                shifted = p[idx] - low
            if not np.all(np.isfinite(shifted)):
                raise DataFormatError(
                    f"shifting the weights up by {-low!r} to make them non-negative overflows "
                    "float64; weights this large mean the optimization diverged, restart it "
                    "from a saved model"
                )
            out[idx] = shifted
        return out

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        p, _ = _check_pair(params, previous)
        return bool(np.all(p[_resolve(self.indices, p.size)] >= 0.0))


class IncreasingByRaising:
    """``params[indices]`` increasing with gaps ``>= min_gap`` (and the first ``>= lower``),
    enforced by raising values in one forward pass.

    The deployed server's ordering of the four bucket cutoffs (``applyConstraints`` in
    ``FederatedLearningRPropOptimizer.scala`` of ``mozilla/telemetry-streaming``, revision
    460154e; revision 5c9abf3 lacks the first line, i.e. ``lower=None``)::

        nonNegativeWeights(0) = math.max(nonNegativeWeights(0), 1)
        nonNegativeWeights(1) = math.max(nonNegativeWeights(1), nonNegativeWeights(0) + 1)
        nonNegativeWeights(2) = math.max(nonNegativeWeights(2), nonNegativeWeights(1) + 1)
        nonNegativeWeights(3) = math.max(nonNegativeWeights(3), nonNegativeWeights(2) + 1)

    So ``x_0 <- max(x_0, lower)`` and then ``x_k <- max(x_k, x_{k-1} + min_gap)`` in index
    order, each using the already raised predecessor: values are only ever raised, never
    lowered, and colliding values are pushed apart upward (``[7, 7, 7, 7]`` becomes ``[7, 8,
    9, 10]``; ``[5, 3, 4, 10]`` becomes ``[5, 6, 7, 10]``). This is not the Euclidean
    projection of :class:`StrictlyIncreasing` (which would lower the first values too).

    The result is bit for bit the Scala one, except where ``x_{k-1} + min_gap`` rounds to a
    gap more than :data:`TOLERANCE` short of ``min_gap`` (magnitudes above about 1e7, where
    the float spacing exceeds it; the Scala code would leave the short gap): there the value
    is raised by a few ulps more, so the gap really is ``min_gap``. ``holds`` is true exactly
    when ``project`` would return the values unchanged, and it implies gaps of at least
    ``min_gap - TOLERANCE``. Raises :class:`DataFormatError` when the values would pass the
    largest float.

    Args:
        indices: the ordered weights (at least 2), in increasing order.
        min_gap: the smallest gap, in (0, 1e12] (default 1, one day between cutoffs).
        lower: the smallest first value, in [-1e12, 1e12], or ``None`` for no bound (default).
    """

    def __init__(self, indices: Indices, min_gap: float = 1.0, lower: float | None = None) -> None:
        if indices is None:
            raise ConfigError("IncreasingByRaising needs the indices of the ordered weights")
        self.indices = _store_indices(indices, ordered=True)
        self.min_gap = check_hyperparameter("min_gap", min_gap, low=0.0, high=1e12)
        self.lower = (
            None
            if lower is None
            else check_hyperparameter("lower", lower, low=-1e12, high=1e12, low_inclusive=True)
        )

    def __repr__(self) -> str:
        return (
            f"IncreasingByRaising(indices={_indices_repr(self.indices)}, "
            f"min_gap={self.min_gap}, lower={self.lower})"
        )

    def _need(self, before: float) -> float:
        """The smallest value allowed after ``before``: ``before + min_gap`` as Scala
        computes it, nudged up by ulps only where rounding made the gap too short."""
        need = before + self.min_gap
        if need - before < self.min_gap - TOLERANCE:
            while need - before < self.min_gap:
                need = math.nextafter(need, math.inf)
        return need

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, _ = _check_pair(params, previous)
        idx = _resolve(self.indices, p.size)
        z = p[idx].tolist()
        if self.lower is not None:
            z[0] = _java_max(z[0], self.lower)
        for k in range(1, len(z)):
            need = self._need(z[k - 1])
            if not math.isfinite(need):
                raise DataFormatError(
                    f"ordering the weights at positions {idx.tolist()} with gaps of "
                    f"{self.min_gap} would exceed the largest float; the weights diverged, "
                    "restart from a saved model"
                )
            z[k] = _java_max(z[k], need)
        out = p.copy()
        out[idx] = z
        return out

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        p, _ = _check_pair(params, previous)
        z = p[_resolve(self.indices, p.size)].tolist()
        if self.lower is not None and not z[0] >= self.lower:
            return False
        return all(z[k] >= self._need(z[k - 1]) for k in range(1, len(z)))


class ConstraintChain:
    """Applies constraints in order; ``holds`` when every one of them holds.

    Put :class:`StepBound` last: the projections before it keep earlier constraints (see the
    module docstring), and clipping towards a feasible ``previous`` keeps them all.

    Args:
        *constraints: the constraints, applied in this order.
        dim: if given, the parameter length the chain is meant for; other lengths raise
            :class:`ConfigError`.
    """

    def __init__(self, *constraints: Constraint, dim: int | None = None) -> None:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise ConfigError(f"dim must be a positive integer or None, got {dim!r}")
        self.dim = dim
        for c in constraints:
            if not isinstance(c, Constraint):
                raise ConfigError(
                    f"{c!r} is not a constraint (it needs project(params, previous) and "
                    "holds(params, previous))"
                )
        self.constraints: tuple[Constraint, ...] = tuple(constraints)

    def __repr__(self) -> str:
        parts = [repr(c) for c in self.constraints]
        if self.dim is not None:
            parts.append(f"dim={self.dim}")
        return f"ConstraintChain({', '.join(parts)})"

    def _check(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        p, _ = _check_pair(params, previous)
        if self.dim is not None and p.size != self.dim:
            raise ConfigError(f"this constraint chain is for {self.dim} parameters, got {p.size}")
        return p

    def __iter__(self) -> Iterator[Constraint]:
        return iter(self.constraints)

    def __len__(self) -> int:
        return len(self.constraints)

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        out = self._check(params, previous).copy()
        for c in self.constraints:
            out = c.project(out, previous)
        return out

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        return not self.violated(params, previous)

    def violated(self, params: np.ndarray, previous: np.ndarray) -> list[Constraint]:
        """The constraints that ``params`` does not satisfy (empty when all hold)."""
        self._check(params, previous)
        return [c for c in self.constraints if not c.holds(params, previous)]
