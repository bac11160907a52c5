"""Shamir secret sharing (fedrank.secagg.shamir): a hand-computed example, reconstruction
from any t shares, and the perfect secrecy of t - 1 shares."""

from __future__ import annotations

import inspect
import itertools
import random
import secrets
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError
from fedrank.secagg import shamir
from fedrank.secagg.errors import ShareReconstructionError
from fedrank.secagg.shamir import PRIME, Share, lagrange_coefficients, reconstruct, share

P127 = 2**127 - 1


def fixed(*values: int):
    """A ``randbits`` that returns ``values`` in order: fixes the polynomial's coefficients."""
    it: Iterator[int] = iter(values)
    return lambda bits: next(it)


def test_hand_computed_example_over_2_127_minus_1() -> None:
    """f(x) = 42 + 7 x - x**2 over GF(2**127 - 1), i.e. a_1 = 7 and a_2 = p - 1.

    f(1) = 48, f(2) = 52, f(3) = 54, f(4) = 54, f(5) = 52, f(10) = 42 + 70 - 100 = 12,
    f(20) = 42 + 140 - 400 = -218 = p - 218.
    """
    shares = share(42, 3, [1, 2, 3, 4, 5, 10, 20], prime=P127, randbits=fixed(7, P127 - 1))
    assert [(s.x, s.y) for s in shares] == [
        (1, 48),
        (2, 52),
        (3, 54),
        (4, 54),
        (5, 52),
        (10, 12),
        (20, 170141183460469231731687303715884105509),  # 2**127 - 1 - 218
    ]
    # Lagrange at 0 for x = 2, 4, 20: L_2 = 4*20 / ((4-2)(20-2)) = 80/36 = 20/9,
    # L_4 = 2*20 / ((2-4)(20-4)) = -40/32 = -5/4, L_20 = 2*4 / ((2-20)(4-20)) = 8/288 = 1/36.
    w2, w4, w20 = lagrange_coefficients([2, 4, 20], 0, prime=P127)
    assert (9 * w2 % P127, 4 * w4 % P127, 36 * w20 % P127) == (20, P127 - 5, 1)
    # 52 * 20/9 - 54 * 5/4 - 218/36 = (4160 - 2430 - 218) / 36 = 1512 / 36 = 42.
    assert reconstruct([shares[1], shares[3], shares[6]], 3, prime=P127) == 42
    assert reconstruct(shares, 3, prime=P127) == 42  # all 7: the extra 4 are checked


def test_default_field_holds_32_byte_secrets() -> None:
    assert PRIME == 2**521 - 1 and shamir.SHARE_BYTES == 66
    secret = int.from_bytes(b"\xff" * 32, "big")  # the largest 32-byte value
    shares = share(secret, 4, range(1, 8))
    assert reconstruct(shares[3:], 4) == secret
    assert all(0 <= s.y < PRIME for s in shares)


def test_randomness_defaults_to_the_os_csprng() -> None:
    for fn in (share, shamir.random_below):
        assert inspect.signature(fn).parameters["randbits"].default is secrets.randbits


def test_random_below_rejects_out_of_range_draws() -> None:
    # bound 10 takes 4 bits; 15 and 10 are rejected, 3 is kept.
    assert shamir.random_below(10, fixed(15, 10, 3)) == 3


@settings(max_examples=80, deadline=None)
@given(data=st.data(), n=st.integers(1, 9), secret=st.integers(0, PRIME - 1))
def test_any_t_shares_reconstruct(data: st.DataObject, n: int, secret: int) -> None:
    t = data.draw(st.integers(1, n), label="t")
    rnd = data.draw(st.randoms(use_true_random=False), label="rng")
    xs = data.draw(
        st.lists(st.integers(1, 2**32 - 1), min_size=n, max_size=n, unique=True), label="xs"
    )
    shares = share(secret, t, xs, randbits=rnd.getrandbits)
    subset = data.draw(st.permutations(shares), label="order")[: data.draw(st.integers(t, n))]
    assert reconstruct(subset, t) == secret


def _coefficients_through(points: list[tuple[int, int]], p: int) -> list[int]:
    """The coefficients ``[c_0, ..., c_{k-1}]`` of the polynomial of degree < k through the
    k points (Lagrange basis expanded into monomials)."""
    k = len(points)
    coefficients = [0] * k
    for i, (xi, yi) in enumerate(points):
        basis, denominator = [1], 1  # prod_{j != i} (X - x_j), lowest degree first
        for j, (xj, _) in enumerate(points):
            if j != i:
                basis = [(a - xj * b) % p for a, b in zip([0, *basis], [*basis, 0], strict=True)]
                denominator = denominator * (xi - xj) % p
        scale = yi * pow(denominator, -1, p) % p
        coefficients = [(c + scale * b) % p for c, b in zip(coefficients, basis, strict=True)]
    return coefficients


@settings(max_examples=40, deadline=None)
@given(data=st.data(), t=st.integers(2, 6), secret=st.integers(0, P127 - 1))
def test_t_minus_1_shares_are_consistent_with_every_secret(
    data: st.DataObject, t: int, secret: int
) -> None:
    """For every other secret s', some choice of the other coefficients gives exactly the
    same t - 1 shares: the shares cannot tell s from s'."""
    rnd = data.draw(st.randoms(use_true_random=False), label="rng")
    xs = data.draw(st.lists(st.integers(1, 10**6), min_size=t, max_size=t, unique=True), label="xs")
    seen = share(secret, t, xs, prime=P127, randbits=rnd.getrandbits)[: t - 1]
    other = data.draw(st.integers(0, P127 - 1), label="other secret")
    poly = _coefficients_through([(0, other)] + [(s.x, s.y) for s in seen], P127)
    assert poly[0] == other
    again = share(other, t, xs, prime=P127, randbits=fixed(*poly[1:]))
    assert again[: t - 1] == seen


def test_t_minus_1_shares_are_exactly_uniform_whatever_the_secret() -> None:
    """Exhaustively over GF(11), t = 3 of parties 1, 2, 3: for each secret, the 121
    coefficient pairs map one-to-one onto the 121 possible shares of parties 1 and 2."""
    p = 11
    for secret in range(p):
        counts = Counter(
            tuple(s.y for s in share(secret, 3, [1, 2, 3], prime=p, randbits=fixed(a1, a2))[:2])
            for a1, a2 in itertools.product(range(p), repeat=2)
        )
        assert len(counts) == p * p and set(counts.values()) == {1}


def test_too_few_shares_fail_loudly() -> None:
    shares = share(5, 3, [1, 2, 3], prime=P127)
    with pytest.raises(ShareReconstructionError, match="needs threshold=3 shares, got 2"):
        reconstruct(shares[:2], 3, prime=P127)


def test_an_altered_share_is_detected_given_one_spare_share() -> None:
    shares = share(123456789, 3, [1, 2, 3, 4], prime=P127, randbits=random.Random(1).getrandbits)
    for i in range(4):
        altered = list(shares)
        altered[i] = Share(altered[i].x, (altered[i].y + 1) % P127)
        with pytest.raises(ShareReconstructionError, match="does not lie on the polynomial"):
            reconstruct(altered, 3, prime=P127)
        # With exactly t shares nothing can be checked: the secret comes out wrong.
        assert reconstruct(altered[:3], 3, prime=P127) != 123456789 or i == 3


@pytest.mark.parametrize(
    ("shares", "match"),
    [
        ([Share(1, 1), Share(1, 2)], "distinct"),
        ([Share(0, 1), Share(1, 2)], r"\[1, p\)"),
        ([Share(1, P127), Share(2, 2)], "outside"),
    ],
)
def test_malformed_shares_are_refused(shares: list[Share], match: str) -> None:
    with pytest.raises(ShareReconstructionError, match=match):
        reconstruct(shares, 2, prime=P127)


def test_share_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        share(1, 4, [1, 2, 3])
    with pytest.raises(ConfigError, match="secret"):
        share(P127, 2, [1, 2], prime=P127)
    with pytest.raises(ConfigError, match="distinct"):
        share(1, 2, [1, 1])
