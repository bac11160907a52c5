"""FPDGD: federated Pairwise Differentiable Gradient Descent (Wang et al., ICTIR 2021), a
federated online learner to rank from clicks beside FOLtR-ES. :data:`SYSTEM` is its record
in :data:`fedrank.federation.registry.SYSTEMS`."""

from __future__ import annotations

from typing import Any

from fedrank.privacy.report import SystemPrivacy, fpdgd_privacy
from fedrank.systems.fpdgd.client import FpdgdClient
from fedrank.systems.fpdgd.config import FpdgdConfig
from fedrank.systems.fpdgd.strategy import FpdgdStrategy
from fedrank.systems.fpdgd.wire import FpdgdWire
from fedrank.systems.system import System


def _device_privacy(config: dict[str, Any], rounds: int | None) -> SystemPrivacy:
    laplace = {
        "dp": config.get("laplace", "none"),
        "dp_epsilon": config.get("laplace_epsilon", 0.0),
        "dp_clip": config.get("laplace_clip"),
    }
    return fpdgd_privacy(laplace, rounds)


SYSTEM = System(
    name="fpdgd",
    section="fpdgd",
    config=FpdgdConfig,
    strategy=FpdgdStrategy,
    client=FpdgdClient,
    wire=FpdgdWire,
    summary="FPDGD: federated pairwise differentiable gradient descent from clicks",
    metrics=(("clicks", 0.0, 1e4), ("maxrr", 0.0, 1.0), ("ndcg", 0.0, 1.0)),
    max_n=1000,  # a client's interactions in one round
    device_privacy=_device_privacy,
)
