"""The FedPS central server (FedPS Algorithm 1, server side).

The server holds the shared model ``M_t`` as a flat float32 vector and nothing else about
users: it broadcasts ``M_t`` to the sampled clients, folds in their updates (directly in
FedPSFlat, or the merged state of proxies and group servers in FedPSProxy) and closes the
step with the FedAvg strategy's server step
(:class:`~fedrank.systems.fedavg.strategy.FedAvgStrategy`, the same chain the HTTP server
runs), as a :class:`~fedrank.federation.round.Round`: ``M_{t+1} = M_t + eta_s sum_j n_j
dM_j / sum_j n_j``. Algorithm 1 is ``eta_s = 1``; a larger server step size (FedAvg with
server learning rate, Reddi et al. 2021, "Adaptive Federated Optimization") compensates for
averaging away the updates of words and parameters that only a few of the K clients touch.
It never receives a client object, a log, a profile or personal parameters; its module
imports nothing from the client side (tested).

With a privacy budget (:class:`~fedrank.federation.privacy.PrivacyConfig`) the strategy is
the privacy factory's (:func:`~fedrank.federation.privacy.private`, the same the frecency
study and the HTTP server use): central DP (DP-FedAvg, McMahan et al. 2018) folds every
update with weight 1, clipped to ``C``, and adds Gaussian noise of standard deviation
``z C / m`` to the step's mean; distributed DP encodes every update on secure aggregation's
integer grid, the step's sum carries the clients' Skellam shares, and a step with fewer
than the plan's threshold is aborted (the model stays). The proxies of FedPSProxy fold their
clients' updates by the same rule (trusted proxies clip as they merge; under distributed DP
they sum encoded vectors, as they would sum masked ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.errors import DataFormatError
from fedrank.federation.privacy import PrivacyConfig, private
from fedrank.federation.round import Round
from fedrank.strategies.base import Strategy
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy


class FedPSServer:
    """The shared model and the FedAvg step.

    Args:
        initial_parameters: ``M_0``, the flat shared parameters (float32).
        learning_rate: ``eta_s``, the server step size (1 = Algorithm 1).
        privacy: central or distributed DP of every step (module docstring); ``None``: none.
        seed: the seed of the privacy noise.
        rounds, sampling_rate, clients, noise_multiplier: what the privacy factory needs to
            calibrate the noise (:func:`~fedrank.federation.privacy.private`): the steps a
            user may take part in and its probability in each, the clients of a step
            (distributed DP's plan), or a noise multiplier given outright.
    """

    def __init__(
        self,
        initial_parameters: np.ndarray,
        learning_rate: float = 1.0,
        privacy: PrivacyConfig | None = None,
        *,
        seed: int = 0,
        rounds: int = 1,
        sampling_rate: float = 1.0,
        clients: int | None = None,
        noise_multiplier: float | None = None,
    ) -> None:
        params = np.asarray(initial_parameters, dtype=np.float32)
        if params.ndim != 1 or params.size == 0:
            raise DataFormatError(f"expected a non-empty flat parameter vector, got {params.shape}")
        fedavg = FedAvgStrategy(
            FedAvgConfig(dim=params.size, server_learning_rate=learning_rate), initial=params
        )
        self.learning_rate = fedavg.config.server_learning_rate
        self.strategy: Strategy = private(
            fedavg,
            privacy,
            rounds=rounds,
            rng=np.random.default_rng(seed),
            sampling_rate=sampling_rate,
            clients=clients,
            noise_multiplier=noise_multiplier,
        )
        self.round = Round(self.strategy)
        self.updates_applied = 0

    @property
    def version(self) -> int:
        """Steps applied so far."""
        return self.round.version

    def broadcast(self) -> np.ndarray:
        """A copy of ``M_t`` for the sampled clients."""
        return self.round.params.copy()

    def restart_from(self, parameters: np.ndarray) -> None:
        """Go on from ``parameters`` (the best model of an earlier stage of the run, e.g.
        the click-feature warm-up): the step's state starts again from them; the version
        counter goes on."""
        params = np.asarray(parameters, dtype=np.float32)
        if params.shape != self.round.params.shape:
            raise DataFormatError(
                f"expected parameters of shape {self.round.params.shape}, got {params.shape}"
            )
        self.round.restart_from(params)

    def fold(self, batch: MessageBatch) -> None:
        """The step's updates that reached the server directly (FedPSFlat), folded by the
        strategy's rule."""
        self.round.fold(batch)

    def merge(self, partial: Any) -> None:
        """A state merged through proxies and group servers from :meth:`empty` (FedPSProxy)."""
        self.round.merge(partial)

    def empty(self) -> Any:
        """Where a proxy starts folding its clients' updates of this step."""
        return self.round.empty()

    def apply(self) -> None:
        """Close the step (Algorithm 1, line "server aggregates"): add the ``n_j``-weighted
        mean of its updates times ``eta_s``. A step whose updates all arrived too late
        (empty) leaves the model unchanged but still counts as a step."""
        self.updates_applied += self.round.aggregate.count
        self.round.close()
