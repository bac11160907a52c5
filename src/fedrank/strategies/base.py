"""What every strategy shares: the server step (ARCHITECTURE.md, Sections 1-2).

A strategy is the one place where a system's chain is assembled from its validated config
section: the aggregator, the optimizer chain and the constraints. Its server half is one
function, :meth:`Strategy.server_step`:

    aggregate = aggregator.finalize(state)              # mergeable state of the round
    step, opt_state = optimizer.update(aggregate, ...)  # an optax-style chain
    params' = constraints.project(params + step, params)

Every place that advances a model -- the HTTP server closing an iteration, every simulation
runner, every experiment -- calls it, so a change to a system's learning rule is made once
and is the same in process, over HTTP and on a cluster. Transport (HTTP, the proxy
hierarchy, Dask) lives elsewhere; a strategy never does I/O (the style of Flower's
strategies, without their inheritance chains).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.core.protocols import Aggregator, Optimizer
from fedrank.errors import FedrankError
from fedrank.optim.constraints import ConstraintChain


class SafeguardError(FedrankError):
    """The constraints could not be satisfied after a step; the model must not change."""


@dataclass(frozen=True)
class ServerStep:
    """The outcome of :meth:`Strategy.server_step`.

    Attributes:
        params: the next model.
        opt_state: the optimizer chain's next state.
        aggregate: the finalized aggregate the step was computed from.
        step: the optimizer chain's step, before the constraints.
    """

    params: np.ndarray
    opt_state: Any
    aggregate: np.ndarray
    step: np.ndarray


class Strategy(ABC):
    """A system's chain (see the module docstring). Subclasses build ``aggregator``,
    ``optimizer`` and ``constraints`` from their config in ``__init__`` and say how the
    first model looks."""

    name: ClassVar[str]
    dim: int
    aggregator: Aggregator[Any]
    optimizer: Optimizer[Any]
    constraints: ConstraintChain | None = None

    @abstractmethod
    def initial_params(self) -> np.ndarray:
        """The model of version 0."""

    def parameter_names(self) -> list[str] | None:
        """Names of the parameters, in vector order, where they have names."""
        return None

    def publish(self, params: np.ndarray) -> np.ndarray:
        """The model as clients receive it (the server keeps ``params``)."""
        return params

    def init(self, params: np.ndarray) -> Any:
        """The optimizer chain's state for ``params``."""
        return self.optimizer.init(params)

    def accumulate(self, state: Any, batch: MessageBatch) -> Any:
        """Fold a batch of messages into the aggregator ``state`` in one vectorized call;
        the empty batch leaves it unchanged."""
        if batch.size == 0:
            return state
        return self.aggregator.accumulate_batch(state, batch)

    def server_step(self, state: Any, params: np.ndarray, opt_state: Any) -> ServerStep:
        """Finalize the aggregator ``state``, step the optimizer chain from ``params`` and
        project onto the constraints (see the module docstring). Pure: the inputs are not
        modified.

        Raises:
            SafeguardError: if the projected model does not satisfy the constraints.
        """
        aggregate = self.aggregator.finalize(state)
        step, new_opt_state = self.optimizer.update(aggregate, opt_state, params)
        proposal = params + step
        if self.constraints is None:
            return ServerStep(proposal, new_opt_state, aggregate, step)
        new_params = self.constraints.project(proposal, params)
        if not self.constraints.holds(new_params, params):
            violated = ", ".join(repr(c) for c in self.constraints.violated(new_params, params))
            raise SafeguardError(
                f"the {self.name} safeguards could not be satisfied after the step "
                f"(violated: {violated}); the model was not changed"
            )
        return ServerStep(new_params, new_opt_state, aggregate, step)
