"""The service's rounds (``[rounds]``): the open round's cohort
(:class:`~fedrank.server.cohort.Cohort`: check-in, selection, reporting deadlines) and, with
``[secagg]``, its secure-aggregation session (:class:`~fedrank.server.secagg_round.SecAggRound`)
and the previous round's, whose clients may still ask how it ended. A report is accepted
only from a selected client, once, before its deadline; the scheduler
(:mod:`fedrank.server.scheduler`) starts the next round when one ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

from fedrank.server.cohort import Cohort
from fedrank.server.config import ServerConfig
from fedrank.server.envelope import BadRequest
from fedrank.server.messages import Incoming, Outcome
from fedrank.server.secagg_round import SecAggRound
from fedrank.server.seeds import IssuedSeed

if TYPE_CHECKING:
    from fedrank.privacy.skellam import SkellamPlan


class Rounds:
    """The open round (module docstring).

    Args:
        config: the server's configuration (``[rounds]``, ``[secagg]``).
        dim: the model's dimension (a secure round sums vectors of it).
        noise: the clients' distributed DP noise of a secure round, or ``None``.
        issue_seed: issues a selected client's FOLtR-ES seed for a model version
            (``[foltr_es] server_seeds``), or ``None`` when clients draw their own.
    """

    def __init__(
        self,
        config: ServerConfig,
        dim: int,
        noise: SkellamPlan | None,
        issue_seed: Callable[[int], IssuedSeed] | None,
    ) -> None:
        self.config = config
        self.dim = dim
        self.noise = noise
        self.issue_seed = issue_seed
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
            )
        return Cohort(number, r.clients_per_round, r.t_max_seconds, issue_seed=self.issue_seed)

    def next(self) -> None:
        """The round ended: the next one starts."""
        self.cohort = self._start(self.cohort.number + 1)

    def checkin(self, client: str, now: float, model_version: int) -> dict[str, Any]:
        """The answer to a check-in of ``client``: selected (with its secure-aggregation
        id in a secure round) or told to retry. A secure round takes no new client once its
        protocol has left the first stage."""
        sa = self.secagg
        if sa is not None and client not in sa.ids and (sa.stage > 0 or sa.finished):
            return {
                "selected": False,
                "round": self.cohort.number,
                "retry_after_seconds": sa.stage_seconds,
            }
        answer = self.cohort.checkin(client, now, model_version)
        if sa is not None and answer["selected"]:
            answer["secagg"] = sa.join(client, now)
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

    def reported(self, item: Incoming, client: str | None, outcome: Outcome) -> None:
        """The writer answered a reserved report: settle the client's report."""
        if item.kind == "update" and client and client in self.cohort.pending:
            self.cohort.settle(client, accepted=outcome.status == 202)
