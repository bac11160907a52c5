"""FOLtR-ES: federated online learning to rank by evolution strategies, with local
differential privacy (Kharitonov, WSDM 2019). :data:`SYSTEM` is its record in
:data:`fedrank.federation.registry.SYSTEMS`."""

from __future__ import annotations

from typing import Any

from fedrank.privacy.report import SystemPrivacy, foltr_es_privacy
from fedrank.systems.foltr_es.client import FoltrEsClient
from fedrank.systems.foltr_es.config import FoltrEsConfig
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy
from fedrank.systems.foltr_es.wire import FoltrEsWire
from fedrank.systems.system import System


def _device_privacy(config: dict[str, Any], rounds: int | None) -> SystemPrivacy:
    return foltr_es_privacy(config.get("p"), int(config.get("batch", 4)), rounds)


SYSTEM = System(
    name="foltr-es",
    section="foltr_es",
    config=FoltrEsConfig,
    strategy=FoltrEsStrategy,
    client=FoltrEsClient,
    wire=FoltrEsWire,
    summary="FOLtR-ES: seeds and randomized-response metrics, evolution strategies",
    metrics=(("clicks", 0.0, 1e4), ("maxrr", 0.0, 1.0), ("ndcg", 0.0, 1.0)),
    max_n=1,  # a report is one client's B interactions, never weighted
    device_privacy=_device_privacy,
    central_dp=False,  # its messages are seeds and metrics: privatized on the device
    attacks=("sign-flip", "scale", "random", "targeted-seed"),
)
