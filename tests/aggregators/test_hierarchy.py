"""The proxy hierarchy (FedPS Sec. 3.4): same result as flat aggregation, and the central
server only ever merges group-server states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrank.aggregators.hierarchy import ProxyRound, Topology, hierarchical_aggregate
from fedrank.aggregators.mean import WeightedMean
from fedrank.core.message import Message, MessageBatch
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
    result = hierarchical_aggregate(agg, topology, clients, updates, n)
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
        hierarchical_aggregate(agg, topology, np.arange(3), np.zeros((2, 2)), np.ones(3))
    with pytest.raises(ConfigError, match=r"\[0, 10\)"):
        hierarchical_aggregate(agg, topology, np.array([10]), np.zeros((1, 2)), np.ones(1))
    with pytest.raises(ConfigError, match="clients_per_proxy"):
        Topology.build(10, np.random.default_rng(0), 0, 2)


@given(st.integers(1, 40), st.integers(1, 7), st.integers(1, 4), st.integers(0, 2**31))
def test_streaming_proxy_round_equals_batch_hierarchy(
    n_sampled: int, per_proxy: int, per_group: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    topology = Topology.build(50, rng, clients_per_proxy=per_proxy, proxies_per_group=per_group)
    clients = rng.choice(50, size=min(n_sampled, 50), replace=False)
    updates = rng.normal(size=(clients.size, 4))
    n = rng.integers(1, 50, size=clients.size)
    agg = WeightedMean(4)
    step = ProxyRound(agg, topology)
    for c, u, w in zip(clients, updates, n, strict=True):
        step.accumulate(int(c), Message(update=u, n=int(w)))
    streamed = step.forward()
    batch = hierarchical_aggregate(agg, topology, clients, updates, n.astype(float))
    assert streamed.proxy_states.keys() == batch.proxy_states.keys()
    assert streamed.group_states.keys() == batch.group_states.keys()
    np.testing.assert_allclose(agg.finalize(streamed.state), agg.finalize(batch.state))
    assert streamed.state.count == clients.size


def test_proxy_round_refuses_unknown_clients() -> None:
    step = ProxyRound(WeightedMean(2), Topology.build(5, np.random.default_rng(0), 2, 2))
    with pytest.raises(ConfigError, match="client id"):
        step.accumulate(5, Message(update=np.zeros(2)))
