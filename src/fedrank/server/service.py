"""What the endpoints and the scheduler share: built with the app
(:func:`fedrank.server.app.create_app`), completed by its lifespan before the first request
(:func:`fedrank.server.app.lifespan`)."""

from __future__ import annotations

from fedrank.server.branches import Branches
from fedrank.server.config import ServerConfig
from fedrank.server.engine import Engine
from fedrank.server.identity import Attestation, Identity, load_attestation
from fedrank.server.rounds import Rounds
from fedrank.server.routes.observability import RequestCounts
from fedrank.server.scheduler import Scheduler
from fedrank.server.secagg_round import SecAggRound
from fedrank.server.seeds import SeedChecks


class Service:
    """The configuration, the study's branches and the request counts from the start; the
    engine, the scheduler, the enrolled devices (:mod:`fedrank.identity`), the open round
    (``[rounds]``) and the checks of server-issued seeds (``[foltr_es] server_seeds``) once
    the lifespan has started them."""

    #: Set by the lifespan.
    engine: Engine
    scheduler: Scheduler
    identity: Identity

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.branches = Branches(config.branches)
        self.counts = RequestCounts()
        self.rounds: Rounds | None = None
        self.seeds = SeedChecks()
        #: ``[identity] attestation``, imported here: a bad one stops the server at start.
        self.attestation: Attestation | None = load_attestation(config.identity.attestation)

    @property
    def secagg(self) -> SecAggRound | None:
        """The open round's secure-aggregation session (``[secagg]``), else ``None``."""
        return None if self.rounds is None else self.rounds.secagg
