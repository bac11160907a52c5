"""The messages a client sends to the server.

A :class:`Message` carries the update vector (full precision, or a compressed form such as signs),
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


@dataclass(frozen=True)
class ESMessage:
    """A FOLtR-ES report (Section 3.2): the client's random seed and its mean (privatized)
    metric, plus the metric of the antithetic perturbation when antithetic variates are used.

    On the wire (:func:`fedrank.core.codec.encode_es_message`) this is 8 bytes, or 12 with
    the antithetic metric: a 4-byte seed and 4-byte float32 metrics. The model version
    travels beside it (in the request), not in these bytes.

    Attributes:
        seed: the seed the client perturbed the model with, in ``[0, 2**32)``.
        metric: mean privatized metric of the interactions ranked with ``+sigma * v``.
        antithetic_metric: the same for ``-sigma * v`` (``None`` without antithetic variates).
        model_version: version of the model the client perturbed.
    """

    seed: int
    metric: float
    antithetic_metric: float | None = None
    model_version: int = 0
