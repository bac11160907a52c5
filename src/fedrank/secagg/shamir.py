"""Shamir's ``t``-out-of-``n`` secret sharing over a prime field (Shamir, CACM 1979), the
``SS.share`` / ``SS.recon`` of Bonawitz et al., CCS 2017, Section 3.1.

A secret ``s`` becomes the constant term of a random polynomial ``f`` of degree ``t - 1``
over ``GF(p)``; party ``x`` receives the share ``(x, f(x))``. Any ``t`` shares determine
``f`` and hence ``s = f(0)`` by Lagrange interpolation; any ``t - 1`` shares are uniformly
distributed whatever ``s`` is, so they say nothing about it.

The field: ``p = 2**521 - 1`` (:data:`PRIME`). The protocol shares 32-byte values (an X25519
private key and a PRG seed), so ``p`` must exceed ``2**256``; ``2**521 - 1`` is a Mersenne
prime (proved prime in 1952; it is also the field of NIST P-521), so its primality needs no
trust in a generated constant. A share is a 66-byte field element. (The ``2**255 - 19``
field of Curve25519 is too small: a raw X25519 key can be any 32 bytes.)

Arithmetic uses Python integers: the secrets are few and small. Evaluating the polynomial
at ``n`` points costs ``n (t - 1)`` multiply-adds, done over a numpy object array (one
interpreter step per coefficient, not per point) with a reduction modulo ``p`` every
:data:`_REDUCE_EVERY` steps.

Randomness: the coefficients are cryptographic secrets, so they come from
:func:`secrets.randbits` (the operating system's CSPRNG, ``os.urandom``), never from a numpy
``Generator`` or :mod:`random`. ``share`` takes an injectable ``randbits(k) -> int`` only so
that tests can fix the coefficients; production code must leave the default.
"""

from __future__ import annotations

import functools
import secrets as _secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.secagg.errors import ShareReconstructionError

#: The default field: the Mersenne prime ``2**521 - 1``.
PRIME = (1 << 521) - 1
#: Bytes of one share's value in the default field.
SHARE_BYTES = (PRIME.bit_length() + 7) // 8
#: Horner steps between reductions modulo ``p`` (values grow by ``log2(x)`` bits a step).
_REDUCE_EVERY = 8

RandBits = Callable[[int], int]


@dataclass(frozen=True, slots=True)
class Share:
    """The share ``(x, y = f(x))`` of party ``x`` (``0 < x < p``)."""

    x: int
    y: int


def random_below(bound: int, randbits: RandBits = _secrets.randbits) -> int:
    """A uniform integer in ``[0, bound)`` by rejection from ``randbits(bound.bit_length())``
    (no modulo bias)."""
    bits = bound.bit_length()
    while True:
        value = randbits(bits)
        if 0 <= value < bound:
            return value


def share(
    secret: int,
    threshold: int,
    xs: Sequence[int],
    *,
    prime: int = PRIME,
    randbits: RandBits = _secrets.randbits,
) -> list[Share]:
    """Split ``secret`` into ``len(xs)`` shares, any ``threshold`` of which reconstruct it.

    The polynomial is ``f(X) = secret + a_1 X + ... + a_{t-1} X^{t-1}`` with ``a_1``, ...,
    ``a_{t-1}`` drawn in that order by :func:`random_below` from ``randbits``.

    Args:
        secret: an integer in ``[0, prime)``.
        threshold: ``t``, between 1 and ``len(xs)``.
        xs: the parties' distinct evaluation points, each in ``[1, prime)``.
        prime: the field's modulus (a prime; not checked).
        randbits: the source of the coefficients; keep the default (``secrets.randbits``)
            outside tests.

    Returns:
        ``[Share(x, f(x)) for x in xs]``, in the order of ``xs``.
    """
    xs = _check_points(xs, prime)
    if not 0 <= secret < prime:
        raise ConfigError(f"the secret must be an integer in [0, p), p = {_describe(prime)}")
    if not 1 <= threshold <= len(xs):
        raise ConfigError(
            f"threshold must be between 1 and the number of shares {len(xs)}, got {threshold}"
        )
    coefficients = [random_below(prime, randbits) for _ in range(threshold - 1)]
    values = evaluate_polynomial([secret, *coefficients], xs, prime=prime)
    return [Share(x, y) for x, y in zip(xs, values, strict=True)]


def evaluate_polynomial(
    coefficients: Sequence[int], xs: Sequence[int], *, prime: int = PRIME
) -> list[int]:
    """``f(x) mod prime`` for every ``x`` in ``xs``, where ``f(X) = sum_k c_k X^k`` and
    ``coefficients = [c_0, c_1, ...]`` (Horner's rule, vectorized over ``xs``)."""
    points = np.array([int(x) % prime for x in xs], dtype=object)
    values = np.zeros(len(points), dtype=object)
    for step, c in enumerate(reversed(coefficients), start=1):
        values = values * points + c
        if step % _REDUCE_EVERY == 0:
            values %= prime
    return [int(v) % prime for v in values]


def reconstruct(shares: Sequence[Share], threshold: int, *, prime: int = PRIME) -> int:
    """The secret ``f(0)`` from at least ``threshold`` shares (Lagrange interpolation at 0).

    The first ``threshold`` shares determine ``f``; every further share is checked to lie on
    it, so passing ``threshold + 1`` shares detects any single altered share (and raises),
    where ``threshold`` shares would silently give a wrong secret.

    Raises:
        ShareReconstructionError: fewer than ``threshold`` shares, repeated points, or shares
            that do not lie on one polynomial of degree ``threshold - 1``.
    """
    if threshold < 1:
        raise ConfigError(f"threshold must be >= 1, got {threshold}")
    if len(shares) < threshold:
        raise ShareReconstructionError(
            f"reconstruction needs threshold={threshold} shares, got {len(shares)}: too "
            "many holders dropped out, so the secret is lost"
        )
    try:
        xs = _check_points([s.x for s in shares], prime)
    except ConfigError as err:
        raise ShareReconstructionError(str(err)) from err
    ys = [int(s.y) for s in shares]
    if any(not 0 <= y < prime for y in ys):
        raise ShareReconstructionError("a share's value lies outside [0, p): it was altered")
    base_xs, base_ys = tuple(xs[:threshold]), ys[:threshold]
    secret = _combine(lagrange_coefficients(base_xs, 0, prime=prime), base_ys, prime)
    for x, y in zip(xs[threshold:], ys[threshold:], strict=True):
        if _combine(lagrange_coefficients(base_xs, x, prime=prime), base_ys, prime) != y:
            raise ShareReconstructionError(
                f"the share of party {x} does not lie on the polynomial through the first "
                f"{threshold} shares: at least one share was altered or belongs to another "
                "secret"
            )
    return secret


def lagrange_coefficients(xs: Sequence[int], at: int = 0, *, prime: int = PRIME) -> tuple[int, ...]:
    """The Lagrange weights ``L_i(at) = prod_{j != i} (at - x_j) / (x_i - x_j) mod prime``,
    so that ``f(at) = sum_i L_i(at) f(x_i)`` for every ``f`` of degree ``< len(xs)``.
    Cached per ``(xs, at, prime)``: a server reconstructing many secrets from the same
    parties computes them once."""
    return _lagrange(tuple(int(x) for x in xs), int(at), prime)


@functools.lru_cache(maxsize=256)
def _lagrange(xs: tuple[int, ...], at: int, prime: int) -> tuple[int, ...]:
    k = len(xs)
    # Numerators prod_{j != i} (at - x_j) from prefix and suffix products: O(k).
    prefix = [1] * (k + 1)
    for i, x in enumerate(xs):
        prefix[i + 1] = prefix[i] * (at - x) % prime
    suffix = 1
    numerators = [0] * k
    for i in range(k - 1, -1, -1):
        numerators[i] = prefix[i] * suffix % prime
        suffix = suffix * (at - xs[i]) % prime
    inverses = _batch_inverse(list(_denominators(xs, prime)), prime)
    return tuple(n * d % prime for n, d in zip(numerators, inverses, strict=True))


@functools.lru_cache(maxsize=64)
def _denominators(xs: tuple[int, ...], prime: int) -> tuple[int, ...]:
    """``prod_{j != i} (x_i - x_j) mod prime`` for every ``i``: O(k**2), once per point set."""
    arr = np.array(xs, dtype=object)
    out = []
    for i, x in enumerate(xs):
        diffs = x - arr
        diffs[i] = 1
        out.append(int(np.prod(diffs)) % prime)
    return tuple(out)


def _batch_inverse(values: list[int], prime: int) -> list[int]:
    """Modular inverses of non-zero ``values`` with one exponentiation (Montgomery's trick)."""
    prefix = [1] * (len(values) + 1)
    for i, v in enumerate(values):
        prefix[i + 1] = prefix[i] * v % prime
    inverse = pow(prefix[-1], -1, prime)
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = inverse * prefix[i] % prime
        inverse = inverse * values[i] % prime
    return out


def _combine(weights: Sequence[int], ys: Sequence[int], prime: int) -> int:
    return sum(w * y for w, y in zip(weights, ys, strict=True)) % prime


def _check_points(xs: Sequence[int], prime: int) -> list[int]:
    points = [int(x) for x in xs]
    if not points:
        raise ConfigError("secret sharing needs at least one party")
    if any(not 0 < x < prime for x in points):
        raise ConfigError(
            f"share points must lie in [1, p), p = {_describe(prime)}: the point 0 holds "
            "the secret itself"
        )
    if len(set(points)) != len(points):
        raise ConfigError("share points must be distinct (two parties share one point)")
    return points


def _describe(prime: int) -> str:
    return f"2**{prime.bit_length()}-{(1 << prime.bit_length()) - prime}"
