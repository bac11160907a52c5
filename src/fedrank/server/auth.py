"""The service's bearer tokens (docs/service.md): ``[server] admin_token`` for the operator
(admin actions, and the exact counts under ``[privacy]``) and each ``[[proxies]]`` token for
a proxy's merged aggregates and masked sums. Tokens are compared in constant time
(``hmac.compare_digest``), so the time of a refusal tells nothing about a token."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from fedrank.server.config import ServerConfig
from fedrank.server.envelope import BadRequest
from fedrank.server.sections import Proxy


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
