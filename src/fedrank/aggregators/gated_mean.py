"""Weighted mean with a per-coordinate significance gate (beyond the paper, Section 5.3).

Rprop (Eq. 1-2) steps every weight by its full step size in the direction of the sign of
the aggregate, however weak the evidence for that sign. A weight that hardly affects any
ranking (in the simulation: the bonus of a rare visit type) then gets an aggregate whose
sign is noise, and Rprop random-walks it away from its start (measured in
``docs/frecency.md``: up to 20 points in 40 iterations on the ``paper`` preset, where the
defaults are optimal). The gate keeps such weights still: coordinate ``j`` of the weighted
mean is reported only where

    |mean_j| > z * se_j,   se_j = sqrt(var_j / n_eff),

``var_j`` the ``n_i``-weighted variance of the clients' updates and ``n_eff = (sum n_i)^2 /
sum n_i^2`` the effective number of reports; elsewhere it is 0, which Rprop treats as "no
gradient": the weight and its step size stay (Sec. 5.3). ``z = 2`` is a two-sided test at
about 5% per coordinate, ``z = 1`` (the frecency ``paper`` setting's, which keeps learning
under sign-flipping clients: :data:`fedrank.systems.frecency.config.PAPER_SIGNIFICANCE_Z`) at
about 32%; ``z = 0`` gives :class:`~fedrank.aggregators.mean.WeightedMean`.

The state holds sums only (``sum n_i H_i``, ``sum n_i H_i^2``, ``sum n_i``, ``sum n_i^2``),
so it merges like the plain mean, across proxies or cluster partitions.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.aggregators.mean import check_dim, check_update, check_weight, vector_columns
from fedrank.core.message import Message, MessageBatch
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError


class GatedMeanState(NamedTuple):
    """Partial aggregate of :class:`GatedMean`: float64 ``(dim,)`` sums ``sum n_i H_i`` and
    ``sum n_i H_i^2``, the weight sums ``sum n_i`` and ``sum n_i^2``, and the message count."""

    weighted_sum: npt.NDArray[np.float64]
    weighted_sq_sum: npt.NDArray[np.float64]
    total_weight: float
    total_sq_weight: float
    count: int


class GatedMean:
    """Weighted mean ``sum n_i H_i / sum n_i`` with coordinates that are not significantly
    non-zero (``|mean| <= z * se``) set to 0.

    Args:
        dim: length of the update vectors.
        z: gate threshold in standard errors (>= 0; default 2).

    With fewer than two messages there is no variance to judge by and the mean is returned
    ungated; the empty state finalizes to ``zeros(dim)``.
    """

    def __init__(self, dim: int, z: float = 2.0) -> None:
        self.dim = check_dim(dim)
        if not (np.isfinite(z) and z >= 0):
            raise ConfigError(f"z (the gate, in standard errors) must be finite and >= 0, got {z}")
        self.z = float(z)

    def __repr__(self) -> str:
        return f"GatedMean(dim={self.dim}, z={self.z:g})"

    def zero(self) -> GatedMeanState:
        """The empty aggregate."""
        return GatedMeanState(np.zeros(self.dim), np.zeros(self.dim), 0.0, 0.0, 0)

    def _check_state(self, state: GatedMeanState) -> None:
        for arr in (state.weighted_sum, state.weighted_sq_sum):
            if arr.shape != (self.dim,):
                raise ConfigError(
                    f"expected a state of dimension {self.dim}, got shape {arr.shape}"
                )

    def check_consistent(self, state: GatedMeanState) -> None:
        """Refuse a state no sequence of messages can produce (e.g. a proxy's forged merge):
        non-finite sums, negative weights or second moments, ``sum n_i^2`` outside
        ``[(sum n_i)^2 / count, (sum n_i)^2]``, or a coordinate whose ``(sum n_i H_i)^2``
        exceeds ``sum n_i * sum n_i H_i^2`` (Cauchy-Schwarz). Raises
        :class:`~fedrank.errors.DataFormatError` naming the broken rule."""
        self._check_state(state)
        w, w2, count = state.total_weight, state.total_sq_weight, state.count
        arrays = (state.weighted_sum, state.weighted_sq_sum)
        if not (np.isfinite([w, w2]).all() and all(np.isfinite(a).all() for a in arrays)):
            raise DataFormatError("the state holds non-finite values")
        if count < 0 or w < 0 or w2 < 0 or np.any(state.weighted_sq_sum < 0):
            raise DataFormatError("weights, squared weights and second moments must be >= 0")
        slack = 1e-9
        if count == 0 and (w or w2 or np.any(state.weighted_sum) or np.any(state.weighted_sq_sum)):
            raise DataFormatError("a state of 0 messages must be all zeros")
        if count and not (w * w / count * (1 - slack) <= w2 <= w * w * (1 + slack)):
            raise DataFormatError(
                f"sum of squared weights {w2:g} is impossible for total weight {w:g} over "
                f"{count} messages (needs total^2 / count <= it <= total^2)"
            )
        bound = w * state.weighted_sq_sum * (1 + slack) + 1e-300
        if np.any(state.weighted_sum**2 > bound):
            raise DataFormatError(
                "a coordinate's weighted sum is larger than its weights and second moment allow"
            )

    def accumulate(self, state: GatedMeanState, message: Message) -> GatedMeanState:
        """Fold one message into ``state``."""
        self._check_state(state)
        vec = check_update(message.update, self.dim).astype(np.float64, copy=False)
        w = check_weight(message.n)
        return GatedMeanState(
            state.weighted_sum + w * vec,
            state.weighted_sq_sum + w * vec * vec,
            state.total_weight + w,
            state.total_sq_weight + w * w,
            state.count + 1,
        )

    def accumulate_batch(self, state: GatedMeanState, batch: MessageBatch) -> GatedMeanState:
        """Fold ``C`` messages at once (rows of ``batch.vector``, weights ``batch.weight``);
        equal to accumulating the rows one by one, up to rounding."""
        self._check_state(state)
        mat, weights = vector_columns(batch, self.dim)
        mat = mat.astype(np.float64, copy=False)
        w = weights.astype(np.float64, copy=False)
        return GatedMeanState(
            state.weighted_sum + w @ mat,
            state.weighted_sq_sum + w @ (mat * mat),
            state.total_weight + float(w.sum()),
            state.total_sq_weight + float(w @ w),
            state.count + int(mat.shape[0]),
        )

    def merge(self, a: GatedMeanState, b: GatedMeanState) -> GatedMeanState:
        """Combine two partial aggregates."""
        self._check_state(a)
        self._check_state(b)
        return GatedMeanState(
            a.weighted_sum + b.weighted_sum,
            a.weighted_sq_sum + b.weighted_sq_sum,
            a.total_weight + b.total_weight,
            a.total_sq_weight + b.total_sq_weight,
            a.count + b.count,
        )

    def standard_error(self, state: GatedMeanState) -> np.ndarray:
        """Per-coordinate standard error of the weighted mean (inf with < 2 messages)."""
        self._check_state(state)
        if state.count < 2 or state.total_weight == 0:
            return np.full(self.dim, np.inf)
        mean = state.weighted_sum / state.total_weight
        var = np.maximum(state.weighted_sq_sum / state.total_weight - mean * mean, 0.0)
        n_eff = state.total_weight**2 / state.total_sq_weight
        return np.sqrt(var / n_eff)

    def finalize(self, state: GatedMeanState) -> np.ndarray:
        """The gated weighted mean (float64, shape ``(dim,)``)."""
        self._check_state(state)
        if state.total_weight == 0:
            return np.zeros(self.dim, dtype=np.float64)
        mean = state.weighted_sum / state.total_weight
        if state.count < 2:
            return mean
        return np.where(np.abs(mean) > self.z * self.standard_error(state), mean, 0.0)

    def state_to_json(self, state: GatedMeanState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check_state(state)
        return encode_state(state, "GatedMean", settings={"dim": self.dim})

    def state_from_json(self, data: dict[str, Any]) -> GatedMeanState:
        """Inverse of :meth:`state_to_json`."""
        state = decode_state(data, GatedMeanState, "GatedMean", settings={"dim": self.dim})
        self._check_state(state)
        return state
