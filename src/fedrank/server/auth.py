"""Who sends a request (docs/service.md, docs/devices.md): ``[server] admin_token`` for the
operator (admin actions, and the exact counts under ``[privacy]``), each ``[[proxies]]``
token for a proxy's merged aggregates and masked sums, and an enrolled device's session
(:func:`device_of`, :mod:`fedrank.identity`) for check-ins, updates and secure-aggregation
messages. Tokens are compared in constant time (``hmac.compare_digest``), so the time of a
refusal tells nothing about a token."""

from __future__ import annotations

import hmac
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from fedrank.server.config import ServerConfig
from fedrank.server.envelope import BadRequest
from fedrank.server.sections import Proxy

if TYPE_CHECKING:
    from fedrank.server.service import Service


def _bearer(headers: Mapping[str, str], token: str) -> bool:
    given = headers.get("authorization", "").encode()
    return hmac.compare_digest(given, f"Bearer {token}".encode())


def is_admin(config: ServerConfig, headers: Mapping[str, str]) -> bool:
    """The request carries ``[server] admin_token`` as its bearer token (never true
    without a configured token)."""
    token = config.server.admin_token
    return bool(token) and _bearer(headers, token)


def proxy_of(config: ServerConfig, headers: Mapping[str, str]) -> Proxy:
    """The configured proxy whose bearer token ``headers`` carry; 403 when the server takes
    no aggregates, 401 for any other token."""
    if not config.proxies:
        raise BadRequest(
            403,
            "aggregates_disabled",
            "this server accepts no aggregates; configure [[proxies]] with a token each",
        )
    found = None
    for proxy in config.proxies:  # every token compared: no timing hint of which
        if _bearer(headers, proxy.token):
            found = proxy
    if found is None:
        raise BadRequest(401, "unauthorized", "an aggregate needs a proxy's bearer token")
    return found


def device_of(
    service: Service, scope: MutableMapping[str, Any], headers: Mapping[str, str], body: bytes
) -> str | None:
    """The enrolled device an ASGI request comes from (``None``: no identity, and none is
    required); 401 or 429 otherwise (:meth:`fedrank.server.identity.Identity.authenticate`,
    with the request's target: its path and query string)."""
    query = scope.get("query_string", b"")
    target = scope["path"] + ("?" + query.decode("latin-1") if query else "")
    peer = scope.get("client")
    return service.identity.authenticate(
        scope["method"], target, headers, body, None if peer is None else peer[0]
    )


def as_client(device: str | None, claimed: str | None) -> str | None:
    """The client of a request: its device when it has one (a ``client_id`` it names must
    be that device, else 403 ``client_mismatch``), else the ``client_id`` it names."""
    if device is None:
        return claimed
    if claimed is not None and claimed != device:
        raise BadRequest(
            403,
            "client_mismatch",
            f"client_id {claimed!r} is not this device ({device}): a device speaks for itself",
        )
    return device
