"""What every strategy shares: the server step (docs/architecture.md).

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

Robust aggregation wraps a strategy's aggregator the same way everywhere
(:func:`build_aggregator`): the coordinate-wise median or trimmed mean
(:mod:`fedrank.aggregators.robust`) in place of the mean, and a fixed or adaptive L2 bound
on every update (:class:`~fedrank.aggregators.norm_bounded.NormBounded`). An adaptive bound
is carried from one iteration to the next, so every caller starts an iteration with
:meth:`Strategy.next_zero` of the previous one's final state (:meth:`Strategy.zero` for the
first).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

from fedrank.aggregators.norm_bounded import NormBounded
from fedrank.aggregators.robust import CoordinateMedian, TrimmedMean
from fedrank.core.message import MessageBatch
from fedrank.core.protocols import Aggregator, Optimizer
from fedrank.core.validation import Accepts, Entry, Interval, Options, Rule
from fedrank.errors import FedrankError
from fedrank.optim.constraints import ConstraintChain

#: The robust aggregators a vector strategy offers besides its own mean.
ROBUST_AGGREGATORS: tuple[str, ...] = ("median", "trimmed-mean")


def aggregation_accepts(aggregators: tuple[str, ...]) -> dict[str, Entry]:
    """The ``ACCEPTS`` entries of the aggregation keys every vector strategy's config shares
    (:mod:`fedrank.core.validation`): ``aggregator``, one of ``aggregators`` (the
    strategy's own mean and :data:`ROBUST_AGGREGATORS`); ``trim``; ``norm_bound``;
    ``norm_quantile``; ``max_rows``. Their rule is :data:`AGGREGATION_RULES`."""
    return {
        "aggregator": Options(*aggregators),
        "trim": Accepts(
            Interval(Real, 0, 0.5, closed="left"),
            note="the trimmed mean's fraction dropped from each end",
        ),
        "norm_bound": Accepts(
            Interval(Real, 0, None), note="the L2 bound of every update; 0: none"
        ),
        "norm_quantile": Accepts(
            Interval(Real, 0, 1, closed="neither"),
            None,
            note="the quantile of the update norms the adaptive bound tracks; None: a fixed bound",
        ),
        "max_rows": Accepts(
            Interval(Integral, 1, None),
            note="most updates a median or trimmed mean holds per iteration",
        ),
    }


#: The rule between the aggregation keys of :func:`aggregation_accepts`.
AGGREGATION_RULES: tuple[Rule, ...] = (
    Rule(
        lambda c: c.norm_quantile is None or c.norm_bound > 0,
        "norm_quantile adapts the norm bound from its start norm_bound: set norm_bound > 0 "
        "(near the typical update norm), or drop norm_quantile",
    ),
)


def build_aggregator(
    mean: Aggregator[Any],
    aggregator: str,
    dim: int,
    trim: float,
    norm_bound: float,
    norm_quantile: float | None,
    max_rows: int,
) -> Aggregator[Any]:
    """The aggregator of a vector strategy: its own ``mean`` (any ``aggregator`` name but
    ``median`` and ``trimmed-mean``), the coordinate-wise median or the trimmed mean (Yin
    et al. 2018), wrapped in :class:`~fedrank.aggregators.norm_bounded.NormBounded`
    (Andrew et al. 2021) when ``norm_bound > 0``."""
    inner: Aggregator[Any]
    if aggregator == "median":
        inner = CoordinateMedian(dim, max_rows=max_rows)
    elif aggregator == "trimmed-mean":
        inner = TrimmedMean(dim, trim=trim, max_rows=max_rows)
    else:
        inner = mean
    if norm_bound > 0:
        return NormBounded(inner, bound=norm_bound, quantile=norm_quantile)
    return inner


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

    def zero(self) -> Any:
        """The empty aggregate of the first iteration."""
        return self.aggregator.zero()

    def next_zero(self, state: Any) -> Any:
        """The empty aggregate of the iteration after the one whose final aggregate is
        ``state``: what the aggregator carries over (an adaptive norm bound,
        :meth:`NormBounded.next_zero <fedrank.aggregators.norm_bounded.NormBounded.
        next_zero>`), else :meth:`zero`. Every caller that closes an iteration starts the
        next one with it."""
        carry = getattr(self.aggregator, "next_zero", None)
        return self.aggregator.zero() if carry is None else carry(state)

    @property
    def carries_over(self) -> bool:
        """Whether :meth:`next_zero` depends on the previous iteration (then a server that
        restarts needs the last closed iteration's final aggregate)."""
        return bool(getattr(self.aggregator, "adaptive", False))

    def capacity(self, state: Any) -> int | None:
        """How many more messages ``state`` can fold in (the robust statistics keep every
        update, up to ``max_rows``); ``None``: no limit."""
        room = getattr(self.aggregator, "capacity", None)
        return None if room is None else room(state)

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
        return self.step_from(self.aggregator.finalize(state), params, opt_state)

    def step_from(self, aggregate: np.ndarray, params: np.ndarray, opt_state: Any) -> ServerStep:
        """The optimizer chain's step on ``aggregate`` from ``params``, projected onto the
        constraints: the part of :meth:`server_step` after the aggregate (a wrapper that
        changes the aggregate, such as DP noise, reuses it).

        Raises:
            SafeguardError: if the projected model does not satisfy the constraints.
        """
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


class WrappedStrategy(Strategy):
    """A strategy that replaces another's aggregation (a privacy wrapper) and keeps its
    model: the first model, the parameter names, what clients receive and the optimizer's
    state are ``inner``'s. Subclasses set ``inner``, ``aggregator``, ``optimizer`` and
    ``constraints``."""

    inner: Strategy

    def initial_params(self) -> np.ndarray:
        return self.inner.initial_params()

    def parameter_names(self) -> list[str] | None:
        return self.inner.parameter_names()

    def publish(self, params: np.ndarray) -> np.ndarray:
        return self.inner.publish(params)

    def init(self, params: np.ndarray) -> Any:
        return self.inner.init(params)
