"""Distributed differential privacy as the service runs it (``[privacy] mode =
"distributed"``, :mod:`fedrank.privacy.skellam`), for a strategy of vector updates in one
process: the frecency study's ``--dp-mode distributed``.

What a secure-aggregation round does, emulated exactly where it matters:

1. every client clips its update to the plan's L2 bound ``C`` and encodes it on the plan's
   integer grid, ``rint(scale x)`` (:class:`EncodedSum`: vectorized, the same integers as
   :meth:`fedrank.secagg.field.FixedPointEncoder.encode` row by row);
2. each of the round's ``m`` clients adds Skellam noise of variance ``mu / t`` (the plan's
   ``client_variance``; ``t`` its threshold), so the sum carries ``Sk(m mu / t)``; one draw
   of that variance is the same distribution as the ``m`` shares summed (Skellam variables
   add), and is what :class:`DistributedDPStrategy` draws;
3. secure aggregation reveals only the sum, modulo ``2**32``: it is wrapped into
   ``[-2**31, 2**31)`` (the plan sizes the grid so that this never bites, except with
   probability 1e-12 over the run), decoded (``/ scale``) and averaged over ``m``;
4. a round with fewer than ``t`` contributors is aborted, as the service aborts it: its sum
   would carry less than ``Sk(mu)``, so nothing is released and the model stays.

The server never sees a single update; the guarantee is the plan's Renyi-DP accounting
(Agarwal, Kairouz & Liu 2021) over the rounds, against the server too, if at least ``t``
honest clients add their share. The noise comes from a seeded generator (simulation).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fedrank.aggregators.mean import check_update, vector_columns
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError
from fedrank.privacy import fixed_point
from fedrank.privacy.report import run_privacy, skellam_privacy
from fedrank.privacy.skellam import SkellamPlan, skellam_noise
from fedrank.strategies.base import ServerStep, Strategy, WrappedStrategy


class EncodedSumState(NamedTuple):
    """The round's sum of encoded updates (``int64``) and how many clients it holds."""

    total: np.ndarray
    count: int


class EncodedSum:
    """Clip each update to L2 norm ``clip``, encode it as ``rint(scale x)`` and sum the
    integers (mergeable: sums add)."""

    def __init__(self, dim: int, clip: float, scale: float) -> None:
        self.dim, self.clip, self.scale = int(dim), float(clip), float(scale)

    def zero(self) -> EncodedSumState:
        return EncodedSumState(np.zeros(self.dim, dtype=np.int64), 0)

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """``(m, d)`` updates clipped to L2 norm ``clip`` (each coordinate then clamped to
        ``[-clip, clip]``) and scaled to integers, ``int64``
        (:func:`fedrank.privacy.fixed_point.encode`)."""
        return fixed_point.encode(rows, self.scale, self.clip, l2_bound=self.clip)

    def accumulate(self, state: EncodedSumState, message: Message) -> EncodedSumState:
        """Fold in one update (weight 1, whatever its ``n``)."""
        row = check_update(message.update, self.dim)[None, :]
        return EncodedSumState(state.total + self.encode(row)[0], state.count + 1)

    def accumulate_batch(self, state: EncodedSumState, batch: MessageBatch) -> EncodedSumState:
        mat, _ = vector_columns(batch, self.dim)
        return EncodedSumState(state.total + self.encode(mat).sum(axis=0), state.count + len(mat))

    def merge(self, a: EncodedSumState, b: EncodedSumState) -> EncodedSumState:
        return EncodedSumState(a.total + b.total, a.count + b.count)


class DistributedDPStrategy(WrappedStrategy):
    """Distributed DP of a vector strategy (module docstring).

    Args:
        inner: the strategy wrapped (its model, optimizer chain and constraints are used;
            its aggregation is replaced by the unweighted mean of the decoded sum).
        plan: the noise plan (:func:`fedrank.privacy.skellam.plan`) for this strategy's
            dimension.
        rng: the noise's generator, or a seed for one.
    """

    name = "distributed-dp"

    def __init__(
        self,
        inner: Strategy,
        plan: SkellamPlan,
        rng: np.random.Generator | np.random.SeedSequence | int,
    ) -> None:
        if plan.dim != inner.dim:
            raise ConfigError(
                f"the Skellam plan is for {plan.dim} coordinates, the strategy has {inner.dim}"
            )
        self.inner, self.plan, self.dim = inner, plan, inner.dim
        self.aggregator = EncodedSum(inner.dim, plan.clip, plan.scale)  # type: ignore[assignment]
        self.optimizer = inner.optimizer
        self.constraints = inner.constraints
        self.rng_ = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        #: Per round: the clients in the sum (0 for an aborted round, below the threshold).
        self.released: list[int] = []

    def accumulate(self, state: EncodedSumState, batch: MessageBatch) -> EncodedSumState:
        """Fold in a batch of updates, each with weight 1 whatever its ``n``."""
        if batch.size == 0:
            return state
        return self.aggregator.accumulate_batch(state, batch)

    def noisy_aggregate(self, state: EncodedSumState) -> np.ndarray | None:
        """The round's decoded mean with the clients' noise, or ``None`` for a round below
        the threshold (draws the noise only for a released round)."""
        m = state.count
        if m < self.plan.threshold:
            return None
        total = state.total + skellam_noise(self.rng_, self.plan.client_variance * m, self.dim)
        return fixed_point.signed(total) / self.plan.scale / m  # what the field's sum decodes to

    def server_step(self, state: EncodedSumState, params: np.ndarray, opt_state: Any) -> ServerStep:
        """The inner optimizer chain on the noisy decoded mean; an aborted round leaves the
        model and the optimizer's state as they are."""
        aggregate = self.noisy_aggregate(state)
        self.released.append(0 if aggregate is None else state.count)
        if aggregate is None:
            zeros = np.zeros(self.dim)
            return ServerStep(params.copy(), opt_state, zeros, zeros)
        return self.step_from(aggregate, params, opt_state)

    def run_privacy(self, rounds: int, system: str = "fedavg") -> dict[str, Any]:
        """What a run's JSON records under ``privacy``: the plan's guarantee over
        ``rounds`` rounds (:func:`fedrank.privacy.report.skellam_privacy`), its parameters,
        and each round's contributors (0: aborted)."""
        row = skellam_privacy(self.plan, rounds, system)
        return {
            **run_privacy(row),
            "target_epsilon": self.plan.epsilon,
            "accountant": "rdp",
            "mode": "distributed",
            **{k: v for k, v in row.parameters.items() if k not in ("noise_multiplier", "clip")},
            "contributors_per_iteration": list(self.released),
            "aborted_iterations": sum(1 for m in self.released if m == 0),
        }
