"""The pieces of the federated data flow, as structural protocols.

One loop serves all three systems (docs/architecture.md)::

    Estimator -> Privatizer -> Message -> Aggregator -> Optimizer -> Constraint -> Registry

* An :class:`Estimator` runs on a client and turns the current parameters and local data into
  a :class:`~fedrank.core.message.Message`.
* A :class:`Privatizer` transforms a message before it leaves the device.
* An :class:`Aggregator` is a commutative monoid over messages (``zero`` / ``accumulate`` /
  ``merge`` / ``finalize``), so the same code runs in one process, in a tree of proxies, or
  on a cluster.
* An :class:`Optimizer` is an Optax-style pure pair ``init`` / ``update`` with explicit,
  JSON-serialisable state.
* Both save and restore their states as JSON (:class:`StateCodec`, built on
  :mod:`fedrank.core.state_json`).
* A :class:`Constraint` projects parameters back onto the feasible set after a step.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from fedrank.core.message import Message, MessageBatch

State = TypeVar("State")
LocalData = TypeVar("LocalData", contravariant=True)


@runtime_checkable
class Estimator(Protocol[LocalData]):
    """Client-side computation of an update from local data."""

    def estimate(
        self, params: np.ndarray, local_data: LocalData, rng: np.random.Generator
    ) -> Message:
        """Return the message this client would send for ``params`` and its data."""
        ...


@runtime_checkable
class Privatizer(Protocol):
    """Transforms a message on the device before it is sent."""

    def privatize(self, message: Message, rng: np.random.Generator) -> Message:
        """Return the privatized message (never mutates ``message``)."""
        ...


class StateCodec(Protocol, Generic[State]):
    """What saves its states as JSON and restores them exactly: the checkpoints the server
    stores and the merged states proxies send (:mod:`fedrank.core.state_json`)."""

    def state_to_json(self, state: State) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        ...

    def state_from_json(self, data: dict[str, Any]) -> State:
        """Inverse of :meth:`state_to_json`; refuses (with
        :class:`~fedrank.errors.DataFormatError` or, for a state of other settings,
        :class:`~fedrank.errors.ConfigError`) what does not fit this component."""
        ...


class Aggregator(StateCodec[State], Protocol):
    """A commutative monoid over messages.

    Laws (checked by ``tests/conformance``): ``merge`` is associative and commutative,
    ``zero`` is its identity, and ``finalize`` of accumulating messages in any order or any
    grouping gives the same update.
    """

    def zero(self) -> State:
        """The empty aggregate."""
        ...

    def accumulate(self, state: State, message: Message) -> State:
        """Fold one message into ``state`` (returns a new state)."""
        ...

    def accumulate_batch(self, state: State, batch: MessageBatch) -> State:
        """Fold a batch of messages (the columnar form every transport carries) at once;
        equal to folding its messages one by one, up to float rounding."""
        ...

    def merge(self, a: State, b: State) -> State:
        """Combine two partial aggregates."""
        ...

    def finalize(self, state: State) -> np.ndarray:
        """The update vector the optimizer consumes."""
        ...

    def check_consistent(self, state: State) -> None:
        """Raise :class:`~fedrank.errors.DataFormatError` for a state that no sequence of
        messages can produce (negative weights, counts that do not match the sums,
        non-finite values): what a server checks on a merged state a proxy sends."""
        ...


class Optimizer(StateCodec[State], Protocol):
    """Optax-style optimizer: pure functions over an explicit state record.

    ``update`` receives the aggregated update (a gradient estimate, pointing uphill) and
    returns the *step* to add to the parameters: ``params_new = params + step``.
    """

    def init(self, params: np.ndarray) -> State:
        """Initial optimizer state for ``params``."""
        ...

    def update(
        self, update: np.ndarray, state: State, params: np.ndarray
    ) -> tuple[np.ndarray, State]:
        """Return ``(step, new_state)``."""
        ...


@runtime_checkable
class Constraint(Protocol):
    """A safeguard applied to parameters after each optimizer step."""

    def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """Return the closest feasible parameters to ``params``.

        ``previous`` are the parameters before the step (some constraints, such as a bound
        on the change per iteration, need them).
        """
        ...

    def holds(self, params: np.ndarray, previous: np.ndarray) -> bool:
        """Whether ``params`` satisfies the constraint."""
        ...
