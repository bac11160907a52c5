"""WeightedMean (FedAvg, paper Section 3.1) and MetricMean."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedrank.aggregators import MetricMean, WeightedMean
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import DataFormatError


def test_weighted_mean_is_fedavg() -> None:
    agg = WeightedMean(2)
    state = agg.zero()
    state = agg.accumulate(state, Message(update=np.array([1.0, 0.0]), n=1))
    state = agg.accumulate(state, Message(update=np.array([4.0, 3.0]), n=3))
    np.testing.assert_allclose(agg.finalize(state), [13 / 4, 9 / 4])
    assert state.count == 2 and state.total_weight == 4.0


def test_empty_or_weightless_state_gives_no_step() -> None:
    agg = WeightedMean(3)
    np.testing.assert_array_equal(agg.finalize(agg.zero()), np.zeros(3))
    state = agg.accumulate(agg.zero(), Message(update=np.ones(3), n=0))
    np.testing.assert_array_equal(agg.finalize(state), np.zeros(3))
    assert state.count == 1


def test_batch_of_ten_thousand_clients_matches_the_formula() -> None:
    rng = np.random.default_rng(0)
    updates = rng.normal(size=(10_000, 22))
    n = rng.integers(1, 30, size=10_000)
    agg = WeightedMean(22)
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(updates, n))
    expected = (n[:, None] * updates).sum(axis=0) / n.sum()
    np.testing.assert_allclose(agg.finalize(state), expected, rtol=1e-12, atol=1e-15)
    assert state.count == 10_000


def test_integer_and_float32_updates_are_averaged_in_float64() -> None:
    agg = WeightedMean(2)
    state = agg.accumulate_batch(
        agg.zero(),
        MessageBatch.of_vectors(np.array([[1, 2], [3, 4]], dtype=np.int32), np.array([1, 1])),
    )
    state = agg.accumulate(state, Message(update=np.array([2.0, 3.0], dtype=np.float32)))
    out = agg.finalize(state)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [2.0, 3.0])


def test_bad_inputs_are_refused() -> None:
    agg = WeightedMean(2)
    with pytest.raises(DataFormatError, match="NaN"):
        agg.accumulate(agg.zero(), Message(update=np.array([np.nan, 0.0])))
    with pytest.raises(DataFormatError, match="row 1"):
        agg.accumulate_batch(
            agg.zero(), MessageBatch.of_vectors(np.array([[0.0, 0.0], [np.inf, 0.0]]), np.ones(2))
        )
    with pytest.raises(DataFormatError, match=">= 0"):
        agg.accumulate(agg.zero(), Message(update=np.zeros(2), n=-1))
    with pytest.raises(DataFormatError, match=">= 0"):
        agg.accumulate_batch(
            agg.zero(), MessageBatch.of_vectors(np.zeros((2, 2)), np.array([1, -1]))
        )


def test_state_json_is_plain_json() -> None:
    agg = WeightedMean(2)
    state = agg.accumulate(agg.zero(), Message(update=np.array([0.1, -0.2]), n=3))
    data = agg.state_to_json(state)
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["type"] == "WeightedMean" and data["count"] == 1


def test_metric_mean_weights_by_n_and_skips_missing_metrics() -> None:
    agg = MetricMean()
    state = agg.zero()
    state = agg.accumulate(state, Message(update=np.zeros(1), n=1, metrics={"loss": 2.0}))
    state = agg.accumulate(
        state, Message(update=np.zeros(1), n=3, metrics={"loss": 6.0, "chars_typed": 4.0})
    )
    state = agg.accumulate(state, Message(update=np.zeros(1), n=2, metrics={"rank": np.nan}))
    result = agg.finalize(state)
    assert result == {"chars_typed": 4.0, "loss": 5.0}
    assert isinstance(result, dict) and state.count == 3


def test_metric_mean_batch_form_takes_columns() -> None:
    agg = MetricMean()
    state = agg.accumulate_batch(
        agg.zero(),
        {"loss": np.array([2.0, 6.0, np.nan]), "chars_typed": np.array([np.nan, 4.0, 1.0])},
        np.array([1, 3, 1]),
    )
    result = agg.finalize(state)
    assert result["loss"] == pytest.approx(5.0)
    assert result["chars_typed"] == pytest.approx(13 / 4)
    assert state.count == 3


def test_metric_mean_refuses_infinite_values() -> None:
    agg = MetricMean()
    with pytest.raises(DataFormatError, match="infinite"):
        agg.accumulate(agg.zero(), Message(update=np.zeros(1), metrics={"loss": np.inf}))
    with pytest.raises(DataFormatError, match="infinite"):
        agg.accumulate_batch(agg.zero(), {"loss": np.array([np.inf])}, np.ones(1))
