"""Federated frecency: tuning the Firefox URL bar's ranking from what users select
(Hartmann et al., *Federated Learning for Ranking Browser History Suggestions*).
:data:`SYSTEM` is its record in :data:`fedrank.federation.registry.SYSTEMS`."""

from __future__ import annotations

from typing import Any

from fedrank.models.frecency.scorer import page_scorer
from fedrank.privacy.report import SystemPrivacy, frecency_privacy
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy
from fedrank.systems.frecency.wire import FrecencyWire
from fedrank.systems.system import StudyBranch, System

#: The study's branches (Mozilla Sec. 6.2): 60% treatment, 20% control with Firefox's
#: weights and daily decay, 20% control without the decay.
STUDY_BRANCHES = (
    StudyBranch("treatment", 0.6, "trained"),
    StudyBranch("control", 0.2, "defaults", decay=True),
    StudyBranch("control-no-decay", 0.2, "defaults", decay=False),
)


def _device_privacy(config: dict[str, Any], rounds: int | None) -> SystemPrivacy:
    dim = len(page_scorer(config.get("model", "classic")).names)
    return frecency_privacy(config, None, dim, rounds)


SYSTEM = System(
    name="frecency",
    section="frecency",
    config=FrecencyConfig,
    strategy=FrecencyStrategy,
    client=FrecencyClient,
    wire=FrecencyWire,
    summary="federated frecency: Firefox's URL-bar ranking tuned by finite differences",
    # the add-on reports the SVM loss, the characters typed and the selected rank (Sec.
    # 6.3); `fedrank client` also the searches it replayed, and 1 in `evaluation` marks the
    # pings of an evaluation phase (`fedrank demo`)
    metrics=(
        ("chars_typed", 0.0, 2048.0),
        ("evaluation", 0.0, 1.0),
        ("loss", 0.0, 1e9),
        ("searches", 0.0, 1e6),
        ("selected_rank", 0.0, 1000.0),
    ),
    # a client reports the searches it replays: 100 is already one every 18 s of the
    # paper's 30-minute iterations
    max_n=100,
    device_privacy=_device_privacy,
    branches=STUDY_BRANCHES,
    rounds=False,
)
