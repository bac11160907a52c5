"""``POST /v1/admin/{close,pause,resume}``: the operator's actions, with the bearer token of
``[server] admin_token`` (:mod:`fedrank.server.auth`; without one, admin is off). ``close``
closes the open iteration whatever the policy (not while the privacy budget is spent, not
an empty one); ``pause`` stops taking updates (503 until ``resume``) and survives restarts
(docs/service.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.auth import is_admin
from fedrank.server.envelope import BadRequest, json_response

if TYPE_CHECKING:
    from fedrank.server.service import Service

#: The actions of ``/v1/admin/{action}``.
ACTIONS = ("close", "pause", "resume")


class Admin:
    """The admin endpoint (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def admin(self, request: Request) -> Response:
        service = self.service
        action = request.path_params["action"]
        try:
            if not service.config.server.admin_token:
                raise BadRequest(403, "admin_disabled", "set [server] admin_token to enable admin")
            if not is_admin(service.config, request.headers):
                raise BadRequest(401, "unauthorized", "a valid bearer token is required")
            if action not in ACTIONS:
                raise BadRequest(404, "not_found", f"unknown admin action {action!r}")
        except BadRequest as err:
            return service.counts.reject("admin", err)
        writer = service.engine.writer
        if action == "close":
            outcome = await writer.command("close", reason="admin", force=True)
        else:
            outcome = await writer.command(action)
        return json_response(outcome.body, outcome.status)
