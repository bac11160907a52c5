"""FedAvg of shared-parameter deltas (McMahan et al. 2017; FedPS, Yao et al., Algorithm 1):
the server half, built once from its config.

Clients train the broadcast model locally and send ``(delta, n)``: the change of the shared
parameters and their number of training queries
(:class:`~fedrank.estimators.local_sgd.FedPSClient`); personal parameters never leave the
device. The server merges the messages with the weighted mean
(:class:`~fedrank.aggregators.mean.WeightedMean`, directly or through proxies and group
servers: :mod:`fedrank.aggregators.hierarchy`) and applies

    M_{t+1} = M_t + eta_s * sum_j n_j delta_j / sum_j n_j

as the optimizer chain ``Chain(Scale(-1), SGD(eta_s))``: the mean delta points downhill,
the chain turns it into the uphill update SGD descends. Algorithm 1 is ``eta_s = 1``; a
larger server step size is FedAvg with a server learning rate (Reddi et al. 2021). No
constraints.

Against poisoning the mean can be replaced by the coordinate-wise median or trimmed mean of
the deltas (Yin et al. 2018; unweighted, since ``n_j`` is client-reported), and every delta
bounded in L2 norm, fixed or adaptively (Andrew et al. 2021):
:func:`~fedrank.strategies.base.build_aggregator`.
"""

from __future__ import annotations

import numpy as np

from fedrank.aggregators.mean import WeightedMean
from fedrank.errors import ConfigError
from fedrank.optim.chain import Chain, Scale
from fedrank.optim.sgd import SGD
from fedrank.strategies.base import Strategy, build_aggregator
from fedrank.systems.fedavg.config import FedAvgConfig


class FedAvgStrategy(Strategy):
    """The FedAvg server chain for one :class:`FedAvgConfig` (module docstring).

    Args:
        config: the settings.
        initial: the model of version 0 (default: zeros of ``config.dim``); its dtype is
            kept (FedPS's models are float32).
    """

    name = "fedavg"

    def __init__(self, config: FedAvgConfig, initial: np.ndarray | None = None) -> None:
        self.config = config
        self.dim = config.dim
        if initial is not None and np.shape(initial) != (config.dim,):
            raise ConfigError(
                f"the initial model must have shape ({config.dim},), got {np.shape(initial)}"
            )
        self._initial = np.zeros(config.dim) if initial is None else np.array(initial)
        self.aggregator = build_aggregator(
            WeightedMean(config.dim), config.aggregator, config.dim, config.trim,
            config.norm_bound, config.norm_quantile, config.max_rows,
        )  # fmt: skip
        self.optimizer = Chain(Scale(-1.0), SGD(learning_rate=config.server_learning_rate))

    def initial_params(self) -> np.ndarray:
        return self._initial.copy()
