"""fedrank.core.message.MessageBatch: the one columnar form of many client messages, its
JSON form, and every strategy folding it into its aggregator."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.core.message import MessageBatch
from fedrank.errors import DataFormatError
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.foltr_es.config import FoltrEsConfig
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy


def _same(a: MessageBatch, b: MessageBatch) -> None:
    assert a.size == b.size
    for f in MessageBatch.FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype, f


@settings(max_examples=50, deadline=None)
@given(
    m=st.integers(0, 6),
    d=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_json_round_trip_is_exact(m: int, d: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = MessageBatch.of_vectors(rng.normal(size=(m, d)), rng.integers(1, 9, m) * 1.0)
    es = MessageBatch.of_es(
        rng.integers(0, 2**32, m, dtype=np.uint64), rng.random(m), rng.random(m)
    )
    for batch in (vectors, es):
        text = orjson.dumps(batch.to_json())  # what goes on the wire
        _same(MessageBatch.from_json(orjson.loads(text)), batch)


def test_take_and_concat_keep_rows_together() -> None:
    rng = np.random.default_rng(0)
    batch = MessageBatch.of_vectors(rng.normal(size=(5, 3)), np.arange(1.0, 6.0))
    parts = [batch.take(np.array([0, 1])), MessageBatch(0), batch.take(np.array([2, 3, 4]))]
    _same(MessageBatch.concat(parts), batch)
    assert MessageBatch.concat([MessageBatch(0)]).size == 0
    picked = batch.take(np.array([4, 0]))
    np.testing.assert_array_equal(picked.weight, [5.0, 1.0])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([1, 2], "an object"),
        ({"size": 1, "dim": 1, "vector": [[1.0]], "bogus": 1}, "unknown message batch keys"),
        ({"size": -1}, "size must be an integer"),
        ({"size": True}, "size must be an integer"),
        ({"size": 2, "dim": 1, "vector": [[1.0], [2.0]], "weight": [1.0]}, "weight has 1 rows"),
        ({"size": 1, "dim": 1, "vector": [1.0]}, "vector has shape"),
        ({"size": 1, "dim": 2, "vector": [[1.0]]}, "vector has shape"),
        ({"size": 1, "vector": [[1.0]]}, "needs dim"),
        ({"size": 1, "dim": 1, "vector": [["x"]]}, "not numeric"),
        ({"size": 1, "metric": [float("nan")]}, "non-finite"),
        ({"size": 1, "seed": [1.5], "metric": [0.5]}, "seed must be a list of integers"),
        ({"size": 1, "seed": [2**32], "metric": [0.5]}, "seed must be a list of integers"),
        ({"size": 1, "seed": [-1], "metric": [0.5]}, "seed must be a list of integers"),
    ],
)
def test_bad_json_says_what_is_wrong(data: object, reason: str) -> None:
    with pytest.raises(DataFormatError, match=reason):
        MessageBatch.from_json(data)


def test_every_strategy_folds_a_batch_like_its_aggregator() -> None:
    """``Strategy.accumulate`` is the aggregator's vectorized fold of the batch's columns,
    and an empty batch changes nothing."""
    rng = np.random.default_rng(3)
    frecency = FrecencyStrategy(FrecencyConfig())
    fedavg = FedAvgStrategy(FedAvgConfig(dim=4))
    for strategy in (frecency, fedavg):
        agg = strategy.aggregator
        vectors, n = rng.normal(size=(7, strategy.dim)), rng.integers(1, 5, 7) * 1.0
        got = agg.finalize(strategy.accumulate(agg.zero(), MessageBatch.of_vectors(vectors, n)))
        want = agg.finalize(agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(vectors, n)))
        np.testing.assert_array_equal(got, want)
        state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(vectors, n))
        assert strategy.accumulate(state, MessageBatch(0)) is state
    es = FoltrEsStrategy(FoltrEsConfig(n_features=5, antithetic=True))
    seeds = rng.integers(0, 2**32, 6, dtype=np.uint64)
    metric, anti = rng.random(6), rng.random(6)
    got = es.aggregator.finalize(
        es.accumulate(es.aggregator.zero(), MessageBatch.of_es(seeds, metric, anti))
    )
    want = es.aggregator.finalize(
        es.aggregator.accumulate_batch(
            es.aggregator.zero(), MessageBatch.of_es(seeds, metric, anti)
        )
    )
    np.testing.assert_array_equal(got, want)
    assert np.any(got != 0.0)
