"""Randomized response over a metric's finite set of values (FOLtR-ES, Section 3.3).

"We assume that the metric used takes a finite number of values, f_0, f_1, ..., f_{n-1}
... Instead of transmitting this value, we toss a coin. If we obtain heads (with
probability p), we send the true value of the metric, f_0. Otherwise, with probability
1 - p, we uniformly at random select a value out of n - 1 values which are *different* from
f_0, and send it."

Guarantees (Section 4): every output has probability between ``(1 - p) / (n - 1)`` and ``p``
whatever the input, so one privatized value is ``epsilon``-locally differentially private
with (Eq. 10)

    epsilon = ln(p (n - 1) / (1 - p)).

Fact 1 (Eq. 7): ``E[f_p | f] = f (p n - 1) / (n - 1) + C`` with ``C = (1 - p) / (n - 1) *
sum_i f_i`` -- an increasing affine function of the true value when ``p > 1 / n``, so the
maximizer of the expected metric is unchanged. At ``p <= 1 / n`` it is constant or
decreasing, and learning would stall or run backwards: such ``p`` are refused.

FOLtR-ES privatizes each interaction's value before the client averages its ``B``
interactions (as the reference implementation does); the message then reveals the average
of independently privatized values, which keeps the per-interaction guarantee.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedrank.core.message import Message
from fedrank.errors import ConfigError, DataFormatError


class RandomizedResponse:
    """Randomized response with truth probability ``p`` over ``values`` (a
    :class:`~fedrank.core.protocols.Privatizer`).

    Args:
        values: the ``n >= 2`` distinct values the metric can take (for MaxRR at depth 10:
            :func:`fedrank.metrics.maxrr.maxrr_values`, ``n = 11``).
        p: probability of sending the true value; ``1 / n < p <= 1`` (``p = 1`` sends the
            truth, epsilon infinite).

    ``privatize`` replaces every entry of a message's update (one metric value per
    interaction) independently.
    """

    def __init__(self, values: np.ndarray, p: float) -> None:
        table = np.asarray(values, dtype=np.float64)
        if table.ndim != 1 or table.size < 2:
            raise ConfigError("randomized response needs at least 2 metric values")
        if np.unique(table).size != table.size or not np.all(np.isfinite(table)):
            raise ConfigError("the metric values must be finite and distinct")
        n = table.size
        if isinstance(p, bool) or not isinstance(p, int | float | np.floating):
            raise ConfigError(f"p must be a number, got {p!r}")
        if not (1.0 / n < float(p) <= 1.0):
            raise ConfigError(
                f"p must lie in (1/n, 1] = ({1.0 / n:.4f}, 1] for a metric with n = {n} values, "
                f"got {p}. At p <= 1/n the privatized metric no longer increases with the true "
                "one (FOLtR-ES Fact 1 needs p > 1/n), so nothing could be learned; choose a "
                "larger p (the paper uses 0.9) for less noise or one just above 1/n for more "
                "privacy"
            )
        self.values = table
        self.p = float(p)
        self._sorted = np.argsort(table)

    def __repr__(self) -> str:
        return f"RandomizedResponse(n={self.n}, p={self.p})"

    #: The :mod:`fedrank.core.codec` encoding that carries privatized values exactly.
    encoding = "float64"

    @property
    def n(self) -> int:
        return int(self.values.size)

    def epsilon(self) -> float:
        """The local differential privacy of one privatized value, Eq. (10)."""
        if self.p == 1.0:
            return float("inf")
        return float(np.log(self.p * (self.n - 1) / (1.0 - self.p)))

    def transition_matrix(self) -> np.ndarray:
        """``(n, n)``: ``P[output j | true value i]``."""
        off = (1.0 - self.p) / (self.n - 1)
        matrix = np.full((self.n, self.n), off)
        np.fill_diagonal(matrix, self.p)
        return matrix

    def expected(self, true_values: np.ndarray) -> np.ndarray:
        """``E[privatized | true]`` of Eq. (7): ``f (p n - 1) / (n - 1) + C``."""
        f = np.asarray(true_values, dtype=np.float64)
        c = (1.0 - self.p) / (self.n - 1) * float(self.values.sum())
        return f * (self.p * self.n - 1.0) / (self.n - 1) + c

    def privatize_indices(self, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Privatize value *indices* (``0..n-1``), any shape: keep each with probability
        ``p``, else move it to one of the other ``n - 1`` indices uniformly. Draws two
        uniforms per entry, entry after entry (row-major), so a batch draws exactly what its
        rows privatized one after another would."""
        u = rng.random((*np.shape(index), 2))
        return self.respond(index, u[..., 0], u[..., 1])

    def respond(self, index: np.ndarray, keep_u: np.ndarray, shift_u: np.ndarray) -> np.ndarray:
        """:meth:`privatize_indices` with its two uniforms per entry given (``keep_u < p``
        keeps the index, else ``shift_u`` picks one of the other ``n - 1``)."""
        idx = np.asarray(index)
        if idx.dtype.kind not in "iu":
            raise DataFormatError(f"value indices must be integers, got dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise DataFormatError(f"value indices must lie in [0, {self.n}), got {idx.min()}..")
        keep = np.asarray(keep_u) < self.p
        shift = 1 + np.minimum((np.asarray(shift_u) * (self.n - 1)).astype(np.int64), self.n - 2)
        return np.where(keep, idx, (idx + shift) % self.n)

    def index_of(self, values: np.ndarray) -> np.ndarray:
        """Indices of metric values. A value matches the nearest domain value within a
        relative 1e-6 (so float32-rounded values are accepted); anything else raises."""
        v = np.asarray(values, dtype=np.float64)
        table = self.values[self._sorted]
        pos = np.clip(np.searchsorted(table, v), 1, self.n - 1)
        nearer_left = np.abs(v - table[pos - 1]) <= np.abs(table[pos] - v)
        nearest = np.where(nearer_left, pos - 1, pos)
        if not np.all(np.abs(table[nearest] - v) <= 1e-6 * np.maximum(1.0, np.abs(v))):
            raise DataFormatError(
                "randomized response only accepts the metric's own values "
                f"{np.round(self.values, 4).tolist()}; got others"
            )
        return self._sorted[nearest]

    def privatize_batch(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Privatize a ``(C, B)`` matrix of metric values (same dtype out)."""
        arr = np.asarray(values)
        if arr.ndim != 2:
            raise ConfigError(f"expected values of shape (C, B), got shape {arr.shape}")
        out = self.values[self.privatize_indices(self.index_of(arr), rng)]
        return out.astype(arr.dtype if arr.dtype.kind == "f" else np.float64)

    def privatize(self, message: Message, rng: np.random.Generator) -> Message:
        """A copy of ``message`` whose update (one metric value per interaction) is
        privatized entry by entry."""
        update = np.asarray(message.update)
        if update.ndim != 1:
            raise ConfigError(f"expected a 1-D vector of metric values, got shape {update.shape}")
        out = self.privatize_batch(update[None, :], rng)[0]
        return replace(message, update=out, metrics=dict(message.metrics))
