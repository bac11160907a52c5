"""FedAvg's client half (McMahan et al. 2017; FedPS, Yao et al., Algorithm 1): a device
trains the broadcast model on its own data -- FedPS's ``E`` epochs of minibatch SGD on the
user's queries, the personal parameters kept on the device
(:mod:`fedrank.estimators.local_sgd`) -- and sends only the change of the shared
parameters with the number of training queries behind it, the weight ``n_j`` of the
server's mean. No privatizer of its own: the shared delta leaves as computed, unless the
server runs central DP (``[privacy]``) or secure aggregation with distributed noise
(``[secagg]``, :mod:`fedrank.client.secagg`)."""

from __future__ import annotations

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.systems.fedavg.config import FedAvgConfig


class FedAvgClient:
    """The client half for one :class:`FedAvgConfig` (module docstring)."""

    #: The shared delta leaves as computed (module docstring).
    privatizer = None

    def __init__(self, config: FedAvgConfig) -> None:
        self.config = config
        self.dim = config.dim

    def message(self, broadcast: np.ndarray, trained: np.ndarray, n: int) -> MessageBatch:
        """The message of a client that trained ``broadcast`` into ``trained`` on ``n``
        queries: the delta of the shared parameters and its weight."""
        before, after = np.asarray(broadcast), np.asarray(trained)
        if before.shape != (self.dim,) or after.shape != (self.dim,):
            raise ConfigError(
                f"the shared parameters have {self.dim} entries; got shapes {before.shape} "
                f"and {after.shape}"
            )
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ConfigError(f"n (the training queries behind the delta) must be >= 1, got {n!r}")
        delta = after.astype(np.float64) - before.astype(np.float64)
        return MessageBatch.of_vectors(delta[None, :], np.array([float(n)]))

    def message_epsilon(self) -> float | None:
        """``None``: the delta leaves as computed (module docstring)."""
        return None
