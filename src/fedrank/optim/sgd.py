"""Plain gradient descent: ``step = -learning_rate * update``.

This is the baseline paper Section 5.3 argues against: with no data collected beforehand the
gradient magnitudes are unknown, so the learning rate cannot be tuned before federated training
starts. With ``learning_rate = 1`` it also applies an averaged FedAvg delta (FedPS,
docs/architecture.md) when the clients report ``update = -delta`` (uphill convention).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fedrank.core.state_json import decode_state, encode_state
from fedrank.optim.serialization import check_hyperparameter, check_step_inputs, step_dtype


class SGDState(NamedTuple):
    """State of :class:`SGD`: only the number of updates applied (and the parameter shape,
    so that mismatched updates are caught)."""

    count: int
    shape: tuple[int, ...]


class SGD:
    """Gradient descent with a constant learning rate.

    Args:
        learning_rate: positive step multiplier; ``step = -learning_rate * update``.

    >>> import numpy as np
    >>> opt = SGD(learning_rate=0.1)
    >>> step, state = opt.update(np.array([1.0, -2.0]), opt.init(np.zeros(2)), np.zeros(2))
    >>> step.tolist()
    [-0.1, 0.2]
    """

    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = check_hyperparameter("learning_rate", learning_rate, low=0.0)

    def __repr__(self) -> str:
        return f"SGD(learning_rate={self.learning_rate})"

    def init(self, params: np.ndarray) -> SGDState:
        """A fresh state for ``params``."""
        return SGDState(0, tuple(np.shape(params)))

    def update(
        self, update: np.ndarray, state: SGDState, params: np.ndarray
    ) -> tuple[np.ndarray, SGDState]:
        """``(-learning_rate * update, new_state)``."""
        g, p = check_step_inputs(update, params, state.shape)
        step = (0.0 - self.learning_rate * g).astype(step_dtype(p), copy=False)
        return step, SGDState(state.count + 1, state.shape)

    def state_to_json(self, state: SGDState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        return encode_state(state, "SGD")

    def state_from_json(self, data: dict[str, Any]) -> SGDState:
        """Inverse of :meth:`state_to_json`."""
        return decode_state(data, SGDState, "SGD")
