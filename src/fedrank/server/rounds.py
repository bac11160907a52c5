"""The service's rounds (``[rounds]``): the open round's cohort
(:class:`~fedrank.server.cohort.Cohort`: the check-in window, the uniform draw of its seats,
reporting deadlines) and, with ``[secagg]``, its secure-aggregation session
(:class:`~fedrank.server.secagg_round.SecAggRound`) and the previous round's, whose clients
may still ask how it ended. A secure round draws its ``K`` members the same way, waiting for
at least ``K`` clients, and they join its session when drawn, before its protocol starts. A
report is accepted only from a seated client, once, before its deadline, on every path a
report takes (a single update, a JSON batch, a proxy's merged aggregate naming its
contributors); the scheduler (:mod:`fedrank.server.scheduler`) draws the seats when a window
ends and starts the next round when one ends.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING, Any

from fedrank.server.cohort import Cohort, IssueSeed
from fedrank.server.config import ServerConfig
from fedrank.server.envelope import BadRequest
from fedrank.server.messages import Incoming, Outcome
from fedrank.server.secagg_round import SecAggRound, no_registry

if TYPE_CHECKING:
    from fedrank.privacy.skellam import SkellamPlan


class Rounds:
    """The open round (module docstring).

    Args:
        config: the server's configuration (``[rounds]``, ``[secagg]``).
        dim: the model's dimension (a secure round sums vectors of it).
        noise: the clients' distributed DP noise of a secure round, or ``None``.
        issue_seed: issues a seated client's FOLtR-ES seed for a model version, bound to
            the client (``[foltr_es] server_seeds``), or ``None`` when clients draw their own.
        public_key_of: a device's enrolled Ed25519 key (the device registry,
            :meth:`fedrank.server.identity.Identity.public_key`). Where enrolled devices are
            required, a secure round's member must advertise that key (docs/secagg.md,
            "Clients that lie"); elsewhere the key a member advertises is bound to it for
            the session.
    """

    def __init__(
        self,
        config: ServerConfig,
        dim: int,
        noise: SkellamPlan | None,
        issue_seed: IssueSeed | None,
        public_key_of: Callable[[str], bytes | None],
    ) -> None:
        self.config = config
        self.dim = dim
        self.noise = noise
        self.issue_seed = issue_seed
        self.public_key_of = public_key_of if config.identity_required else no_registry
        seed = config.rounds.selection_seed
        #: Draws the seats (and the window's reservoir): a CSPRNG unless a seed is set.
        self.rng: random.Random = secrets.SystemRandom() if seed < 0 else random.Random(seed)
        self.secagg: SecAggRound | None = None
        self.secagg_previous: SecAggRound | None = None
        self.cohort = self._start(0)

    def _start(self, number: int) -> Cohort:
        r, sa = self.config.rounds, self.config.secagg
        if sa.enabled:
            self.secagg_previous = self.secagg
            self.secagg = SecAggRound(
                number,
                self.dim,
                r.clients_per_round,
                sa.threshold_for(r.clients_per_round),
                sa.l2_bound,
                sa.stage_seconds,
                self.noise,
                self.public_key_of,
            )
        return Cohort(
            number,
            r,
            self.rng,
            issue_seed=self.issue_seed,
            min_checkins=r.clients_per_round if sa.enabled else r.min_checkins,
        )

    def next(self) -> None:
        """The round ended: the next one starts."""
        self.cohort = self._start(self.cohort.number + 1)

    def select(self, now: float) -> None:
        """Draw the open round's seats if its window has ended; in a secure round the seated
        clients join its session, in the order drawn."""
        self._join(self.cohort.select(now), now)

    def _join(self, seats: Sequence[str], now: float) -> None:
        if self.secagg is not None:
            for client in seats:
                self.secagg.join(client, now)

    def checkin(self, client: str, now: float, model_version: int) -> dict[str, Any]:
        """The answer to a check-in of ``client``: wait for the window's end, seated (with
        its secure-aggregation block in a secure round) or retry next round."""
        drawn = self.cohort.selected_at is not None
        answer = self.cohort.checkin(client, now, model_version)
        if not drawn and self.cohort.selected_at is not None:
            self._join(list(self.cohort.deadlines), now)
        if self.secagg is not None and answer["selected"]:
            answer["secagg"] = self.secagg.join(client, now)
        return answer

    def check_report(self, item: Incoming, client: str | None, known: Container[str]) -> None:
        """Refuse a report from a client not selected, late or already reported (409);
        reserve the client otherwise (one report per client, even when two arrive at once).
        A message already stored (its id in ``known``) is a retry: the writer answers it
        200 duplicate."""
        if item.kind == "update" and item.message_id not in known:
            refused = self.cohort.refusal(client, time.time())
            if refused is not None:
                raise BadRequest(409, *refused)

    def check_contributors(
        self, batch_id: str, clients: list[str], known: Container[str]
    ) -> list[str]:
        """Refuse a proxy's merged aggregate unless every client it names is seated, in
        time and has not reported (409, the first refusal's reason); reserve them all
        otherwise and return them. An aggregate already stored (``batch_id`` in ``known``)
        is a retry: nobody is reserved."""
        if batch_id in known:
            return []
        refused = self.cohort.refusal_of_all(clients, time.time())
        if refused is not None:
            raise BadRequest(409, *refused)
        return clients

    def reported(self, item: Incoming, client: str | None, outcome: Outcome) -> None:
        """The writer answered a reserved report: settle the client's report."""
        if item.kind == "update" and client and client in self.cohort.pending:
            self.cohort.settle(client, accepted=outcome.status == 202)

    def contributed(self, reserved: list[str], outcome: Outcome) -> None:
        """The writer answered an aggregate: settle the reports of the contributors
        :meth:`check_contributors` reserved."""
        for client in reserved:
            self.cohort.settle(client, accepted=outcome.status == 202)
