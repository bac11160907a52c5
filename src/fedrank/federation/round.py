"""The one round loop of every federated learner in fedrank (docs/architecture.md).

A round starts from the strategy's empty aggregate -- :meth:`Strategy.zero
<fedrank.strategies.base.Strategy.zero>` for the first, :meth:`Strategy.next_zero
<fedrank.strategies.base.Strategy.next_zero>` of the previous round's final aggregate after
that, which carries an adaptive norm bound or clip -- folds in what arrives (batches of
client messages, or the merged partial aggregates of proxies and cluster workers), and
closes with the strategy's server step::

    aggregate             = round's folded messages        (fold / merge)
    params', opt_state'   = strategy.server_step(aggregate, params, opt_state)
    next round's aggregate = strategy.next_zero(aggregate)
    version              += 1; clients receive strategy.publish(params')

The service's engine, the frecency study and its iteration policies, FOLtR-ES and FPDGD
training, the FedPS runner and the Dask driver all drive a :class:`Round`; nothing else
calls ``server_step``, so the order above is written once. The transport (in process,
HTTP, Dask) sits outside: a round never does I/O, in the manner of Flower's
``Strategy.start(grid, ...)``, whose loop is written once and takes the grid it runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.strategies.base import ServerStep, Strategy


class RoundState(NamedTuple):
    """Everything a round holds: the server's parameters, the optimizer chain's state, the
    open round's aggregate and the version of the model those parameters are."""

    params: np.ndarray
    opt_state: Any
    aggregate: Any
    version: int


@dataclass(frozen=True)
class Closed:
    """What :meth:`Round.close` did.

    Attributes:
        version: the version of the model the close produced (published).
        step: the strategy's server step (the new parameters, optimizer state, the
            aggregate it stepped on and the step before the constraints).
        aggregate: the closed round's final aggregate, what a durable server keeps so that
            a restart can carry its adaptive bound into the round after.
    """

    version: int
    step: ServerStep
    aggregate: Any


class Round:
    """The open round of a strategy (module docstring).

    Args:
        strategy: the system's chain (possibly wrapped for privacy or robustness).
        state: where to start; default: the strategy's first model (version 0), its
            optimizer state and the first round's empty aggregate.
    """

    def __init__(self, strategy: Strategy, state: RoundState | None = None) -> None:
        self.strategy = strategy
        if state is None:
            params = strategy.initial_params()
            state = RoundState(params, strategy.init(params), strategy.zero(), 0)
        self.state = state
        self._empty = state.aggregate

    @classmethod
    def resume(
        cls,
        strategy: Strategy,
        params: np.ndarray,
        opt_state: Any,
        version: int,
        closed_aggregate: Any = None,
    ) -> Round:
        """The round after a restart: the stored model and optimizer state of ``version``,
        and an empty aggregate carried over from ``closed_aggregate``, the final aggregate
        of the round that produced ``version`` (``None``: the first round's zero)."""
        if closed_aggregate is None:
            empty = strategy.zero()
        else:
            empty = strategy.next_zero(closed_aggregate)
        return cls(strategy, RoundState(params, opt_state, empty, version))

    # -- what the round holds -----------------------------------------------------------

    @property
    def params(self) -> np.ndarray:
        """The server's current parameters (which may differ from what clients receive:
        :meth:`model`)."""
        return self.state.params

    @property
    def opt_state(self) -> Any:
        return self.state.opt_state

    @property
    def aggregate(self) -> Any:
        """The open round's aggregate so far (exact: the trusted server's eyes only)."""
        return self.state.aggregate

    @property
    def version(self) -> int:
        """The version of the current model: the number of rounds closed since version 0."""
        return self.state.version

    def model(self) -> np.ndarray:
        """The current model as clients receive it (:meth:`Strategy.publish
        <fedrank.strategies.base.Strategy.publish>`)."""
        return self.strategy.publish(self.state.params)

    def empty(self) -> Any:
        """The open round's empty aggregate: where a proxy or a cluster worker starts the
        partial aggregate it later hands to :meth:`merge` (it carries the round's norm
        bound)."""
        return self._empty

    def capacity(self) -> int | None:
        """How many more messages the open round can hold (``None``: no limit)."""
        return self.strategy.capacity(self.state.aggregate)

    def running_update(self) -> np.ndarray:
        """The update the round's messages so far amount to (the aggregator's finalize,
        before any privacy noise): what an adaptive closing policy watches settle."""
        return self.strategy.aggregator.finalize(self.state.aggregate)

    # -- folding -----------------------------------------------------------------------

    def fold(self, batch: MessageBatch) -> None:
        """Fold a batch of client messages into the open round (the strategy's rule: a
        privacy wrapper weighs every update 1, a norm bound clips it)."""
        self.state = self.state._replace(
            aggregate=self.strategy.accumulate(self.state.aggregate, batch)
        )

    def merge(self, partial: Any) -> None:
        """Merge a partial aggregate that started from :meth:`empty` (a proxy's, a cluster
        worker's, a secure sum's) into the open round."""
        self.state = self.state._replace(
            aggregate=self.strategy.aggregator.merge(self.state.aggregate, partial)
        )

    # -- closing -----------------------------------------------------------------------

    def close(self, publish: Callable[[Closed], None] | None = None) -> Closed:
        """Step the model on the round's aggregate, open the next round and count the
        version up (module docstring). A privacy wrapper draws its noise here.

        Args:
            publish: called with the close before the next round opens (a durable server
                stores the new model there); if it raises, the round stays open and
                unchanged.

        Raises:
            SafeguardError: the step breaks the constraints; the round stays open and
                unchanged.
        """
        s = self.state
        step = self.strategy.server_step(s.aggregate, s.params, s.opt_state)
        closed = Closed(s.version + 1, step, s.aggregate)
        if publish is not None:
            publish(closed)
        empty = self.strategy.next_zero(s.aggregate)
        self.state = RoundState(step.params, step.opt_state, empty, closed.version)
        self._empty = empty
        return closed

    def restart_from(self, params: np.ndarray) -> None:
        """Go on from ``params`` (the best model of an earlier stage of a run, such as
        FedPS's click-feature warm-up): a fresh optimizer state for them and the open
        round emptied; the version counts on."""
        params = np.array(params, copy=True)
        self.state = RoundState(params, self.strategy.init(params), self._empty, self.state.version)
