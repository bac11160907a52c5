"""FedAvg weighted mean of client updates (paper Section 3.1).

The server combines the updates ``H_i`` of the ``K`` selected clients, weighting each by its
number of data points ``n_i``::

    H = sum_i n_i H_i / sum_i n_i

As a monoid (docs/architecture.md) the state is the running weighted sum, the total
weight and the number of messages; ``merge`` adds states, so partial sums from proxies or
cluster partitions combine into the same mean. Floating-point addition is not associative,
so different orders agree to rounding (relative error around 1e-15), not bit for bit.

This module also holds the input checks shared by the vector aggregators.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.core.message import Message, MessageBatch
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError


def check_dim(dim: int) -> int:
    """Validate an aggregator dimension."""
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ConfigError(f"dim must be a positive integer (the update length), got {dim!r}")
    return int(dim)


def check_update(update: np.ndarray, dim: int) -> np.ndarray:
    """``update`` as a finite vector of length ``dim`` (not copied)."""
    vec = np.asarray(update)
    if vec.shape != (dim,):
        raise ConfigError(f"expected an update of shape ({dim},), got shape {vec.shape}")
    if vec.dtype.kind not in "fiub":
        raise DataFormatError(f"update must be numeric, got dtype {vec.dtype}")
    if not np.all(np.isfinite(vec)):
        raise DataFormatError(
            "update contains NaN or infinite values; drop or repair that client's message "
            "before aggregating"
        )
    return vec


def check_weight(n: float) -> float:
    """A message weight ``n_i``: finite and non-negative."""
    w = float(n)
    if not np.isfinite(w) or w < 0:
        raise DataFormatError(f"message weight n must be finite and >= 0, got {n!r}")
    return w


def vector_columns(batch: MessageBatch, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch's ``(vector, weight)`` columns, validated by :func:`check_batch`; a batch of
    other messages (e.g. ES seeds and metrics) raises."""
    if batch.vector is None or batch.weight is None:
        if batch.size == 0:
            return np.zeros((0, dim)), np.zeros(0)
        used = [f for f in MessageBatch.FIELDS if getattr(batch, f) is not None]
        raise DataFormatError(
            f"this aggregator folds vector messages (columns vector and weight); the batch "
            f"has columns {used}"
        )
    return check_batch(batch.vector, batch.weight, dim)


def check_batch(updates: np.ndarray, n: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(updates, n)`` validated as a finite ``(C, dim)`` matrix and ``(C,)`` weights."""
    mat = np.asarray(updates)
    if mat.ndim != 2 or mat.shape[1] != dim:
        raise ConfigError(f"expected updates of shape (C, {dim}), got shape {mat.shape}")
    if mat.dtype.kind not in "fiub":
        raise DataFormatError(f"updates must be numeric, got dtype {mat.dtype}")
    weights = np.asarray(n)
    if weights.shape != (mat.shape[0],):
        raise ConfigError(
            f"expected n of shape ({mat.shape[0]},) (one weight per update row), got shape "
            f"{weights.shape}"
        )
    if weights.dtype.kind not in "fiub":
        raise DataFormatError(f"n must be numeric, got dtype {weights.dtype}")
    if not np.all(np.isfinite(mat)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(mat), axis=1))[0])
        raise DataFormatError(
            f"updates row {bad} contains NaN or infinite values; drop or repair those clients "
            "before aggregating"
        )
    if weights.size and (not np.all(np.isfinite(weights)) or weights.min() < 0):
        raise DataFormatError("every weight in n must be finite and >= 0")
    return mat, weights


class WeightedMeanState(NamedTuple):
    """Partial aggregate of :class:`WeightedMean`.

    Attributes:
        weighted_sum: ``sum_i n_i H_i``, float64 of shape ``(dim,)``.
        total_weight: ``sum_i n_i``.
        count: number of messages folded in.
    """

    weighted_sum: npt.NDArray[np.float64]
    total_weight: float
    count: int


class WeightedMean:
    """FedAvg weighted mean ``sum_i n_i H_i / sum_i n_i`` (paper Section 3.1).

    Args:
        dim: length of the update vectors.

    ``finalize`` of a state with no weight (no messages, or only ``n = 0`` messages) returns
    ``zeros(dim)``: no information means no step.
    """

    def __init__(self, dim: int) -> None:
        self.dim = check_dim(dim)

    def __repr__(self) -> str:
        return f"WeightedMean(dim={self.dim})"

    def zero(self) -> WeightedMeanState:
        """The empty aggregate."""
        return WeightedMeanState(np.zeros(self.dim, dtype=np.float64), 0.0, 0)

    def _check_state(self, state: WeightedMeanState) -> None:
        if state.weighted_sum.shape != (self.dim,):
            raise ConfigError(
                f"expected a state of dimension {self.dim}, got shape {state.weighted_sum.shape}"
            )

    def check_consistent(self, state: WeightedMeanState) -> None:
        """Refuse a state no sequence of messages can produce: non-finite sums, a negative
        total weight or count, or weight without messages. Raises
        :class:`~fedrank.errors.DataFormatError`."""
        self._check_state(state)
        if not (np.isfinite(state.total_weight) and np.isfinite(state.weighted_sum).all()):
            raise DataFormatError("the state holds non-finite values")
        if state.count < 0 or state.total_weight < 0:
            raise DataFormatError("the total weight and the count must be >= 0")
        if state.count == 0 and (state.total_weight or np.any(state.weighted_sum)):
            raise DataFormatError("a state of 0 messages must be all zeros")

    def accumulate(self, state: WeightedMeanState, message: Message) -> WeightedMeanState:
        """Fold one message into ``state``."""
        self._check_state(state)
        vec = check_update(message.update, self.dim).astype(np.float64, copy=False)
        w = check_weight(message.n)
        return WeightedMeanState(
            state.weighted_sum + w * vec, state.total_weight + w, state.count + 1
        )

    def accumulate_batch(self, state: WeightedMeanState, batch: MessageBatch) -> WeightedMeanState:
        """Fold ``C`` messages at once: rows of ``batch.vector`` (``(C, dim)``) with weights
        ``batch.weight`` (``(C,)``). Equals accumulating the rows one by one, up to
        rounding."""
        self._check_state(state)
        mat, weights = vector_columns(batch, self.dim)
        w = weights.astype(np.float64, copy=False)
        return WeightedMeanState(
            state.weighted_sum + w @ mat.astype(np.float64, copy=False),
            state.total_weight + float(w.sum()),
            state.count + int(mat.shape[0]),
        )

    def merge(self, a: WeightedMeanState, b: WeightedMeanState) -> WeightedMeanState:
        """Combine two partial aggregates."""
        self._check_state(a)
        self._check_state(b)
        return WeightedMeanState(
            a.weighted_sum + b.weighted_sum, a.total_weight + b.total_weight, a.count + b.count
        )

    def finalize(self, state: WeightedMeanState) -> np.ndarray:
        """The weighted mean (float64, shape ``(dim,)``); zeros when the total weight is 0."""
        self._check_state(state)
        if state.total_weight == 0:
            return np.zeros(self.dim, dtype=np.float64)
        return state.weighted_sum / state.total_weight

    def state_to_json(self, state: WeightedMeanState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check_state(state)
        return encode_state(state, "WeightedMean", settings={"dim": self.dim})

    def state_from_json(self, data: dict[str, Any]) -> WeightedMeanState:
        """Inverse of :meth:`state_to_json`."""
        state = decode_state(data, WeightedMeanState, "WeightedMean", settings={"dim": self.dim})
        self._check_state(state)
        return state
