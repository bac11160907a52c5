"""Fixed-point encoding of float vectors into the group ``Z_q``, ``q = 2**32``, where secure
aggregation adds them (Bonawitz et al., CCS 2017, Section 3: inputs are vectors in ``Z_R^m``;
the masks are uniform in the same group, so a masked vector is a one-time pad).

Why ``q = 2**32`` rather than a prime:

* masks must be exactly uniform in ``Z_q``: with a power of two, the PRG's bytes read as
  little-endian ``uint32`` *are* uniform in ``Z_q``, with no rejection sampling and no modulo
  bias (a prime modulus would need both);
* the group operation is an integer addition that wraps: numpy ``uint64`` arithmetic wraps
  modulo ``2**64``, and ``2**32`` divides ``2**64``, so one ``& (q - 1)`` at the end of any
  chain of additions and subtractions gives the result modulo ``q``;
* a coordinate costs 4 bytes on the wire;
* 31 bits of headroom are plenty for model updates: 1,000 clients with ``|x_i| <= 1`` allow
  ``scale = 2**21`` (a resolution of about ``5e-7`` per client and coordinate).

No primality is needed: the masks only hide an input if they are uniform, and any finite
group gives that. A field matters only for Shamir's secret sharing (:mod:`.shamir`).

Encoding (:class:`FixedPointEncoder`): clip, multiply by ``scale``, round to the nearest
integer, and reduce modulo ``q``. The encoder refuses any configuration in which the sum of
``max_clients`` clipped vectors could leave ``[-2**31, 2**31 - 1]``, the range that decodes
without ambiguity, so the sum never wraps around.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy import fixed_point
from fedrank.privacy.fixed_point import MAX_ABS_SUM, MODULUS, MODULUS_BITS

#: Bytes of one coordinate on the wire (little-endian ``uint32``).
ELEMENT_BYTES = MODULUS_BITS // 8
_MASK = np.uint64(MODULUS - 1)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b mod q`` of two field vectors (``uint64`` arrays with values in ``[0, q)``)."""
    return (np.asarray(a, dtype=np.uint64) + np.asarray(b, dtype=np.uint64)) & _MASK


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b mod q`` (``uint64`` subtraction wraps modulo ``2**64``, a multiple of ``q``)."""
    return (np.asarray(a, dtype=np.uint64) - np.asarray(b, dtype=np.uint64)) & _MASK


def negate(a: np.ndarray) -> np.ndarray:
    """``-a mod q``."""
    return np.subtract(np.uint64(0), np.asarray(a, dtype=np.uint64)) & _MASK


def sum_vectors(vectors: Iterable[np.ndarray] | np.ndarray) -> np.ndarray:
    """The sum modulo ``q`` of field vectors (the rows of a 2-D array, or an iterable)."""
    if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
        return vectors.astype(np.uint64, copy=False).sum(axis=0, dtype=np.uint64) & _MASK
    total: np.ndarray | None = None
    for vector in vectors:
        v = np.asarray(vector, dtype=np.uint64)
        total = v.copy() if total is None else total + v
    if total is None:
        raise DataFormatError("sum_vectors needs at least one vector")
    return total & _MASK


def check_vector(vector: object, dimension: int, what: str = "vector") -> np.ndarray:
    """``vector`` as a 1-D ``uint64`` array of length ``dimension`` with values in
    ``[0, q)``; :class:`~fedrank.errors.DataFormatError` naming ``what`` otherwise."""
    arr = np.asarray(vector)
    if arr.ndim != 1 or arr.shape[0] != dimension:
        raise DataFormatError(
            f"{what} must be a 1-D field vector of length {dimension}, got shape {arr.shape}"
        )
    if arr.dtype.kind not in "ui":
        raise DataFormatError(
            f"{what} must hold integers in [0, 2**{MODULUS_BITS}) (encode floats with "
            f"FixedPointEncoder.encode first), got dtype {arr.dtype}"
        )
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= MODULUS):
        raise DataFormatError(f"{what} has values outside [0, 2**{MODULUS_BITS})")
    return arr.astype(np.uint64, copy=False)


def to_bytes(vector: np.ndarray) -> bytes:
    """A field vector's wire form: ``ELEMENT_BYTES`` bytes per coordinate, little-endian."""
    return np.asarray(vector, dtype=np.uint64).astype("<u4").tobytes()


def from_bytes(data: bytes, dimension: int) -> np.ndarray:
    """The inverse of :func:`to_bytes`, checking the length."""
    if len(data) != dimension * ELEMENT_BYTES:
        raise DataFormatError(
            f"a field vector of dimension {dimension} takes {dimension * ELEMENT_BYTES} "
            f"bytes, got {len(data)}"
        )
    return np.frombuffer(data, dtype="<u4").astype(np.uint64)


@dataclass(frozen=True)
class FixedPointEncoder:
    """Float vectors to ``Z_q`` and back, so that sums of up to ``max_clients`` vectors
    never wrap around.

    Encoding of ``x``: clip it (to ``[-max_abs, max_abs]`` per coordinate, and/or scale it
    down to L2 norm ``l2_bound``), then ``z = rint(scale * x) mod q``. Every clipped
    coordinate lies in ``[-B, B]`` with ``B = min(max_abs, l2_bound)`` (an L2 ball of radius
    ``r`` lies in the cube of half-side ``r``), so every encoded integer lies in ``[-K, K]``
    with ``K = rint(scale * B)``. The constructor refuses ``max_clients * K > q/2 - 1``
    (:data:`MAX_ABS_SUM`): then no sum of ``n <= max_clients`` encodings can wrap.

    Precision. For ``n <= max_clients`` vectors, ``decode(sum of encode(x_u), n)`` differs
    from the float sum of the *clipped* inputs, in every coordinate, by at most::

        n / (2 * scale)  +  n * (B + 1 / scale) * 2**-51

    The first term is rounding to the grid ``1 / scale`` (half a step per client and
    coordinate; within the ``1 / scale`` per client and coordinate one usually quotes); the
    second bounds float64 rounding in ``scale * x`` and in the final division (about
    ``4e-16 * n * B``: negligible). :meth:`error_bound` returns it. Proof: with
    ``y = clip(x)``, ``|fl(scale*y) - scale*y| <= 2**-53 * scale * B`` and rounding adds
    ``<= 1/2``; the integer sum is exact (no wrap); dividing it by ``scale`` adds a relative
    ``2**-53``.

    Rounding is to nearest (deterministic), so the encoding of a vector has no randomness of
    its own; its error is at most half a grid step per coordinate.

    Args:
        scale: grid steps per unit (``> 0``); the resolution is ``1 / scale``.
        max_clients: the most vectors that will ever be summed (``>= 1``).
        max_abs: per-coordinate clip bound (``> 0``), or ``None``.
        l2_bound: L2-norm clip bound (``> 0``), or ``None``. At least one bound is required.
    """

    scale: float
    max_clients: int
    max_abs: float | None = None
    l2_bound: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_abs", "l2_bound"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a finite number > 0 or None, got {value}")
        if self.max_abs is None and self.l2_bound is None:
            raise ConfigError(
                "FixedPointEncoder needs a bound on the inputs (max_abs per coordinate or "
                "l2_bound on the norm): without one, no scale keeps the sum from wrapping"
            )
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ConfigError(f"scale must be a finite number > 0, got {self.scale}")
        if isinstance(self.max_clients, bool) or not isinstance(self.max_clients, int | np.integer):
            raise ConfigError(f"max_clients must be an int, got {self.max_clients!r}")
        if self.max_clients < 1:
            raise ConfigError(f"max_clients must be >= 1, got {self.max_clients}")
        if self.max_int < 1:
            raise ConfigError(
                f"scale * bound = {self.scale} * {self.bound} rounds to 0: every input would "
                f"encode to 0; raise scale to at least {1.0 / self.bound:g}"
            )
        worst = self.max_clients * self.max_int
        if worst > MAX_ABS_SUM:
            safe_scale = _largest_power_of_two_scale(self.bound, self.max_clients)
            advice = (
                f"use scale <= {safe_scale:g} (e.g. FixedPointEncoder.with_max_scale)"
                if safe_scale is not None
                else "no scale works with this many clients"
            )
            raise ConfigError(
                f"the sum of max_clients={self.max_clients} clipped vectors could reach "
                f"{self.max_clients} * rint(scale * bound) = {self.max_clients} * "
                f"{self.max_int} = {worst} in absolute value, beyond {MAX_ABS_SUM} = "
                f"2**{MODULUS_BITS - 1} - 1: it would wrap around modulo 2**{MODULUS_BITS}. "
                f"Lower scale (for this bound {self.bound:g} and max_clients, {advice}), the "
                f"bound, or max_clients (at most {MAX_ABS_SUM // self.max_int} at this scale)"
            )

    @classmethod
    def with_max_scale(
        cls, max_clients: int, *, max_abs: float | None = None, l2_bound: float | None = None
    ) -> FixedPointEncoder:
        """The encoder with the largest power-of-two ``scale`` (the finest grid) for which
        ``max_clients`` clipped vectors cannot wrap."""
        bound = min(b for b in (max_abs, l2_bound, np.inf) if b is not None)
        if not (np.isfinite(bound) and bound > 0):
            # The constructor explains what is wrong with the bounds.
            return cls(1.0, max_clients, max_abs=max_abs, l2_bound=l2_bound)
        scale = _largest_power_of_two_scale(bound, max(int(max_clients), 1))
        if scale is None:
            raise ConfigError(
                f"no scale lets {max_clients} clients' vectors bounded by {bound:g} sum "
                f"without wrapping modulo 2**{MODULUS_BITS}: at most {MAX_ABS_SUM} clients"
            )
        return cls(scale, max_clients, max_abs=max_abs, l2_bound=l2_bound)

    @property
    def bound(self) -> float:
        """``B``: every clipped coordinate lies in ``[-B, B]``."""
        return float(min(b for b in (self.max_abs, self.l2_bound) if b is not None))

    @property
    def max_int(self) -> int:
        """``K = rint(scale * B)``: every encoded integer lies in ``[-K, K]``."""
        return int(np.rint(np.float64(self.scale) * np.float64(self.bound)))

    def clip(self, x: np.ndarray) -> np.ndarray:
        """``x`` clipped to the encoder's bounds (a float64 copy; non-finite values are
        refused with :class:`~fedrank.errors.DataFormatError`), so that ``|y_i| <= B``
        holds exactly and the overflow check above is a proof
        (:func:`fedrank.privacy.fixed_point.clip_coordinates`)."""
        arr = np.asarray(x)
        if arr.ndim > 1:
            raise DataFormatError(f"encode one vector at a time, got shape {arr.shape}")
        return fixed_point.clip_coordinates(arr, self.bound, self.l2_bound)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """``rint(scale * clip(x)) mod q`` as a ``uint64`` field vector
        (:func:`fedrank.privacy.fixed_point.encode`)."""
        arr = np.asarray(x)
        if arr.ndim > 1:
            raise DataFormatError(f"encode one vector at a time, got shape {arr.shape}")
        ints = fixed_point.encode(arr, self.scale, self.bound, self.l2_bound)
        return ints.astype(np.uint64) & _MASK  # two's complement: -k becomes 2**64 - k

    def decode(self, total: np.ndarray, n_clients: int) -> np.ndarray:
        """The float sum of ``n_clients`` encoded vectors from their sum ``total`` modulo
        ``q``: the representative of ``total`` in ``[-q/2, q/2)``, divided by ``scale``.
        The error is at most :meth:`error_bound` ``(n_clients)`` per coordinate."""
        if not 1 <= n_clients <= self.max_clients:
            raise ConfigError(
                f"decode got a sum of {n_clients} vectors, but the encoder guarantees no "
                f"wrap-around only for 1..{self.max_clients}: build it with a larger "
                "max_clients (and a scale that fits)"
            )
        arr = np.asarray(total)
        if arr.ndim != 1:
            raise DataFormatError(f"decode takes one summed vector, got shape {arr.shape}")
        t = check_vector(arr, arr.shape[0], "the summed vector")
        return fixed_point.signed(t).astype(np.float64) / np.float64(self.scale)

    def error_bound(self, n_clients: int) -> float:
        """The largest ``|decode(sum) - sum of clipped inputs|`` per coordinate for a sum of
        ``n_clients`` vectors: ``n / (2 scale) + n (B + 1/scale) 2**-51``."""
        return n_clients * (0.5 / self.scale + (self.bound + 1.0 / self.scale) * 2.0**-51)


def _largest_power_of_two_scale(bound: float, max_clients: int) -> float | None:
    """The largest ``2**k`` with ``max_clients * rint(2**k * bound) <= MAX_ABS_SUM`` and
    ``rint(2**k * bound) >= 1``, or ``None``."""
    per_client = MAX_ABS_SUM // max_clients
    if per_client < 1:
        return None
    k = int(np.floor(np.log2(per_client / bound))) + 1
    while k > -1100:
        scale = 2.0**k
        limit = np.rint(np.float64(scale) * np.float64(bound))
        if limit < 1:
            return None
        if limit <= per_client:
            return scale
        k -= 1
    return None
