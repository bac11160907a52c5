"""Conformance checks run on every aggregator (in the spirit of scikit-learn's
``parametrize_with_checks``): monoid laws, order independence, batch == sequential, empty
input, dtype/shape, exact JSON state round trips (odd values too: -0.0, subnormals, huge
and infinite sums, float32 updates), refusal of malformed saved states, no mutation of
inputs.

Integer-count aggregators (SignVote) must agree exactly, and so must the robust statistics
(TrimmedMean, CoordinateMedian, also behind a NormBounded clip): their state is each
coordinate's sorted values, one canonical form for any order or grouping. Float sums
(WeightedMean, MetricMean, NormBounded around a mean) agree to ``rtol=1e-12`` (plus
``atol=1e-9`` for coordinates whose terms cancel).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.aggregators import (
    CoordinateMedian,
    GatedMean,
    MetricMean,
    NormBounded,
    SignVote,
    TrimmedMean,
    WeightedMean,
)
from fedrank.aggregators.es_gradient import ESGradient, ESGradientState
from fedrank.aggregators.gated_mean import GatedMeanState
from fedrank.aggregators.mean import WeightedMeanState
from fedrank.aggregators.metrics import MetricMeanState
from fedrank.aggregators.norm_bounded import NormBoundedState
from fedrank.aggregators.robust import SortedColumnsState
from fedrank.aggregators.sign_vote import SignVoteState
from fedrank.core.message import ESMessage, Message, MessageBatch
from fedrank.errors import ConfigError, DataFormatError
from tests.conformance.statekit import as_text, assert_identical, loads, malformed

METRIC_NAMES = ("loss", "chars_typed", "selected_rank")


def _as_es_message(m: Message) -> ESMessage:
    """An ES report made from a drawn message: seed from n, metrics from the update."""
    return ESMessage(
        seed=m.n * 7919, metric=float(m.update[0]), antithetic_metric=float(m.update[-1])
    )


def _es_batch(agg: ESGradient, messages: Sequence[ESMessage], dim: int) -> Any:
    seeds = np.array([m.seed for m in messages], dtype=np.int64)
    metric = np.array([m.metric for m in messages], dtype=np.float64)
    anti = np.array([m.antithetic_metric for m in messages], dtype=np.float64)
    return agg.accumulate_batch(agg.zero(), MessageBatch.of_es(seeds, metric, anti))


@dataclass(frozen=True)
class AggCase:
    name: str
    build: Callable[[int], Any]
    exact: bool  # integer state: every law holds bit for bit
    vector: bool  # finalize returns an array of shape (dim,)
    convert: Callable[[Message], Any] | None = None  # the case's own message type
    batch: Callable[[Any, Sequence[Any], int], Any] | None = None  # its accumulate_batch

    def __str__(self) -> str:
        return self.name

    def messages(self, drawn: Sequence[Message]) -> list[Any]:
        return list(drawn) if self.convert is None else [self.convert(m) for m in drawn]


CASES = [
    AggCase("WeightedMean", WeightedMean, exact=False, vector=True),
    AggCase("SignVote", lambda d: SignVote(d), exact=True, vector=True),
    AggCase("SignVote-weighted", lambda d: SignVote(d, weighted=True), exact=True, vector=True),
    AggCase("SignVote-gated", lambda d: SignVote(d, z=1.0), exact=True, vector=True),
    AggCase("GatedMean", GatedMean, exact=False, vector=True),
    AggCase("MetricMean", lambda d: MetricMean(), exact=False, vector=False),
    AggCase("TrimmedMean", lambda d: TrimmedMean(d, trim=0.2), exact=True, vector=True),
    AggCase("TrimmedMean-untrimmed", lambda d: TrimmedMean(d, trim=0.0), exact=True, vector=True),
    AggCase("CoordinateMedian", CoordinateMedian, exact=True, vector=True),
    # Bounds of 10 clip many of the drawn updates (entries up to 1e3).
    AggCase(
        "NormBounded-WeightedMean",
        lambda d: NormBounded(WeightedMean(d), bound=10.0, quantile=0.5),
        exact=False,
        vector=True,
    ),
    AggCase(
        "NormBounded-TrimmedMean",
        lambda d: NormBounded(TrimmedMean(d, trim=0.2), bound=10.0),
        exact=True,
        vector=True,
    ),
    AggCase(
        "ESGradient",
        lambda d: ESGradient(d, sigma=0.01, antithetic=True),
        exact=False,
        vector=True,
        convert=_as_es_message,
        batch=_es_batch,
    ),
    AggCase(
        "ESGradient-difference-bound",
        lambda d: ESGradient(d, sigma=0.01, antithetic=True, difference_bound=0.5),
        exact=False,
        vector=True,
        convert=_as_es_message,
        batch=_es_batch,
    ),
]
VECTOR_CASES = [c for c in CASES if c.vector]
UPDATE_CASES = [c for c in VECTOR_CASES if c.convert is None]  # messages carry update vectors

parametrize_cases = pytest.mark.parametrize("case", CASES, ids=str)
parametrize_vector_cases = pytest.mark.parametrize("case", VECTOR_CASES, ids=str)
parametrize_update_cases = pytest.mark.parametrize("case", UPDATE_CASES, ids=str)
SETTINGS = settings(max_examples=40, deadline=None)

_value = st.one_of(
    st.just(0.0),
    st.sampled_from([-1.0, 1.0]),
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
)


@st.composite
def message_lists(draw: st.DrawFn, min_size: int = 0, max_size: int = 12) -> tuple[int, list]:
    dim = draw(st.integers(1, 6))
    count = draw(st.integers(min_size, max_size))
    messages = []
    for _ in range(count):
        update = np.array(draw(st.lists(_value, min_size=dim, max_size=dim)), dtype=np.float64)
        names = draw(st.lists(st.sampled_from(METRIC_NAMES), unique=True, max_size=3))
        metrics = {name: draw(st.floats(-1e3, 1e3)) for name in names}
        messages.append(Message(update=update, n=draw(st.integers(0, 20)), metrics=metrics))
    return dim, messages


def fold(agg: Any, messages: Sequence[Message], state: Any = None) -> Any:
    state = agg.zero() if state is None else state
    for m in messages:
        state = agg.accumulate(state, m)
    return state


def fold_batch(case: AggCase, agg: Any, messages: Sequence[Any], dim: int) -> Any:
    if case.batch is not None:
        return case.batch(agg, messages, dim)
    n = np.array([m.n for m in messages], dtype=np.int64)
    if case.vector:
        updates = np.array([m.update for m in messages], dtype=np.float64).reshape(-1, dim)
        return agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(updates, n))
    columns = {
        name: np.array([m.metrics.get(name, np.nan) for m in messages], dtype=np.float64)
        for name in METRIC_NAMES
    }
    return agg.accumulate_batch(agg.zero(), columns, n)


def _leaves(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [leaf for k in sorted(obj) for leaf in _leaves(obj[k], f"{path}/{k}")]
    if isinstance(obj, list):
        return [leaf for i, v in enumerate(obj) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, obj)]


def assert_same_state(case: AggCase, agg: Any, a: Any, b: Any, exact: bool | None = None) -> None:
    """States equal: exactly (via their JSON form) or to rounding."""
    exact = case.exact if exact is None else exact
    ja, jb = agg.state_to_json(a), agg.state_to_json(b)
    if exact:
        assert ja == jb
        return
    la, lb = _leaves(ja), _leaves(jb)
    assert [p for p, _ in la] == [p for p, _ in lb]
    for (path, va), (_, vb) in zip(la, lb, strict=True):
        if isinstance(va, float) or isinstance(vb, float):
            assert np.allclose(va, vb, rtol=1e-12, atol=1e-9), (path, va, vb)
        else:
            assert va == vb, (path, va, vb)


def assert_same_result(case: AggCase, agg: Any, a: Any, b: Any) -> None:
    ra, rb = agg.finalize(a), agg.finalize(b)
    if not case.vector:
        assert ra.keys() == rb.keys()
        for k in ra:
            assert np.allclose(ra[k], rb[k], rtol=1e-12, atol=1e-9)
    elif case.exact:
        np.testing.assert_array_equal(ra, rb)
    else:
        np.testing.assert_allclose(ra, rb, rtol=1e-12, atol=1e-9)


@parametrize_cases
@SETTINGS
@given(data=message_lists(), perm_seed=st.integers(0, 2**32 - 1))
def test_order_independence(case: AggCase, data: tuple[int, list], perm_seed: int) -> None:
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    order = np.random.default_rng(perm_seed).permutation(len(messages))
    a = fold(agg, messages)
    b = fold(agg, [messages[i] for i in order])
    assert_same_state(case, agg, a, b)
    assert_same_result(case, agg, a, b)


@parametrize_cases
@SETTINGS
@given(data=message_lists(), cuts=st.lists(st.integers(0, 12), min_size=2, max_size=2))
def test_merge_is_associative_and_commutative_with_zero_identity(
    case: AggCase, data: tuple[int, list], cuts: list[int]
) -> None:
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    i, j = sorted(min(c, len(messages)) for c in cuts)
    a, b, c = fold(agg, messages[:i]), fold(agg, messages[i:j]), fold(agg, messages[j:])
    assert_same_state(case, agg, agg.merge(a, agg.merge(b, c)), agg.merge(agg.merge(a, b), c))
    assert_same_state(case, agg, agg.merge(a, b), agg.merge(b, a), exact=True)
    assert_same_state(case, agg, agg.merge(agg.zero(), a), a, exact=True)
    assert_same_state(case, agg, agg.merge(a, agg.zero()), a, exact=True)


@parametrize_cases
@SETTINGS
@given(data=message_lists(), seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 5))
def test_any_grouping_gives_the_same_aggregate(
    case: AggCase, data: tuple[int, list], seed: int, groups: int
) -> None:
    """A tree of proxies (random partition, merged in random order) equals one pass."""
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    rng = np.random.default_rng(seed)
    label = rng.integers(0, groups, size=len(messages))
    partials = [
        fold(agg, [m for m, g in zip(messages, label, strict=True) if g == k])
        for k in rng.permutation(groups)
    ]
    merged = agg.zero()
    for p in partials:
        merged = agg.merge(merged, p)
    assert_same_state(case, agg, merged, fold(agg, messages))


@parametrize_cases
@SETTINGS
@given(data=message_lists())
def test_accumulate_batch_equals_sequential_accumulate(
    case: AggCase, data: tuple[int, list]
) -> None:
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    batched = fold_batch(case, agg, messages, dim)
    assert_same_state(case, agg, batched, fold(agg, messages))
    assert_same_result(case, agg, batched, fold(agg, messages))


@parametrize_cases
def test_empty_input(case: AggCase) -> None:
    agg = case.build(4)
    result = agg.finalize(agg.zero())
    if case.vector:
        assert result.shape == (4,) and result.dtype == np.float64
        np.testing.assert_array_equal(result, np.zeros(4))
    else:
        assert result == {}
    assert_same_state(case, agg, fold_batch(case, agg, [], 4), agg.zero(), exact=True)


@parametrize_vector_cases
@SETTINGS
@given(data=message_lists(min_size=1))
def test_shape_and_dtype_kept(case: AggCase, data: tuple[int, list]) -> None:
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    out = agg.finalize(fold(agg, messages))
    assert out.shape == (dim,) and out.dtype == np.float64
    assert np.all(np.isfinite(out))


@parametrize_cases
@SETTINGS
@given(data=message_lists(min_size=2))
def test_state_json_round_trip_is_exact_and_resumable(
    case: AggCase, data: tuple[int, list]
) -> None:
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    half = len(messages) // 2
    state = fold(agg, messages[:half])
    text = json.dumps(agg.state_to_json(state), allow_nan=False)
    restored = agg.state_from_json(json.loads(text))
    assert as_text(agg.state_to_json(restored)) == as_text(json.loads(text))
    assert_identical(restored, state)
    # Continue from the restored state: bit-identical to never having stopped.
    assert as_text(agg.state_to_json(fold(agg, messages[half:], restored))) == as_text(
        agg.state_to_json(fold(agg, messages[half:], state))
    )


#: Updates with the values a saved state must keep exactly: -0.0, subnormals, sums that
#: overflow (GatedMean's squares of 1e200 are infinite), float32 rows.
ODD_UPDATES = (
    np.array([-0.0, 1e-308, 2.5, -3.0]),
    np.array([0.5, -0.0, 5e-324, 1e200]),
    np.array([1.5, -2.25, 0.0, 7.0], dtype=np.float32),
    np.array([-1e-300, 3.0, -4.0, 0.1]),
    np.array([-0.0, -0.0, -0.0, -0.0], dtype=np.float32),
)


def _odd_messages(case: AggCase) -> list[Any]:
    metrics = ({"loss": 1e-308, "rank": -0.0}, {"loss": 1e200}, {}, {"rank": 5e-324}, {})
    return case.messages(
        [
            Message(update=u, n=n, metrics=m)
            for u, n, m in zip(ODD_UPDATES, (3, 1, 2, 0, 4), metrics, strict=True)
        ]
    )


@parametrize_cases
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_state_json_round_trip_keeps_odd_values_bit_for_bit(case: AggCase) -> None:
    agg = case.build(4)
    messages = _odd_messages(case)
    for state in (fold(agg, messages), fold_batch(case, agg, messages, 4)):
        text = json.dumps(agg.state_to_json(state), allow_nan=False)
        restored = agg.state_from_json(json.loads(text))
        assert_identical(restored, state)
        assert as_text(agg.state_to_json(restored)) == as_text(json.loads(text))
        assert as_text(agg.state_to_json(fold(agg, messages, restored))) == as_text(
            agg.state_to_json(fold(agg, messages, state))
        )


@parametrize_cases
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_malformed_saved_states_are_refused(case: AggCase) -> None:
    """Missing keys, values of a wrong type, arrays of a wrong dtype or shape, in the state
    and in the states nested in it: each is refused with a ConfigError or DataFormatError
    (what a server answers a proxy's malformed state with)."""
    agg = case.build(4)
    saved = json.loads(json.dumps(agg.state_to_json(fold(agg, _odd_messages(case)))))
    accepted = [fault for fault, data in malformed(saved) if loads(agg, data)]
    assert not accepted
    assert loads(agg, saved)


@parametrize_cases
@SETTINGS
@given(data=message_lists(min_size=1))
def test_inputs_and_states_are_never_mutated(case: AggCase, data: tuple[int, list]) -> None:
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    before = copy.deepcopy(messages)
    state = fold(agg, messages[:1])
    state_json = agg.state_to_json(state)
    fold(agg, messages, state)
    agg.merge(state, state)
    agg.finalize(state)
    fold_batch(case, agg, messages, dim)
    assert agg.state_to_json(state) == state_json
    assert isinstance(state, tuple)  # NamedTuple: fields cannot be reassigned
    for m, b in zip(messages, before, strict=True):
        if isinstance(m, Message):
            np.testing.assert_array_equal(m.update, b.update)
            assert m.metrics == b.metrics and m.n == b.n
        else:
            assert m == b


@parametrize_update_cases
def test_dimension_mismatch_is_a_config_error(case: AggCase) -> None:
    agg = case.build(3)
    with pytest.raises(ConfigError, match=r"expected .*\(3,\).*got .*\(4,\)"):
        agg.accumulate(agg.zero(), Message(update=np.zeros(4)))
    with pytest.raises(ConfigError, match=r"expected .*3.*got .*\(2, 5\)"):
        agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(np.zeros((2, 5)), np.ones(2)))
    with pytest.raises(DataFormatError, match="column weight has 3 rows"):
        MessageBatch.of_vectors(np.zeros((2, 3)), np.ones(3))
    with pytest.raises(DataFormatError, match="folds vector messages"):
        agg.accumulate_batch(agg.zero(), MessageBatch.of_es(np.arange(2), np.ones(2)))
    empty = agg.accumulate_batch(agg.zero(), MessageBatch(0))
    assert agg.state_to_json(empty) == agg.state_to_json(agg.zero())
    with pytest.raises(ConfigError, match="dimension"):
        agg.merge(agg.zero(), case.build(4).zero())
    with pytest.raises(ConfigError):
        case.build(0)


def test_metric_mean_column_shape_mismatch_is_a_config_error() -> None:
    agg = MetricMean()
    with pytest.raises(ConfigError, match="expected shape"):
        agg.accumulate_batch(agg.zero(), {"loss": np.zeros(3)}, np.ones(2))


@parametrize_cases
def test_no_global_rng_is_used(case: AggCase) -> None:
    agg = case.build(3)
    before = np.random.get_state()[1].copy()
    messages = case.messages(
        [Message(update=np.array([1.0, -2.0, 0.0]), n=2, metrics={"loss": 1.0})]
    )
    agg.finalize(fold(agg, messages))
    np.testing.assert_array_equal(np.random.get_state()[1], before)


@parametrize_cases
@SETTINGS
@given(data=message_lists(), cut=st.integers(0, 12))
def test_every_reachable_state_is_consistent(
    case: AggCase, data: tuple[int, list], cut: int
) -> None:
    """What messages and merges produce passes ``check_consistent`` (so a server never
    refuses an honest proxy's merged state)."""
    dim, messages = data
    messages = case.messages(messages)
    agg = case.build(dim)
    a, b = fold(agg, messages[:cut]), fold(agg, messages[cut:])
    for state in (agg.zero(), a, b, agg.merge(a, b)):
        agg.check_consistent(state)


def _forged(case: str) -> tuple[Any, Any]:
    """An aggregator and a state no messages can produce (the forgeries of a merged state
    a hostile proxy could send)."""
    dim = 3
    one = np.ones(dim)
    if case == "WeightedMean":
        return WeightedMean(dim), WeightedMeanState(one, -5.0, 2)
    if case == "WeightedMean-weight-without-messages":
        return WeightedMean(dim), WeightedMeanState(one, 3.0, 0)
    if case == "GatedMean-zero-square-weight":  # would divide by zero on close
        return GatedMean(dim), GatedMeanState(one, one, 4.0, 0.0, 2)
    if case == "GatedMean-negative-weight":
        return GatedMean(dim), GatedMeanState(one, one, -1.0, 1.0, 1)
    if case == "GatedMean-cauchy-schwarz":
        return GatedMean(dim), GatedMeanState(10 * one, one, 1.0, 1.0, 1)
    if case == "SignVote-negative":
        return SignVote(dim), SignVoteState(
            -one.astype(int), 2 * one.astype(int), 0 * one.astype(int), 1
        )
    if case == "SignVote-uneven":
        return SignVote(dim), SignVoteState(
            np.array([1, 0, 0]), np.array([0, 0, 0]), np.array([0, 1, 0]), 1
        )
    if case == "SignVote-count":
        return SignVote(dim), SignVoteState(
            one.astype(int), 0 * one.astype(int), 0 * one.astype(int), 5
        )
    if case == "ESGradient":
        return ESGradient(dim, sigma=0.01), ESGradientState(np.array([np.inf, 0, 0]), 1)
    if case == "TrimmedMean-count":
        return TrimmedMean(dim), SortedColumnsState(np.zeros((2, dim), order="F"), 3)
    if case == "TrimmedMean-unsorted":
        return TrimmedMean(dim), SortedColumnsState(np.array([[1.0, 0, 0], [0.0, 0, 0]]), 2)
    if case == "TrimmedMean-non-finite":
        return TrimmedMean(dim), SortedColumnsState(np.full((1, dim), np.inf), 1)
    if case == "CoordinateMedian-too-many-rows":
        return CoordinateMedian(dim, max_rows=2), SortedColumnsState(np.zeros((3, dim)), 3)
    if case == "NormBounded-within-above-count":
        agg = NormBounded(WeightedMean(dim), bound=1.0)
        return agg, NormBoundedState(WeightedMeanState(one, 1.0, 1), 1.0, 2, 1)
    if case == "NormBounded-not-the-fixed-bound":
        agg = NormBounded(WeightedMean(dim), bound=1.0)
        return agg, NormBoundedState(WeightedMeanState(one, 1.0, 1), 2.0, 1, 1)
    if case == "NormBounded-bound-out-of-range":
        agg = NormBounded(WeightedMean(dim), bound=1.0, quantile=0.5, max_bound=10.0)
        return agg, NormBoundedState(WeightedMeanState(one, 1.0, 1), 11.0, 1, 1)
    if case == "NormBounded-inner-count":
        agg = NormBounded(WeightedMean(dim), bound=1.0)
        return agg, NormBoundedState(WeightedMeanState(one, 1.0, 1), 1.0, 1, 2)
    if case == "NormBounded-inner":
        agg = NormBounded(WeightedMean(dim), bound=1.0)
        return agg, NormBoundedState(WeightedMeanState(one, -5.0, 2), 1.0, 2, 2)
    assert case == "MetricMean"
    return MetricMean(), MetricMeanState({"loss": 1.0}, {"loss": -2.0}, 1)


@pytest.mark.parametrize(
    "case",
    [
        "WeightedMean",
        "WeightedMean-weight-without-messages",
        "GatedMean-zero-square-weight",
        "GatedMean-negative-weight",
        "GatedMean-cauchy-schwarz",
        "SignVote-negative",
        "SignVote-uneven",
        "SignVote-count",
        "ESGradient",
        "MetricMean",
        "TrimmedMean-count",
        "TrimmedMean-unsorted",
        "TrimmedMean-non-finite",
        "CoordinateMedian-too-many-rows",
        "NormBounded-within-above-count",
        "NormBounded-not-the-fixed-bound",
        "NormBounded-bound-out-of-range",
        "NormBounded-inner-count",
        "NormBounded-inner",
    ],
)
def test_forged_states_are_refused(case: str) -> None:
    agg, state = _forged(case)
    with pytest.raises(DataFormatError):
        agg.check_consistent(state)
