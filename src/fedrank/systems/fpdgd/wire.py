"""FPDGD's messages on the wire: ``{"delta": [d floats], "n": int}``, the change of the
ranker's parameters after the client's ``B`` interactions and ``n = B`` (FedAvg's form,
:mod:`fedrank.systems.fedavg.wire`)."""

from __future__ import annotations

from fedrank.models.rankers import make_ranker
from fedrank.systems.fpdgd.config import FpdgdConfig
from fedrank.systems.wire import VectorWire


class FpdgdWire(VectorWire):
    """Model deltas with their interactions (module docstring)."""

    name = "fpdgd"
    key = "delta"

    def __init__(self, config: FpdgdConfig, max_n: int) -> None:
        super().__init__(make_ranker(config.ranker, config.n_features).dim, max_n)
