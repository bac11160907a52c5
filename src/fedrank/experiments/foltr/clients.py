"""Where the clients of a FOLtR-ES or FPDGD training run interact: in this process, or
spread over the workers of a Dask cluster (``fedrank foltr train --dask-workers N``).

Every client's random numbers are its own (:class:`~fedrank.core.client_random.
ClientRandom`, keyed by the run seed, the iteration and the client's number), so a block of
clients reports the same wherever it runs. On Dask, the client code and the query bank
reach each worker once (scattered); every iteration sends the model, each worker runs one
contiguous block of clients (:class:`~fedrank.experiments.executors.DaskBlocks`), and the
driver puts the blocks' reports back in client order:

* FOLtR-ES: :meth:`~fedrank.estimators.evolution_strategies.ESEstimator.interact`; the
  reports are the clients' messages (a seed and one or two metrics, 8-12 bytes each);
* FPDGD: :class:`FPDGDUpdate`, each client's ``B`` PDGD interactions from the global
  model, then its (privatized) parameter change.

Either way the driver's aggregator folds exactly the messages an in-process run folds, in
the same order: the two runs are identical bit for bit (``tests/cli/test_cli_foltr.py``,
on a real 2-worker cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from fedrank.core.client_random import ClientRandom
from fedrank.data.query_bank import QueryBank
from fedrank.estimators.evolution_strategies import ESEstimator, ESReports
from fedrank.experiments.executors import DaskBlocks, blocks
from fedrank.systems.fpdgd.client import FPDGDReports, FPDGDUpdate

if TYPE_CHECKING:
    from distributed import Client


class ESClients(Protocol):
    """The clients of one FOLtR-ES run."""

    def interact(self, theta: np.ndarray, random: ClientRandom) -> ESReports:
        """The reports of the clients of ``random`` against the model ``theta``."""
        ...


class LocalESClients:
    """All clients in this process, one vectorized call per iteration."""

    def __init__(self, estimator: ESEstimator, bank: QueryBank) -> None:
        self.estimator, self.bank = estimator, bank

    def interact(self, theta: np.ndarray, random: ClientRandom) -> ESReports:
        return self.estimator.interact(theta, self.bank, random)


def _interact(
    estimator: ESEstimator, bank: QueryBank, theta: np.ndarray, random: ClientRandom
) -> ESReports:
    return estimator.interact(theta, bank, random)


def concat_reports(parts: list[ESReports]) -> ESReports:
    """Reports of consecutive client blocks as one (client order kept)."""
    anti = [p.antithetic_metric for p in parts]
    return ESReports(
        np.concatenate([p.seeds for p in parts]),
        np.concatenate([p.metric for p in parts]),
        None if anti[0] is None else np.concatenate(anti),  # type: ignore[arg-type]
        np.concatenate([p.maxrr for p in parts]),
    )


def client_blocks(random: ClientRandom, n_blocks: int) -> list[ClientRandom]:
    """The clients of ``random`` in at most ``n_blocks`` contiguous blocks of nearly equal
    size (their numbers do not change)."""
    return [random.block(b.start, b.stop) for b in blocks(np.ones(random.size), n_blocks)]


class DaskESClients:
    """The clients spread over the workers of a Dask cluster, one contiguous block each
    (module docstring)."""

    def __init__(self, client: Client, estimator: ESEstimator, bank: QueryBank) -> None:
        self.blocks = DaskBlocks(client, estimator, bank)

    def interact(self, theta: np.ndarray, random: ClientRandom) -> ESReports:
        parts = client_blocks(random, self.blocks.n_workers)
        return concat_reports(self.blocks.run(_interact, theta, parts))


def _fpdgd(
    update: FPDGDUpdate, bank: QueryBank, theta: np.ndarray, random: ClientRandom
) -> FPDGDReports:
    return update.run(theta, bank, random)


class LocalFPDGDClients:
    """FPDGD's clients in this process, one vectorized pass per interaction."""

    def __init__(self, update: FPDGDUpdate, bank: QueryBank) -> None:
        self.update, self.bank = update, bank

    def train(self, theta: np.ndarray, random: ClientRandom) -> FPDGDReports:
        return self.update.run(theta, self.bank, random)


class DaskFPDGDClients:
    """FPDGD's clients in contiguous blocks on the workers of a Dask cluster."""

    def __init__(self, client: Client, update: FPDGDUpdate, bank: QueryBank) -> None:
        self.blocks = DaskBlocks(client, update, bank)

    def train(self, theta: np.ndarray, random: ClientRandom) -> FPDGDReports:
        parts = self.blocks.run(_fpdgd, theta, client_blocks(random, self.blocks.n_workers))
        return FPDGDReports(
            np.concatenate([p.deltas for p in parts]), np.concatenate([p.maxrr for p in parts])
        )
