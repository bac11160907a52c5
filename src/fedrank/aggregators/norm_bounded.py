"""Norm-bounded aggregation with a fixed or adaptive bound (Andrew, Thakkar, McMahan &
Ramaswamy 2021, "Differentially Private Learning with Adaptive Clipping", NeurIPS,
Algorithm 1 and Section 2).

:class:`NormBounded` wraps any vector aggregator: every update is scaled down to L2 norm at
most the current bound ``C`` (:func:`fedrank.privacy.clipping.clip_l2`) before the inner
aggregator folds it in, so one client moves a weighted mean by at most ``n_i C / sum n``
however large its update (without it, one frecency gradient of norm 4.7e6 among 100 honest
ones decides all 22 weights: docs/service.md, Poisoning).

The right ``C`` depends on the model, the loss and the stage of training. With
``quantile = gamma`` the bound follows the ``gamma``-quantile of the clients' update norms,
by Andrew et al.'s geometric rule, once per iteration::

    C <- C * exp(-eta * (b - gamma)),   b = (updates with norm <= C) / (updates),

clamped to ``[min_bound, max_bound]``. Where more than a fraction ``gamma`` of the updates
fit under ``C`` the bound shrinks, where fewer fit it grows; its fixed point is the
``gamma``-quantile of the norms. The paper's ``eta = 0.2`` is the default. (The paper
estimates ``b`` from noised client bits for differential privacy; the server here sees the
norms, so ``b`` is counted exactly.) Each update moves ``b`` by one count whatever its
norm, so a fraction ``f`` of attackers can only shift the fixed point to a quantile between
``(gamma - f) / (1 - f)`` (all of them tiny) and ``gamma / (1 - f)`` (all of them huge) of
the honest clients' norms, never to their own norms.

As a monoid the state is the inner state, the bound of the iteration, and the integer
counts of updates within the bound and of all updates: integers and the inner state merge
exactly (as exactly as the inner aggregator). States of different bounds do not merge: an
iteration has one bound. Its identity is that iteration's empty state: :meth:`zero` for the
first iteration, :meth:`next_zero` of the previous iteration's final state afterwards; a
server that restarts recomputes the bound from the stored final state of the last closed
iteration.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

from fedrank.aggregators.mean import check_update, vector_columns
from fedrank.core.message import Message, MessageBatch
from fedrank.core.protocols import Aggregator
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.clipping import clip_l2, geometric_bound


class NormBoundedState(NamedTuple):
    """Partial aggregate of :class:`NormBounded`.

    Attributes:
        inner: the wrapped aggregator's state (of the clipped updates).
        bound: the L2 bound ``C`` of this iteration.
        within: updates whose norm was ``<= bound`` (before clipping).
        count: updates folded in.
    """

    inner: Any
    bound: float
    within: int
    count: int


def _norms(mat: np.ndarray) -> np.ndarray:
    """Row norms of a ``(C, d)`` float64 matrix, computed as :func:`clip_l2` does."""
    return np.linalg.norm(mat, axis=-1)


class NormBounded:
    """Clip every update to L2 norm ``<= C``, then aggregate with ``inner``; ``C`` fixed or
    adapted once per iteration towards a quantile of the update norms (module docstring).

    Args:
        inner: the vector aggregator of the clipped updates (e.g.
            :class:`~fedrank.aggregators.mean.WeightedMean`,
            :class:`~fedrank.aggregators.robust.TrimmedMean`).
        bound: ``C`` of the first iteration (finite, > 0); with ``quantile=None`` the bound
            of every iteration.
        quantile: ``gamma`` in (0, 1): the quantile of the update norms the bound tracks
            (Andrew et al.: 0.5 works well); ``None`` (default): a fixed bound.
        eta: the geometric learning rate of the bound (> 0; Andrew et al.: 0.2).
        min_bound: the bound's lower end (default ``bound / 1000``).
        max_bound: its upper end (default ``bound * 1000``: with ``min_bound``, six orders
            of magnitude around the start, so start within a factor 1000 of the typical
            norm).

    ``finalize`` is ``inner.finalize`` of the clipped updates.
    """

    def __init__(
        self,
        inner: Aggregator[Any],
        bound: float,
        quantile: float | None = None,
        eta: float = 0.2,
        min_bound: float | None = None,
        max_bound: float | None = None,
    ) -> None:
        dim = getattr(inner, "dim", None)
        if not isinstance(dim, int):
            raise ConfigError(
                f"NormBounded wraps a vector aggregator (one with a dim), got {inner!r}"
            )
        self.inner = inner
        self.dim = dim
        self.bound = check_hyperparameter("bound (the L2 norm bound C)", bound)
        if quantile is not None:
            quantile = check_hyperparameter(
                "quantile (the norm quantile gamma the bound tracks)", quantile, high=1.0,
                high_inclusive=False,
            )  # fmt: skip
        self.quantile = quantile
        self.eta = check_hyperparameter("eta (the bound's learning rate)", eta)
        low = self.bound / 1000.0 if min_bound is None else min_bound
        high = self.bound * 1000.0 if max_bound is None else max_bound
        self.min_bound = check_hyperparameter("min_bound", low)
        self.max_bound = check_hyperparameter("max_bound", high)
        if not self.min_bound <= self.bound <= self.max_bound:
            raise ConfigError(
                f"the bound {self.bound:g} must lie in [min_bound, max_bound] = "
                f"[{self.min_bound:g}, {self.max_bound:g}]"
            )

    def __repr__(self) -> str:
        adapt = "" if self.quantile is None else f", quantile={self.quantile:g}, eta={self.eta:g}"
        return f"NormBounded({self.inner!r}, bound={self.bound:g}{adapt})"

    @property
    def adaptive(self) -> bool:
        """Whether the bound of an iteration depends on the previous iteration's updates."""
        return self.quantile is not None

    def zero(self) -> NormBoundedState:
        """The empty aggregate of the first iteration (bound ``bound``)."""
        return NormBoundedState(self.inner.zero(), self.bound, 0, 0)

    def next_bound(self, state: NormBoundedState) -> float:
        """The bound of the iteration after the one whose final state is ``state``: Andrew
        et al.'s ``C exp(-eta (b - gamma))`` clamped to ``[min_bound, max_bound]`` when
        adaptive (an iteration without updates keeps its bound), else ``bound``."""
        if self.quantile is None:
            return self.bound
        if state.count == 0:
            return min(max(state.bound, self.min_bound), self.max_bound)
        return geometric_bound(
            state.bound,
            state.within / state.count,
            self.quantile,
            self.eta,
            self.min_bound,
            self.max_bound,
        )

    def next_zero(self, state: NormBoundedState) -> NormBoundedState:
        """The empty aggregate of the next iteration (bound :meth:`next_bound`)."""
        self._check_state(state)
        return NormBoundedState(self.inner.zero(), self.next_bound(state), 0, 0)

    def capacity(self, state: NormBoundedState) -> int | None:
        """How many more messages ``state`` can take (the inner aggregator's limit, e.g.
        :class:`~fedrank.aggregators.robust.TrimmedMean`'s ``max_rows``); ``None``: no
        limit."""
        inner = getattr(self.inner, "capacity", None)
        return None if inner is None else inner(state.inner)

    def _check_state(self, state: NormBoundedState) -> None:
        if not isinstance(state, NormBoundedState):
            raise ConfigError(f"expected a NormBoundedState, got {type(state).__name__}")

    def check_consistent(self, state: NormBoundedState) -> None:
        """Refuse a state no sequence of messages can produce: an inconsistent inner state,
        a bound that is not finite and > 0 (or, fixed, not ``bound``; adaptive, outside
        ``[min_bound, max_bound]``), ``within`` outside ``[0, count]``, or an inner state
        that folded another number of messages. Raises
        :class:`~fedrank.errors.DataFormatError`."""
        self._check_state(state)
        self.inner.check_consistent(state.inner)
        bound = state.bound
        if not (math.isfinite(bound) and bound > 0):
            raise DataFormatError(f"the state's norm bound must be finite and > 0, got {bound}")
        if self.quantile is None and bound != self.bound:
            raise DataFormatError(
                f"the state's norm bound {bound:g} is not the fixed {self.bound:g}"
            )
        if not self.min_bound <= bound <= self.max_bound:
            raise DataFormatError(
                f"the state's norm bound {bound:g} lies outside [{self.min_bound:g}, "
                f"{self.max_bound:g}]"
            )
        if not 0 <= state.within <= state.count:
            raise DataFormatError(
                f"updates within the bound ({state.within}) must lie in 0..{state.count}"
            )
        inner_count = getattr(state.inner, "count", state.count)
        if inner_count != state.count:
            raise DataFormatError(
                f"the inner state folded {inner_count} messages, the bound counted {state.count}"
            )

    def accumulate(self, state: NormBoundedState, message: Message) -> NormBoundedState:
        """Clip one message's update to the state's bound and fold it in."""
        self._check_state(state)
        row = check_update(message.update, self.dim).astype(np.float64)[None, :]
        within = int(_norms(row)[0] <= state.bound)
        clipped = dataclasses.replace(message, update=clip_l2(row, state.bound)[0])
        return NormBoundedState(
            self.inner.accumulate(state.inner, clipped),
            state.bound,
            state.within + within,
            state.count + 1,
        )

    def accumulate_batch(self, state: NormBoundedState, batch: MessageBatch) -> NormBoundedState:
        """Clip ``C`` messages' updates (rows of ``batch.vector``) to the state's bound and
        fold them in at once."""
        self._check_state(state)
        mat, weights = vector_columns(batch, self.dim)
        if mat.shape[0] == 0:
            return state
        mat = mat.astype(np.float64, copy=False)
        within = int(np.count_nonzero(_norms(mat) <= state.bound))
        clipped = MessageBatch.of_vectors(clip_l2(mat, state.bound), weights)
        return NormBoundedState(
            self.inner.accumulate_batch(state.inner, clipped),
            state.bound,
            state.within + within,
            state.count + int(mat.shape[0]),
        )

    def merge(self, a: NormBoundedState, b: NormBoundedState) -> NormBoundedState:
        """Combine two partial aggregates of the same iteration (the same bound)."""
        self._check_state(a)
        self._check_state(b)
        if a.bound != b.bound:
            raise DataFormatError(
                f"cannot merge states clipped at different norm bounds ({a.bound!r} and "
                f"{b.bound!r}): a state belongs to one iteration; fold a partial aggregate "
                "from the open iteration's empty state (next_zero), not from zero()"
            )
        return NormBoundedState(
            self.inner.merge(a.inner, b.inner), a.bound, a.within + b.within, a.count + b.count
        )

    def finalize(self, state: NormBoundedState) -> np.ndarray:
        """The inner aggregate of the clipped updates."""
        self._check_state(state)
        return self.inner.finalize(state.inner)

    def state_to_json(self, state: NormBoundedState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly (the inner
        state as the inner aggregator writes it)."""
        self._check_state(state)
        return encode_state(
            state, "NormBounded", settings={"dim": self.dim}, nested={"inner": self.inner}
        )

    def state_from_json(self, data: dict[str, Any]) -> NormBoundedState:
        """Inverse of :meth:`state_to_json` (the inner state checked by the inner
        aggregator)."""
        return decode_state(
            data,
            NormBoundedState,
            "NormBounded",
            settings={"dim": self.dim},
            nested={"inner": self.inner},
        )
