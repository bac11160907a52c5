"""Sign compression of client updates (paper Section 5.3, last paragraph).

With Rprop only the sign of the aggregated gradient matters, so clients may send just the
sign of each partial derivative and the server takes the most common sign
(:class:`fedrank.aggregators.sign_vote.SignVote`). "If we ignore the unlikely case of having a
gradient of 0 ... clients now only need to share a single bit for each weight. If one does not
want to ignore this third case, two bits are required."

* ``with_zero=True`` (2 bits/weight, codec ``"sign2"``): values in ``{-1, 0, +1}``.
* ``with_zero=False`` (1 bit/weight, codec ``"sign1"``): values in ``{-1, +1}``; an exact zero
  becomes ``+1`` or ``-1`` with probability 1/2 each, drawn from the caller's ``rng``. The
  replacement is unbiased (its expectation is 0, the sign of a zero) and adds no vote on
  average.

Privacy: signs reveal less than full-precision values (the paper notes this "can also provide
a privacy advantage"), but this is compression, not a formal guarantee: there is no epsilon.
:class:`RandomizedSigns` adds one: randomized response on every sign (local DP on the device).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fedrank.core.message import Message
from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy.batch import BatchPrivatizer


def _signs(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "fiub":
        raise DataFormatError(f"updates must be numeric, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise DataFormatError(
            "update contains NaN or infinite values, which have no meaningful sign"
        )
    dtype = arr.dtype if arr.dtype.kind == "f" else np.dtype(np.float64)
    # np.sign keeps -0.0 as -0.0; adding 0.0 makes it +0.0, so every zero encodes alike.
    return np.sign(arr.astype(dtype, copy=False)) + 0.0


class SignCompressor:
    """Replaces each update by its sign (a :class:`~fedrank.core.protocols.Privatizer`).

    Args:
        with_zero: keep exact zeros as 0 (2 bits per weight, default) or replace them by a
            random ``+-1`` (1 bit per weight).

    Output dtype: that of a floating-point input, float64 otherwise. Inputs are never mutated.
    """

    def __init__(self, with_zero: bool = True) -> None:
        if not isinstance(with_zero, bool | np.bool_):
            raise ConfigError(f"with_zero must be True or False, got {with_zero!r}")
        self.with_zero = bool(with_zero)

    def __repr__(self) -> str:
        return f"SignCompressor(with_zero={self.with_zero})"

    @property
    def bits_per_weight(self) -> int:
        """Bits each weight takes on the wire: 2 with zeros, 1 without."""
        return 2 if self.with_zero else 1

    @property
    def encoding(self) -> str:
        """The :mod:`fedrank.core.codec` encoding that stores this output losslessly."""
        return "sign2" if self.with_zero else "sign1"

    def _compress(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = _signs(updates)
        if not self.with_zero:
            zeros = out == 0
            k = int(np.count_nonzero(zeros))
            if k:
                # One uniform double per zero, in row-major order: a batch draws exactly what
                # the same rows privatized one after another would draw.
                out[zeros] = np.where(rng.random(k) < 0.5, -1.0, 1.0)
        return out

    def privatize(self, message: Message, rng: np.random.Generator) -> Message:
        """A copy of ``message`` whose update is replaced by its signs."""
        update = np.asarray(message.update)
        if update.ndim != 1:
            raise ConfigError(f"expected a 1-D update vector, got shape {update.shape}")
        return replace(message, update=self._compress(update, rng), metrics=dict(message.metrics))

    def privatize_batch(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Signs of a ``(C, d)`` matrix of updates; row ``i`` equals ``privatize`` of row
        ``i`` when the rows are privatized in order with the same generator."""
        mat = np.asarray(updates)
        if mat.ndim != 2:
            raise ConfigError(f"expected updates of shape (C, d), got shape {mat.shape}")
        return self._compress(mat, rng)


class RandomizedSigns(BatchPrivatizer):
    """Randomized response on the signs of an update, on the device (local differential
    privacy of sign messages; Warner 1965, the k-ary form of Kairouz, Bonawitz & Ramage
    2016): each weight's sign ``v`` in ``{-1, 0, +1}`` is kept with probability
    ``p = e^eps / (e^eps + 2)`` and replaced by each of the two other values with
    probability ``q = 1 / (e^eps + 2)``.

    Guarantee: ``eps``-LDP per weight (``p / q = e^eps``). A message carries ``d`` signs,
    all of which one user's searches may change, so it is ``d eps``-LDP by basic composition,
    and a user who reports in ``T`` iterations ``T d eps`` (an upper bound;
    :func:`fedrank.privacy.report.frecency_privacy`). The sign vote needs no correction:
    ``E[v'] = (p - q) v``, so the expected vote keeps every sign and the gate's standard error
    is measured on the randomized votes themselves.

    Args:
        epsilon: ``eps`` per weight (> 0).
    """

    def __init__(self, epsilon: float) -> None:
        if (
            isinstance(epsilon, bool)
            or not isinstance(epsilon, int | float | np.floating)
            or not (math.isfinite(epsilon) and epsilon > 0)
        ):
            raise ConfigError(f"epsilon (per weight) must be a finite number > 0, got {epsilon!r}")
        self.epsilon = float(epsilon)
        self.keep = math.exp(self.epsilon) / (math.exp(self.epsilon) + 2.0)

    def __repr__(self) -> str:
        return f"RandomizedSigns(epsilon={self.epsilon:g})"

    def message_epsilon(self, dim: int) -> float:
        """One message of ``dim`` signs: ``dim * eps`` (basic composition)."""
        return int(dim) * self.epsilon

    @property
    def encoding(self) -> str:
        """The :mod:`fedrank.core.codec` encoding of the output: 2 bits per weight."""
        return "sign2"

    def privatize_batch(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The randomized signs of a ``(C, d)`` matrix of updates (one uniform per entry, in
        row-major order: a batch draws what its rows privatized in order would); the dtype
        of a floating-point input, float64 otherwise."""
        mat = np.asarray(updates)
        if mat.ndim != 2:
            raise ConfigError(f"expected updates of shape (C, d), got shape {mat.shape}")
        return self.privatize_uniforms(mat, rng.random(mat.shape))

    def privatize_uniforms(self, updates: np.ndarray, u: np.ndarray) -> np.ndarray:
        """:meth:`privatize_batch` with its uniforms given, one per entry: a client whose
        uniforms are its own (:class:`~fedrank.core.client_random.ClientRandom`) randomizes
        its signs the same wherever it runs."""
        mat = np.asarray(updates)
        if mat.ndim != 2 or np.shape(u) != mat.shape:
            raise ConfigError(
                f"expected updates of shape (C, d) and one uniform per entry, got {mat.shape} "
                f"and {np.shape(u)}"
            )
        signs = _signs(mat)
        index = signs.astype(np.int64) + 1  # -1, 0, +1 -> 0, 1, 2
        # keep below p; else move by 1 or by 2 (mod 3) with probability q each
        shift = np.where(u < self.keep, 0, np.where(u < (1 + self.keep) / 2, 1, 2))
        return ((index + shift) % 3 - 1).astype(signs.dtype)
