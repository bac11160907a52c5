"""Per-client random numbers: pure functions of (seed, round, client, stream, counter)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrank.core.client_random import ClientRandom, Stream
from fedrank.errors import ConfigError

GOLDEN_SEEDS = [2085765587, 4139734036, 1504255603]
GOLDEN_SLOTS = [0.8536447110243689, 0.2890400758415289, 0.3348272949262664, 0.6254700274045266]
GOLDEN_QUERY_UNIFORMS = [0.200002312211237, 0.47802329056589343, 0.07333223818419743]
GOLDEN_LATER = {
    Stream.GUMBEL: (0, [0.8543743932647674, 0.91915011380178, 0.26113434844281325]),
    Stream.NOISE: (1, [0.8148387615661153, 0.47353879302956225, 0.09394955341411915]),
}


def test_golden_values_pin_the_function() -> None:
    """Changing the hashing would silently change every FOLtR-ES result: pin it."""
    r = ClientRandom(0, 0, np.arange(3))
    assert r.seeds().tolist() == GOLDEN_SEEDS
    np.testing.assert_array_equal(
        r.uniform(np.arange(3), Stream.QUERY, np.zeros(3, int)), GOLDEN_QUERY_UNIFORMS
    )
    slots = r.uniform_slots(np.arange(2), Stream.CLICK, np.array([0, 1]), 2)
    np.testing.assert_array_equal(slots.ravel(), GOLDEN_SLOTS)
    for stream, (counter, values) in GOLDEN_LATER.items():
        drawn = r.uniform(np.arange(3), stream, np.full(3, counter))
        np.testing.assert_array_equal(drawn, values)


def test_no_two_draws_of_a_client_share_a_hash() -> None:
    """Every (stream, counter) of a client is its own draw, across both hashing domains."""
    r = ClientRandom(0, 0, np.arange(1))
    ctr = np.arange(20_000)
    drawn = np.concatenate([r.bits(np.zeros(ctr.size, int), s, ctr) for s in Stream])
    assert np.unique(drawn).size == drawn.size


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    round_=st.integers(0, 10**6),
    ids=st.lists(st.integers(0, 10**9), min_size=1, max_size=20),
)
def test_a_clients_numbers_do_not_depend_on_the_others(
    seed: int, round_: int, ids: list[int]
) -> None:
    ids_arr = np.array(ids)
    together = ClientRandom(seed, round_, ids_arr)
    ctr = np.arange(5)
    for k, client in enumerate(ids):
        alone = ClientRandom(seed, round_, np.array([client]))
        assert alone.seeds()[0] == together.seeds()[k]
        np.testing.assert_array_equal(
            alone.uniform(np.zeros(5, int), Stream.CLICK, ctr),
            together.uniform(np.full(5, k), Stream.CLICK, ctr),
        )
        np.testing.assert_array_equal(
            alone.uniform_slots(np.zeros(5, int), Stream.CLICK, ctr, 7),
            together.uniform_slots(np.full(5, k), Stream.CLICK, ctr, 7),
        )
    lo = len(ids) // 2
    np.testing.assert_array_equal(together.block(lo, len(ids)).seeds(), together.seeds()[lo:])


def test_uniforms_are_uniform_and_streams_rounds_seeds_independent() -> None:
    r = ClientRandom(5, 0, np.arange(2000))
    rows, ctr = np.repeat(np.arange(2000), 50), np.tile(np.arange(50), 2000)
    draws = {s: r.uniform(rows, s, ctr) for s in Stream}
    for u in draws.values():
        assert u.min() >= 0.0 and u.max() < 1.0
        assert stats.kstest(u, "uniform").pvalue > 1e-4
    for a, b in (
        (Stream.CLICK, Stream.KEEP),
        (Stream.CLICK, Stream.GUMBEL),
        (Stream.SEED, Stream.NOISE),
    ):
        assert abs(np.corrcoef(draws[a], draws[b])[0, 1]) < 0.01
    for other in (ClientRandom(5, 1, np.arange(2000)), ClientRandom(6, 0, np.arange(2000))):
        u = other.uniform(rows, Stream.CLICK, ctr)
        assert abs(np.corrcoef(u, draws[Stream.CLICK])[0, 1]) < 0.01
    slots = r.uniform_slots(np.arange(2000), Stream.CLICK, np.zeros(2000, int), 50)
    assert stats.kstest(slots.ravel(), "uniform").pvalue > 1e-4
    for a, b in ((0, 1), (0, 49)):  # neighbouring and distant slots are uncorrelated
        assert abs(np.corrcoef(slots[:, a], slots[:, b])[0, 1]) < 0.1
    ints = r.integers(rows, Stream.QUERY, ctr, 7)
    assert ints.min() == 0 and ints.max() == 6
    assert stats.chisquare(np.bincount(ints, minlength=7)).pvalue > 1e-4
    assert np.unique(r.seeds()).size > 1990


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="seed"):
        ClientRandom(-1, 0, np.arange(2))
    with pytest.raises(ConfigError, match="round"):
        ClientRandom(0, 1.5, np.arange(2))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="client ids"):
        ClientRandom(0, 0, np.array([[1, 2]]))
    with pytest.raises(ConfigError, match="client ids"):
        ClientRandom(0, 0, np.array([-3]))
    with pytest.raises(ConfigError, match="high"):
        ClientRandom(0, 0, np.arange(2)).integers(np.arange(2), Stream.QUERY, np.zeros(2), 0)
