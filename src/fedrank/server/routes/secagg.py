"""``POST /v1/secagg`` and ``GET /v1/secagg``: the secure-aggregation protocol of the open
round (``[secagg]``; docs/secagg.md, "In the service"). The session and its stages are
:mod:`fedrank.server.secagg_round`'s; the scheduler moves it on
(:mod:`fedrank.server.scheduler`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.auth import as_client, device_of, proxy_of
from fedrank.server.envelope import BadRequest, json_body, json_response, read_body
from fedrank.server.secagg_round import SecAggRound

if TYPE_CHECKING:
    from fedrank.server.service import Service


class SecAggRoutes:
    """The secure-aggregation endpoints (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def _session(self) -> SecAggRound:
        sa = self.service.secagg
        if sa is None:
            raise BadRequest(404, "no_secagg", "this server does not run secure aggregation")
        return sa

    async def post(self, request: Request) -> Response:
        """A client's message of the open protocol stage, or a proxy's sum of its clients'
        masked inputs (stage ``masked_sum``, with its bearer token)."""
        service = self.service
        try:
            sa = self._session()
            body = await read_body(request.headers, request.receive, service.config.server)
            data = json_body(body)
            if isinstance(data, dict) and data.get("stage") == "masked_sum":
                proxy = proxy_of(service.config, request.headers)
                sa.receive_sum(data, proxy.max_clients, time.time())
            else:
                device = device_of(service, request.scope, request.headers, body)
                as_client(device, data.get("client_id") if isinstance(data, dict) else None)
                sa.receive(data, time.time())
        except BadRequest as err:
            return service.counts.reject("secagg", err)
        service.counts.answered("secagg", 202)
        return json_response({"accepted": True}, 202)

    async def get(self, request: Request) -> Response:
        """``?client_id=&session=``: the stage and this client's input for it (a round that
        ended: how it ended)."""
        service = self.service
        try:
            sa = self._session()
            q = request.query_params
            assert service.rounds is not None  # a session is a round's
            previous = service.rounds.secagg_previous
            if previous is not None and q.get("session") == previous.session:
                sa = previous
            device = device_of(service, request.scope, request.headers, b"")
            answer = sa.view(as_client(device, q.get("client_id")), q.get("session"), time.time())
        except BadRequest as err:
            return service.counts.reject("secagg", err)
        service.counts.answered("secagg", 200)
        return json_response(answer)
