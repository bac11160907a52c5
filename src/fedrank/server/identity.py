""":class:`Identity`: the server's side of device identity (docs/devices.md), what the
routes call.

* :meth:`Identity.authenticate` checks a request's :data:`~fedrank.identity.protocol.HEADER`
  (session expiry, timestamp within ``max_clock_skew_seconds``, HMAC over method, target,
  timestamp and the body's SHA-256, device enrolled and not revoked) and the rate limits,
  and returns the device id, which is then the request's client (docs/service.md).
* :meth:`Identity.enroll` admits a device by an enrollment token or by the attestation
  check of ``[identity] attestation``; :meth:`Identity.open_session` verifies the device's
  Ed25519 signature and derives its session key.

The enrolled devices are cached in memory and reloaded when another process (the operator's
``fedrank devices revoke``) changes ``devices.sqlite``, so a revoked device is refused at its
next request.
"""

from __future__ import annotations

import hmac
import importlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedrank.core.hmac_sha256 import HmacSha256
from fedrank.errors import ConfigError, FedrankError
from fedrank.identity.limits import TokenBuckets
from fedrank.identity.protocol import (
    HEADER,
    ID_LENGTH,
    PUBLIC_KEY_BYTES,
    SIGNATURE_BYTES,
    b64decode,
    b64encode,
    request_mac,
    session_challenge,
    session_key,
    session_mac,
    verify,
)
from fedrank.identity.registry import DeviceRegistry, EnrollmentRefused
from fedrank.server.config import ServerConfig
from fedrank.server.envelope import BadRequest

log = logging.getLogger("fedrank.server")

#: How a device enrolls, for every 401 that asks it to.
HOW_TO_ENROLL = (
    "enroll this device with a token from the operator (`fedrank devices enroll`): "
    "Client(url, state_dir, enrollment_token=...) or `fedrank client --enrollment-token`, "
    "docs/devices.md"
)
#: Longest :data:`~fedrank.identity.protocol.HEADER` value read.
MAX_HEADER = 160
#: Session nonces remembered (each for the clock-skew window).
MAX_NONCES = 1_000_000
#: Session keys remembered (derived again when forgotten).
MAX_SESSION_KEYS = 100_000
#: Seconds between two looks at whether another process (the operator's ``fedrank
#: devices``) changed the registry: a query per request would hand the GIL to the writer
#: thread on every request (sqlite releases it), which costs far more than the query.
REFRESH_SECONDS = 0.5

Attestation = Callable[[bytes, Any], bool]


def load_attestation(spec: str) -> Attestation | None:
    """The function ``module:function`` of ``[identity] attestation`` (``""``: none)."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, SyntaxError) as exc:
        raise ConfigError(f"[identity] attestation = {spec!r} cannot be imported: {exc}") from exc
    if not callable(found):
        raise ConfigError(f"[identity] attestation = {spec!r} is not a function")
    return found  # type: ignore[no-any-return]


def _unknown(device: str) -> BadRequest:
    return BadRequest(401, "revoked", f"device {device} is revoked or unknown: {HOW_TO_ENROLL}")


def _unauthorized(code: str, detail: str) -> BadRequest:
    return BadRequest(401, code, detail)


class Identity:
    """Device identity of a running server (module docstring).

    Args:
        config: the server's configuration (``[identity]``).
        store: the store directory (``devices.sqlite`` lives there).
        attestation: ``[identity] attestation``'s function (:func:`load_attestation`).
        clock: wall-clock seconds (timestamps and session expiries).
    """

    def __init__(
        self,
        config: ServerConfig,
        store: Path,
        attestation: Attestation | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        section = config.identity
        self.required = config.identity_required
        if config.counts_clients and not self.required:
            log.warning(
                "[identity] required = false with [rounds], [secagg] or [privacy] on: anyone "
                "can make clients, so cohorts, secure aggregation and privacy budgets hold "
                "only against honest clients (docs/devices.md)"
            )
        self.session_seconds = section.session_seconds
        self.skew = section.max_clock_skew_seconds
        self.clock = clock
        self.attestation = attestation
        self.registry = DeviceRegistry(store)
        self._secret = self.registry.secret()
        self._devices = self.registry.active()
        self._version = self.registry.data_version()
        self._next_refresh = time.monotonic() + REFRESH_SECONDS
        self._nonces: OrderedDict[str, float] = OrderedDict()
        self._keys: dict[tuple[str, int], HmacSha256] = {}
        self._per_device = TokenBuckets(section.device_rate, section.device_burst)
        self._per_address = TokenBuckets(section.address_rate, section.address_burst)

    def close(self) -> None:
        self.registry.close()

    # -- the registry, as this process sees it ---------------------------------------------

    def _refresh(self) -> None:
        """Reload the devices when another process changed the registry (looked at once
        every :data:`REFRESH_SECONDS`: a revocation holds from the next request after)."""
        now = time.monotonic()
        if now < self._next_refresh:
            return
        self._next_refresh = now + REFRESH_SECONDS
        version = self.registry.data_version()
        if version != self._version:
            self._version = version
            self._devices = self.registry.active()

    def public_key(self, device: str) -> bytes | None:
        """The enrolled raw Ed25519 public key of ``device`` (``None``: unknown or revoked)."""
        self._refresh()
        return self._devices.get(device)

    # -- rate limits -------------------------------------------------------------------------

    @staticmethod
    def _limited(wait: float, what: str) -> None:
        if wait > 0:
            raise BadRequest(
                429, "rate_limited", f"too many requests from this {what}; retry after {wait:.2g} s"
            )

    def limit_address(self, peer: str | None) -> None:
        """Take a token of ``peer``'s bucket (429 when it is empty)."""
        if peer is not None:
            self._limited(self._per_address.take(peer), "address")

    # -- requests ------------------------------------------------------------------------------

    def authenticate(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        peer: str | None,
    ) -> str | None:
        """The device a request comes from (``path``: the target, with its query string).
        ``None`` when it carries no identity and none is required; raises
        :class:`~fedrank.server.envelope.BadRequest` 401 (missing, malformed, expired,
        forged, unknown, revoked) or 429 (a rate limit). The device's bucket pays for an
        authenticated request; a refused one costs its address a token (a 429 once they are
        spent): the address limit bounds what senders without a valid session can do, and
        devices behind one address (a NAT) do not share a bucket."""
        value = headers.get(HEADER)
        if value is None and not self.required:
            return None
        try:
            return self._verify(method, path, value, body)
        except BadRequest:
            self.limit_address(peer)
            raise

    def _verify(self, method: str, path: str, value: str | None, body: bytes) -> str:
        """:meth:`authenticate`'s checks of the header ``value``, and the device's limit."""
        if value is None:
            raise _unauthorized(
                "unenrolled",
                f"this server takes requests from enrolled devices only: {HOW_TO_ENROLL}",
            )
        parts = value.split(" ") if len(value) <= MAX_HEADER and value.isascii() else []
        if len(parts) != 4 or not (parts[1].isdigit() and parts[2].isdigit()):
            raise _unauthorized(
                "bad_signature", f"{HEADER} must be '<device> <expires> <timestamp ms> <mac>'"
            )
        device, expires_text, stamp_text, mac = parts
        now = self.clock()
        expires, stamp = int(expires_text), int(stamp_text)
        if expires <= now:
            raise _unauthorized("session_expired", "the session expired: open a new one")
        if expires > now + self.session_seconds + self.skew:
            raise _unauthorized("bad_signature", "the session's expiry is not one this server set")
        if abs(stamp / 1000 - now) > self.skew:
            raise _unauthorized(
                "stale_timestamp",
                f"the request's timestamp is more than {self.skew:g} s from the server's clock "
                "(a replay, or a clock to set right)",
            )
        known = self._keys.get((device, expires))
        key = known or session_mac(session_key(self._secret, device, expires))
        expected = request_mac(key, method, path, stamp, body)
        if not hmac.compare_digest(mac, expected):  # both ASCII (checked above)
            raise _unauthorized("bad_signature", "the request's MAC does not match its session")
        if known is None:  # remembered once a request proved it (a forgery costs an HMAC)
            if len(self._keys) >= MAX_SESSION_KEYS:
                self._keys.clear()
            self._keys[device, expires] = key
        if self.public_key(device) is None:
            raise _unknown(device)
        self._limited(self._per_device.take(device), "device")
        return device

    # -- enrollment and sessions --------------------------------------------------------------

    def enroll(self, data: Any, peer: str | None) -> str:
        """``POST /v1/devices/enroll {token?, public_key, evidence?}``: the new device's id
        (the same id again for a retry with the same token and key)."""
        self.limit_address(peer)
        if not isinstance(data, dict) or not set(data) <= {"token", "public_key", "evidence"}:
            raise BadRequest(
                422, "invalid", "send {'token': <enrollment token>, 'public_key': <base64>}"
            )
        public_key = _decoded(data.get("public_key"), PUBLIC_KEY_BYTES, "public_key")
        token = data.get("token")
        if token is not None and (not isinstance(token, str) or not 1 <= len(token) <= 256):
            raise BadRequest(422, "invalid", "token must be the string the operator gave you")
        evidence = data.get("evidence")
        if token is None and not (self.attestation and self._attests(public_key, evidence)):
            raise _unauthorized("enrollment_refused", f"no valid token: {HOW_TO_ENROLL}")
        try:
            device = self.registry.enroll(token, public_key)
        except EnrollmentRefused as exc:
            raise _unauthorized("enrollment_refused", f"{exc}; ask the operator for one") from None
        self._devices[device] = public_key
        return device

    def _attests(self, public_key: bytes, evidence: Any) -> bool:
        assert self.attestation is not None
        try:
            return self.attestation(public_key, evidence) is True
        except Exception:  # the operator's check failed: no admission, and say so once
            log.exception("[identity] attestation raised; the device is not admitted")
            return False

    def open_session(self, data: Any, peer: str | None) -> dict[str, Any]:
        """``POST /v1/devices/session {device_id, timestamp, nonce, signature}``: a session
        key and its expiry, for a fresh signature of an enrolled device's key."""
        self.limit_address(peer)
        keys = {"device_id", "timestamp", "nonce", "signature"}
        if not isinstance(data, dict) or set(data) != keys:
            raise BadRequest(
                422,
                "invalid",
                "send {device_id, timestamp (ms), nonce, signature} (docs/devices.md)",
            )
        device, stamp, nonce = data["device_id"], data["timestamp"], data["nonce"]
        if not (isinstance(device, str) and len(device) == ID_LENGTH):
            raise BadRequest(422, "invalid", f"device_id must be {ID_LENGTH} hex characters")
        if isinstance(stamp, bool) or not isinstance(stamp, int):
            raise BadRequest(422, "invalid", "timestamp must be an integer (Unix milliseconds)")
        if not (isinstance(nonce, str) and 16 <= len(nonce) <= 64):
            raise BadRequest(422, "invalid", "nonce must be a random string of 16-64 characters")
        signature = _decoded(data["signature"], SIGNATURE_BYTES, "signature")
        now = self.clock()
        if abs(stamp / 1000 - now) > self.skew:
            raise _unauthorized(
                "stale_timestamp", f"the timestamp is more than {self.skew:g} s from the server's"
            )
        public_key = self.public_key(device)
        if public_key is None:
            raise _unknown(device)
        if not verify(public_key, signature, session_challenge(device, stamp, nonce)):
            raise _unauthorized("bad_signature", "the signature does not verify with the key")
        self._use_nonce(f"{device}/{nonce}", now)
        self._limited(self._per_device.take(device), "device")
        expires = int(now + self.session_seconds)
        self.registry.seen(device, now)
        return {
            "device_id": device,
            "session_key": b64encode(session_key(self._secret, device, expires)),
            "expires": expires,
        }

    def _use_nonce(self, nonce: str, now: float) -> None:
        """Refuse a nonce seen within the clock-skew window (a replayed session request)."""
        nonces = self._nonces
        while nonces and (next(iter(nonces.values())) < now or len(nonces) >= MAX_NONCES):
            nonces.popitem(last=False)
        if nonce in nonces:
            raise _unauthorized("replayed", "this session request was already used")
        nonces[nonce] = now + 2 * self.skew

    def issue(self, data: Any) -> list[str]:
        """``POST /v1/admin/devices {count?, label?, expires_hours?}``: new tokens."""
        data = {} if data is None else data
        if not isinstance(data, dict) or not set(data) <= {"count", "label", "expires_hours"}:
            raise BadRequest(422, "invalid", "send {count, label, expires_hours} (all optional)")
        count, label = data.get("count", 1), data.get("label", "")
        hours = data.get("expires_hours", 24.0)
        if isinstance(count, bool) or not isinstance(count, int):
            raise BadRequest(422, "invalid", f"count must be an integer, got {count!r}")
        if not isinstance(label, str):
            raise BadRequest(422, "invalid", f"label must be a string, got {label!r}")
        if isinstance(hours, bool) or not isinstance(hours, int | float):
            raise BadRequest(422, "invalid", f"expires_hours must be a number, got {hours!r}")
        try:
            return self.registry.issue(count, label, float(hours))
        except FedrankError as exc:
            raise BadRequest(422, "invalid", str(exc)) from exc


def _decoded(value: Any, size: int, name: str) -> bytes:
    """``value``, URL-safe base64 of exactly ``size`` bytes."""
    try:
        raw = b64decode(value) if isinstance(value, str) and len(value) <= 4 * size else b""
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise BadRequest(422, "invalid", f"{name} must be URL-safe base64 of {size} bytes")
    return raw
