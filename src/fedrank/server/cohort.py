"""Server-selected rounds: check-in, selection, reporting deadline (FedPS Algorithm 1; the
protocol of cross-device FL systems, Bonawitz et al., "Towards Federated Learning at
Scale", SysML 2019).

A client checks in with its own random ``client_id``; the first ``K`` clients to check in
during a round are selected and get a reporting deadline ``T_max`` seconds later; the others
are told to retry. A report is accepted only from a selected client, once, before its
deadline; a late report is refused with the reason. The round is complete when every
selected client has reported or every deadline has passed; the server then closes the
iteration (if enough reports arrived) and the next round starts.

Selection lives in memory: after a restart the round starts afresh and clients check in
again (their stored reports are not affected).

With server-issued FOLtR-ES seeds (:mod:`fedrank.server.seeds`) the answer to a selected
client also holds its ``seed`` and ``seed_token``. A client that checks in again gets the
same seed while the model version is the same, and a seed of the new version once the model
has moved on: one selection, one seed per version, so the round's capacity ``K`` bounds the
seeds a client can collect in a round by checking in under many ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedrank.server.seeds import IssuedSeed


@dataclass
class Cohort:
    """One round's selection: ``deadlines[client_id]`` and who has reported; with
    ``issue_seed`` (server-issued FOLtR-ES seeds: a model version to a fresh
    :class:`~fedrank.server.seeds.IssuedSeed`) also each selected client's seed."""

    number: int
    clients_per_round: int
    t_max_seconds: float
    deadlines: dict[str, float] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)  # a report of theirs is being stored
    issue_seed: Callable[[int], IssuedSeed] | None = None
    seeds: dict[str, IssuedSeed] = field(default_factory=dict)

    def checkin(self, client_id: str, now: float, model_version: int) -> dict[str, Any]:
        """Select the client if the round has room (a client that checks in again gets the
        same answer)."""
        if client_id in self.deadlines:
            return self._selected(client_id, model_version)
        if len(self.deadlines) >= self.clients_per_round:
            return {
                "selected": False,
                "round": self.number,
                "retry_after_seconds": max(1.0, self.t_max_seconds / 4),
            }
        self.deadlines[client_id] = now + self.t_max_seconds
        return self._selected(client_id, model_version)

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
                issued = self.seeds[client_id] = self.issue_seed(model_version)
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

    def settle(self, client_id: str, accepted: bool) -> None:
        """The reserved client's report was stored (``accepted``) or not."""
        self.pending.discard(client_id)
        if accepted:
            self.reported.add(client_id)

    def complete(self, now: float) -> bool:
        """Every selected client has reported, or every deadline has passed."""
        if not self.deadlines:
            return False
        if len(self.reported) >= self.clients_per_round:
            return True
        return all(now > d for d in self.deadlines.values())
