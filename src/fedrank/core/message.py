"""The messages a client sends to the server.

:class:`MessageBatch` is the one form many messages take between parsing and aggregation,
everywhere: the service's workloads parse JSON and binary requests into it, every
simulator builds it from its clients' arrays, and a strategy folds it into its aggregator
(:meth:`fedrank.strategies.base.Strategy.accumulate`) in one vectorized call.

A :class:`Message` carries the update vector (full precision, or a compressed form such as signs),
the number of data points ``n`` it was computed from (the FedAvg weight ``n_i``), the model
version it was computed against, and metrics that travel with it (loss, characters typed,
selected rank, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedrank.errors import DataFormatError


@dataclass(frozen=True)
class Message:
    """One client report.

    Attributes:
        update: update vector (for gradients: the direction of steepest *ascent* of the loss).
        n: number of data points behind the update (``n_i`` in the paper's weighted mean).
        model_version: version of the model the update was computed against.
        metrics: scalar metrics reported alongside the update.
    """

    update: np.ndarray
    n: int = 1
    model_version: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ESMessage:
    """A FOLtR-ES report (Section 3.2): the client's random seed and its mean (privatized)
    metric, plus the metric of the antithetic perturbation when antithetic variates are used.

    On the wire (:func:`fedrank.core.codec.encode_es_message`) this is 8 bytes, or 12 with
    the antithetic metric: a 4-byte seed and 4-byte float32 metrics. The model version
    travels beside it (in the request), not in these bytes.

    Attributes:
        seed: the seed the client perturbed the model with, in ``[0, 2**32)``.
        metric: mean privatized metric of the interactions ranked with ``+sigma * v``.
        antithetic_metric: the same for ``-sigma * v`` (``None`` without antithetic variates).
        model_version: version of the model the client perturbed.
    """

    seed: int
    metric: float
    antithetic_metric: float | None = None
    model_version: int = 0


@dataclass(frozen=True)
class MessageBatch:
    """``size`` client messages, column by column.

    Vector messages (frecency gradients or signs, FedAvg deltas) fill ``vector`` ``(m, d)``
    and ``weight`` ``(m,)`` (the ``n_i`` of the weighted mean); ES messages (FOLtR-ES) fill
    ``seed`` ``(m,)`` uint64, ``metric`` ``(m,)`` and, with antithetic variates,
    ``antithetic`` ``(m,)``. Unused columns are ``None``; an empty batch has only ``size = 0``.
    """

    size: int
    vector: np.ndarray | None = None
    weight: np.ndarray | None = None
    seed: np.ndarray | None = None
    metric: np.ndarray | None = None
    antithetic: np.ndarray | None = None

    FIELDS: ClassVar[tuple[str, ...]] = ("vector", "weight", "seed", "metric", "antithetic")

    def __post_init__(self) -> None:
        for f in self.FIELDS:
            col = getattr(self, f)
            if col is not None and len(col) != self.size:
                raise DataFormatError(
                    f"column {f} has {len(col)} rows, the batch has {self.size} messages"
                )

    @classmethod
    def of_vectors(cls, vectors: np.ndarray, weights: np.ndarray) -> MessageBatch:
        """Vector messages: rows of ``vectors`` with their weights."""
        return cls(len(vectors), vector=np.asarray(vectors), weight=np.asarray(weights))

    @classmethod
    def of_es(
        cls, seeds: np.ndarray, metric: np.ndarray, antithetic: np.ndarray | None = None
    ) -> MessageBatch:
        """ES messages: seeds and (privatized) metrics, antithetic ones if used."""
        anti = None if antithetic is None else np.asarray(antithetic, dtype=np.float64)
        return cls(
            len(seeds),
            seed=np.asarray(seeds, dtype=np.uint64),
            metric=np.asarray(metric, dtype=np.float64),
            antithetic=anti,
        )

    def take(self, index: np.ndarray) -> MessageBatch:
        """The messages at ``index``."""
        parts = {f: None if getattr(self, f) is None else getattr(self, f)[index]
                 for f in self.FIELDS}  # fmt: skip
        return MessageBatch(int(np.size(index)), **parts)

    @staticmethod
    def concat(parts: list[MessageBatch]) -> MessageBatch:
        """The messages of ``parts``, in order (empty parts are skipped)."""
        parts = [c for c in parts if c.size]
        if not parts:
            return MessageBatch(0)
        joined = {
            f: None if getattr(parts[0], f) is None
            else np.concatenate([getattr(c, f) for c in parts])
            for f in MessageBatch.FIELDS
        }  # fmt: skip
        return MessageBatch(sum(c.size for c in parts), **joined)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: ``{"size": m, <column>: nested lists, ...}`` (used columns only;
        seeds as integers, so they round-trip exactly), with ``"dim"`` beside ``vector`` so
        that an empty batch keeps its width."""
        out: dict[str, Any] = {"size": self.size}
        if self.vector is not None:
            out["dim"] = int(self.vector.shape[1])
        for f in self.FIELDS:
            col = getattr(self, f)
            if col is not None:
                out[f] = col.tolist()
        return out

    @classmethod
    def from_json(cls, data: Any) -> MessageBatch:
        """The batch of :meth:`to_json`'s form; :class:`~fedrank.errors.DataFormatError`
        naming the first problem (unknown key, wrong shape, non-finite value)."""
        if not isinstance(data, dict) or "size" not in data:
            raise DataFormatError('a message batch is an object with "size" and its columns')
        unknown = set(data) - {"size", "dim", *cls.FIELDS}
        if unknown:
            raise DataFormatError(f"unknown message batch keys {sorted(unknown)}")
        size = data["size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise DataFormatError(f"size must be an integer >= 0, got {size!r}")
        cols: dict[str, np.ndarray] = {}
        for f in cls.FIELDS:
            if f not in data:
                continue
            if f == "seed" and not (
                isinstance(data[f], list)
                and all(type(v) is int and 0 <= v < 2**32 for v in data[f])
            ):
                raise DataFormatError("column seed must be a list of integers in [0, 2**32)")
            try:
                col = np.asarray(data[f], dtype=np.uint64 if f == "seed" else np.float64)
            except (TypeError, ValueError, OverflowError) as exc:
                raise DataFormatError(f"column {f} is not numeric: {exc}") from exc
            if f == "vector":
                dim = data.get("dim")
                if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
                    raise DataFormatError(
                        f"a vector column needs dim, an integer >= 1; got {dim!r}"
                    )
                if col.size == 0 and size == 0:
                    col = col.reshape(0, dim)
                if col.shape != (size, dim):
                    raise DataFormatError(
                        f"column vector has shape {col.shape}, not ({size}, {dim})"
                    )
            elif col.ndim != 1:
                raise DataFormatError(
                    f"column {f} must be a list of {size} numbers, got shape {col.shape}"
                )
            if col.dtype.kind == "f" and not np.all(np.isfinite(col)):
                raise DataFormatError(f"column {f} holds non-finite values")
            cols[f] = col
        return cls(size, **cols)
