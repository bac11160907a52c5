"""Server-selected rounds: check-in window, uniform selection, reporting deadline (FedPS
Algorithm 1; the protocol of cross-device FL systems, Bonawitz et al., "Towards Federated
Learning at Scale", SysML 2019, Sec. 2.2: devices check in, the server samples a subset).

A round's first check-in opens its window of ``[rounds] checkin_seconds``. A client that
checks in during the window (with its own random ``client_id``, or the device identity that
stands for it) is told to wait and poll again at the window's end. At the end (once at least
``min_checkins`` distinct clients wait) the server samples the round's ``K`` seats uniformly
at random, without replacement, from the distinct clients that checked in: one client, one
seat, and the order of arrival plays no part, so a client that floods the window with fresh
ids gains seats only in proportion to the ids it brings (each of ``N`` candidates is seated
with probability ``K / N``), never by coming first. A window keeps at most ``max_waiting``
clients: beyond that, each new one replaces a random kept one with probability
``max_waiting / i`` (reservoir sampling, Vitter's Algorithm R, ACM TOMS 1985), so every
distinct client that checked in is kept with the same probability and memory stays bounded
however many check in. The draws come from a CSPRNG (:class:`secrets.SystemRandom`) unless
``[rounds] selection_seed`` asks for a reproducible generator (simulations, tests).

A seated client gets a reporting deadline ``T_max`` seconds after the selection; the others
are told to retry in the next round. A report is accepted only from a seated client, once,
before its deadline; a late report is refused with the reason. The round is complete when
every seated client has reported or every deadline has passed; the server then closes the
iteration (if enough reports arrived) and the next round starts.

Selection lives in memory: after a restart the round starts afresh and clients check in
again (their stored reports are not affected).

With server-issued FOLtR-ES seeds (:mod:`fedrank.server.seeds`) the answer to a seated
client also holds its ``seed`` and ``seed_token``, bound to that client. A client that
checks in again gets the same seed while the model version is the same, and a seed of the
new version once the model has moved on: one seat, one seed per version, so the round's
capacity ``K`` bounds the seeds a client can collect in a round by checking in under many
ids.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fedrank.server.sections import RoundsSection
from fedrank.server.seeds import IssuedSeed

#: Issues a seated client's seed: (model version, client) to a fresh seed and its token.
IssueSeed = Callable[[int, str], IssuedSeed]


@dataclass
class Cohort:
    """One round: its check-in window, then its seats (``deadlines[client_id]``) and who
    has reported; with ``issue_seed`` (server-issued FOLtR-ES seeds) also each seated
    client's seed. ``min_checkins`` overrides ``[rounds] min_checkins`` (a secure round
    waits for ``K``)."""

    number: int
    rounds: RoundsSection
    rng: random.Random
    issue_seed: IssueSeed | None = None
    min_checkins: int = 0
    #: When the window closes (set by the round's first check-in).
    window_end: float | None = field(default=None, init=False)
    #: When the seats were drawn (``None`` while the window is open).
    selected_at: float | None = field(default=None, init=False)
    deadlines: dict[str, float] = field(default_factory=dict, init=False)
    reported: set[str] = field(default_factory=set, init=False)
    #: Seated clients a report of whose is being stored.
    pending: set[str] = field(default_factory=set, init=False)
    seeds: dict[str, IssuedSeed] = field(default_factory=dict, init=False)
    #: The window's kept clients (a reservoir) and each one's slot in it.
    _waiting: list[str] = field(default_factory=list, init=False)
    _slot: dict[str, int] = field(default_factory=dict, init=False)
    #: Distinct arrivals at the window so far (the reservoir's ``i``).
    _arrivals: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.min_checkins = self.min_checkins or self.rounds.min_checkins

    @property
    def waiting(self) -> int:
        """How many clients the open window keeps (0 once the seats are drawn)."""
        return len(self._waiting)

    def checkin(self, client_id: str, now: float, model_version: int) -> dict[str, Any]:
        """The answer to a check-in: wait (the window is open), seated (a client that checks
        in again gets the same answer) or not seated (retry next round). A check-in at or
        after the window's end draws the seats first if nobody has yet."""
        if self.selected_at is None:
            if self.window_end is None:
                self.window_end = now + self.rounds.checkin_seconds
            if not self.select(now):
                self._wait(client_id)
                self.select(now)  # this arrival may be the last one the window waited for
        if self.selected_at is None:
            assert self.window_end is not None
            poll_at = max(self.window_end, now + min(1.0, self.rounds.checkin_seconds))
            return {
                "selected": False,
                "waiting": True,
                "round": self.number,
                "poll_at": poll_at,
                "retry_after_seconds": poll_at - now,
            }
        if client_id in self.deadlines:
            return self._selected(client_id, model_version)
        return {
            "selected": False,
            "round": self.number,
            "retry_after_seconds": max(1.0, self.rounds.t_max_seconds / 4),
        }

    def _wait(self, client_id: str) -> None:
        """Keep ``client_id`` in the window's reservoir (Algorithm R: the ``i``-th distinct
        arrival replaces a uniformly chosen kept client with probability ``cap / i``)."""
        if client_id in self._slot:
            return
        self._arrivals += 1
        cap = self.rounds.waiting_cap
        if len(self._waiting) < cap:
            self._slot[client_id] = len(self._waiting)
            self._waiting.append(client_id)
            return
        j = self.rng.randrange(self._arrivals)
        if j < cap:
            del self._slot[self._waiting[j]]
            self._waiting[j] = client_id
            self._slot[client_id] = j

    def select(self, now: float) -> list[str]:
        """Draw the round's seats if the window has ended with at least ``min_checkins``
        clients waiting: ``K`` of them (all, if fewer) uniformly at random, each with its
        deadline ``T_max`` from now. Returns the seats drawn now, in the order drawn (none
        if it is not time, or they were drawn before)."""
        if (
            self.selected_at is not None
            or self.window_end is None
            or now < self.window_end
            or len(self._waiting) < self.min_checkins
        ):
            return []
        seats = self.rng.sample(self._waiting, min(self.rounds.clients_per_round, self.waiting))
        self.selected_at = now
        self.deadlines = {client: now + self.rounds.t_max_seconds for client in seats}
        self._waiting, self._slot = [], {}
        return seats

    def _selected(self, client_id: str, model_version: int) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "selected": True,
            "round": self.number,
            "model_version": model_version,
            "deadline": self.deadlines[client_id],
        }
        if self.issue_seed is not None:
            issued = self.seeds.get(client_id)
            if issued is None or issued.model_version != model_version:
                issued = self.seeds[client_id] = self.issue_seed(model_version, client_id)
            answer["seed"] = issued.seed
            answer["seed_token"] = issued.token
        return answer

    def refusal(self, client_id: str | None, now: float) -> tuple[str, str] | None:
        """``(code, reason)`` why a report from ``client_id`` cannot be accepted now, or
        ``None`` (and then the client is reserved until :meth:`settle`)."""
        if not client_id:
            return "not_selected", (
                "this server selects clients per round: send client_id (POST /v1/checkin)"
            )
        if client_id not in self.deadlines:
            return "not_selected", (
                f"client {client_id!r} is not selected in round {self.number}; check in"
            )
        if client_id in self.reported or client_id in self.pending:
            return "already_reported", (
                f"client {client_id!r} has already reported in round {self.number}"
            )
        if now > self.deadlines[client_id]:
            late = now - self.deadlines[client_id]
            return "late", f"late: the reporting deadline passed {late:.1f} s ago (T_max)"
        self.pending.add(client_id)
        return None

    def refusal_of_all(self, clients: Iterable[str], now: float) -> tuple[str, str] | None:
        """:meth:`refusal` of the first of ``clients`` that cannot report now, and then none
        of them is reserved; ``None`` when all can (all are reserved)."""
        reserved: list[str] = []
        for client in clients:
            refused = self.refusal(client, now)
            if refused is not None:
                for held in reserved:
                    self.settle(held, accepted=False)
                return refused
            reserved.append(client)
        return None

    def settle(self, client_id: str, accepted: bool) -> None:
        """The reserved client's report was stored (``accepted``) or not."""
        self.pending.discard(client_id)
        if accepted:
            self.reported.add(client_id)

    def complete(self, now: float) -> bool:
        """Every seated client has reported, or every deadline has passed."""
        if not self.deadlines:
            return False
        if len(self.reported) >= len(self.deadlines):
            return True
        return all(now > d for d in self.deadlines.values())
