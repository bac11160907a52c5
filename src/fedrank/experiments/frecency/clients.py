"""Where the frecency study's clients compute their messages: in this process, or in
blocks on the workers of a Dask cluster (``fedrank frecency simulate --dask-workers N``).

The client half of federated frecency (Sec. 5.4: finite-difference gradients of the SVM
loss over a client's own searches, then its signs for sign messages) needs only what the
client holds: the histories of the pages its searches showed, and what it selected
(:class:`~fedrank.simulation.frecency.messages.ClientSearches`). A client's message depends on
its own searches alone and the client half draws no random numbers, so a block of clients
reports the same wherever it runs. On Dask, every iteration splits the clients into one
contiguous block per worker (balanced by their numbers of searches), each worker computes
and privatizes its block's messages, and the driver puts the blocks back in client order:
its aggregator folds exactly the messages an in-process run folds, in the same order, and
the two runs are identical bit for bit (``tests/cli/test_cli_frecency.py``).

What stays on the driver is the world: what the simulated users browse, type and select
(the searches themselves), which is most of a study's time; so Dask does not make a study
faster on one machine (``python benchmarks/bench_dask.py --only frecency``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from fedrank.core.client_random import ClientRandom
from fedrank.experiments.executors import DaskBlocks, blocks
from fedrank.simulation.frecency.messages import ClientReports, ClientSearches
from fedrank.systems.frecency.client import FrecencyClient

if TYPE_CHECKING:
    from distributed import Client


class FrecencyClients(Protocol):
    """The clients of one frecency study."""

    def messages(
        self, searches: ClientSearches, theta: np.ndarray, random: ClientRandom
    ) -> ClientReports:
        """Every client's report against the published model ``theta``, its update
        privatized by the client half (signs for sign messages; randomized signs from each
        client's own numbers in ``random``, one row per client of ``searches``), in client
        order."""
        ...


def _messages(
    client: FrecencyClient, theta: np.ndarray, searches: ClientSearches, random: ClientRandom
) -> ClientReports:
    reports = searches.reports(theta, client.estimator)
    updates = client.privatize_clients(reports.updates, random)
    return ClientReports(reports.users, updates, reports.n, reports.loss)


class LocalFrecencyClients:
    """All clients in this process, one vectorized call per iteration."""

    def __init__(self, client: FrecencyClient) -> None:
        self.client = client

    def messages(
        self, searches: ClientSearches, theta: np.ndarray, random: ClientRandom
    ) -> ClientReports:
        return _messages(self.client, theta, searches, random)


class DaskFrecencyClients:
    """The clients spread over the workers of a Dask cluster, one contiguous block each,
    balanced by their numbers of searches (module docstring). The client half reaches each
    worker once."""

    def __init__(self, dask: Client, client: FrecencyClient) -> None:
        self.client = client
        self.blocks = DaskBlocks(dask, client)

    def messages(
        self, searches: ClientSearches, theta: np.ndarray, random: ClientRandom
    ) -> ClientReports:
        cut = blocks(searches.work(), self.blocks.n_workers)
        parts = [(searches.block(b.start, b.stop), random.block(b.start, b.stop)) for b in cut]
        if not parts:
            return _messages(self.client, theta, searches, random)  # no client searched
        return ClientReports.concat(self.blocks.run(_on_worker, theta, parts))


def _on_worker(
    client: FrecencyClient, theta: np.ndarray, part: tuple[ClientSearches, ClientRandom]
) -> ClientReports:
    return _messages(client, theta, *part)
