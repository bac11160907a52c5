"""The proxy hierarchy (FedPS Sec. 3.4): same result as flat aggregation, and the central
server only ever merges group-server states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrank.aggregators.hierarchy import Topology, hierarchical_aggregate
from fedrank.aggregators.mean import WeightedMean
from fedrank.aggregators.norm_bounded import NormBounded
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError


def test_topology_sizes_and_seeded_shuffle() -> None:
    t = Topology.build(2_345, np.random.default_rng(1), clients_per_proxy=100, proxies_per_group=10)
    assert t.n_clients == 2_345 and t.n_proxies == 24 and t.n_groups == 3
    sizes = np.bincount(t.proxy_of)
    assert sizes[:-1].tolist() == [100] * 23 and sizes[-1] == 45
    assert np.bincount(t.group_of_proxy).tolist() == [10, 10, 4]
    again = Topology.build(2_345, np.random.default_rng(1), 100, 10)
    np.testing.assert_array_equal(t.proxy_of, again.proxy_of)
    other = Topology.build(2_345, np.random.default_rng(2), 100, 10)
    assert not np.array_equal(t.proxy_of, other.proxy_of)
    assert t.members(3).tolist() == np.flatnonzero(t.proxy_of == 3).tolist()


@given(st.integers(1, 60), st.integers(1, 7), st.integers(1, 4), st.integers(0, 2**31))
def test_hierarchy_equals_flat_aggregation(
    n_sampled: int, per_proxy: int, per_group: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    topology = Topology.build(80, rng, clients_per_proxy=per_proxy, proxies_per_group=per_group)
    clients = rng.choice(80, size=min(n_sampled, 80), replace=False)
    updates = rng.normal(size=(clients.size, 5))
    n = rng.integers(0, 50, size=clients.size).astype(float)
    agg = WeightedMean(5)
    result = hierarchical_aggregate(agg, topology, clients, MessageBatch.of_vectors(updates, n))
    flat = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(updates, n))
    np.testing.assert_allclose(agg.finalize(result.state), agg.finalize(flat), atol=1e-12)
    assert result.state.count == clients.size
    # every proxy state holds exactly its own sampled clients
    proxies = topology.proxy_of[clients]
    for proxy, state in result.proxy_states.items():
        assert state.count == int(np.count_nonzero(proxies == proxy))
    assert sum(s.count for s in result.group_states.values()) == clients.size
    assert set(result.group_states) == {int(topology.group_of_proxy[p]) for p in proxies}


def test_bad_inputs_are_refused() -> None:
    topology = Topology.build(10, np.random.default_rng(0), 5, 2)
    agg = WeightedMean(2)
    with pytest.raises(ConfigError, match="one row per client"):
        hierarchical_aggregate(agg, topology, np.arange(3), _batch(np.zeros((2, 2))))
    with pytest.raises(ConfigError, match=r"\[0, 10\)"):
        hierarchical_aggregate(agg, topology, np.array([10]), _batch(np.zeros((1, 2))))
    with pytest.raises(ConfigError, match="clients_per_proxy"):
        Topology.build(10, np.random.default_rng(0), 0, 2)


def _batch(rows: np.ndarray) -> MessageBatch:
    return MessageBatch.of_vectors(rows, np.ones(len(rows)))


def test_proxies_fold_by_the_given_rule_from_the_given_empty_state() -> None:
    """A round's empty aggregate carries its norm bound, and a strategy's fold its rule:
    the proxies use both, so the central state is the one the round would fold itself,
    and a round with no messages gives back the empty state."""
    topology = Topology.build(6, np.random.default_rng(3), clients_per_proxy=2, proxies_per_group=2)
    agg = NormBounded(WeightedMean(2), bound=1.0, quantile=0.5)
    empty = agg.next_zero(agg.accumulate_batch(agg.zero(), _batch(np.full((3, 2), 9.0))))
    assert empty.bound != agg.zero().bound
    calls: list[int] = []

    def fold(state: object, batch: MessageBatch) -> object:
        calls.append(batch.size)
        return agg.accumulate_batch(state, batch)

    rows = np.array([[3.0, 4.0], [0.1, 0.0], [6.0, 8.0], [0.0, 0.2]])
    clients = np.array([0, 1, 4, 5])
    result = hierarchical_aggregate(agg, topology, clients, _batch(rows), empty=empty, fold=fold)
    flat = agg.accumulate_batch(empty, _batch(rows))
    np.testing.assert_allclose(agg.finalize(result.state), agg.finalize(flat), atol=1e-12)
    assert result.state.bound == empty.bound and sum(calls) == 4
    none = hierarchical_aggregate(
        agg, topology, np.zeros(0, int), _batch(np.zeros((0, 2))), empty=empty
    )
    assert none.state == empty
