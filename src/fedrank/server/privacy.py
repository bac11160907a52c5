"""The server's privacy ledger: central differential privacy of the trained model from
``[privacy]``, the per-user guarantee so far, and the budget the server stops at
(docs/privacy.md, "In the server").

With ``[privacy] epsilon > 0`` the workload's strategy (frecency or FedAvg) is wrapped in
:class:`~fedrank.strategies.dp.DPStrategy`: every update clipped to L2 norm ``clip``, the
unweighted mean, Gaussian noise at every close. The noise multiplier ``z`` is the smallest
that keeps ``rounds`` closed iterations within ``(epsilon, delta)`` per user
(:func:`~fedrank.privacy.accounting.gaussian_noise_multiplier`). Every user may send an
update in every iteration, so each close composes one Gaussian mechanism for *every* user
(sampling rate 1, no amplification claimed): after ``k`` closes each user's epsilon is that
of ``k`` rounds, the same for all users, and a per-user ledger reduces to the count of
closed iterations. After ``rounds`` closes the budget is spent: the server refuses updates,
check-ins and closes (``403 privacy_budget_spent``) for good.

The guarantee assumes what the SDK does: one update per user and iteration. The server
cannot tell users apart (ids are random per message), so a client that sends ``m`` updates
in one iteration moves the sum by up to ``m C``; its own guarantee is then that of
``z / m``. The metric summaries (``/v1/summary``) are not noised: they are outside the
guarantee.

With ``[privacy] mode = 'distributed'`` (and ``[secagg]``) the server adds no noise and sees
no single update: every client of a secure round adds a share of Skellam noise to its encoded
delta (:mod:`fedrank.privacy.skellam`; the plan's scale and per-client variance go out in
each check-in's ``secagg`` block), and each completed round composes one Skellam mechanism
for every user, accounted in Renyi DP. The ledger and the budget work as above.

Noise source (central): a fresh ``numpy`` generator seeded from OS entropy at every close (or, with
``noise_seed >= 0``, ``default_rng([noise_seed, iteration])``: reproducible, for tests
only). Never one generator carried across restarts, which would repeat a round's noise.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrank.errors import ConfigError
from fedrank.privacy.report import (
    SystemPrivacy,
    budget_noise_multiplier,
    central_dp_block,
    foltr_es_privacy,
    frecency_privacy,
    gaussian_privacy,
    no_privacy,
    run_privacy,
    skellam_privacy,
)
from fedrank.privacy.skellam import SkellamPlan, plan
from fedrank.strategies.frecency import FrecencyStrategy

if TYPE_CHECKING:
    from fedrank.server.config import PrivacySection, ServerConfig
    from fedrank.strategies.base import Strategy
    from fedrank.strategies.dp import DPStrategy


def noise_multiplier(section: PrivacySection) -> float:
    """The noise multiplier that keeps ``section.rounds`` closes within the budget."""
    return budget_noise_multiplier(
        section.epsilon, section.delta, section.rounds, section.accountant
    )


@functools.cache
def _plan(
    epsilon: float, delta: float, rounds: int, clip: float, dim: int, clients: int, t: int
) -> SkellamPlan:
    return plan(epsilon, delta, rounds, clip, dim, clients, t)


def distributed_plan(config: ServerConfig) -> SkellamPlan | None:
    """The clients' Skellam noise of ``[privacy] mode = 'distributed'`` (``None``
    otherwise): the encoder's scale and each client's share, for the budget over
    ``[privacy] rounds`` secure rounds of ``[rounds] clients_per_round`` clients."""
    if not config.privacy.distributed:
        return None
    p, k = config.privacy, config.rounds.clients_per_round
    t = config.secagg.threshold_for(k)
    return _plan(p.epsilon, p.delta, p.rounds, p.clip, config.fedavg.dim, k, t)


class PrivacyLedger:
    """The server's guarantees (module docstring); ``closed`` below is the number of
    iterations the server has closed (its open iteration's number)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.section = config.privacy
        self.enabled = self.section.enabled
        self._status: dict[int, dict[str, Any]] = {}
        self._dp: DPStrategy | None = None
        #: The clients' noise under secure aggregation (``mode = 'distributed'``).
        self.plan = distributed_plan(config)
        if self.enabled and self.plan is None:
            noise_multiplier(self.section)  # calibrate at start: a bad budget fails here

    def wrap(self, strategy: Strategy) -> Strategy:
        """The strategy the server runs: ``strategy`` itself (no DP, or distributed noise
        added by the clients), or its central-DP wrapper."""
        if not self.enabled or self.plan is not None:
            return strategy
        from fedrank.strategies.dp import DPStrategy

        self._dp = DPStrategy(
            strategy, noise_multiplier(self.section), self.section.clip, np.random.default_rng()
        )
        return self._dp

    def before_close(self, iteration: int) -> None:
        """Give the DP wrapper the noise generator of ``iteration``'s close (nothing
        without ``[privacy]``)."""
        if self._dp is not None:
            self._dp.use_rng(self.noise_rng(iteration))

    def identity(self) -> dict[str, Any] | None:
        """What the store records of the budget: a store trained under one budget cannot
        continue under another (or without one)."""
        if not self.enabled:
            return None
        s = self.section
        identity = {"epsilon": s.epsilon, "delta": s.delta, "clip": s.clip, "rounds": s.rounds}
        return identity if self.plan is None else {**identity, "mode": s.mode}

    def spent(self, closed: int) -> bool:
        """Whether ``closed`` closes have used the whole budget."""
        return self.enabled and closed >= self.section.rounds

    def noise_rng(self, iteration: int) -> np.random.Generator:
        """The generator of the noise added when ``iteration`` closes."""
        seed = self.section.noise_seed
        return np.random.default_rng() if seed < 0 else np.random.default_rng([seed, iteration])

    def refusal(self) -> str:
        s = self.section
        return (
            f"the privacy budget is spent: {s.rounds} iterations at epsilon {s.epsilon:g}, "
            f"delta {s.delta:g} per user ([privacy]); this server takes no more updates"
        )

    def status(self, closed: int) -> dict[str, Any]:
        """``/v1/status``'s ``privacy``: each user's guarantee over the ``closed``
        iterations (``{mechanism, epsilon, delta, rounds, sampling_rate, noise_multiplier,
        clip}``; epsilon ``None``: no mechanism), the per-message guarantee, the budget and
        whether it is spent. Computed once per ``closed`` (the accountant takes ~0.1 s)."""
        cache = self._status
        value = cache.get(closed)
        if value is None:
            # Keep the last few: a request may still read the snapshot of the iteration
            # before the one the writer just closed. A new dict replaces the old one, so a
            # reader in another thread never sees it half-built.
            value = self._compute(closed)
            fresh = {k: v for k, v in cache.items() if k >= closed - 2}
            fresh[closed] = value
            self._status = fresh
        return value

    def _compute(self, closed: int) -> dict[str, Any]:
        s = self.section
        row = report_config(self.config, closed)[0]
        budget = {"epsilon": s.epsilon, "delta": s.delta, "rounds": s.rounds}
        return {
            **run_privacy(row),
            "per_message": row.per_message,
            "budget": budget if self.enabled else None,
            "budget_spent": self.spent(closed),
        }


def report_config(config: ServerConfig, rounds: int | None) -> list[SystemPrivacy]:
    """The guarantees of a server configured by ``config``: its workload's mechanism, and
    ``[privacy]``'s central DP (over ``rounds`` rounds, or the budget's)."""
    workload = config.workload
    if config.privacy.enabled:
        ps = config.privacy
        if rounds is not None and rounds > ps.rounds:
            raise ConfigError(
                f"the server closes at most [privacy] rounds = {ps.rounds} iterations; "
                f"--rounds {rounds} is more"
            )
        distributed = distributed_plan(config)
        if distributed is not None:
            out = skellam_privacy(distributed, ps.rounds if rounds is None else rounds)
            out.notes.append(
                f"the server refuses updates and closes after {ps.rounds} iterations "
                f"(epsilon {ps.epsilon:g} at delta {ps.delta:g})"
            )
            return [out]
        block = central_dp_block(
            ps.epsilon,
            ps.delta,
            ps.clip,
            ps.rounds,
            ps.accountant,
            ps.rounds if rounds is None else rounds,
        )
        out = gaussian_privacy(workload, block, {"budget_epsilon": ps.epsilon})
        out.notes.append(
            f"the server refuses updates and closes after {ps.rounds} iterations "
            f"(epsilon {ps.epsilon:g} at delta {ps.delta:g})"
        )
        return [out]
    notes = ["no [privacy] section: central DP is off"]
    if workload == "foltr-es":
        out = foltr_es_privacy(config.foltr_es.p, config.foltr_es.batch, rounds)
        notes = []
    elif workload == "frecency":
        fc = config.frecency
        dim = len(FrecencyStrategy(fc).parameter_names())
        out = frecency_privacy(
            {"message": fc.message, "sign_epsilon": fc.sign_epsilon}, None, dim, rounds
        )
        if fc.norm_bound:
            notes.append(f"norm_bound {fc.norm_bound:g} clips updates; clipping alone is not DP")
    else:
        out = no_privacy(
            "fedavg", {"dim": config.fedavg.dim}, "none: the model delta is sent as computed"
        )
    out.notes.extend(notes)
    return [out]
