"""The message a client sends to the server.

A message carries the update vector (full precision, or a compressed form such as signs),
the number of data points ``n`` it was computed from (the FedAvg weight ``n_i``), the model
version it was computed against, and metrics that travel with it (loss, characters typed,
selected rank, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Message:
    """One client report.

    Attributes:
        update: update vector (for gradients: the direction of steepest *ascent* of the loss).
        n: number of data points behind the update (``n_i`` in the paper's weighted mean).
        model_version: version of the model the update was computed against.
        metrics: scalar metrics reported alongside the update.
    """

    update: np.ndarray
    n: int = 1
    model_version: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
