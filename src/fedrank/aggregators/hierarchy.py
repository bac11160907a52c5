"""The FedPSProxy hierarchy: clients -> proxies -> group servers -> central server (FedPS
Sec. 3.4, Fig. 3).

A proxy merges the updates of its sampled clients with the same mergeable aggregator the
flat server uses (``zero`` / ``accumulate_batch``), forwards only that merged state to its
group server, which merges its proxies' states and forwards one state to the central
server. So the central server never holds a single client's update ("this method breaks
the link between the model updates and the user on the server side"), and because the
aggregator is a monoid the result equals flat aggregation of the same updates up to
floating-point rounding (tested).

:class:`Topology` assigns clients to proxies (default 100 per proxy) and proxies to group
servers (default 1,000 per group server), after a seeded shuffle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError

State = TypeVar("State")


@dataclass(frozen=True)
class Topology:
    """Which proxy each client reaches the server through, and which group server each
    proxy reports to.

    Attributes:
        proxy_of: ``(n_clients,)`` proxy index of every client.
        group_of_proxy: ``(n_proxies,)`` group-server index of every proxy.
    """

    proxy_of: np.ndarray
    group_of_proxy: np.ndarray

    @classmethod
    def build(
        cls,
        n_clients: int,
        rng: np.random.Generator,
        clients_per_proxy: int = 100,
        proxies_per_group: int = 1000,
    ) -> Topology:
        """Clients shuffled by ``rng``, then cut into proxies of ``clients_per_proxy`` (the
        last one may be smaller), proxies cut into group servers of ``proxies_per_group``."""
        for name, value in (
            ("n_clients", n_clients),
            ("clients_per_proxy", clients_per_proxy),
            ("proxies_per_group", proxies_per_group),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        order = rng.permutation(n_clients)
        proxy_of = np.empty(n_clients, dtype=np.int64)
        proxy_of[order] = np.arange(n_clients) // clients_per_proxy
        n_proxies = int(proxy_of.max()) + 1
        group_of_proxy = np.arange(n_proxies, dtype=np.int64) // proxies_per_group
        return cls(proxy_of, group_of_proxy)

    @property
    def n_clients(self) -> int:
        return int(self.proxy_of.size)

    @property
    def n_proxies(self) -> int:
        return int(self.group_of_proxy.size)

    @property
    def n_groups(self) -> int:
        return int(self.group_of_proxy.max()) + 1

    def members(self, proxy: int) -> np.ndarray:
        """The clients of ``proxy`` (sorted)."""
        return np.flatnonzero(self.proxy_of == proxy)


@dataclass(frozen=True)
class HierarchyResult(Generic[State]):
    """The central server's state, and what each level forwarded (for inspection: the
    proxies' and group servers' merged states, keyed by their index)."""

    state: State
    proxy_states: dict[int, State]
    group_states: dict[int, State]


def hierarchical_aggregate(
    aggregator: Any,
    topology: Topology,
    clients: np.ndarray,
    batch: MessageBatch,
    *,
    empty: Any = None,
    fold: Callable[[Any, MessageBatch], Any] | None = None,
) -> HierarchyResult[Any]:
    """Aggregate the messages of ``batch`` (row ``i`` sent by client ``clients[i]``) through
    the hierarchy: each proxy folds its own clients' messages into ``empty`` with ``fold``,
    each group server merges its proxies' states, the central server merges the group
    servers' states.

    ``aggregator`` is any aggregator with ``zero`` / ``accumulate_batch`` / ``merge`` (e.g.
    :class:`fedrank.aggregators.mean.WeightedMean`: FedPS Algorithm 1's ``n_j / n``
    weighting). ``empty``: the state a proxy starts from (default ``aggregator.zero()``; a
    round's empty aggregate carries its norm bound). ``fold``: how a proxy folds a batch
    (default ``aggregator.accumulate_batch``; a strategy's ``accumulate`` applies its rule,
    e.g. a privacy wrapper's clipping and unit weights)."""
    clients = np.asarray(clients, dtype=np.int64)
    if clients.ndim != 1 or len(clients) != batch.size:
        raise ConfigError(
            f"clients and the batch must have one row per client: got {clients.shape} and "
            f"{batch.size} messages"
        )
    if clients.size and (clients.min() < 0 or clients.max() >= topology.n_clients):
        raise ConfigError(f"client ids must lie in [0, {topology.n_clients})")
    empty = aggregator.zero() if empty is None else empty
    fold = aggregator.accumulate_batch if fold is None else fold
    proxies = topology.proxy_of[clients]
    proxy_states: dict[int, Any] = {}
    for proxy in np.unique(proxies):
        proxy_states[int(proxy)] = fold(empty, batch.take(np.flatnonzero(proxies == proxy)))
    return merge_upward(aggregator, topology, proxy_states, empty)


def merge_upward(
    aggregator: Any, topology: Topology, proxy_states: dict[int, Any], empty: Any = None
) -> HierarchyResult[Any]:
    """The levels above the proxies: each group server merges the states its proxies
    forward, the central server merges the group servers' states (``empty``, default
    ``aggregator.zero()``, when no proxy forwarded anything)."""
    group_states: dict[int, Any] = {}
    for proxy, state in proxy_states.items():
        group = int(topology.group_of_proxy[proxy])
        held = group_states.get(group)
        group_states[group] = state if held is None else aggregator.merge(held, state)
    central = None
    for state in group_states.values():
        central = state if central is None else aggregator.merge(central, state)
    if central is None:
        central = aggregator.zero() if empty is None else empty
    return HierarchyResult(central, proxy_states, group_states)
