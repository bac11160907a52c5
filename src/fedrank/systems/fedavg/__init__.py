"""FedAvg of a ranker's shared parameters, the federated half of FedPS (McMahan et al. 2017;
Yao et al., *FedPS*, Algorithm 1). :data:`SYSTEM` is its record in
:data:`fedrank.federation.registry.SYSTEMS`."""

from __future__ import annotations

from typing import Any

from fedrank.privacy.report import SystemPrivacy, no_privacy
from fedrank.systems.fedavg.client import FedAvgClient
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.fedavg.wire import FedAvgWire
from fedrank.systems.system import System


def _device_privacy(config: dict[str, Any], rounds: int | None) -> SystemPrivacy:
    return no_privacy(
        "fedavg", {"dim": config.get("dim")}, "none: the model delta is sent as computed"
    )


SYSTEM = System(
    name="fedavg",
    section="fedavg",
    config=FedAvgConfig,
    strategy=FedAvgStrategy,
    client=FedAvgClient,
    wire=FedAvgWire,
    summary="FedAvg of a ranker's shared parameters (FedPS)",
    # FedPS clients report their local training loss (only when the user turns metrics on)
    metrics=(("loss", 0.0, 1e9), ("ndcg", 0.0, 1.0), ("train_loss", 0.0, 1e9)),
    max_n=100_000,  # a FedPS client's training queries
    device_privacy=_device_privacy,
    secure_aggregation=True,
    attacks=("sign-flip", "scale", "random", "model-replacement"),
)
