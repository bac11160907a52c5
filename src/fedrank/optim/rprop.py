"""Rprop: per-weight step sizes adapted from gradient signs (paper Section 5.3, Eq. (1)-(2)).

Rprop ignores gradient magnitudes, so it works whatever scale the federated gradient
estimates have, and every iteration moves each weight by at most ``step_max`` (Section 5.3:
"the optimization algorithm bounds the magnitude of updates by design"). For weight ``i`` and
iteration ``t``, with ``g_t`` the aggregated gradient (uphill), the step size is adapted first
(Eq. (2))::

    eta_i(t) = min(eta_i(t-1) * eta_plus,  step_max)   if sign(g_t,i) * sign(g_{t-1},i) > 0
               max(eta_i(t-1) * eta_minus, step_min)   if sign(g_t,i) * sign(g_{t-1},i) < 0
               eta_i(t-1)                              otherwise (a zero gradient, or t = 0)

and then the weight moves against the gradient (Eq. (1))::

    step_i = -eta_i(t) * sign(g_t,i)

so a zero gradient leaves both the weight and its step size unchanged. Step sizes are floats
and are never rounded: rounding ``1 * 1.2`` back to ``1`` would stop them from ever growing
and rounding ``1 * 0.5`` to ``0`` would freeze the weight.

This is the variant the study's deployed server ran (``FederatedLearningRPropOptimizer.scala``
in ``mozilla/telemetry-streaming``), Rprop without weight-backtracking ("Rprop-" in Igel and
Huesken 2003): on a sign change the step size shrinks and the weight still moves, with the
new sign; a zero keeps the step size, does not move, and leaves the next step size unchanged
too; the first update keeps ``step_init``. Its hyperparameters were
``Rprop(eta_plus=2.0, eta_minus=0.6, step_init=2.0, step_min=1.0, step_max=3.0)``. Its
clients sent ``(E(theta - eps) - E(theta + eps)) / (2 eps)``, the *negative* gradient, and the
server added ``eta * sign(mean)``: pass the negated mean here. (The Scala code compares the
product of the raw mean updates with the previous ones, which would underflow to 0, i.e.
"no change", only for products below about 5e-324; this class compares signs.)

Because only signs are used, the ``update`` can just as well be the output of a sign-majority
vote (:class:`fedrank.aggregators.sign_vote.SignVote`, end of Section 5.3).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim.serialization import check_hyperparameter, check_step_inputs, step_dtype


class RpropState(NamedTuple):
    """State of :class:`Rprop`.

    Attributes:
        step_size: current per-weight step sizes ``eta_i`` (float64).
        prev_sign: sign of the previous update per weight, in ``{-1, 0, +1}`` (int8; all 0
            before the first update).
        count: number of updates applied.
    """

    step_size: npt.NDArray[np.float64]
    prev_sign: npt.NDArray[np.int8]
    count: int


class Rprop:
    """Resilient backpropagation as used for federated frecency (paper Eq. (1)-(2)).

    Args:
        eta_plus: factor that grows a step size while the gradient keeps its sign
            (``alpha`` in Eq. (2); default 1.2, Igel and Huesken 2003).
        eta_minus: factor that shrinks it when the sign flips (``beta``; default 0.5).
        step_init: initial step size of every weight (``eta_i(0)``; default 1.0).
        step_min: lower clip of step sizes (default 1e-3).
        step_max: upper clip of step sizes, hence the largest change of any weight in one
            iteration (default 3.0).

    Requires ``eta_plus > 1 > eta_minus > 0`` and ``0 < step_min <= step_init <= step_max``.

    Example (two iterations; the second gradient keeps the sign of weight 0, flips that of
    weight 1 and is zero for weight 2):

    >>> import numpy as np
    >>> opt = Rprop()
    >>> params = np.zeros(3)
    >>> state = opt.init(params)
    >>> step, state = opt.update(np.array([2.0, -0.5, 0.0]), state, params)
    >>> step.tolist()
    [-1.0, 1.0, 0.0]
    >>> params = params + step
    >>> step, state = opt.update(np.array([4.0, 0.3, 0.0]), state, params)
    >>> state.step_size.tolist()
    [1.2, 0.5, 1.0]
    >>> step.tolist()
    [-1.2, -0.5, 0.0]
    """

    def __init__(
        self,
        eta_plus: float = 1.2,
        eta_minus: float = 0.5,
        step_init: float = 1.0,
        step_min: float = 1e-3,
        step_max: float = 3.0,
    ) -> None:
        self.eta_plus = check_hyperparameter("eta_plus", eta_plus, low=1.0)
        self.eta_minus = check_hyperparameter(
            "eta_minus", eta_minus, low=0.0, high=1.0, high_inclusive=False
        )
        self.step_min = check_hyperparameter("step_min", step_min, low=0.0)
        self.step_init = check_hyperparameter("step_init", step_init, low=0.0)
        self.step_max = check_hyperparameter("step_max", step_max, low=0.0)
        if not self.step_min <= self.step_init <= self.step_max:
            raise ConfigError(
                "Rprop needs step_min <= step_init <= step_max, got "
                f"step_min={step_min}, step_init={step_init}, step_max={step_max}"
            )

    def __repr__(self) -> str:
        return (
            f"Rprop(eta_plus={self.eta_plus}, eta_minus={self.eta_minus}, "
            f"step_init={self.step_init}, step_min={self.step_min}, step_max={self.step_max})"
        )

    def init(self, params: np.ndarray) -> RpropState:
        """Every step size at ``step_init``, no previous sign."""
        shape = np.shape(params)
        return RpropState(
            np.full(shape, self.step_init, dtype=np.float64), np.zeros(shape, dtype=np.int8), 0
        )

    def update(
        self, update: np.ndarray, state: RpropState, params: np.ndarray
    ) -> tuple[np.ndarray, RpropState]:
        """Adapt the step sizes to the sign of ``update`` (Eq. (2)), then step against it
        (Eq. (1)). Returns ``(step, new_state)``; add ``step`` to ``params``."""
        g, p = check_step_inputs(update, params, state.step_size.shape)
        sign = np.sign(g).astype(np.int8)
        agreement = sign * state.prev_sign
        step_size = np.where(
            agreement > 0,
            np.minimum(state.step_size * self.eta_plus, self.step_max),
            np.where(
                agreement < 0,
                np.maximum(state.step_size * self.eta_minus, self.step_min),
                state.step_size,
            ),
        )
        # 0.0 - x rather than -x, so that weights with a zero gradient get +0.0, not -0.0.
        step = (0.0 - step_size * sign).astype(step_dtype(p), copy=False)
        return step, RpropState(step_size, sign, state.count + 1)

    def state_to_json(self, state: RpropState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        return encode_state(state, "Rprop")

    def state_from_json(self, data: dict[str, Any]) -> RpropState:
        """Inverse of :meth:`state_to_json`; the step sizes and signs must be of one shape."""
        state = decode_state(data, RpropState, "Rprop")
        if state.step_size.shape != state.prev_sign.shape:
            raise DataFormatError(
                f"saved Rprop state has step_size of shape {state.step_size.shape} but "
                f"prev_sign of shape {state.prev_sign.shape}"
            )
        return state
