"""``POST /v1/checkin {"client_id": ...}``: round selection (``[rounds]``,
:mod:`fedrank.server.cohort`). During the round's check-in window the answer is "waiting,
poll again at ``poll_at``"; once the seats are drawn, a seated client gets its reporting
deadline (with ``[foltr_es] server_seeds`` also its ``seed`` and ``seed_token``,
:mod:`fedrank.server.seeds`, and with ``[secagg]`` its secure-aggregation block), the others
``retry_after_seconds`` for the next round (docs/service.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.auth import as_client, device_of
from fedrank.server.envelope import BadRequest, identifier, json_body, json_response, read_body

if TYPE_CHECKING:
    from fedrank.server.service import Service


class Checkin:
    """The check-in endpoint (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def checkin(self, request: Request) -> Response:
        service = self.service
        engine, rounds = service.engine, service.rounds
        try:
            if rounds is None:
                raise BadRequest(404, "no_rounds", "this server does not select clients per round")
            if engine.snapshot().budget_spent:
                raise BadRequest(403, "privacy_budget_spent", engine.privacy.refusal())
            body = await read_body(request.headers, request.receive, service.config.server)
            device = device_of(service, request.scope, request.headers, body)
            data = json_body(body)
            if not isinstance(data, dict) or set(data) != {"client_id"} and data != {}:
                raise BadRequest(422, "invalid", "send {'client_id': <your random id>}")
            named = identifier(data.get("client_id"), "client_id", required=device is None)
            client = as_client(device, named)
        except BadRequest as err:
            return service.counts.reject("checkin", err)
        assert client is not None
        answer = rounds.checkin(client, time.time(), engine.snapshot().version)
        service.counts.answered("checkin", 200)
        return json_response(answer)
