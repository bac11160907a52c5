"""The masks of secure aggregation (Bonawitz et al., CCS 2017: the double masking of their
"technical intuition" and Round 2, MaskedInputCollection, of their Figure 4).

Client ``u`` sends ``y_u = x_u + PRG(b_u) + sum_{v != u} sign(u, v) PRG(s_uv)  (mod q)``:

* **pairwise masks** ``PRG(s_uv)``: ``s_uv`` is a 32-byte seed that only ``u`` and ``v`` can
  compute: the X25519 shared secret of ``u``'s private key and ``v``'s public key (or the
  reverse: the same value), passed through HKDF-SHA256 with the session id and the pair.
  ``sign(u, v)`` is ``+1`` if ``u < v`` and ``-1`` otherwise, so the two masks of a pair
  cancel in the sum. If ``u`` drops out after the others masked with ``s_uv``, the server
  reconstructs ``u``'s private key from Shamir shares and removes them.
* **self mask** ``PRG(b_u)``: ``b_u`` is a fresh random seed, Shamir-shared too. The server
  learns ``b_u`` only for clients whose masked input it counted. A client whose input
  arrives after the server declared it dropped (and so learned its pairwise masks) is still
  hidden by ``PRG(b_u)``, because the survivors reveal shares of either ``b_u`` or ``u``'s
  key, never both.

Primitives, all from the ``cryptography`` package: X25519 for key agreement, HKDF-SHA256 to
turn a shared secret into a seed, and AES-256 in counter mode as the PRG (its keystream,
read as little-endian ``uint32``, is uniform in ``Z_q`` for ``q = 2**32``).
"""

from __future__ import annotations

import secrets as _secrets
import struct
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedrank.secagg import field
from fedrank.secagg.errors import ProtocolError

#: Bytes of a PRG seed (an AES-256 key), of a pairwise seed and of the self-mask seed ``b_u``.
SEED_BYTES = 32
#: Bytes of an X25519 public key (and of a raw private key).
KEY_BYTES = 32
#: Domain-separation prefix of every HKDF ``info`` string of this protocol.
LABEL = b"fedrank/secagg/v1/"
_ZERO_COUNTER = bytes(16)

RandBits = Callable[[int], int]


def generate_private_key(randbits: RandBits = _secrets.randbits) -> X25519PrivateKey:
    """A fresh X25519 private key from 32 random bytes (``secrets.randbits``, i.e. the OS
    CSPRNG; tests may inject a seeded ``randbits``). X25519 accepts any 32 bytes as a
    private key (RFC 7748 clamps them when used)."""
    return X25519PrivateKey.from_private_bytes(randbits(8 * KEY_BYTES).to_bytes(KEY_BYTES, "big"))


def public_bytes(private_key: X25519PrivateKey) -> bytes:
    """The 32-byte raw public key of ``private_key``."""
    return private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def private_key_to_int(private_key: X25519PrivateKey) -> int:
    """The raw private key as an integer in ``[0, 2**256)`` (the value that is Shamir-shared)."""
    raw = private_key.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return int.from_bytes(raw, "big")


def private_key_from_int(value: int) -> X25519PrivateKey:
    """The inverse of :func:`private_key_to_int`; ``ValueError`` if ``value`` needs more than
    32 bytes (a wrongly reconstructed secret)."""
    if not 0 <= value < 1 << (8 * KEY_BYTES):
        raise ValueError("an X25519 private key is a 32-byte value")
    return X25519PrivateKey.from_private_bytes(value.to_bytes(KEY_BYTES, "big"))


def seed_to_int(seed: bytes) -> int:
    """A 32-byte seed as an integer in ``[0, 2**256)``, for Shamir sharing."""
    return int.from_bytes(seed, "big")


def seed_from_int(value: int) -> bytes:
    """The inverse of :func:`seed_to_int`; ``ValueError`` if ``value`` needs more than 32 bytes."""
    if not 0 <= value < 1 << (8 * SEED_BYTES):
        raise ValueError("a seed is a 32-byte value")
    return value.to_bytes(SEED_BYTES, "big")


def new_seed(randbits: RandBits = _secrets.randbits) -> bytes:
    """A fresh uniformly random 32-byte seed (the self-mask seed ``b_u``)."""
    return seed_from_int(randbits(8 * SEED_BYTES))


def agree(
    private_key: X25519PrivateKey,
    peer_public_key: bytes,
    *,
    purpose: bytes,
    session_id: bytes,
    u: int,
    v: int,
) -> bytes:
    """A 32-byte key that clients ``u`` and ``v`` (in either order) both derive: HKDF-SHA256
    of the X25519 shared secret, with the session id as salt and ``info = LABEL + purpose +
    min(u, v) + max(u, v)``. ``purpose`` separates the pairwise-mask seed from the
    share-encryption key, which come from different key pairs anyway.

    Raises:
        ProtocolError: ``peer_public_key`` is not a valid X25519 public key (wrong length,
            or a low-order point whose shared secret would be all zeros).
    """
    if len(peer_public_key) != KEY_BYTES:
        raise ProtocolError(
            f"an X25519 public key has {KEY_BYTES} bytes, got {len(peer_public_key)}"
        )
    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public_key))
    except ValueError as err:
        raise ProtocolError(
            f"key agreement between clients {u} and {v} failed ({err}): a public key is "
            "invalid; exclude that client from the round"
        ) from err
    info = LABEL + purpose + struct.pack(">II", min(u, v), max(u, v))
    return HKDF(algorithm=hashes.SHA256(), length=SEED_BYTES, salt=session_id, info=info).derive(
        shared
    )


def pairwise_seed(
    private_key: X25519PrivateKey, peer_public_key: bytes, *, session_id: bytes, u: int, v: int
) -> bytes:
    """``s_uv``: the seed of the pairwise mask of clients ``u`` and ``v`` (symmetric)."""
    return agree(
        private_key, peer_public_key, purpose=b"pairwise-mask", session_id=session_id, u=u, v=v
    )


def prg(seed: bytes, dimension: int) -> np.ndarray:
    """``PRG(seed)``: ``dimension`` uniform elements of ``Z_q`` as a ``uint64`` vector.

    The keystream of AES-256-CTR keyed by ``seed`` (counter block starting at zero: each
    seed keys one expansion only) read as little-endian ``uint32``. Pseudorandom as long as
    AES is a pseudorandom permutation and the stream stays far below ``2**64`` blocks.
    """
    if len(seed) != SEED_BYTES:
        raise ValueError(f"a PRG seed has {SEED_BYTES} bytes, got {len(seed)}")
    encryptor = Cipher(algorithms.AES(seed), modes.CTR(_ZERO_COUNTER)).encryptor()
    stream = encryptor.update(bytes(dimension * field.ELEMENT_BYTES)) + encryptor.finalize()
    return np.frombuffer(stream, dtype="<u4").astype(np.uint64)


def pairwise_sign(u: int, v: int) -> int:
    """The sign of ``PRG(s_uv)`` in ``y_u``: ``+1`` if ``u < v`` else ``-1``. Any rule works
    as long as ``pairwise_sign(u, v) == -pairwise_sign(v, u)``: that is what cancels the
    pair's masks in the sum."""
    return 1 if u < v else -1


def pairwise_mask(seed: bytes, dimension: int, u: int, v: int) -> np.ndarray:
    """``sign(u, v) * PRG(s_uv) mod q``: the mask that ``u`` adds for its peer ``v``."""
    mask = prg(seed, dimension)
    return mask if pairwise_sign(u, v) > 0 else field.negate(mask)


def self_mask(seed: bytes, dimension: int) -> np.ndarray:
    """``PRG(b_u)``: the self mask of the client whose seed is ``b_u``."""
    return prg(seed, dimension)
