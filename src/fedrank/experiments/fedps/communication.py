"""Communication time of one training round, FedPSFlat vs FedPSProxy (FedPS Sec. 5.3,
Table 6).

The paper's accounting: "we focus on the time spent for broadcasting the current global
model and uploading the parameter updates, both of which are assumed equal to T"; a
fraction of devices "have a poor connection and suffer a delay d in each step"; in
FedPSProxy "such stragglers offload their computing tasks to the proxies so we ignore the
time cost of data exchange between these clients and the corresponding proxy".

Our model of a step, from the topology and the step's sampled clients:

* Flat: the central server exchanges the model with each of the step's K clients in turn
  (``2T`` each: broadcast and upload) and waits ``d`` for each response later than
  ``T_max`` among them. A round costs ``2 N T + (late responses) d``: the paper's
  ``236134 T`` for its N = 118,067.
* Proxy: nodes of one level work in parallel, and each node exchanges with its children in
  turn. The central server exchanges with every group server involved (``2T`` each); then
  each group server with its sampled proxies (the busiest group server sets the time); then
  each proxy with its sampled clients that are not stragglers (the busiest proxy sets the
  time). Stragglers cost nothing at the proxy level and never delay the step.

The paper does not spell out its Proxy accounting, so these figures are ours; the
``fedrank fedps reproduce`` report prints them beside the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.aggregators.hierarchy import Topology
from fedrank.errors import ConfigError


@dataclass(frozen=True)
class RoundTime:
    """Communication time of a round as ``t_units * T + d_units * d``."""

    t_units: float
    d_units: float

    def __str__(self) -> str:
        d = f" + {self.d_units:g}d" if self.d_units else ""
        return f"{self.t_units:g}T{d}"


def flat_round_time(steps: list[np.ndarray], late: list[np.ndarray]) -> RoundTime:
    """FedPSFlat: ``2T`` per sampled client, ``d`` per late response (``late[i]`` is the
    bool mask of ``steps[i]``'s clients that answered after ``T_max``)."""
    _check_late(steps, late)
    sampled = sum(int(s.size) for s in steps)
    return RoundTime(2.0 * sampled, float(sum(int(np.count_nonzero(m)) for m in late)))


def proxy_round_time(
    steps: list[np.ndarray], late: list[np.ndarray], topology: Topology
) -> RoundTime:
    """FedPSProxy: per step, ``2T`` x (group servers involved + the most proxies under one
    group server + the most clients under one proxy that answered in time; the late ones
    offload to their proxy)."""
    _check_late(steps, late)
    total = 0
    for clients, slow in zip(steps, late, strict=True):
        proxies = topology.proxy_of[clients]
        sampled_proxies = np.unique(proxies)
        groups = topology.group_of_proxy[sampled_proxies]
        per_group = np.bincount(groups)
        present = clients[~slow]
        per_proxy = np.bincount(topology.proxy_of[present]) if present.size else np.zeros(1)
        total += 2 * (np.count_nonzero(per_group) + int(per_group.max()) + int(per_proxy.max()))
    return RoundTime(float(total), 0.0)


def _check_late(steps: list[np.ndarray], late: list[np.ndarray]) -> None:
    if len(late) != len(steps) or any(
        np.shape(m) != np.shape(s) for s, m in zip(steps, late, strict=False)
    ):
        raise ConfigError("late must hold one bool mask per step, of the step's size")
