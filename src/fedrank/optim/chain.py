"""Composing update transformations, Optax-style (``optax.chain``, ``optax.scale``).

A strategy's server step is one transformation of the aggregate into the step added to the
parameters. Every optimizer here (:class:`~fedrank.optim.rprop.Rprop`,
:class:`~fedrank.optim.sgd.SGD`, :class:`~fedrank.optim.adam.Adam`) takes an *uphill*
update (a gradient of a loss) and returns a descent step. An aggregate that points the
other way -- a FedAvg mean delta, an ES estimate of the gradient of a metric to maximize --
goes through :class:`Scale` ``(-1)`` first, written where the chain is built
(``Chain(Scale(-1.0), SGD(1.0))``), instead of a flag that hides the direction.

Both are pure ``init`` / ``update`` pairs with explicit, JSON-checkpointable state, like
every optimizer (docs/architecture.md), and pass the optimizer conformance suite.

>>> import numpy as np
>>> from fedrank.optim.sgd import SGD
>>> fedavg = Chain(Scale(-1.0), SGD(learning_rate=1.0))  # FedPS Alg. 1: add the mean delta
>>> step, _ = fedavg.update(np.array([0.5, -1.0]), fedavg.init(np.zeros(2)), np.zeros(2))
>>> step.tolist()
[0.5, -1.0]
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fedrank.core.protocols import Optimizer
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_step_inputs, step_dtype


class ScaleState(NamedTuple):
    """State of :class:`Scale`: the parameter shape, so mismatched updates are caught."""

    shape: tuple[int, ...]


class Scale:
    """``update -> factor * update`` (``optax.scale``), in float64 (a :class:`Chain`
    casts its last output to the parameters' dtype); no other state.

    Args:
        factor: a finite, non-zero multiplier (``-1`` turns a descent direction into the
            uphill update the optimizers take).
    """

    def __init__(self, factor: float) -> None:
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            raise ConfigError(f"factor must be a number, got {factor!r}")
        if not np.isfinite(factor) or factor == 0:
            raise ConfigError(f"factor must be finite and non-zero, got {factor!r}")
        self.factor = float(factor)

    def __repr__(self) -> str:
        return f"Scale({self.factor})"

    def init(self, params: np.ndarray) -> ScaleState:
        return ScaleState(tuple(np.shape(params)))

    def update(
        self, update: np.ndarray, state: ScaleState, params: np.ndarray
    ) -> tuple[np.ndarray, ScaleState]:
        g, _ = check_step_inputs(update, params, state.shape)
        return self.factor * g, state  # float64: the chain casts its last output

    def state_to_json(self, state: ScaleState) -> dict[str, Any]:
        return encode_state(state, "Scale")

    def state_from_json(self, data: dict[str, Any]) -> ScaleState:
        return decode_state(data, ScaleState, "Scale")


class ChainState(NamedTuple):
    """State of :class:`Chain`: one state per transformation, in order."""

    states: tuple[Any, ...]


class Chain:
    """Apply transformations in order, each to the previous one's output
    (``optax.chain``); the last one's output is the step.

    Args:
        transforms: at least one object with ``init`` / ``update`` / ``state_to_json`` /
            ``state_from_json`` (an :class:`~fedrank.core.protocols.Optimizer`).
    """

    def __init__(self, *transforms: Optimizer[Any]) -> None:
        if not transforms:
            raise ConfigError("a Chain needs at least one transformation")
        self.transforms = transforms

    def __repr__(self) -> str:
        return f"Chain({', '.join(map(repr, self.transforms))})"

    def init(self, params: np.ndarray) -> ChainState:
        return ChainState(tuple(t.init(params) for t in self.transforms))

    def update(
        self, update: np.ndarray, state: ChainState, params: np.ndarray
    ) -> tuple[np.ndarray, ChainState]:
        if len(state.states) != len(self.transforms):
            raise ConfigError(
                f"a state of {len(state.states)} transformations for a chain of "
                f"{len(self.transforms)}"
            )
        states = []
        for transform, sub in zip(self.transforms, state.states, strict=True):
            update, sub = transform.update(update, sub, params)
            states.append(sub)
        step = np.asarray(update).astype(step_dtype(np.asarray(params)), copy=False)
        return step, ChainState(tuple(states))

    def state_to_json(self, state: ChainState) -> dict[str, Any]:
        """Each transformation's state as that transformation writes it."""
        return encode_state(state, "Chain", nested={"states": self.transforms})

    def state_from_json(self, data: dict[str, Any]) -> ChainState:
        """Inverse of :meth:`state_to_json` (each state checked by its transformation)."""
        return decode_state(data, ChainState, "Chain", nested={"states": self.transforms})
