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

The guarantee assumes one update per user and iteration. A message that names its device
(:attr:`~fedrank.server.messages.Incoming.client`, the authenticated device) is held to it:
the ledger keeps, per device, the closed iterations it contributed an update to (from the
store's ``client`` column: it survives restarts and ``fedrank store recover``), refuses a
second update of a device in one iteration (``409 one_update_per_iteration``) and a device
whose own epsilon would exceed the budget (``403 privacy_budget_spent``, naming its spend;
:meth:`PrivacyLedger.client_refusal`, which the routes may also ask before accepting).
A device's epsilon is that of the closes it contributed to: a close it sent nothing to
does not read its data (individual privacy accounting, Feldman & Zrnic 2021, "Individual
Privacy Accounting via a Renyi Filter", NeurIPS). ``/v1/status`` reports the largest
per-device spend and how many devices are at the budget, never which. A message without a
device cannot be told apart from another user's: a client sending ``m`` of them in one
iteration moves the sum by up to ``m C`` and has the guarantee of ``z / m``. The metric
summaries (``/v1/summary``) are not noised: they are outside the guarantee.

With ``[privacy] mode = 'distributed'`` (and ``[secagg]``) the server adds no noise and sees
no single update: every client of a secure round adds a share of Skellam noise to its encoded
delta (:mod:`fedrank.privacy.skellam`; the plan's scale and per-client variance go out in
each check-in's ``secagg`` block), and each completed round composes one Skellam mechanism
for every user, accounted in Renyi DP. The ledger and the budget work as above.

With ``clip_quantile`` (central only) the clip adapts by a private quantile estimate
(:class:`~fedrank.privacy.adaptive_clip.AdaptiveClip`, Andrew et al. 2021): each close also
releases the noised count of updates within the clip and sets the next iteration's clip
from it; the budget's multiplier covers both releases.

Noise source (central): with ``noise = "numpy"`` each close's noise is drawn from
``default_rng([secret, iteration])`` and the adaptive clip's count noise from
``default_rng([secret, iteration, 1])``; with ``noise = "secure"`` it is the discrete
Gaussian on a lattice sampled exactly from the ChaCha20 keystream keyed by HMAC-SHA256 of
the secret and the iteration (:mod:`fedrank.privacy.discrete_gaussian`, Canonne, Kamath &
Steinke 2020), accounted by its Renyi bound, which is the Gaussian mechanism's for the same
multiplier (the report lists the lattice). ``secret`` is 128 bits of OS entropy drawn once
and kept beside the store's database (never served or logged;
:meth:`~fedrank.server.store.Store.noise_secret`), or ``noise_seed`` when it is set
(reproducible, for tests only). A retried close draws the same noise, a restarted server
recomputes the open iteration's clip from the closed one's count with the same noise, and
``fedrank store recover`` closes every iteration again with the noise it had: nothing is
released twice with different noise, which would average it away.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrank.errors import ConfigError
from fedrank.federation.privacy import PrivacyConfig, private
from fedrank.privacy.discrete_gaussian import KeyStream, LatticeGaussian, noise_key
from fedrank.privacy.report import (
    SystemPrivacy,
    budget_noise_multiplier,
    central_dp_block,
    gaussian_privacy,
    run_privacy,
    skellam_privacy,
)
from fedrank.privacy.skellam import SkellamPlan
from fedrank.server.messages import UPDATE, Messages, Outcome

if TYPE_CHECKING:
    from fedrank.server.config import ServerConfig
    from fedrank.server.sections import PrivacySection
    from fedrank.server.store import Store
    from fedrank.strategies.base import Strategy
    from fedrank.strategies.dp import DPStrategy


def noise_multiplier(section: PrivacySection) -> float:
    """The noise multiplier that keeps ``section.rounds`` closes within the budget."""
    return budget_noise_multiplier(
        section.epsilon, section.delta, section.rounds, section.accountant
    )


def budget(section: PrivacySection) -> PrivacyConfig:
    """``[privacy]`` as the privacy factory's config (:mod:`fedrank.federation.privacy`)."""
    s = section
    return PrivacyConfig(
        epsilon=s.epsilon,
        delta=s.delta,
        clip=s.clip,
        accountant=s.accountant,
        clip_quantile=s.clip_quantile if s.adaptive else None,
        count_noise=s.count_noise if s.adaptive else None,
        clip_eta=s.clip_eta,
        denominator=s.denominator or None,
        mode=s.mode,
    )


@functools.cache
def _plan(privacy: PrivacyConfig, rounds: int, dim: int, clients: int, t: int) -> SkellamPlan:
    return privacy.skellam_plan(rounds, dim, clients, t)


def distributed_plan(config: ServerConfig) -> SkellamPlan | None:
    """The clients' Skellam noise of ``[privacy] mode = 'distributed'`` (``None``
    otherwise): the encoder's scale and each client's share, for the budget over
    ``[privacy] rounds`` secure rounds of ``[rounds] clients_per_round`` clients."""
    if not config.privacy.distributed:
        return None
    k = config.rounds.clients_per_round
    dim = config.system.strategy(config.system_config).dim
    t = config.secagg.threshold_for(k)
    return _plan(budget(config.privacy), config.privacy.rounds, dim, k, t)


class PrivacyLedger:
    """The server's guarantees (module docstring); ``closed`` below is the number of
    iterations the server has closed (its open iteration's number)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.section = config.privacy
        self.enabled = self.section.enabled
        self._status: dict[int, dict[str, Any]] = {}
        self._dp: DPStrategy | None = None
        self._secret: int | None = None
        #: The open iteration's clip (adaptive clip only; :meth:`track`).
        self.current_clip: float | None = None
        #: The clients' noise under secure aggregation (``mode = 'distributed'``).
        self.plan = distributed_plan(config)
        #: Per device, the closed iterations it contributed an update to; the devices of
        #: the open iteration (module docstring). Written by the writer thread only.
        self._closed_by: dict[str, int] = {}
        self._open_by: set[str] = set()
        self._devices: dict[str, Any] | None = None
        self._epsilon_after: dict[int, float] = {}
        self._spends: list[dict[str, Any]] = []
        if self.enabled and self.plan is None:
            noise_multiplier(self.section)  # calibrate at start: a bad budget fails here

    def wrap(self, strategy: Strategy) -> Strategy:
        """The strategy the server runs: ``strategy`` itself (no DP, or distributed noise
        added by the clients), or its central-DP wrapper (with the adaptive clip when
        ``clip_quantile`` is set)."""
        if not self.enabled or self.plan is not None:
            return strategy
        from fedrank.strategies.dp import DPStrategy

        s = self.section
        dp = private(
            strategy,
            budget(s),
            rounds=s.rounds,
            rng=np.random.default_rng(),
            noise_multiplier=noise_multiplier(s),
        )
        assert isinstance(dp, DPStrategy)
        self._dp = dp
        return dp

    def attach(self, store: Store) -> None:
        """Read (or draw, on a new store) the store's noise secret, unless ``noise_seed``
        is set (module docstring)."""
        if self._dp is not None and self.section.noise_seed < 0:
            self._secret = store.noise_secret()

    def before_close(self, iteration: int) -> None:
        """Give the DP wrapper the noise generators of ``iteration``'s close (nothing
        without central DP). Also called before a restart recomputes the next clip from
        ``iteration``'s stored aggregate, so that it replays the same count noise."""
        if self._dp is None:
            return
        if self.section.noise == "secure":
            self._dp.use_rng(KeyStream(noise_key(self._seed(), f"iteration {iteration}")))
        else:
            self._dp.use_rng(self.noise_rng(iteration), self.noise_rng(iteration, count=True))

    def track(self, state: Any) -> None:
        """Note the open iteration's clip (the adaptive clip's; ``state`` the aggregate)."""
        if self._dp is not None and self._dp.adaptive is not None:
            self.current_clip = float(state.bound)

    def identity(self) -> dict[str, Any] | None:
        """What the store records of the budget: a store trained under one budget cannot
        continue under another (or without one)."""
        if not self.enabled:
            return None
        s = self.section
        identity: dict[str, Any] = {
            "epsilon": s.epsilon,
            "delta": s.delta,
            "clip": s.clip,
            "rounds": s.rounds,
        }
        if self.plan is not None:
            identity["mode"] = s.mode
        if s.adaptive:
            identity.update(
                clip_quantile=s.clip_quantile, count_noise=s.count_noise, clip_eta=s.clip_eta
            )
        return identity

    def spent(self, closed: int) -> bool:
        """Whether ``closed`` closes have used the whole budget."""
        return self.enabled and closed >= self.section.rounds

    # -- per device (module docstring) ---------------------------------------------------

    def load(self, store: Store, open_iteration: int) -> None:
        """Read each device's closed contributions from ``store``; the open iteration's
        are noted again as its stored messages are replayed (:meth:`note`)."""
        if self.enabled:
            self._closed_by = store.contributions(open_iteration)
            self._open_by = set()
            self._devices = self._device_summary()
            self._spends = self._spend_distribution()

    def client_refusal(self, client: str | None) -> Outcome | None:
        """Why an update of device ``client`` cannot be taken in the open iteration
        (``403 privacy_budget_spent``: its budget; ``409 one_update_per_iteration``: it
        sent one already), or ``None``. The routes may ask before accepting; the writer
        decides (:meth:`screen`)."""
        if not self.enabled or client is None:
            return None
        spent = self._closed_by.get(client, 0)
        s = self.section
        if spent >= s.rounds:
            detail = (
                f"device {client} has contributed to {spent} closed iterations: epsilon "
                f"{self.epsilon_after(spent):.4g} at delta {s.delta:g}, its whole budget "
                f"([privacy] epsilon {s.epsilon:g} over {s.rounds} iterations); it can send no "
                "more updates"
            )
            return Outcome(403, {"error": "privacy_budget_spent", "detail": detail})
        return _second_update(client) if client in self._open_by else None

    def screen(self, msgs: Messages, status: np.ndarray, bodies: dict[int, Any]) -> Counter[str]:
        """Refuse, in a group the writer is about to store, the updates (status 202) of a
        device that :meth:`client_refusal` refuses, or that the group already holds one of
        (its first is taken); sets their status and body, returns the refusals by reason."""
        refused: Counter[str] = Counter()
        if not self.enabled or msgs.clients is None:
            return refused
        clients, kinds = msgs.clients, msgs.kind_codes
        taken: set[str] = set()
        for k in np.flatnonzero((status == 202) & (kinds == UPDATE)).tolist():
            client = clients[k]
            if client is None:
                continue
            outcome = self.client_refusal(client)
            if outcome is None and client in taken:
                outcome = _second_update(client)
            if outcome is None:
                taken.add(client)
                continue
            status[k] = outcome.status
            bodies[k] = outcome.body
            refused[outcome.body["error"]] += 1
        return refused

    def note(self, msgs: Messages, accepted: np.ndarray) -> None:
        """Note the devices of the stored updates at positions ``accepted`` as
        contributors to the open iteration."""
        if self.enabled and msgs.clients is not None and accepted.size:
            kinds, clients = msgs.kind_codes, msgs.clients
            self._open_by.update(
                c for k in accepted.tolist() if kinds[k] == UPDATE and (c := clients[k]) is not None
            )

    def closed_iteration(self) -> None:
        """The open iteration closed: its devices have contributed to one more close."""
        if self.enabled:
            for client in self._open_by:
                self._closed_by[client] = self._closed_by.get(client, 0) + 1
            self._open_by = set()
            self._devices = self._device_summary()
            self._spends = self._spend_distribution()

    def epsilon_after(self, closes: int) -> float:
        """The epsilon of a device that contributed to ``closes`` closes."""
        value = self._epsilon_after.get(closes)
        if value is None:
            status = self._status.get(closes) or self._compute(closes)
            value = float(status["epsilon"] or 0.0)
            self._epsilon_after[closes] = value
        return value

    def _device_summary(self) -> dict[str, Any]:
        """``/v1/status``'s ``devices``: the largest per-device spend and how many devices
        reached the budget (never which)."""
        most = max(self._closed_by.values(), default=0)
        at_budget = sum(1 for k in self._closed_by.values() if k >= self.section.rounds)
        return {
            "max_iterations": most,
            "max_epsilon": self.epsilon_after(most),
            "at_budget": at_budget,
        }

    def spend_distribution(self) -> list[dict[str, Any]]:
        """How the devices' spends are distributed: per number of closed iterations a
        device contributed to, that many closes' epsilon and how many devices are there
        (never which); empty without ``[privacy]`` or before any device contributed. Built
        by the writer thread at each close (readers never iterate the live ledger)."""
        return self._spends

    def _spend_distribution(self) -> list[dict[str, Any]]:
        counts = Counter(self._closed_by.values())
        return [
            {"iterations": k, "epsilon": self.epsilon_after(k), "devices": counts[k]}
            for k in sorted(counts)
        ]

    def next_cost(self, closed: int) -> float | None:
        """The epsilon the next close adds to a device that contributes to it after
        ``closed`` closes (``None`` without ``[privacy]`` or once the budget is spent)."""
        if not self.enabled or closed >= self.section.rounds:
            return None
        return self.epsilon_after(closed + 1) - self.epsilon_after(closed)

    def noise_rng(self, iteration: int, count: bool = False) -> np.random.Generator:
        """The generator of the noise added when ``iteration`` closes (``count``: of the
        adaptive clip's count), from ``noise_seed`` or the store's secret."""
        seed = self._seed()
        return np.random.default_rng([seed, iteration, 1] if count else [seed, iteration])

    def _seed(self) -> int:
        """``noise_seed``, or the store's secret."""
        seed = self.section.noise_seed if self.section.noise_seed >= 0 else self._secret
        if seed is None:
            raise RuntimeError("attach the store before the first close: no noise secret")
        return seed

    def refusal(self) -> str:
        s = self.section
        return (
            f"the privacy budget is spent: {s.rounds} iterations at epsilon {s.epsilon:g}, "
            f"delta {s.delta:g} per user ([privacy]); this server takes no more updates"
        )

    def status(self, closed: int) -> dict[str, Any]:
        """:meth:`guarantees` of ``closed`` iterations, and the open iteration's clip
        (``clip_current``) when it adapts."""
        value = self.guarantees(closed)
        if self._devices is not None:
            value = {**value, "devices": self._devices}
        return value if self.current_clip is None else {**value, "clip_current": self.current_clip}

    def guarantees(self, closed: int) -> dict[str, Any]:
        """``/v1/status``'s ``privacy``: each user's guarantee over the ``closed``
        iterations (``{mechanism, epsilon, delta, rounds, sampling_rate, noise_multiplier,
        clip}``; epsilon ``None``: no mechanism), the per-message guarantee, the budget and
        whether it is spent. Computed once per ``closed``: the accountant is too slow to
        run in every request."""
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
        central = self.enabled and self.plan is None
        secure = central and s.noise == "secure"
        return {
            **run_privacy(row),
            **({"noise": s.noise} if central else {}),
            **({"lattice": secure_noise(self.config).describe()} if secure else {}),
            "per_message": row.per_message,
            "budget": budget if self.enabled else None,
            "budget_spent": self.spent(closed),
        }


def _second_update(client: str) -> Outcome:
    """The refusal of a device's second update in one iteration."""
    detail = (
        f"device {client} has an update in this iteration already: under [privacy] a device "
        "contributes one update per iteration (its guarantee assumes it); send the next one "
        "after the iteration closes"
    )
    return Outcome(409, {"error": "one_update_per_iteration", "detail": detail})


def secure_noise(config: ServerConfig) -> LatticeGaussian:
    """The lattice mechanism of ``[privacy] noise = 'secure'`` for the workload's model."""
    ps = config.privacy
    dim = config.system.strategy(config.system_config).dim
    return LatticeGaussian(ps.clip, noise_multiplier(ps), dim)


def _describe_secure_noise(out: SystemPrivacy, config: ServerConfig, z: float) -> None:
    """Add the secure noise's lattice and why its accounting is the Gaussian's (Renyi)."""
    mechanism = secure_noise(config)
    described = mechanism.describe()
    out.parameters.update(described)
    out.notes.append(
        f"secure noise: the sum is rounded to the lattice of step {mechanism.step:.4g} and "
        f"discrete Gaussian noise of sigma {described['lattice_sigma']:.6g} lattice "
        f"units is added, sampled exactly from ChaCha20 (Canonne, Kamath & Steinke 2020); "
        f"rounding makes the L2 sensitivity {mechanism.sensitivity:.6g} lattice units "
        f"(clip / step + sqrt(dim)), so the noise is {z:.4g} x the sensitivity: "
        f"1 / (2 * {z:.4g}^2)-zCDP per round (their Theorem 14), the Renyi bound of the "
        "Gaussian mechanism the budget is accounted with (accountant rdp)"
    )


def _describe_adaptive_clip(out: SystemPrivacy, ps: PrivacySection, z: float) -> None:
    """Add the adaptive clip's settings and its split of the budget's multiplier ``z``."""
    from fedrank.privacy.adaptive_clip import AdaptiveClip

    z_u = AdaptiveClip(ps.clip_quantile, ps.count_noise, ps.clip_eta).update_noise_multiplier(z)
    out.parameters.update(
        clip_quantile=ps.clip_quantile,
        count_noise=ps.count_noise,
        clip_eta=ps.clip_eta,
        update_noise_multiplier=z_u,
    )
    out.notes.append(
        f"adaptive clip (Andrew et al. 2021): clip {ps.clip:g} in the first iteration, then "
        f"the {ps.clip_quantile:g}-quantile of the update norms, estimated from the count of "
        f"updates within the clip with noise sigma_b = {ps.count_noise:g}; the updates' noise "
        f"multiplier z_u = {z_u:.4g} and the count's 2 sigma_b together are one Gaussian "
        f"mechanism of z = {z:.4g} per round (their Theorem 1)"
    )


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
            out = skellam_privacy(distributed, ps.rounds if rounds is None else rounds, workload)
        else:
            block = central_dp_block(
                ps.epsilon,
                ps.delta,
                ps.clip,
                ps.rounds,
                ps.accountant,
                ps.rounds if rounds is None else rounds,
            )
            if ps.denominator:
                block["denominator"] = ps.denominator
            out = gaussian_privacy(workload, block, {"budget_epsilon": ps.epsilon})
            if ps.noise == "secure":
                _describe_secure_noise(out, config, block["noise_multiplier"])
            if ps.adaptive:
                _describe_adaptive_clip(out, ps, block["noise_multiplier"])
            if ps.denominator:
                out.notes.append(
                    f"fixed denominator {ps.denominator:g}: each iteration's noised sum is "
                    "divided by it, not by the iteration's count, so the model depends on the "
                    "noised sums only and hides who took part as well as what they sent (the "
                    "counts in /v1/status and the store are the operator's, outside the "
                    "guarantee)"
                )
        out.notes.append(
            f"the server refuses updates and closes after {ps.rounds} iterations "
            f"(epsilon {ps.epsilon:g} at delta {ps.delta:g})"
        )
        return [out]
    notes = ["no [privacy] section: central DP is off"] if config.system.central_dp else []
    section = config.system_config
    out = config.system.device_privacy(asdict(section), rounds)
    if getattr(section, "norm_bound", 0):
        notes.append(f"norm_bound {section.norm_bound:g} clips updates; clipping alone is not DP")
    out.notes.extend(notes)
    return [out]
