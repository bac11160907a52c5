"""The device identity protocol, computed in one place for the SDK and the server
(docs/devices.md).

* A device's key is an Ed25519 key pair (RFC 8032, ``cryptography``); its id is the first
  32 hex characters of the SHA-256 of the raw 32-byte public key (:func:`device_id`).
* Opening a session: the device signs :func:`session_challenge` (device id, a timestamp in
  milliseconds and a random nonce); the server answers a session key
  ``HMAC-SHA256(server secret, device id | expiry)`` (:func:`session_key`), so it keeps no
  session table.
* Every request then carries the header :data:`HEADER`:
  ``<device id> <expiry> <timestamp ms> <mac>``, ``mac`` the hex
  ``HMAC-SHA256(session key, method | target | timestamp | body)``
  (:func:`request_mac`; the target is the path with its query string). The server recomputes
  the session key (once per session) and the MAC: one HMAC over the request.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fedrank.core.hmac_sha256 import HmacSha256, hmac_sha256
from fedrank.errors import FedrankError

#: The request header that carries a device's session and MAC.
HEADER = "x-fedrank-device"
#: Hex characters of a device id.
ID_LENGTH = 32
#: Bytes of a raw Ed25519 public key and of a signature.
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


def device_id(public_key: bytes) -> str:
    """The device id of a raw Ed25519 public key: its SHA-256, first 32 hex characters."""
    return hashlib.sha256(public_key).hexdigest()[:ID_LENGTH]


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """URL-safe base64 (``ValueError`` when it is not)."""
    return base64.urlsafe_b64decode(text.encode("ascii"))


def session_challenge(device: str, timestamp_ms: int, nonce: str) -> bytes:
    """What a device signs to open a session."""
    return f"fedrank-session\n{device}\n{timestamp_ms}\n{nonce}".encode()


def session_key(secret: bytes, device: str, expires: int) -> bytes:
    """The session key of ``device`` until ``expires`` (Unix seconds)."""
    return hmac_sha256(secret, f"{device}|{expires}".encode())


def session_mac(key: bytes) -> HmacSha256:
    """The keyed HMAC-SHA256 of a session, set up once for its requests' MACs."""
    return HmacSha256(key)


def request_mac(
    session: HmacSha256, method: str, target: str, timestamp_ms: int, body: bytes
) -> str:
    """The hex MAC of one request under a session's :func:`session_mac`: HMAC-SHA256 over
    the request's method, target, timestamp and body."""
    return session.hexdigest(f"{method}\n{target}\n{timestamp_ms}\n".encode(), body)


def header_value(device: str, expires: int, timestamp_ms: int, mac: str) -> str:
    """The :data:`HEADER` of a request."""
    return f"{device} {expires} {timestamp_ms} {mac}"


def new_nonce() -> str:
    """A random session nonce."""
    return secrets.token_urlsafe(18)


def verify(public_key: bytes, signature: bytes, data: bytes) -> bool:
    """Whether ``signature`` is the Ed25519 signature of ``data`` under ``public_key``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


class DeviceKey:
    """A device's Ed25519 key pair, kept in a file readable by its owner only (0600). Its
    private half opens the device's sessions and signs its secure-aggregation messages (the
    long-term signing key ``d_u`` of Bonawitz et al., CCS 2017, Figure 4;
    :func:`fedrank.client.secagg.send_secure`)."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self.private_key = private
        self.public_bytes = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.id = device_id(self.public_bytes)

    @classmethod
    def generate(cls) -> DeviceKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, path: Path) -> DeviceKey:
        """The key stored at ``path`` (raw 32-byte private key), made on first use; the
        file is created exclusively with mode 0600, so two clients starting at once keep
        one key."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        key = Ed25519PrivateKey.generate()
        raw = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return cls(Ed25519PrivateKey.from_private_bytes(_read_key(path)))
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        return cls(key)

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)


def _read_key(path: Path) -> bytes:
    """The 32 bytes of a stored key (another client may be finishing writing it)."""
    raw = path.read_bytes()
    if len(raw) != 32:
        raise FedrankError(f"{path} is not a device key (32 bytes); delete it to enroll again")
    return raw
