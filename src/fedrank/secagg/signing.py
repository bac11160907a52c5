"""Ed25519 signatures of the messages a third party may relay (Bonawitz et al., CCS 2017,
Figure 4, the active-adversary variant: every user holds a signing key ``d_u`` whose public
half the server knows from a trusted source; here, the device registry of
:mod:`fedrank.identity`, or the key advertised in Round 0 when there is none).

A client signs its key advertisement (Round 0) and its masked input (Round 2). The
signature covers the statement ``LABEL || len(session) || session || u || stage || digest``
where ``digest`` is the SHA-256 of the message's payload
(:func:`advertise_digest`, :func:`masked_digest`): it binds the session, the client's id in
it and the stage, so a signature cannot be replayed in another session, under another id or
for another message. A proxy that sums masked inputs forwards each sender's digest and
signature (:class:`~fedrank.secagg.messages.MaskedSum`): it cannot name a sender that did
not hand it a signed input.
"""

from __future__ import annotations

import hashlib
import secrets as _secrets
import struct
from collections.abc import Callable

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fedrank.secagg.errors import SignatureError

#: Bytes of an Ed25519 public key, of a signature and of a payload digest.
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
DIGEST_BYTES = 32
#: Domain separation of every signed statement of this protocol.
LABEL = b"fedrank/secagg/v1/signature/"

RandBits = Callable[[int], int]


def generate_signing_key(randbits: RandBits = _secrets.randbits) -> Ed25519PrivateKey:
    """A fresh Ed25519 key from 32 random bytes (the OS CSPRNG unless a test injects a
    seeded ``randbits``), for a client that has no device key."""
    seed = randbits(8 * PUBLIC_KEY_BYTES).to_bytes(PUBLIC_KEY_BYTES, "big")
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_bytes(key: Ed25519PrivateKey) -> bytes:
    """The 32-byte raw public key of ``key``."""
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def advertise_digest(mask_public_key: bytes, share_public_key: bytes, signing_key: bytes) -> bytes:
    """The payload digest of a key advertisement: its three public keys."""
    return hashlib.sha256(mask_public_key + share_public_key + signing_key).digest()


def masked_digest(masked: np.ndarray) -> bytes:
    """The payload digest of a masked input: its vector as little-endian ``uint32`` (its
    wire form, :mod:`fedrank.secagg.wire`)."""
    return hashlib.sha256(np.asarray(masked, dtype="<u4").tobytes()).digest()


def _statement(session_id: bytes, sender: int, stage: str, digest: bytes) -> bytes:
    name = stage.encode("ascii")
    return (
        LABEL
        + struct.pack(">B", len(session_id))
        + session_id
        + struct.pack(">IB", sender, len(name))
        + name
        + digest
    )


def sign(
    key: Ed25519PrivateKey, *, session_id: bytes, sender: int, stage: str, digest: bytes
) -> bytes:
    """The signature of ``sender``'s ``stage`` message of payload ``digest``."""
    return key.sign(_statement(session_id, sender, stage, digest))


def verify(
    public_key: bytes,
    signature: bytes,
    *,
    session_id: bytes,
    sender: int,
    stage: str,
    digest: bytes,
) -> None:
    """Check :func:`sign`'s output against ``sender``'s public key.

    Raises:
        SignatureError: the signature is not ``sender``'s over this statement.
    """
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            signature, _statement(session_id, sender, stage, digest)
        )
    except (InvalidSignature, ValueError) as err:
        raise SignatureError(
            f"client {sender}'s {stage} message is not signed by its key: it was forged or "
            "relayed under a sender that did not send it"
        ) from err
