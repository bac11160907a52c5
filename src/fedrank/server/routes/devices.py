"""Device identity's endpoints (:mod:`fedrank.identity`, docs/devices.md):

* ``POST /v1/devices/enroll {token, public_key}`` (or ``{public_key, evidence}`` under
  ``[identity] attestation``): the device's id, ``201``;
* ``POST /v1/devices/session {device_id, timestamp, nonce, signature}``: a session key and
  its expiry, for an Ed25519 signature of the device's key;
* ``POST /v1/admin/devices {count, label, expires_hours}`` with the admin token: new
  single-use enrollment tokens (what ``fedrank devices enroll`` prints), ``201``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.auth import is_admin
from fedrank.server.envelope import BadRequest, json_body, json_response, read_body

if TYPE_CHECKING:
    from fedrank.server.service import Service


def _peer(request: Request) -> str | None:
    return None if request.client is None else request.client.host


class DeviceRoutes:
    """The device endpoints (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def enroll(self, request: Request) -> Response:
        service = self.service
        try:
            body = await read_body(request.headers, request.receive, service.config.server)
            device = service.identity.enroll(json_body(body), _peer(request))
        except BadRequest as err:
            return service.counts.reject("devices", err)
        service.counts.answered("devices", 201)
        return json_response({"device_id": device}, 201)

    async def session(self, request: Request) -> Response:
        service = self.service
        try:
            body = await read_body(request.headers, request.receive, service.config.server)
            answer = service.identity.open_session(json_body(body), _peer(request))
        except BadRequest as err:
            return service.counts.reject("devices", err)
        service.counts.answered("devices", 200)
        return json_response(answer)

    async def issue(self, request: Request) -> Response:
        service = self.service
        try:
            if not service.config.server.admin_token:
                raise BadRequest(403, "admin_disabled", "set [server] admin_token to enable admin")
            if not is_admin(service.config, request.headers):
                raise BadRequest(401, "unauthorized", "a valid bearer token is required")
            body = await read_body(request.headers, request.receive, service.config.server)
            tokens = service.identity.issue(json_body(body) if body else None)
        except BadRequest as err:
            return service.counts.reject("admin", err)
        service.counts.answered("admin", 201)
        return json_response({"tokens": tokens}, 201)
