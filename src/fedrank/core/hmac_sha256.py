"""HMAC-SHA256 (RFC 2104) for the server's hot paths: request MACs and seed tokens.

``hmac.digest`` is OpenSSL's one-shot HMAC, and CPython releases the GIL around it for any
message length. In the server a released GIL goes to the writer thread, which keeps it until
its next blocking call or the switch interval (5 ms), so one such call per request cost more
than the rest of the request (docs/devices.md, "What it costs"). Here the MAC is computed
with ``hashlib.sha256`` objects, which release the GIL only for inputs of 2 KiB or more,
where the work is worth it.

* :func:`hmac_sha256`: one MAC under a key used once (a session key, a seed token).
* :class:`HmacSha256`: many MACs under one key (a session's requests): the two padded key
  blocks are hashed once (RFC 2104, Sec. 4, "Implementation note") and each MAC copies those
  states, which takes about half the time of ``hmac.new`` per request.
"""

from __future__ import annotations

import hashlib
import hmac

#: SHA-256's block size in bytes (RFC 2104's B).
BLOCK = 64


def hmac_sha256(key: bytes, data: bytes) -> bytes:
    """``HMAC-SHA256(key, data)``, holding the GIL for short messages."""
    return hmac.new(key, data, hashlib.sha256).digest()


class HmacSha256:
    """HMAC-SHA256 under ``key``, the padded key states hashed once (module docstring)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > BLOCK:  # RFC 2104, Sec. 2: a longer key is hashed first
            key = hashlib.sha256(key).digest()
        block = key.ljust(BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def hexdigest(self, head: bytes, body: bytes) -> str:
        """The hex MAC of ``head + body`` (two parts, so that a body is not copied)."""
        inner = self._inner.copy()
        inner.update(head)
        inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()
