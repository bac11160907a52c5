"""Where the FOLtR-ES clients of a training run interact: in this process, or spread over
the workers of a Dask cluster (``fedrank foltr train --dask-workers N``).

Every client's random numbers are its own (:class:`~fedrank.core.client_random.
ClientRandom`, keyed by the run seed, the iteration and the client's number), so a block of
clients reports the same wherever it runs. On Dask, the estimator and the query bank reach
each worker once (scattered); every iteration sends the model, each worker runs
:meth:`~fedrank.estimators.evolution_strategies.ESEstimator.interact` for one contiguous
block of clients, and the driver puts the blocks' reports back in client order. The
reports are the clients' messages (a seed and one or two metrics, 8-12 bytes each), so the
driver's aggregator folds exactly the messages an in-process run folds, in the same order:
the two runs are identical bit for bit (``tests/experiments/foltr/test_clients.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from fedrank.core.client_random import ClientRandom
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError
from fedrank.estimators.evolution_strategies import ESEstimator, ESReports

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


class DaskESClients:
    """The clients spread over the workers of a Dask cluster, one contiguous block each
    (module docstring)."""

    def __init__(self, client: Client, estimator: ESEstimator, bank: QueryBank) -> None:
        self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise ConfigError("the Dask cluster has no workers; start at least one")
        self.client = client
        self._estimator, self._bank = client.scatter([estimator, bank], broadcast=True, hash=False)

    def interact(self, theta: np.ndarray, random: ClientRandom) -> ESReports:
        edges = np.linspace(0, random.size, len(self.workers) + 1).round().astype(int)
        futures = [
            self.client.submit(
                _interact,
                self._estimator,
                self._bank,
                theta,
                random.block(int(lo), int(hi)),
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for lo, hi, worker in zip(edges[:-1], edges[1:], self.workers, strict=True)
            if hi > lo
        ]
        return concat_reports(self.client.gather(futures))
