"""FedAvg's messages on the wire (FedPS Algorithm 1): ``{"delta": [d floats], "n": int}``,
the change of the shared parameters and the training queries behind it (both required)."""

from __future__ import annotations

from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.wire import VectorWire


class FedAvgWire(VectorWire):
    """Model deltas with their weights (module docstring)."""

    name = "fedavg"
    key = "delta"

    def __init__(self, config: FedAvgConfig, max_n: int) -> None:
        super().__init__(config.dim, max_n)
