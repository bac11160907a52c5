"""The device's side of identity (docs/devices.md): :class:`DeviceAuth`, an ``httpx.Auth``
that opens a session with the device's Ed25519 key when it has none (or it is about to
expire) and signs every request with the session key; :func:`enroll` admits a new key with
an enrollment token; :class:`DeviceState` keeps a device's key and enrollment in a
directory. The SDK (:class:`fedrank.client.Client`) uses them; so can any httpx client
(the tests do)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import httpx

from fedrank.errors import FedrankError
from fedrank.identity.protocol import (
    HEADER,
    DeviceKey,
    b64decode,
    b64encode,
    header_value,
    new_nonce,
    request_mac,
    session_challenge,
    session_mac,
)

#: A session is renewed this many seconds before it expires.
RENEW_BEFORE = 30.0
#: Refusals after which a new session is opened and the request sent once more.
_RENEW_ON = frozenset({"session_expired", "stale_timestamp"})


class IdentityError(FedrankError):
    """The server refused to enroll the device or to open its session (``status``,
    ``body``)."""

    def __init__(self, what: str, response: httpx.Response) -> None:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        detail = body.get("detail", body) if isinstance(body, dict) else body
        super().__init__(f"{what}: the server answered {response.status_code}: {detail}")
        self.status, self.body = response.status_code, body


def enroll(
    http: httpx.Client, base_url: str, key: DeviceKey, token: str | None, evidence: Any = None
) -> str:
    """Enroll ``key`` with ``token`` (or ``evidence`` for the server's attestation check);
    the device id the server answers (it is also ``key.id``)."""
    body: dict[str, Any] = {"public_key": b64encode(key.public_bytes)}
    if token is not None:
        body["token"] = token
    if evidence is not None:
        body["evidence"] = evidence
    response = http.post(base_url.rstrip("/") + "/v1/devices/enroll", json=body)
    if response.status_code != 201:
        raise IdentityError("enrolling this device failed", response)
    device = str(response.json()["device_id"])
    if device != key.id:
        raise FedrankError(f"the server enrolled {device}, not this key's id {key.id}")
    return device


class DeviceAuth(httpx.Auth):
    """Signs requests as an enrolled device (module docstring).

    Args:
        key: the device's key pair.
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        clock: wall-clock seconds (a test passes its own to send stale timestamps).
    """

    requires_response_body = True

    def __init__(
        self, key: DeviceKey, base_url: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.key = key
        self.session_url = base_url.rstrip("/") + "/v1/devices/session"
        self.clock = clock
        self.session: tuple[bytes, int] | None = None

    @property
    def device_id(self) -> str:
        return self.key.id

    def _session_request(self) -> httpx.Request:
        stamp = int(self.clock() * 1000)
        nonce = new_nonce()
        signature = self.key.sign(session_challenge(self.key.id, stamp, nonce))
        body = {
            "device_id": self.key.id,
            "timestamp": stamp,
            "nonce": nonce,
            "signature": b64encode(signature),
        }
        return httpx.Request("POST", self.session_url, json=body)

    def _opened(self, response: httpx.Response) -> bool:
        """Keep the session a response opened; ``False`` when it was refused."""
        if response.status_code != 200:
            return False
        data = response.json()
        self.session = (b64decode(data["session_key"]), int(data["expires"]))
        return True

    def open(self, http: httpx.Client) -> tuple[bytes, int]:
        """Open a session now (``auth_flow`` does it when needed): its key and expiry."""
        response = http.send(self._session_request())
        if not self._opened(response):
            raise IdentityError(f"opening a session for device {self.key.id} failed", response)
        assert self.session is not None
        return self.session

    def sign(self, request: httpx.Request) -> None:
        """Set the request's :data:`~fedrank.identity.protocol.HEADER` under the open
        session."""
        assert self.session is not None
        key, expires = self.session
        stamp = int(self.clock() * 1000)
        query = request.url.query.decode("latin-1")
        target = request.url.path + ("?" + query if query else "")
        mac = request_mac(session_mac(key), request.method, target, stamp, request.read())
        request.headers[HEADER] = header_value(self.key.id, expires, stamp, mac)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Open a session if there is none (or it is about to expire), sign and send; a
        session the server refuses ends the flow with its answer (the caller sees the 429
        or the 401 and its reason)."""
        expiring = self.session is None or self.session[1] - self.clock() < RENEW_BEFORE
        if expiring and not self._opened((yield self._session_request())):
            return
        self.sign(request)
        response = yield request
        if response.status_code == 401 and _code(response) in _RENEW_ON:
            if not self._opened((yield self._session_request())):
                return
            self.sign(request)
            yield request


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None


class DeviceState:
    """A device's key and enrollment, kept in ``state_dir`` (``None``: in memory): the key in
    ``device.key`` (0600), the enrollment in ``device.json`` once the server took it.

    Args:
        base_url: the server.
        state_dir: where the key and the enrollment live.
        token: the operator's enrollment token, used once if the device is not enrolled.
    """

    def __init__(self, base_url: str, state_dir: Path | None, token: str | None) -> None:
        self.base_url, self.state_dir, self.token = base_url, state_dir, token
        self.auth: DeviceAuth | None = None
        if state_dir is not None and (state_dir / "device.json").exists():
            self.auth = DeviceAuth(self._key(), base_url)

    def _key(self) -> DeviceKey:
        if self.state_dir is None:
            return DeviceKey.generate()
        return DeviceKey.load_or_create(self.state_dir / "device.key")

    def enrolled(self, http: httpx.Client) -> DeviceAuth | None:
        """The device's auth, enrolled first with the token (once); ``None``: no
        enrollment and no token."""
        if self.auth is None and self.token is not None:
            key = self._key()
            device = enroll(http, self.base_url, key, self.token)
            if self.state_dir is not None:
                record = {"device_id": device, "server": self.base_url}
                (self.state_dir / "device.json").write_text(json.dumps(record))
            self.auth, self.token = DeviceAuth(key, self.base_url), None
        return self.auth
