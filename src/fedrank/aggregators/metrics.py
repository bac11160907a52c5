"""Weighted mean of the metrics that travel with client messages.

Messages carry scalar metrics (loss, characters typed, selected rank, ...;
docs/architecture.md). The server reports each metric's mean over the clients that sent it,
weighted by the clients' ``n_i`` like the FedAvg mean of paper Section 3.1::

    m = sum_i n_i m_i / sum_i n_i      (sums over the messages that report m)

Unlike the vector aggregators, :meth:`MetricMean.finalize` returns a ``dict[str, float]``,
not an array: metrics are named and messages may report different sets of them. A NaN metric
value means "not reported" and is skipped (handy in the batch form, where every client has a
column entry); infinite values are refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from fedrank.aggregators.mean import check_weight
from fedrank.core.message import Message
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError


class MetricMeanState(NamedTuple):
    """Partial aggregate of :class:`MetricMean`.

    Attributes:
        sums: ``sum_i n_i m_i`` per metric name, in name order.
        weights: ``sum_i n_i`` per metric name, the same names in the same order.
        count: number of messages folded in.

    The mappings are never modified in place (every operation returns new ones), so states
    can be shared safely.
    """

    sums: Mapping[str, float]
    weights: Mapping[str, float]
    count: int


def _combine(
    state: MetricMeanState, sums: Mapping[str, tuple[float, float]], count: int
) -> MetricMeanState:
    """``state`` with the ``(sum, weight)`` of each metric in ``sums`` added, and ``count``
    more messages."""
    out = {name: (s, state.weights[name]) for name, s in state.sums.items()}
    for name, (s, w) in sums.items():
        s0, w0 = out.get(name, (0.0, 0.0))
        out[name] = (s0 + s, w0 + w)
    names = sorted(out)
    return MetricMeanState(
        {name: out[name][0] for name in names},
        {name: out[name][1] for name in names},
        state.count + count,
    )


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"metric names must be non-empty strings, got {name!r}")
    return name


class MetricMean:
    """Per-metric mean across messages, weighted by ``n``.

    ``finalize`` returns ``{name: mean}`` (a dict, not an array); a metric whose reporting
    messages all had ``n = 0`` is left out, as is everything for the empty state (``{}``).
    """

    def __repr__(self) -> str:
        return "MetricMean()"

    def zero(self) -> MetricMeanState:
        """The empty aggregate."""
        return MetricMeanState({}, {}, 0)

    def check_consistent(self, state: MetricMeanState) -> None:
        """Refuse a state no sequence of messages can produce: non-finite sums, negative
        weights or count. Raises :class:`~fedrank.errors.DataFormatError`."""
        self._check_state(state)
        if state.count < 0:
            raise DataFormatError("the count must be >= 0")
        for name, s in state.sums.items():
            w = state.weights[name]
            if not (math.isfinite(s) and math.isfinite(w)) or w < 0:
                raise DataFormatError(f"metric {name!r}: sums must be finite, weights >= 0")

    def accumulate(self, state: MetricMeanState, message: Message) -> MetricMeanState:
        """Fold the metrics of one message into ``state``."""
        w = check_weight(message.n)
        sums: dict[str, tuple[float, float]] = {}
        for name, value in message.metrics.items():
            v = float(value)
            if math.isnan(v):
                continue
            if math.isinf(v):
                raise DataFormatError(f"metric {name!r} is infinite; report a finite value")
            sums[_check_name(name)] = (w * v, w)
        return _combine(state, sums, 1)

    def accumulate_batch(
        self, state: MetricMeanState, metrics: Mapping[str, np.ndarray], n: np.ndarray
    ) -> MetricMeanState:
        """Fold ``C`` messages at once: ``metrics`` maps each name to a ``(C,)`` array (NaN =
        not reported by that client), ``n`` holds the ``(C,)`` weights."""
        weights = np.asarray(n)
        if weights.ndim != 1:
            raise ConfigError(f"expected n of shape (C,), got shape {weights.shape}")
        if weights.size and (not np.all(np.isfinite(weights)) or weights.min() < 0):
            raise DataFormatError("every weight in n must be finite and >= 0")
        w = weights.astype(np.float64)
        sums: dict[str, tuple[float, float]] = {}
        for name, column in metrics.items():
            values = np.asarray(column, dtype=np.float64)
            if values.shape != w.shape:
                raise ConfigError(
                    f"metric {name!r}: expected shape {w.shape} (one value per message), got "
                    f"shape {values.shape}"
                )
            if np.any(np.isinf(values)):
                raise DataFormatError(f"metric {name!r} has infinite values; report finite ones")
            reported = ~np.isnan(values)
            if not reported.any():
                continue
            sums[_check_name(name)] = (
                float(w[reported] @ values[reported]),
                float(w[reported].sum()),
            )
        return _combine(state, sums, int(w.size))

    def merge(self, a: MetricMeanState, b: MetricMeanState) -> MetricMeanState:
        """Combine two partial aggregates."""
        return _combine(a, {name: (s, b.weights[name]) for name, s in b.sums.items()}, b.count)

    def finalize(self, state: MetricMeanState) -> dict[str, float]:
        """``{name: weighted mean}`` for every metric with positive total weight."""
        return {
            name: s / state.weights[name]
            for name, s in state.sums.items()
            if state.weights[name] > 0
        }

    def _check_state(self, state: MetricMeanState) -> None:
        names = list(state.sums)
        if names != list(state.weights) or names != sorted(names) or not all(names):
            raise DataFormatError(
                "a MetricMean state holds a sum and a weight for the same metrics, named by "
                f"non-empty strings in order; got sums of {names} and weights of "
                f"{list(state.weights)}"
            )

    def state_to_json(self, state: MetricMeanState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check_state(state)
        return encode_state(state, "MetricMean")

    def state_from_json(self, data: dict[str, Any]) -> MetricMeanState:
        """Inverse of :meth:`state_to_json`."""
        state = decode_state(data, MetricMeanState, "MetricMean")
        self._check_state(state)
        return state
