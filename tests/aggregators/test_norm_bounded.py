"""NormBounded: clipping to the state's bound, the within-bound count, Andrew et al.'s
adaptive bound over iterations (converges to the quantile, barely moved by huge updates),
the cap on one client's influence, merges of one iteration only, and JSON state. The monoid
laws are in tests/conformance."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrank.aggregators import NormBounded, TrimmedMean, WeightedMean
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy.clipping import clip_l2


def _updates(rng: np.random.Generator, norms: np.ndarray, dim: int) -> np.ndarray:
    """Random directions with the given L2 norms."""
    directions = rng.normal(size=(norms.size, dim))
    return directions / np.linalg.norm(directions, axis=1, keepdims=True) * norms[:, None]


def _iterate(agg: NormBounded, draw, iterations: int) -> list[float]:
    """``iterations`` closes of an in-process server: fold that iteration's updates into
    its empty state, then move on with ``next_zero``; the bound of every iteration."""
    state, bounds = agg.zero(), []
    for t in range(iterations):
        bounds.append(state.bound)
        rows = draw(t)
        state = agg.accumulate_batch(state, MessageBatch.of_vectors(rows, np.ones(len(rows))))
        state = agg.next_zero(state)
    return bounds


def test_updates_are_clipped_to_the_bound_and_counted() -> None:
    agg = NormBounded(WeightedMean(2), bound=1.0)
    rows = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [0.6, 0.8]])
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(rows, np.ones(4)))
    assert (state.within, state.count, state.bound) == (3, 4, 1.0)  # norm == bound is within
    expected = np.array([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [0.6, 0.8]]).mean(axis=0)
    np.testing.assert_allclose(agg.finalize(state), expected, rtol=1e-15)
    one = agg.accumulate(agg.zero(), Message(update=np.array([3.0, 4.0]), n=2))
    assert (one.within, one.count) == (0, 1)
    np.testing.assert_allclose(agg.finalize(one), [0.6, 0.8], rtol=1e-15)


def test_clip_l2_leaves_updates_within_the_bound_bit_for_bit() -> None:
    rows = np.array([[0.1, 0.2], [3.0, 4.0], [0.0, 0.0], [1e-310, 0.0]])
    out = clip_l2(rows, 5.0)
    assert out.tobytes() == rows.tobytes()
    np.testing.assert_allclose(np.linalg.norm(clip_l2(rows, 1.0)[1]), 1.0, rtol=1e-15)


def test_one_huge_update_moves_the_mean_by_at_most_its_clipped_share() -> None:
    """99 honest updates and one of norm 1e6: clipped at C, the attacker moves the mean of
    100 equally weighted updates by at most 2 C / 100 (its clipped update replaces an
    honest one's share); without the bound it moves it by about 1e4."""
    rng = np.random.default_rng(0)
    honest = _updates(rng, rng.uniform(0.5, 1.5, size=99), 22)
    attacker = np.full((1, 22), -1e6 / math.sqrt(22))
    bound = 1.0
    agg = NormBounded(WeightedMean(22), bound=bound)

    def mean_of(rows: np.ndarray) -> np.ndarray:
        batch = MessageBatch.of_vectors(rows, np.ones(len(rows)))
        return agg.finalize(agg.accumulate_batch(agg.zero(), batch))

    honest_only = mean_of(np.vstack([honest, honest[:1]]))  # 100 honest updates
    attacked = mean_of(np.vstack([honest, attacker]))
    assert np.linalg.norm(attacked - honest_only) <= 2 * bound / 100 + 1e-12
    plain = WeightedMean(22)
    raw = plain.finalize(
        plain.accumulate_batch(
            plain.zero(), MessageBatch.of_vectors(np.vstack([honest, attacker]), np.ones(100))
        )
    )
    assert np.linalg.norm(raw - honest_only) > 1e3


@pytest.mark.parametrize("start", [20.0, 0.05])
def test_the_adaptive_bound_converges_to_the_median_norm(start: float) -> None:
    """Andrew et al.'s geometric rule with gamma = 0.5: from 10x above or 40x below the
    honest median norm (2.0), the bound settles within 10% of it."""
    rng = np.random.default_rng(1)
    agg = NormBounded(WeightedMean(10), bound=start, quantile=0.5, eta=0.2)
    bounds = _iterate(agg, lambda t: _updates(rng, rng.uniform(1.0, 3.0, size=200), 10), 150)
    late = np.array(bounds[100:])
    assert abs(late.mean() - 2.0) < 0.2, late.mean()
    assert np.all(np.abs(late - 2.0) < 0.4)
    assert abs(bounds[1] / bounds[0] - math.exp(-0.2 * (1 if start > 3 else -1) * 0.5)) < 1e-12


def test_a_fifth_of_huge_updates_moves_the_adaptive_bound_only_a_little() -> None:
    """20% of the updates with norm 1e6: each counts once as "not within", so the bound
    moves from the honest median (2.0) to about their 62.5% quantile (2.25), far below the
    attackers' norms; it stays inside the honest range."""
    rng = np.random.default_rng(2)

    def draw(t: int) -> np.ndarray:
        honest = _updates(rng, rng.uniform(1.0, 3.0, size=160), 10)
        huge = _updates(rng, np.full(40, 1e6), 10)
        return np.vstack([honest, huge])

    agg = NormBounded(WeightedMean(10), bound=2.0, quantile=0.5)
    late = np.array(_iterate(agg, draw, 150)[100:])
    assert 2.05 < late.mean() < 2.45, late.mean()
    assert late.max() < 3.0


def test_next_zero_keeps_or_fixes_the_bound_and_clamps() -> None:
    fixed = NormBounded(WeightedMean(2), bound=1.0)
    state = fixed.accumulate(fixed.zero(), Message(update=np.array([5.0, 0.0])))
    assert fixed.state_to_json(fixed.next_zero(state)) == fixed.state_to_json(fixed.zero())
    adaptive = NormBounded(WeightedMean(2), bound=1.0, quantile=0.5, max_bound=1.05)
    empty = adaptive.zero()
    assert adaptive.next_zero(empty).bound == 1.0  # an iteration without updates
    outside = adaptive.accumulate(empty, Message(update=np.array([5.0, 0.0])))
    free = NormBounded(WeightedMean(2), bound=1.0, quantile=0.5)
    assert free.next_bound(outside) == pytest.approx(math.exp(0.1), rel=1e-15)  # b = 0: grows
    assert adaptive.next_zero(outside).bound == 1.05  # clamped to max_bound
    nxt = adaptive.next_zero(outside)
    assert (nxt.within, nxt.count) == (0, 0)
    np.testing.assert_array_equal(nxt.inner.weighted_sum, np.zeros(2))


def test_states_of_different_bounds_do_not_merge() -> None:
    agg = NormBounded(WeightedMean(2), bound=1.0, quantile=0.5)
    first = agg.accumulate(agg.zero(), Message(update=np.array([5.0, 0.0])))
    second = agg.next_zero(first)
    with pytest.raises(DataFormatError, match="different norm bounds.*next_zero"):
        agg.merge(first, second)
    merged = agg.merge(second, agg.accumulate(second, Message(update=np.ones(2))))
    assert merged.bound == second.bound and merged.count == 1


def test_wrapping_a_trimmed_mean_clips_then_trims() -> None:
    rows = np.array([[10.0, 0.0], [0.5, 0.0], [0.4, 0.0], [0.3, 0.0], [-10.0, 0.0]])
    agg = NormBounded(TrimmedMean(2, trim=0.2), bound=1.0)
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(rows, np.ones(5)))
    np.testing.assert_allclose(agg.finalize(state), [0.4, 0.0])
    assert agg.capacity(state) == 100_000 - 5
    assert NormBounded(WeightedMean(2), bound=1.0).capacity(state) is None


def test_json_round_trip_is_exact() -> None:
    agg = NormBounded(TrimmedMean(3), bound=0.7, quantile=0.3)
    rng = np.random.default_rng(4)
    state = agg.next_zero(
        agg.accumulate_batch(
            agg.zero(), MessageBatch.of_vectors(rng.normal(size=(9, 3)), np.ones(9))
        )
    )
    state = agg.accumulate_batch(
        state, MessageBatch.of_vectors(rng.normal(size=(4, 3)), np.ones(4))
    )
    data = json.loads(json.dumps(agg.state_to_json(state), allow_nan=False))
    back = agg.state_from_json(data)
    assert back.bound == state.bound and back.bound != 0.7
    assert agg.state_to_json(back) == agg.state_to_json(state)
    agg.check_consistent(back)
    with pytest.raises(DataFormatError, match="expected 'NormBounded'"):
        agg.state_from_json(data["inner"])
    with pytest.raises(DataFormatError, match="within must be an integer"):
        agg.state_from_json({**data, "within": 1.5})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bound": 0.0}, r"bound \(the L2 norm bound C\) must be > 0"),
        ({"bound": float("inf")}, "bound"),
        ({"bound": 1.0, "quantile": 1.0}, "quantile"),
        ({"bound": 1.0, "quantile": 0.0}, "quantile"),
        ({"bound": 1.0, "eta": 0.0}, "eta"),
        ({"bound": 1.0, "min_bound": 2.0}, r"must lie in \[min_bound, max_bound\]"),
    ],
)
def test_bad_parameters_are_config_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        NormBounded(WeightedMean(2), **kwargs)


@settings(max_examples=60, deadline=None)
@given(
    rows=hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 20), st.integers(1, 4)),
        elements=st.floats(-1e6, 1e6, allow_nan=False),
    ),
    bound=st.floats(1e-3, 1e3),
)
def test_every_folded_update_is_within_the_bound(rows: np.ndarray, bound: float) -> None:
    """Whatever the clients send, the aggregate of a norm-bounded mean has norm <= C, and
    ``within`` counts exactly the rows of norm <= C."""
    agg = NormBounded(WeightedMean(rows.shape[1]), bound=bound)
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(rows, np.ones(len(rows))))
    assert np.linalg.norm(agg.finalize(state)) <= bound * (1 + 1e-12)
    assert state.within == int(np.sum(np.linalg.norm(rows, axis=1) <= bound))
