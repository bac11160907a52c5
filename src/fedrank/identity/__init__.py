"""Device identity for the federation service (docs/devices.md): who may take part.

A device holds an Ed25519 key pair; the operator admits it with a single-use enrollment
token (or a pluggable attestation check), after which it is known by its device id, the
first 32 hex characters of the SHA-256 of its raw public key. The device proves its key once
per session (an Ed25519 signature) and gets a short-lived session key; every request then
carries an HMAC-SHA256 over its method, target, timestamp and the body's SHA-256, which the
server checks in microseconds without a session table.

* :mod:`.protocol`: the key, the device id and the signed and MACed strings (client and
  server compute them here, in one place).
* :mod:`.registry`: the enrolled devices and the enrollment tokens, in ``devices.sqlite``.
* :mod:`.limits`: token-bucket rate limits per device and per address.
* :mod:`.device`: the device's side: enrollment, sessions and signed requests (the SDK's).

The server's side, what the service's routes call, is :mod:`fedrank.server.identity`.
"""

from fedrank.identity.protocol import DeviceKey, device_id
from fedrank.identity.registry import DeviceRegistry

__all__ = ["DeviceKey", "DeviceRegistry", "device_id"]
