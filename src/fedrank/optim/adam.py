"""Adam (Kingma and Ba 2015), the optimizer FOLtR-ES uses and paper Section 5.3 compares
Rprop with.

Bias-corrected, with PyTorch's defaults and update rule (``torch.optim.Adam``, no weight
decay), for iteration ``t = 1, 2, ...`` and aggregated gradient ``g_t``::

    m_t = b1 * m_{t-1} + (1 - b1) * g_t
    v_t = b2 * v_{t-1} + (1 - b2) * g_t**2
    step = -learning_rate * (m_t / (1 - b1**t)) / (sqrt(v_t / (1 - b2**t)) + eps)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import DataFormatError
from fedrank.optim.serialization import check_hyperparameter, check_step_inputs, step_dtype


class AdamState(NamedTuple):
    """State of :class:`Adam`.

    Attributes:
        count: number of updates applied (``t`` after the update).
        mu: first-moment estimate ``m`` (float64).
        nu: second-moment estimate ``v`` (float64).
    """

    count: int
    mu: npt.NDArray[np.float64]
    nu: npt.NDArray[np.float64]


class Adam:
    """Adam with bias correction (PyTorch defaults).

    Args:
        learning_rate: step scale (default 1e-3).
        b1: decay of the first moment, in [0, 1) (default 0.9).
        b2: decay of the second moment, in [0, 1) (default 0.999).
        eps: positive constant added to the denominator (default 1e-8).

    >>> import numpy as np
    >>> opt = Adam(learning_rate=0.1)
    >>> step, state = opt.update(np.array([3.0, -0.5]), opt.init(np.zeros(2)), np.zeros(2))
    >>> np.round(step, 6).tolist()  # the first step is -learning_rate * sign(g)
    [-0.1, 0.1]
    """

    def __init__(
        self,
        learning_rate: float = 1e-3,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
    ) -> None:
        self.learning_rate = check_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.b1 = check_hyperparameter(
            "b1", b1, low=0.0, low_inclusive=True, high=1.0, high_inclusive=False
        )
        self.b2 = check_hyperparameter(
            "b2", b2, low=0.0, low_inclusive=True, high=1.0, high_inclusive=False
        )
        self.eps = check_hyperparameter("eps", eps, low=0.0)

    def __repr__(self) -> str:
        return (
            f"Adam(learning_rate={self.learning_rate}, b1={self.b1}, b2={self.b2}, eps={self.eps})"
        )

    def init(self, params: np.ndarray) -> AdamState:
        """Zero moments."""
        shape = np.shape(params)
        return AdamState(0, np.zeros(shape, dtype=np.float64), np.zeros(shape, dtype=np.float64))

    def update(
        self, update: np.ndarray, state: AdamState, params: np.ndarray
    ) -> tuple[np.ndarray, AdamState]:
        """One bias-corrected Adam step against ``update``."""
        g, p = check_step_inputs(update, params, state.mu.shape)
        t = state.count + 1
        mu = self.b1 * state.mu + (1.0 - self.b1) * g
        nu = self.b2 * state.nu + (1.0 - self.b2) * (g * g)
        mu_hat = mu / (1.0 - self.b1**t)
        nu_hat = nu / (1.0 - self.b2**t)
        step = (0.0 - self.learning_rate * mu_hat / (np.sqrt(nu_hat) + self.eps)).astype(
            step_dtype(p), copy=False
        )
        return step, AdamState(t, mu, nu)

    def state_to_json(self, state: AdamState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        return encode_state(state, "Adam")

    def state_from_json(self, data: dict[str, Any]) -> AdamState:
        """Inverse of :meth:`state_to_json`; the moments must be of one shape."""
        state = decode_state(data, AdamState, "Adam")
        if state.mu.shape != state.nu.shape:
            raise DataFormatError(
                f"saved Adam state has mu of shape {state.mu.shape} but nu of shape "
                f"{state.nu.shape}"
            )
        return state
