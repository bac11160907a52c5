"""TrimmedMean and CoordinateMedian (Yin et al. 2018): the statistics against numpy, their
robustness to outliers, unweighted folding, exact merges and the max_rows bound. The
monoid laws are in tests/conformance."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrank.aggregators import CoordinateMedian, TrimmedMean, WeightedMean
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError, DataFormatError

SETTINGS = settings(max_examples=60, deadline=None)
_finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


def _fold(agg: TrimmedMean | CoordinateMedian, rows: np.ndarray, n: np.ndarray | None = None):
    weights = np.ones(rows.shape[0]) if n is None else n
    return agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(rows, weights))


def _reference_trimmed_mean(rows: np.ndarray, trim: float) -> np.ndarray:
    c = rows.shape[0]
    k = math.floor(trim * c)
    return np.sort(rows, axis=0)[k : c - k].mean(axis=0)


@pytest.mark.parametrize("c", [1, 2, 5, 10, 11, 40])
@pytest.mark.parametrize("trim", [0.0, 0.1, 0.25, 0.49])
def test_trimmed_mean_matches_the_definition(c: int, trim: float) -> None:
    rows = np.random.default_rng(c).normal(size=(c, 4))
    agg = TrimmedMean(4, trim=trim)
    np.testing.assert_allclose(
        agg.finalize(_fold(agg, rows)), _reference_trimmed_mean(rows, trim), rtol=1e-12
    )


def test_trim_zero_is_the_unweighted_mean_and_weights_are_ignored() -> None:
    rng = np.random.default_rng(1)
    rows, n = rng.normal(size=(30, 3)), rng.integers(1, 100, size=30)
    agg = TrimmedMean(3, trim=0.0)
    np.testing.assert_allclose(agg.finalize(_fold(agg, rows, n)), rows.mean(axis=0), rtol=1e-12)
    # One client, one row: claiming a huge n changes nothing (the weighted mean follows it).
    inflated = n.copy()
    inflated[0] = 10**9
    assert agg.state_to_json(_fold(agg, rows, inflated)) == agg.state_to_json(_fold(agg, rows, n))
    mean = WeightedMean(3)
    heavy = mean.finalize(
        mean.accumulate_batch(mean.zero(), MessageBatch.of_vectors(rows, inflated))
    )
    np.testing.assert_allclose(heavy, rows[0], rtol=1e-4)


@pytest.mark.parametrize("c", [1, 2, 3, 8, 9])
def test_median_matches_numpy(c: int) -> None:
    rows = np.random.default_rng(c).normal(size=(c, 5))
    agg = CoordinateMedian(5)
    np.testing.assert_array_equal(agg.finalize(_fold(agg, rows)), np.median(rows, axis=0))


def test_empty_state_finalizes_to_zeros() -> None:
    for agg in (TrimmedMean(3), CoordinateMedian(3)):
        out = agg.finalize(agg.zero())
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, np.zeros(3))


def test_a_few_huge_updates_do_not_move_the_robust_aggregates() -> None:
    """Issue 15, F5 at the aggregator: 100 honest updates and 5 of norm ~1e6. The mean
    follows the attackers; the median and the 10%-trimmed mean stay with the honest."""
    rng = np.random.default_rng(5)
    direction = np.where(rng.random(22) < 0.5, -1.0, 1.0)
    honest = direction + rng.normal(0.0, 1.0, size=(100, 22))
    rows = np.vstack([honest, np.tile(-1e6 * direction, (5, 1))])
    mean = WeightedMean(22)
    plain = mean.finalize(
        mean.accumulate_batch(mean.zero(), MessageBatch.of_vectors(rows, np.ones(105)))
    )
    assert np.all(np.sign(plain) == -direction)  # the attackers decide every weight
    for agg in (TrimmedMean(22, trim=0.1), CoordinateMedian(22)):
        robust = agg.finalize(_fold(agg, rows))
        assert np.all(np.sign(robust) == direction), agg
        assert np.all(np.abs(robust - honest.mean(axis=0)) < 0.5), agg


def test_negative_zero_is_stored_as_zero() -> None:
    agg = CoordinateMedian(2)
    a = agg.accumulate(agg.zero(), Message(update=np.array([-0.0, 1.0])))
    b = agg.accumulate(agg.zero(), Message(update=np.array([0.0, 1.0])))
    assert agg.state_to_json(a) == agg.state_to_json(b)
    assert not np.signbit(a.values).any()


def test_merge_is_exact_through_a_tree_of_proxies() -> None:
    """Any partition, folded per proxy and merged in any order, gives the very state (and
    so bit for bit the aggregate) of folding every row in one place."""
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(500, 6)) * rng.lognormal(size=(500, 1))
    agg = TrimmedMean(6, trim=0.15)
    flat = _fold(agg, rows)
    label = rng.integers(0, 7, size=500)
    partials = [_fold(agg, rows[label == k]) for k in rng.permutation(7)]
    merged = agg.zero()
    for part in partials:
        merged = agg.merge(merged, part)
    assert agg.state_to_json(merged) == agg.state_to_json(flat)
    assert agg.finalize(merged).tobytes() == agg.finalize(flat).tobytes()


def test_sequential_and_batch_folds_keep_sorted_fortran_columns() -> None:
    rows = np.random.default_rng(3).normal(size=(20, 3))
    agg = CoordinateMedian(3)
    state = agg.zero()
    for row in rows:
        state = agg.accumulate(state, Message(update=row))
    assert state.values.flags.f_contiguous
    np.testing.assert_array_equal(state.values, np.sort(rows, axis=0))
    assert agg.state_to_json(state) == agg.state_to_json(_fold(agg, rows))
    agg.check_consistent(state)


def test_max_rows_bounds_accumulate_batch_and_merge() -> None:
    agg = TrimmedMean(2, max_rows=4)
    three = _fold(agg, np.ones((3, 2)))
    assert agg.capacity(three) == 1
    four = agg.accumulate(three, Message(update=np.zeros(2)))
    assert agg.capacity(four) == 0
    with pytest.raises(DataFormatError, match=r"5 rows, more than its max_rows = 4.*Raise"):
        agg.accumulate(four, Message(update=np.zeros(2)))
    with pytest.raises(DataFormatError, match="max_rows = 4"):
        agg.accumulate_batch(three, MessageBatch.of_vectors(np.ones((2, 2)), np.ones(2)))
    with pytest.raises(DataFormatError, match="max_rows = 4"):
        agg.merge(three, three)
    assert agg.merge(four, agg.zero()) is four  # the empty state never overflows


def test_json_round_trip_is_exact_and_typed() -> None:
    rows = np.random.default_rng(9).normal(size=(7, 3))
    agg = TrimmedMean(3)
    state = _fold(agg, rows)
    back = agg.state_from_json(json.loads(json.dumps(agg.state_to_json(state))))
    assert back.values.tobytes() == state.values.tobytes() and back.count == 7
    assert back.values.flags.f_contiguous
    with pytest.raises(DataFormatError, match="expected 'CoordinateMedian'"):
        CoordinateMedian(3).state_from_json(agg.state_to_json(state))
    with pytest.raises(ConfigError, match="dimension 3, expected 4"):
        TrimmedMean(4).state_from_json(agg.state_to_json(state))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: TrimmedMean(3, trim=0.5), r"\[0, 0\.5\)"),
        (lambda: TrimmedMean(3, trim=-0.1), r"\[0, 0\.5\)"),
        (lambda: TrimmedMean(3, trim=float("nan")), r"\[0, 0\.5\)"),
        (lambda: TrimmedMean(3, max_rows=0), "max_rows must be >= 1"),
        (lambda: CoordinateMedian(3, max_rows=2.5), "max_rows must be a positive integer"),
        (lambda: CoordinateMedian(0), "dim must be a positive integer"),
    ],
)
def test_bad_parameters_are_config_errors(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build()


def test_bad_updates_and_weights_are_refused() -> None:
    agg = CoordinateMedian(2)
    with pytest.raises(DataFormatError, match="NaN"):
        agg.accumulate(agg.zero(), Message(update=np.array([np.nan, 0.0])))
    with pytest.raises(DataFormatError, match="weight n must be finite and >= 0"):
        agg.accumulate(agg.zero(), Message(update=np.zeros(2), n=-1))
    with pytest.raises(DataFormatError, match="finite and >= 0"):
        _fold(agg, np.zeros((2, 2)), np.array([1.0, -1.0]))


# -- properties ----------------------------------------------------------------------


@st.composite
def _matrices(draw: st.DrawFn, min_rows: int = 1) -> np.ndarray:
    c = draw(st.integers(min_rows, 25))
    d = draw(st.integers(1, 5))
    return draw(hnp.arrays(np.float64, (c, d), elements=_finite))


@SETTINGS
@given(rows=_matrices())
def test_median_lies_within_each_columns_range(rows: np.ndarray) -> None:
    agg = CoordinateMedian(rows.shape[1])
    out = agg.finalize(_fold(agg, rows))
    assert np.all(rows.min(axis=0) <= out) and np.all(out <= rows.max(axis=0))
    np.testing.assert_allclose(out, np.median(rows, axis=0), rtol=1e-12, atol=1e-300)


@SETTINGS
@given(
    honest=_matrices(min_rows=4),
    trim=st.floats(0.05, 0.45),
    outlier=st.floats(-1e300, 1e300, allow_nan=False),
    data=st.data(),
)
def test_trimmed_mean_stays_within_the_honest_range(
    honest: np.ndarray, trim: float, outlier: float, data: st.DataObject
) -> None:
    """Yin et al.'s guarantee: with at most ``floor(trim * C)`` arbitrary rows among
    ``C``, the trimmed mean of every coordinate lies within the honest rows' range."""
    h, d = honest.shape
    # The largest f with f <= floor(trim * (h + f)): that many outliers are trimmed away.
    f_max = max((f for f in range(h + 1) if f <= math.floor(trim * (h + f))), default=0)
    f = data.draw(st.integers(0, f_max), label="outliers")
    signs = data.draw(hnp.arrays(np.float64, (f, d), elements=st.sampled_from([-1.0, 1.0])))
    rows = np.vstack([honest, outlier * signs])
    rows = rows[np.random.default_rng(h + f).permutation(h + f)]
    agg = TrimmedMean(d, trim=trim)
    out = agg.finalize(_fold(agg, rows))
    assert np.all(honest.min(axis=0) <= out) and np.all(out <= honest.max(axis=0))


@SETTINGS
@given(rows=_matrices(), trim=st.floats(0.0, 0.49))
def test_trimmed_mean_lies_between_the_kept_values(rows: np.ndarray, trim: float) -> None:
    agg = TrimmedMean(rows.shape[1], trim=trim)
    c = rows.shape[0]
    k = agg.trimmed(c)
    assert k >= 0 and c - 2 * k >= 1
    kept = np.sort(rows, axis=0)[k : c - k]
    out = agg.finalize(_fold(agg, rows))
    assert np.all(kept[0] <= out) and np.all(out <= kept[-1])
