"""Authenticated encryption of Shamir shares from one client to another through the server
(Bonawitz et al., CCS 2017, Section 3: the ``AE.enc`` / ``AE.dec`` of Round 1, ShareKeys,
keyed by ``KA.agree(s_u^SK, s_v^PK)``).

Client ``u`` encrypts the shares it gives ``v`` with AES-256-GCM under a key that only ``u``
and ``v`` can compute: HKDF-SHA256 of the X25519 shared secret of their *share* key pairs
(distinct from the key pairs of the pairwise masks). The server relays the ciphertext and
can neither read nor alter it: the associated data binds the session, the sender and the
recipient, so a ciphertext that was modified, forwarded under another sender or to another
recipient, or replayed from another session fails authentication
(:class:`~fedrank.secagg.errors.ShareAuthenticationError`).

Wire form: ``nonce (12 bytes) || AES-GCM ciphertext || tag (16 bytes)``; the nonce is random
(96 bits from ``randbits``), so the two directions of a pair, which share a key, never reuse
a nonce.
"""

from __future__ import annotations

import secrets as _secrets
import struct
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fedrank.secagg import masks
from fedrank.secagg.errors import ShareAuthenticationError

NONCE_BYTES = 12
TAG_BYTES = 16
#: Bytes a ciphertext adds to its plaintext.
OVERHEAD_BYTES = NONCE_BYTES + TAG_BYTES

RandBits = Callable[[int], int]


def share_key(
    private_key: X25519PrivateKey, peer_public_key: bytes, *, session_id: bytes, u: int, v: int
) -> bytes:
    """The AES-256-GCM key of the pair ``{u, v}`` (the same from either side)."""
    return masks.agree(
        private_key, peer_public_key, purpose=b"share-encryption", session_id=session_id, u=u, v=v
    )


def _associated_data(session_id: bytes, sender: int, recipient: int) -> bytes:
    return masks.LABEL + b"shares" + struct.pack(">II", sender, recipient) + session_id


def encrypt(
    key: bytes,
    plaintext: bytes,
    *,
    session_id: bytes,
    sender: int,
    recipient: int,
    randbits: RandBits = _secrets.randbits,
) -> bytes:
    """``nonce || AES-GCM(key, nonce, plaintext, aad = session, sender, recipient)``."""
    nonce = randbits(8 * NONCE_BYTES).to_bytes(NONCE_BYTES, "big")
    aad = _associated_data(session_id, sender, recipient)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def decrypt(
    key: bytes, ciphertext: bytes, *, session_id: bytes, sender: int, recipient: int
) -> bytes:
    """The plaintext of :func:`encrypt`'s output, checked for integrity and for the claimed
    session, sender and recipient.

    Raises:
        ShareAuthenticationError: the ciphertext fails authentication.
    """
    if len(ciphertext) < OVERHEAD_BYTES:
        raise ShareAuthenticationError(
            f"the encrypted shares from client {sender} to client {recipient} are "
            f"{len(ciphertext)} bytes, shorter than nonce and tag: they were truncated"
        )
    aad = _associated_data(session_id, sender, recipient)
    try:
        return AESGCM(key).decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], aad)
    except InvalidTag as err:
        raise ShareAuthenticationError(
            f"the encrypted shares from client {sender} to client {recipient} fail AES-GCM "
            "authentication: they were altered, relayed under the wrong sender or recipient, "
            "or belong to another session (or the sender lied). The recipient names the sender "
            "in its share check, and the round goes on without that sender"
        ) from err
