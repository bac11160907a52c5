"""The FedPS central server (FedPS Algorithm 1, server side).

The server holds the shared model ``M_t`` as a flat float32 vector and nothing else about
users: it broadcasts ``M_t`` to the sampled clients, receives aggregated updates (a
:class:`~fedrank.aggregators.mean.WeightedMeanState` merged from client messages, directly
in FedPSFlat or through proxies and group servers in FedPSProxy) and applies the FedAvg
strategy's server step (:class:`~fedrank.strategies.fedavg.FedAvgStrategy`, the same chain
the HTTP server runs): ``M_{t+1} = M_t + eta_s sum_j n_j dM_j / sum_j n_j``. Algorithm 1
is ``eta_s = 1``; a larger server step size (FedAvg with server learning rate, Reddi et al.
2021, "Adaptive Federated Optimization") compensates for averaging away the updates of
words and parameters that only a few of the K clients touch. It never receives a client
object, a log, a profile or personal parameters; its module imports nothing from the
client side (tested).

With central DP (``dp``: DP-FedAvg, McMahan et al. 2018; :class:`~fedrank.strategies.dp.
DPStrategy`, the same wrapper the frecency study and the HTTP server use) the step is the
*unweighted* mean of the updates clipped to ``C`` plus Gaussian noise of standard deviation
``z C / m``: every message then weighs 1 (:meth:`FedPSServer.prepare`), and the proxies of
FedPSProxy clip each client's update as they merge (trusted proxies).

With distributed DP (``dp``: :class:`DistributedDP`; :class:`~fedrank.strategies.
distributed_dp.DistributedDPStrategy`, the service's ``[privacy] mode = "distributed"``)
every client's update is clipped and encoded on secure aggregation's integer grid, the
step's sum carries the clients' Skellam shares, and the server steps by the decoded sum
over its contributors; a step with fewer than the plan's threshold is aborted (the model
stays). The proxies of FedPSProxy then sum encoded vectors (as they would sum masked ones).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fedrank.core.message import Message
from fedrank.errors import DataFormatError
from fedrank.privacy.skellam import SkellamPlan
from fedrank.strategies.base import Strategy
from fedrank.strategies.distributed_dp import DistributedDPStrategy
from fedrank.strategies.dp import DPStrategy
from fedrank.strategies.fedavg import FedAvgConfig, FedAvgStrategy


@dataclasses.dataclass(frozen=True)
class CentralDP:
    """DP-FedAvg's settings: noise multiplier ``z``, clip ``C``, the noise's seed, and the
    fixed denominator ``W`` (``None``: each step's count; :class:`~fedrank.strategies.dp.
    DPStrategy`)."""

    noise_multiplier: float
    clip: float
    seed: int
    denominator: float | None = None


@dataclasses.dataclass(frozen=True)
class DistributedDP:
    """Distributed DP's settings: the Skellam plan (:func:`fedrank.privacy.report.
    fedps_skellam_plan`) and the noise's seed."""

    plan: SkellamPlan
    seed: int


class FedPSServer:
    """The shared model and the FedAvg step.

    Args:
        initial_parameters: ``M_0``, the flat shared parameters (float32).
        learning_rate: ``eta_s``, the server step size (1 = Algorithm 1).
        dp: central or distributed DP of every step (module docstring); ``None``: none.
    """

    def __init__(
        self,
        initial_parameters: np.ndarray,
        learning_rate: float = 1.0,
        dp: CentralDP | DistributedDP | None = None,
    ) -> None:
        params = np.asarray(initial_parameters, dtype=np.float32)
        if params.ndim != 1 or params.size == 0:
            raise DataFormatError(f"expected a non-empty flat parameter vector, got {params.shape}")
        fedavg = FedAvgStrategy(
            FedAvgConfig(dim=params.size, server_learning_rate=learning_rate), initial=params
        )
        self.strategy: Strategy = fedavg
        if isinstance(dp, CentralDP):
            self.strategy = DPStrategy(
                fedavg,
                dp.noise_multiplier,
                dp.clip,
                np.random.default_rng(dp.seed),
                denominator=dp.denominator,
            )
        elif isinstance(dp, DistributedDP):
            self.strategy = DistributedDPStrategy(fedavg, dp.plan, np.random.default_rng(dp.seed))
        self.private = dp is not None
        self._fedavg = fedavg
        self.aggregator = self.strategy.aggregator
        self._parameters = self.strategy.initial_params()
        self._opt_state = self.strategy.init(self._parameters)
        self.version = 0
        self.updates_applied = 0

    @property
    def learning_rate(self) -> float:
        return self._fedavg.config.server_learning_rate

    def broadcast(self) -> np.ndarray:
        """A copy of ``M_t`` for the sampled clients."""
        return self._parameters.copy()

    def restart_from(self, parameters: np.ndarray) -> None:
        """Go on from ``parameters`` (the best model of an earlier stage of the run, e.g.
        the click-feature warm-up): the step's state starts again from them; the version
        counter goes on."""
        params = np.asarray(parameters, dtype=np.float32)
        if params.shape != self._parameters.shape:
            raise DataFormatError(
                f"expected parameters of shape {self._parameters.shape}, got {params.shape}"
            )
        self._parameters = params.copy()
        self._opt_state = self.strategy.init(self._parameters)

    def prepare(self, message: Message) -> Message:
        """``message`` as the aggregators take it: under DP with weight 1 (DP-FedAvg's mean
        is unweighted: one user moves it by at most ``C / m``; distributed DP's encoded sum
        has no weights), else as sent."""
        return dataclasses.replace(message, n=1) if self.private else message

    def apply(self, state: Any) -> None:
        """FedAvg step with the merged updates of one step (Algorithm 1, line "server
        aggregates"): add their ``n_j``-weighted mean times ``eta_s``. A step whose updates
        all arrived too late (empty state) leaves the model unchanged but still counts as a
        step."""
        step = self.strategy.server_step(state, self._parameters, self._opt_state)
        self._parameters, self._opt_state = step.params, step.opt_state
        self.updates_applied += state.count
        self.version += 1
