"""Which clients train in each step of a round (FedPS Algorithm 1 and Sec. 3.4).

A round visits every client once, in ``ceil(N / K)`` steps of ``K`` clients ("in each
round, we ensure that every client updates the model once, and complete the model
training on all clients in N/K steps").

* Flat (:func:`flat_schedule`): a seeded permutation of the clients, cut into steps of K.
* Poisson (:func:`poisson_schedule`, beyond the paper, for differential privacy): each of
  the round's ``ceil(N / K)`` steps takes every client independently with probability
  ``K / N``, so a client trains once per round on average, and a step's sample is random
  and secret: what lets the accountant claim amplification by subsampling (DP-FedAvg,
  McMahan et al. 2018).
* Proxy (:func:`proxy_schedule`): "FedPSProxy first samples K/10 proxies, then samples 10
  clients in the scope of each proxy". Each proxy's clients are shuffled and cut into
  chunks of ``per_proxy``; each step draws ``K / per_proxy`` distinct proxies that still
  have a chunk and takes one chunk from each, so a round still visits every client exactly
  once.
"""

from __future__ import annotations

import numpy as np

from fedrank.aggregators.hierarchy import Topology
from fedrank.errors import ConfigError


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def flat_schedule(n_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One round: the steps' client ids (each an ``int64`` array of at most ``k``)."""
    _positive("n_clients", n_clients)
    _positive("K (clients per step)", k)
    order = rng.permutation(n_clients)
    return [order[i : i + k] for i in range(0, n_clients, k)]


def poisson_schedule(n_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One round of Poisson sampling: ``ceil(N / K)`` steps, each the clients whose coin
    (one uniform per client and step, drawn at once) falls below ``K / N``; a step may be
    empty."""
    n = _positive("n_clients", n_clients)
    k = min(_positive("K (clients per step)", k), n)
    coins = rng.random((-(-n // k), n)) < k / n
    return [np.flatnonzero(row) for row in coins]


def proxy_schedule(
    topology: Topology, k: int, rng: np.random.Generator, per_proxy: int = 10
) -> list[np.ndarray]:
    """One round of FedPSProxy sampling: ``K / per_proxy`` proxy chunks of up to
    ``per_proxy`` clients per step. ``K`` must be a multiple of ``per_proxy``."""
    _positive("K (clients per step)", k)
    _positive("per_proxy", per_proxy)
    if k % per_proxy:
        raise ConfigError(
            f"K = {k} must be a multiple of the clients sampled per proxy ({per_proxy}): "
            f"a step samples K/{per_proxy} proxies"
        )
    chunks: list[list[np.ndarray]] = []
    for proxy in range(topology.n_proxies):
        members = rng.permutation(topology.members(proxy))
        chunks.append([members[i : i + per_proxy] for i in range(0, len(members), per_proxy)])
    remaining = np.array([len(c) for c in chunks], dtype=np.int64)
    per_step = k // per_proxy
    steps: list[np.ndarray] = []
    while remaining.any():
        # distinct proxies, drawn in proportion to the chunks they have left, so that all
        # proxies run out together and every step but the last few is full
        open_proxies = np.flatnonzero(remaining)
        take = min(per_step, open_proxies.size)
        weights = remaining[open_proxies] / remaining[open_proxies].sum()
        chosen = rng.choice(open_proxies, size=take, replace=False, p=weights)
        remaining[chosen] -= 1
        steps.append(np.concatenate([chunks[p][remaining[p]] for p in chosen]))
    return steps
