"""Fixed-point encoding into Z_q (fedrank.secagg.field): exact known values, the no-wrap
guarantee at its limit, refusal of configurations that could wrap, and the stated error
bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError, DataFormatError
from fedrank.secagg import field
from fedrank.secagg.field import MAX_ABS_SUM, MODULUS, FixedPointEncoder

Q = MODULUS


def test_modulus_is_two_to_the_32() -> None:
    assert Q == 2**32 and MAX_ABS_SUM == 2**31 - 1 and field.ELEMENT_BYTES == 4


def test_encode_known_values_with_clipping() -> None:
    enc = FixedPointEncoder(scale=4.0, max_clients=3, max_abs=2.0)
    # 1.5 * 4 = 6; -0.25 * 4 = -1 -> q - 1; 3.0 clips to 2 -> 8; -7 clips to -2 -> q - 8;
    # 0.125 * 4 = 0.5 rounds half to even -> 0; 0.375 * 4 = 1.5 -> 2.
    out = enc.encode(np.array([1.5, -0.25, 3.0, -7.0, 0.125, 0.375]))
    assert out.dtype == np.uint64
    assert out.tolist() == [6, Q - 1, 8, Q - 8, 0, 2]
    assert enc.decode(out, 1).tolist() == [1.5, -0.25, 2.0, -2.0, 0.0, 0.5]


def test_l2_clipping_scales_the_vector_down_to_the_bound() -> None:
    enc = FixedPointEncoder(scale=2.0**10, max_clients=10, l2_bound=1.0)
    clipped = enc.clip(np.array([3.0, 4.0]))
    assert np.allclose(clipped, [0.6, 0.8])
    assert np.linalg.norm(clipped) <= 1.0 + 1e-15
    assert enc.bound == 1.0  # an L2 ball of radius 1 lies in the cube [-1, 1]^d
    assert np.array_equal(enc.clip(np.array([0.3, -0.4])), [0.3, -0.4])  # inside: unchanged
    both = FixedPointEncoder(scale=4.0, max_clients=1, max_abs=0.5, l2_bound=2.0)
    assert both.bound == 0.5


def test_refuses_a_configuration_whose_sum_could_wrap() -> None:
    # max_clients * rint(scale * B) = 1024 * 2**21 = 2**31 > 2**31 - 1.
    with pytest.raises(ConfigError, match="wrap around") as err:
        FixedPointEncoder(scale=2.0**21, max_clients=1024, max_abs=1.0)
    assert "scale <= 1.04858e+06" in str(err.value)  # 2**20: the advice is actionable
    FixedPointEncoder(scale=2.0**21, max_clients=1023, max_abs=1.0)  # 2**31 - 2**21: fits
    with pytest.raises(ConfigError, match="wrap around"):
        FixedPointEncoder(scale=1.0, max_clients=2, l2_bound=2.0**31)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scale": 1.0, "max_clients": 3}, "needs a bound"),
        ({"scale": 0.0, "max_clients": 3, "max_abs": 1.0}, "scale must be"),
        ({"scale": float("nan"), "max_clients": 3, "max_abs": 1.0}, "scale must be"),
        ({"scale": 1.0, "max_clients": 0, "max_abs": 1.0}, "max_clients must be >= 1"),
        ({"scale": 1.0, "max_clients": 2.5, "max_abs": 1.0}, "max_clients must be an int"),
        ({"scale": 1.0, "max_clients": 3, "max_abs": -1.0}, "max_abs must be"),
        ({"scale": 0.1, "max_clients": 3, "max_abs": 1.0}, "rounds to 0"),
    ],
)
def test_invalid_configurations_say_what_is_wrong(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FixedPointEncoder(**kwargs)


def test_with_max_scale_picks_the_largest_power_of_two_that_fits() -> None:
    for n, bound in [(1, 1.0), (20, 1.0), (1000, 1.0), (1000, 3.7), (10_000, 0.01)]:
        enc = FixedPointEncoder.with_max_scale(n, max_abs=bound)
        assert math.log2(enc.scale).is_integer()
        assert n * enc.max_int <= MAX_ABS_SUM
        with pytest.raises(ConfigError):
            FixedPointEncoder(enc.scale * 2, n, max_abs=bound)
    # 1000 * 2**21 = 2,097,152,000 <= 2**31 - 1 = 2,147,483,647 < 1000 * 2**22.
    assert FixedPointEncoder.with_max_scale(1000, max_abs=1.0).scale == 2.0**21


def test_the_extreme_sums_decode_exactly_without_wrapping() -> None:
    """``max_clients`` vectors all at +B, or all at -B, is the worst case of the guarantee."""
    enc = FixedPointEncoder.with_max_scale(1000, max_abs=1.0)
    for sign in (1.0, -1.0):
        one = enc.encode(np.full(5, sign * 1.0))
        total = field.sum_vectors(np.tile(one, (1000, 1)))
        assert np.array_equal(enc.decode(total, 1000), np.full(5, sign * 1000.0))


def test_decode_refuses_more_clients_than_the_encoder_was_built_for() -> None:
    enc = FixedPointEncoder(scale=2.0, max_clients=3, max_abs=1.0)
    with pytest.raises(ConfigError, match="max_clients"):
        enc.decode(np.zeros(2, dtype=np.uint64), 4)
    with pytest.raises(ConfigError):
        enc.decode(np.zeros(2, dtype=np.uint64), 0)


def test_encode_refuses_non_finite_and_matrix_inputs() -> None:
    enc = FixedPointEncoder(scale=2.0, max_clients=3, max_abs=1.0)
    with pytest.raises(DataFormatError, match="NaN or infinite"):
        enc.encode(np.array([0.0, np.nan]))
    with pytest.raises(DataFormatError, match="one vector"):
        enc.encode(np.zeros((2, 2)))


def test_group_operations_wrap_modulo_q() -> None:
    a = np.array([Q - 1, 0, 5], dtype=np.uint64)
    b = np.array([1, 1, 7], dtype=np.uint64)
    assert field.add(a, b).tolist() == [0, 1, 12]
    assert field.subtract(b, a).tolist() == [2, 1, 2]
    assert field.subtract(a, b).tolist() == [Q - 2, Q - 1, Q - 2]
    assert field.negate(a).tolist() == [1, 0, Q - 5]
    assert field.sum_vectors([a, b, a]).tolist() == [Q - 1, 1, 17]
    assert field.sum_vectors(np.stack([a, b])).tolist() == [0, 1, 12]
    assert np.array_equal(field.from_bytes(field.to_bytes(a), 3), a)
    assert len(field.to_bytes(a)) == 12
    with pytest.raises(DataFormatError):
        field.from_bytes(b"\x00" * 11, 3)
    with pytest.raises(DataFormatError, match="outside"):
        field.check_vector(np.array([Q], dtype=np.uint64), 1)
    with pytest.raises(DataFormatError, match="encode floats"):
        field.check_vector(np.array([0.5]), 1)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    bound=st.sampled_from([0.5, 1.0, 7.25]),
    coarser=st.integers(0, 12),
    use_l2=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_decoded_sum_is_within_the_stated_bound(
    n: int, bound: float, coarser: int, use_l2: bool, seed: int
) -> None:
    """|decode(sum encode(x_u)) - fsum clip(x_u)| <= error_bound(n) <= n / scale, with inputs
    that reach beyond the bound (so clipping is exercised)."""
    max_clients = 50
    kwargs = {"l2_bound": bound} if use_l2 else {"max_abs": bound}
    fine = FixedPointEncoder.with_max_scale(max_clients, **kwargs)
    enc = FixedPointEncoder(fine.scale / 2.0**coarser, max_clients, **kwargs)
    rng = np.random.default_rng(seed)
    xs = rng.uniform(-1.5 * bound, 1.5 * bound, size=(n, 6))
    total = field.sum_vectors([enc.encode(x) for x in xs])
    decoded = enc.decode(total, n)
    clipped = np.array([enc.clip(x) for x in xs])
    exact = np.array([math.fsum(col) for col in clipped.T])
    error = np.max(np.abs(decoded - exact))
    assert error <= enc.error_bound(n)
    assert enc.error_bound(n) <= n / enc.scale
