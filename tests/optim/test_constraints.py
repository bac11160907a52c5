"""Safeguards (paper Section 5.6): each constraint, its projection, and the property that the
frecency chains always return a point satisfying every constraint."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import isotonic_regression

from fedrank.core.protocols import Constraint
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.modern import MODERN_WEIGHT_NAMES
from fedrank.models.frecency.safeguards import (
    deployed_frecency_safeguards,
    frecency_safeguards,
    modern_frecency_safeguards,
    publish_integers,
)
from fedrank.models.frecency.weights import (
    BUCKET_WEIGHT_SLICE,
    CUTOFF_SLICE,
    N_CLASSIC_WEIGHTS,
    classic_defaults,
)
from fedrank.optim import Rprop
from fedrank.optim.constraints import (
    TOLERANCE,
    ConstraintChain,
    IncreasingByRaising,
    LowerBound,
    NonIncreasing,
    NonNegative,
    ShiftNonNegative,
    StepBound,
    StrictlyIncreasing,
    isotonic_nonincreasing,
)

MAX = float(np.finfo(np.float64).max)
any_float = st.floats(allow_nan=False, allow_infinity=False)
SETTINGS = settings(max_examples=200, deadline=None)


def vectors(size: int, elements: st.SearchStrategy = any_float) -> st.SearchStrategy:
    return st.lists(elements, min_size=size, max_size=size).map(
        lambda v: np.array(v, dtype=np.float64)
    )


# -- individual constraints ---------------------------------------------------------------


def test_every_constraint_follows_the_protocol() -> None:
    for c in (
        StepBound(),
        NonNegative(),
        LowerBound(1.0),
        NonIncreasing([0, 1]),
        StrictlyIncreasing([0, 1]),
        frecency_safeguards(),
        ShiftNonNegative(),
        IncreasingByRaising([0, 1]),
        deployed_frecency_safeguards(),
    ):
        assert isinstance(c, Constraint)


def test_step_bound_clips_around_previous() -> None:
    c = StepBound(max_change=3.0)
    prev = np.array([10.0, 10.0, 10.0, 10.0])
    out = c.project(np.array([20.0, 0.0, 11.5, 13.0]), prev)
    np.testing.assert_array_equal(out, [13.0, 7.0, 11.5, 13.0])
    assert c.holds(out, prev)
    assert not c.holds(np.array([13.1, 10, 10, 10]), prev)
    assert c.holds(np.array([13.0 + TOLERANCE / 2, 10, 10, 10]), prev)


def test_step_bound_on_some_indices_only() -> None:
    c = StepBound(max_change=1.0, indices=[1])
    out = c.project(np.array([100.0, 100.0]), np.zeros(2))
    np.testing.assert_array_equal(out, [100.0, 1.0])


def test_non_negative_and_lower_bound() -> None:
    out = NonNegative().project(np.array([-5.0, 0.0, 3.0]), np.zeros(3))
    np.testing.assert_array_equal(out, [0.0, 0.0, 3.0])
    assert not np.signbit(out).any()
    out = LowerBound(1.0, indices=slice(1, 3)).project(np.array([-5.0, 0.5, 3.0]), np.zeros(3))
    np.testing.assert_array_equal(out, [-5.0, 1.0, 3.0])
    assert NonNegative().holds(np.array([-TOLERANCE / 2]), np.zeros(1))
    assert not NonNegative().holds(np.array([-1e-6]), np.zeros(1))


def test_non_increasing_pools_adjacent_violators() -> None:
    c = NonIncreasing([0, 1, 2, 3])
    out = c.project(np.array([1.0, 3.0, 2.0, 4.0]), np.zeros(4))
    np.testing.assert_allclose(out, [2.5, 2.5, 2.5, 2.5])
    out = c.project(np.array([5.0, 1.0, 3.0, 0.0]), np.zeros(4))
    np.testing.assert_allclose(out, [5.0, 2.0, 2.0, 0.0])


@SETTINGS
@given(vectors(6, st.floats(-1e6, 1e6)))
def test_non_increasing_projection_is_the_exact_isotonic_regression(x: np.ndarray) -> None:
    reference = isotonic_regression(x, increasing=False).x
    np.testing.assert_allclose(isotonic_nonincreasing(x), reference, rtol=1e-9, atol=1e-6)


def test_reversed_indices_give_non_decreasing() -> None:
    out = NonIncreasing([2, 1, 0]).project(np.array([3.0, 2.0, 1.0]), np.zeros(3))
    np.testing.assert_allclose(out, [2.0, 2.0, 2.0])


def test_strictly_increasing_projection_examples() -> None:
    c = StrictlyIncreasing([0, 1, 2, 3], min_gap=1.0, lower=0.0)
    out = c.project(np.array([4.0, 4.0, 4.0, 4.0]), np.zeros(4))
    np.testing.assert_allclose(out, [2.5, 3.5, 4.5, 5.5])
    out = c.project(np.array([-3.0, 0.2, 10.0, 9.5]), np.zeros(4))
    np.testing.assert_allclose(out, [0.0, 1.0, 9.25, 10.25])
    assert c.holds(out, out)
    feasible = np.array([4.0, 14.0, 31.0, 90.0])
    assert c.project(feasible, feasible) is not feasible
    np.testing.assert_array_equal(c.project(feasible, feasible), feasible)


@settings(max_examples=40, deadline=None)
@given(vectors(4, st.floats(-50, 50)), st.floats(0.1, 5.0), st.floats(-10, 10))
def test_strictly_increasing_projection_is_euclidean(
    x: np.ndarray, gap: float, lower: float
) -> None:
    """Certify optimality by the KKT conditions of min ||z - x||^2 s.t. A z >= b (the
    problem is convex, so they are sufficient): feasibility, multipliers from stationarity
    ``A^T mu = 2 (p - x)`` that are non-negative, and complementary slackness. Independent
    of the isotonic reduction the implementation uses (and, unlike a generic solver, exact)."""
    c = StrictlyIncreasing([0, 1, 2, 3], min_gap=gap, lower=lower)
    p = c.project(x, x)
    a = np.zeros((4, 4))
    a[0, 0] = 1.0  # z0 >= lower
    for k in range(3):  # z[k+1] - z[k] >= gap
        a[k + 1, k], a[k + 1, k + 1] = -1.0, 1.0
    b = np.array([lower, gap, gap, gap])
    slack = a @ p - b
    scale = 1.0 + np.abs(x).max()
    assert slack.min() >= -1e-9 * scale
    mu = np.linalg.solve(a.T, 2.0 * (p - x))
    assert mu.min() >= -1e-9 * scale
    np.testing.assert_allclose(mu * slack, 0.0, atol=1e-8 * scale**2)


@SETTINGS
@given(vectors(5), st.floats(1e-3, 1e3), st.floats(-1e6, 1e6))
@example(np.full(5, MAX), 1.0, 0.0)
@example(np.full(5, -MAX), 1.0, 0.0)
@example(np.array([MAX, -MAX, MAX, -MAX, 0.0]), 1.0, 0.0)
@example(np.full(5, 1e17), 1.0, 0.0)
def test_each_projection_satisfies_its_constraint_for_any_finite_input(
    x: np.ndarray, gap: float, lower: float
) -> None:
    prev = np.zeros(5)
    for c in (
        StepBound(3.0),
        NonNegative(),
        LowerBound(lower),
        NonIncreasing([0, 1, 2, 3, 4]),
        NonIncreasing([4, 0, 2]),
        StrictlyIncreasing([0, 1, 2, 3, 4], gap, lower),
        StrictlyIncreasing([3, 1], gap, lower),
    ):
        x_before = x.copy()
        out = c.project(x, prev)
        np.testing.assert_array_equal(x, x_before)  # never mutates
        assert out.shape == x.shape and np.all(np.isfinite(out))
        assert c.holds(out, prev), (c, x, out)
        np.testing.assert_array_equal(c.project(out, prev), out)  # feasible: unchanged


def test_invalid_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_change"):
        StepBound(max_change=0.0)
    with pytest.raises(ConfigError, match="indices"):
        NonIncreasing(None)
    with pytest.raises(ConfigError, match="repeat"):
        NonIncreasing([1, 1, 2])
    with pytest.raises(ConfigError, match="at least 2"):
        StrictlyIncreasing([3])
    with pytest.raises(ConfigError, match="min_gap"):
        StrictlyIncreasing([0, 1], min_gap=0.0)
    with pytest.raises(ConfigError, match="not a constraint"):
        ConstraintChain(NonNegative(), "bound")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="length >= 9"):
        NonIncreasing(BUCKET_WEIGHT_SLICE).project(np.zeros(5), np.zeros(5))
    with pytest.raises(ConfigError, match="out of range"):
        NonIncreasing([0, 7]).project(np.zeros(5), np.zeros(5))
    with pytest.raises(ConfigError, match="shape"):
        StepBound().project(np.zeros(3), np.zeros(4))
    with pytest.raises(DataFormatError, match="finite"):
        NonNegative().project(np.array([np.nan, 1.0]), np.zeros(2))
    with pytest.raises(ConfigError, match="22 parameters"):
        frecency_safeguards().project(np.zeros(5), np.zeros(5))


# -- the frecency chains -------------------------------------------------------------------


@st.composite
def feasible_classic(draw: st.DrawFn) -> np.ndarray:
    """Feasible previous weights of realistic size (|w| <= ~1e5, see the module docstring)."""
    w = np.array(draw(vectors(N_CLASSIC_WEIGHTS, st.floats(0.0, 1e4))))
    first = draw(st.floats(0.0, 1e3))
    gaps = np.array(draw(st.lists(st.floats(1.0, 1e3), min_size=3, max_size=3)))
    w[CUTOFF_SLICE] = first + np.concatenate([[0.0], np.cumsum(gaps)])
    w[BUCKET_WEIGHT_SLICE] = np.sort(w[BUCKET_WEIGHT_SLICE])[::-1]
    return w


@st.composite
def feasible_modern(draw: st.DrawFn) -> np.ndarray:
    w = np.sort(np.array(draw(vectors(4, st.floats(0.0, 1e4)))))
    return np.append(w, draw(st.floats(1.0, 1e4)))


def assert_all_hold(chain: ConstraintChain, out: np.ndarray, prev: np.ndarray) -> None:
    assert np.all(np.isfinite(out))
    assert chain.violated(out, prev) == []
    for c in chain:
        assert c.holds(out, prev), c


@SETTINGS
@given(
    vectors(N_CLASSIC_WEIGHTS), feasible_classic(), st.one_of(st.just(3.0), st.floats(1e-3, 1e3))
)
@example(np.full(N_CLASSIC_WEIGHTS, MAX), classic_defaults(), 3.0)
@example(np.full(N_CLASSIC_WEIGHTS, -MAX), classic_defaults(), 3.0)
@example(np.array([MAX, -MAX] * (N_CLASSIC_WEIGHTS // 2)), classic_defaults(), 3.0)
@example(-classic_defaults(), classic_defaults(), 1e3)
def test_frecency_chain_output_satisfies_every_constraint(
    proposal: np.ndarray, previous: np.ndarray, max_change: float
) -> None:
    chain = frecency_safeguards(max_change)
    assert chain.holds(previous, previous)
    out = chain.project(proposal, previous)
    assert_all_hold(chain, out, previous)
    cut = out[CUTOFF_SLICE]
    assert cut[0] >= -TOLERANCE and np.all(np.diff(cut) >= 1.0 - TOLERANCE)
    assert np.all(np.diff(out[BUCKET_WEIGHT_SLICE]) <= TOLERANCE)
    assert np.all(out >= -TOLERANCE)
    assert np.all(np.abs(out - previous) <= max_change + TOLERANCE)


@SETTINGS
@given(
    vectors(len(MODERN_WEIGHT_NAMES)),
    feasible_modern(),
    st.one_of(st.just(3.0), st.floats(1e-3, 1e3)),
)
@example(np.full(5, -MAX), np.array([0.0, 0.0, 0.0, 0.0, 1.0]), 3.0)
def test_modern_chain_output_satisfies_every_constraint(
    proposal: np.ndarray, previous: np.ndarray, max_change: float
) -> None:
    chain = modern_frecency_safeguards(max_change)
    assert chain.holds(previous, previous)
    out = chain.project(proposal, previous)
    assert_all_hold(chain, out, previous)
    assert np.all(out >= -TOLERANCE) and out[4] >= 1.0 - TOLERANCE
    assert np.all(np.diff(out[:4]) >= -TOLERANCE)  # low <= medium <= high <= veryHigh
    assert np.all(np.abs(out - previous) <= max_change + TOLERANCE)


def test_firefox_defaults_are_feasible_and_a_fixed_point() -> None:
    chain = frecency_safeguards()
    theta = classic_defaults()
    assert chain.holds(theta, theta)
    np.testing.assert_array_equal(chain.project(theta, theta), theta)


def test_frecency_chain_repairs_a_bad_proposal() -> None:
    prev = classic_defaults()
    proposal = prev.copy()
    proposal[CUTOFF_SLICE] = [5.0, 4.5, 31.0, 90.0]  # cutoffs out of order
    proposal[BUCKET_WEIGHT_SLICE] = [100.0, 102.0, 50.0, 30.0, 10.0]  # older bucket heavier
    proposal[12] = -50.0  # negative bonus, far away
    out = frecency_safeguards().project(proposal, prev)
    # cutoffs: projection gives [4.25, 5.25, ...]; the step bound then lifts 5.25 to 14 - 3
    np.testing.assert_allclose(out[CUTOFF_SLICE], [4.25, 11.0, 31.0, 90.0])
    # buckets: pooled to [101, 101, ...]; the step bound then caps 101 at 70 + 3
    np.testing.assert_allclose(out[BUCKET_WEIGHT_SLICE], [101.0, 73.0, 50.0, 30.0, 10.0])
    assert out[12] == prev[12] - 3.0
    assert frecency_safeguards().violated(proposal, prev) != []


def test_modern_chain_layout() -> None:
    chain = modern_frecency_safeguards(2.0)
    assert MODERN_WEIGHT_NAMES[-1] == "halfLifeDays"
    prev = np.array([10.0, 20.0, 30.0, 40.0, 5.0])
    out = chain.project(np.array([25.0, 20.0, 30.0, 40.0, -7.0]), prev)
    np.testing.assert_allclose(out, [12.0, 22.0, 30.0, 40.0, 3.0])  # pooled 22.5, 22.5
    assert chain.holds(out, prev)
    assert "dim=5" in repr(chain)


# -- the deployed server's safeguards (mozilla/telemetry-streaming, Scala) ------------------
# Expected values below are worked out by hand from FederatedLearningRPropOptimizer.scala:
#   if (weights.min < 0) weights.map(_ - min); then
#   w(0) = max(w(0), 1); w(k) = max(w(k), w(k-1) + 1) for k = 1, 2, 3.


def test_shift_non_negative_moves_every_weight_not_only_the_negative_one() -> None:
    c = ShiftNonNegative()
    x = np.array([-3.0, 0.0, 5.0, 1.5])
    out = c.project(x, np.zeros(4))
    np.testing.assert_array_equal(out, [0.0, 3.0, 8.0, 4.5])  # all + 3
    np.testing.assert_array_equal(x, [-3.0, 0.0, 5.0, 1.5])  # input untouched
    # clipping (the paper's reading) would only have moved the negative weight
    np.testing.assert_array_equal(NonNegative().project(x, np.zeros(4)), [0.0, 0.0, 5.0, 1.5])
    # the most negative weight sets the shift
    out = c.project(np.array([-1.0, -4.0, 2.0]), np.zeros(3))
    np.testing.assert_array_equal(out, [3.0, 0.0, 6.0])


def test_shift_non_negative_on_some_indices_and_feasible_points() -> None:
    c = ShiftNonNegative(indices=[1, 2])
    out = c.project(np.array([-10.0, -2.0, 4.0, -7.0]), np.zeros(4))
    np.testing.assert_array_equal(out, [-10.0, 0.0, 6.0, -7.0])  # only indices 1 and 2
    feasible = np.array([0.0, 3.0, 2000.0])
    out = ShiftNonNegative().project(feasible, feasible)
    assert out is not feasible
    np.testing.assert_array_equal(out, feasible)
    # exact, like the Scala "min < 0": a tiny negative value is a violation and is shifted
    assert not ShiftNonNegative().holds(np.array([-1e-12, 5.0]), np.zeros(2))
    out = ShiftNonNegative().project(np.array([-1e-12, 5.0]), np.zeros(2))
    np.testing.assert_array_equal(out, [0.0, 5.0 + 1e-12])
    assert ShiftNonNegative().holds(np.array([-0.0, 0.0]), np.zeros(2))
    with pytest.raises(DataFormatError, match="overflows"):
        ShiftNonNegative().project(np.array([-MAX, MAX]), np.zeros(2))


def test_increasing_by_raising_pushes_collisions_upward() -> None:
    c = IncreasingByRaising([0, 1, 2, 3], min_gap=1.0, lower=1.0)
    prev = np.zeros(4)
    np.testing.assert_array_equal(c.project(np.full(4, 7.0), prev), [7.0, 8.0, 9.0, 10.0])
    np.testing.assert_array_equal(
        c.project(np.array([5.0, 3.0, 4.0, 10.0]), prev), [5.0, 6.0, 7.0, 10.0]
    )
    np.testing.assert_array_equal(
        c.project(np.array([0.0, 0.5, 30.0, 90.0]), prev), [1.0, 2.0, 30.0, 90.0]
    )
    # without a lower bound (revision 5c9abf3) the first value is never moved
    free = IncreasingByRaising([0, 1, 2, 3])
    np.testing.assert_array_equal(
        free.project(np.array([-3.0, -5.0, 0.0, 0.0]), prev), [-3.0, -2.0, 0.0, 1.0]
    )
    # the Euclidean projection would lower the first values instead
    euclid = StrictlyIncreasing([0, 1, 2, 3], min_gap=1.0, lower=1.0)
    np.testing.assert_allclose(euclid.project(np.full(4, 7.0), prev), [5.5, 6.5, 7.5, 8.5])
    feasible = np.array([4.0, 14.0, 31.0, 90.0])
    assert c.holds(feasible, prev) and c.project(feasible, prev) is not feasible
    np.testing.assert_array_equal(c.project(feasible, prev), feasible)
    with pytest.raises(DataFormatError, match="largest float"):
        IncreasingByRaising([0, 1]).project(np.array([MAX, 0.0]), np.zeros(2))


def test_deployed_chain_shifts_first_then_orders_the_cutoffs() -> None:
    x = classic_defaults()
    x[CUTOFF_SLICE] = [0.5, -2.0, 0.0, 90.0]  # negative and colliding cutoffs
    x[BUCKET_WEIGHT_SLICE] = [100.0, 120.0, 50.0, 30.0, 10.0]  # an older bucket heavier
    x[9] = -3.0  # embedVisitBonus: the most negative weight
    chain = deployed_frecency_safeguards()
    out = chain.project(x, classic_defaults())
    # shift all 22 weights by +3: cutoffs [3.5, 1, 3, 93]; ordering: [3.5, 4.5, 5.5, 93]
    expected = classic_defaults() + 3.0
    expected[CUTOFF_SLICE] = [3.5, 4.5, 5.5, 93.0]
    expected[BUCKET_WEIGHT_SLICE] = [103.0, 123.0, 53.0, 33.0, 13.0]  # not reordered
    expected[9] = 0.0
    np.testing.assert_array_equal(out, expected)
    assert chain.holds(out, x)
    # ordering first, then shifting, would have given cutoffs [4, 5, 6, 93]
    assert not np.array_equal(out[CUTOFF_SLICE], [4.0, 5.0, 6.0, 93.0])
    # no step bound: typedVisitBonus may jump by far more than the step sizes' 3
    y = classic_defaults()
    y[12] = 5000.0
    y[0] = -1000.0
    out = chain.project(y, classic_defaults())
    assert out[12] == 6000.0 and out[0] == 0.0 + 1.0  # shifted to 0, then raised to 1
    assert len(chain) == 2 and "dim=22" in repr(chain)


def test_deployed_chain_first_cutoff_bound_per_revision() -> None:
    x = classic_defaults()
    x[CUTOFF_SLICE] = 0.0
    out = deployed_frecency_safeguards().project(x, x)  # 460154e: first cutoff >= 1
    np.testing.assert_array_equal(out[CUTOFF_SLICE], [1.0, 2.0, 3.0, 4.0])
    out = deployed_frecency_safeguards(first_cutoff_lower=None).project(x, x)  # 5c9abf3
    np.testing.assert_array_equal(out[CUTOFF_SLICE], [0.0, 1.0, 2.0, 3.0])
    theta = classic_defaults()
    assert deployed_frecency_safeguards().holds(theta, theta)
    np.testing.assert_array_equal(deployed_frecency_safeguards().project(theta, theta), theta)


def test_one_deployed_server_iteration_end_to_end() -> None:
    """FederatedLearningRPropOptimizer.fit (weights + lr * signum(mean update), then
    applyConstraints) followed by the sink's math.round, worked out by hand for an
    optimizer state bootstrapped with close cutoffs and fresh step sizes of 2."""
    weights = classic_defaults()
    weights[CUTOFF_SLICE] = [1.5, 2.0, 2.2, 90.0]
    mean_update = np.zeros(N_CLASSIC_WEIGHTS)  # what the clients sent: minus the gradient
    mean_update[[0, 1, 2, 9]] = [1.0, -1.0, -0.3, -1.0]
    # + 2 * signum: cutoffs [3.5, 0.0, 0.2, 90], embedVisitBonus 0 - 2 = -2
    # shift by +2: cutoffs [5.5, 2.0, 2.2, 92], every other weight + 2
    # order: [5.5, 6.5, 7.5, 92]; round half up: [6, 7, 8, 92]
    opt = Rprop(eta_plus=2.0, eta_minus=0.6, step_init=2.0, step_min=1.0, step_max=3.0)
    step, _ = opt.update(-mean_update, opt.init(weights), weights)
    state_weights = deployed_frecency_safeguards().project(weights + step, weights)
    expected = classic_defaults() + 2.0
    expected[CUTOFF_SLICE] = [5.5, 6.5, 7.5, 92.0]
    expected[9] = 0.0
    np.testing.assert_array_equal(state_weights, expected)
    published = publish_integers(state_weights)
    expected[CUTOFF_SLICE] = [6.0, 7.0, 8.0, 92.0]  # np.rint would give [6, 6, 8, 92]
    np.testing.assert_array_equal(published, expected)


def test_publish_integers_rounds_half_up_like_java_math_round() -> None:
    x = np.array(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.4, -2.6, 7.0, -0.0, -0.3]
        + [0.49999999999999994, -0.49999999999999994, 4503599627370495.0 / 2**23]
    )
    before = x.copy()
    out = publish_integers(x)
    expected = [1, 2, 3, 0, -1, -2, 2, 3, -2, -3, 7, 0, 0, 0, 0, 536870912]
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.float64
    assert not np.signbit(out[out == 0.0]).any()  # -0.0 published as 0
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(publish_integers(np.arange(3)), [0.0, 1.0, 2.0])
    assert publish_integers(np.ones((2, 2))).shape == (2, 2)


def test_publish_integers_refuses_what_an_int_cannot_hold() -> None:
    np.testing.assert_array_equal(
        publish_integers(np.array([2147483647.4, -2147483648.5])), [2147483647, -2147483648]
    )
    with pytest.raises(DataFormatError, match="Int range"):
        publish_integers(np.array([2147483647.5]))
    with pytest.raises(DataFormatError, match="Int range"):
        publish_integers(np.array([-2147483648.6]))
    with pytest.raises(DataFormatError, match="finite"):
        publish_integers(np.array([1.0, np.nan]))
    with pytest.raises(DataFormatError, match="numeric"):
        publish_integers(np.array(["1"]))


def test_invalid_deployed_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="indices"):
        IncreasingByRaising(None)
    with pytest.raises(ConfigError, match="at least 2"):
        IncreasingByRaising([3])
    with pytest.raises(ConfigError, match="min_gap"):
        IncreasingByRaising([0, 1], min_gap=0.0)
    with pytest.raises(ConfigError, match="lower"):
        IncreasingByRaising([0, 1], lower=1e13)
    with pytest.raises(ConfigError, match="repeat"):
        ShiftNonNegative([1, 1])
    with pytest.raises(ConfigError, match="22 parameters"):
        deployed_frecency_safeguards().project(np.zeros(5), np.zeros(5))


BIG = 1e300  # beyond this the shift of the deployed rule can overflow (it raises)


@SETTINGS
@given(vectors(5, st.floats(-BIG, BIG)), st.floats(1e-3, 1e3), st.floats(-1e6, 1e6))
@example(np.full(5, 1e17), 1.0, 0.0)
@example(np.array([BIG, -BIG, BIG, -BIG, 0.0]), 1.0, 0.0)
@example(np.array([1.0 + 2.0**-52, 0.0, 0.0, 0.0, 0.0]), 1.0, 0.0)
def test_deployed_projections_satisfy_their_constraint(
    x: np.ndarray, gap: float, lower: float
) -> None:
    prev = np.zeros(5)
    for c in (
        ShiftNonNegative(),
        ShiftNonNegative([4, 0, 2]),
        IncreasingByRaising([0, 1, 2, 3, 4], gap, lower),
        IncreasingByRaising([3, 1], gap),
    ):
        x_before = x.copy()
        out = c.project(x, prev)
        np.testing.assert_array_equal(x, x_before)  # never mutates
        assert out.shape == x.shape and np.all(np.isfinite(out))
        assert c.holds(out, prev), (c, x, out)
        np.testing.assert_array_equal(c.project(out, prev), out)  # feasible: unchanged
        if c.holds(x, prev):
            np.testing.assert_array_equal(out, x)
        if isinstance(c, IncreasingByRaising):  # values only ever go up
            assert np.all(out >= x)
            z = out[list(c.indices)]
            assert np.all(np.diff(z) >= c.min_gap - TOLERANCE)


@SETTINGS
@given(vectors(N_CLASSIC_WEIGHTS, st.floats(-BIG, BIG)))
@example(-classic_defaults())
@example(np.zeros(N_CLASSIC_WEIGHTS))
def test_deployed_chain_output_satisfies_every_constraint(proposal: np.ndarray) -> None:
    chain = deployed_frecency_safeguards()
    out = chain.project(proposal, classic_defaults())
    assert_all_hold(chain, out, classic_defaults())
    assert np.all(out >= 0.0)
    cut = out[CUTOFF_SLICE]
    assert cut[0] >= 1.0 and np.all(np.diff(cut) >= 1.0 - TOLERANCE)
    np.testing.assert_array_equal(chain.project(out, out), out)
