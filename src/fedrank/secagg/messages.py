"""The messages of the secure-aggregation rounds (:mod:`.protocol` has the overview), one
frozen dataclass per message in the order the rounds send them, and the session's outcome
(:class:`AggregationResult`).

Messages carry ``nbytes()``: the payload size in a compact binary encoding (4-byte ids and
field elements, 32-byte keys, 66-byte shares, 64-byte signatures, ciphertexts as they are),
which the benchmark reports. Their JSON forms are in :mod:`.wire`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedrank.secagg import field, shamir, signing
from fedrank.secagg.protocol import ID_BYTES


@dataclass(frozen=True)
class AdvertiseKeys:
    """Round 0, client -> server: ``(c_u^PK, s_u^PK, d_u^PK)`` and the signature of the three
    under ``d_u`` (:func:`fedrank.secagg.signing.advertise_digest`)."""

    sender: int
    mask_public_key: bytes  # c_u^PK: pairwise-mask agreement
    share_public_key: bytes  # s_u^PK: share-encryption agreement
    signing_public_key: bytes  # d_u^PK: the device's Ed25519 key
    signature: bytes

    @property
    def digest(self) -> bytes:
        return signing.advertise_digest(
            self.mask_public_key, self.share_public_key, self.signing_public_key
        )

    def nbytes(self) -> int:
        keys = len(self.mask_public_key) + len(self.share_public_key)
        return ID_BYTES + keys + len(self.signing_public_key) + len(self.signature)


@dataclass(frozen=True)
class KeyDirectory:
    """Round 0, server -> every client of ``U1``: all advertised keys, by client id."""

    keys: Mapping[int, AdvertiseKeys]

    def nbytes(self) -> int:
        return sum(k.nbytes() for k in self.keys.values())


@dataclass(frozen=True)
class ShareKeys:
    """Round 1, client ``u`` -> server: ``e_uv`` for every ``v`` in ``U1 - u``, by ``v``."""

    sender: int
    ciphertexts: Mapping[int, bytes]

    def nbytes(self) -> int:
        return ID_BYTES + sum(ID_BYTES + len(c) for c in self.ciphertexts.values())


@dataclass(frozen=True)
class ForwardedShares:
    """Round 1, server -> client ``v`` that sent its shares: ``e_uv`` for every other ``u``
    that sent theirs, by ``u``. Its keys and the recipient are the clients that shared
    keys."""

    recipient: int
    ciphertexts: Mapping[int, bytes]

    @property
    def clients(self) -> frozenset[int]:
        """The clients that shared keys (``U2`` before the share check)."""
        return frozenset(self.ciphertexts) | {self.recipient}

    def nbytes(self) -> int:
        return sum(ID_BYTES + len(c) for c in self.ciphertexts.values())


@dataclass(frozen=True)
class ShareCheck:
    """Round 1b, client -> server: the senders whose encrypted shares to this client failed
    to decrypt (or named other parties), sorted."""

    sender: int
    rejected: tuple[int, ...]

    def nbytes(self) -> int:
        return ID_BYTES * (1 + len(self.rejected))


@dataclass(frozen=True)
class MaskingSet:
    """Round 1b, server -> every client of ``U2``: ``U2`` (the clients that mask with each
    other from now on) and the clients excluded for a failed share check, both sorted."""

    members: tuple[int, ...]
    excluded: tuple[int, ...]

    def nbytes(self) -> int:
        return ID_BYTES * (len(self.members) + len(self.excluded))


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """Round 2, client -> server: ``y_u`` (a field vector of length ``d``), signed under
    ``d_u`` (:func:`fedrank.secagg.signing.masked_digest`)."""

    sender: int
    masked: np.ndarray
    signature: bytes

    @property
    def digest(self) -> bytes:
        return signing.masked_digest(self.masked)

    def nbytes(self) -> int:
        vector = field.ELEMENT_BYTES * int(np.asarray(self.masked).size)
        return ID_BYTES + vector + len(self.signature)


@dataclass(frozen=True, eq=False)
class MaskedSum:
    """Round 2, proxy -> server: the sum mod ``q`` of the masked inputs of ``senders``
    (:class:`~fedrank.secagg.proxy.MaskedInputProxy`), with each sender's digest and
    signature of its masked input (in the order of ``senders``), so that the server accepts
    only senders that signed an input for this session."""

    senders: tuple[int, ...]
    masked: np.ndarray
    digests: tuple[bytes, ...]
    signatures: tuple[bytes, ...]

    def nbytes(self) -> int:
        signed = sum(len(d) + len(s) for d, s in zip(self.digests, self.signatures, strict=True))
        vector = field.ELEMENT_BYTES * int(np.asarray(self.masked).size)
        return ID_BYTES * len(self.senders) + vector + signed


@dataclass(frozen=True)
class UnmaskRequest:
    """Round 2 -> 4, server -> every client of ``U3``: the ids of ``U3``, sorted."""

    contributors: tuple[int, ...]

    def nbytes(self) -> int:
        return ID_BYTES * len(self.contributors)


@dataclass(frozen=True)
class UnmaskingShares:
    """Round 4, client ``w`` -> server: the ``y`` of ``w``'s share of ``b_v`` for every ``v``
    in ``U3`` and of ``c_v^SK`` for every ``v`` in ``U2 - U3`` (the share's ``x`` is ``w``)."""

    sender: int
    self_mask_shares: Mapping[int, int]
    key_shares: Mapping[int, int]

    def nbytes(self) -> int:
        entries = len(self.self_mask_shares) + len(self.key_shares)
        return ID_BYTES + entries * (ID_BYTES + shamir.SHARE_BYTES)


@dataclass(frozen=True, eq=False)
class AggregationResult:
    """The outcome of a session.

    Attributes:
        total: ``sum_{u in U3} x_u mod q`` (a ``uint64`` field vector).
        contributors: ``U3``: the clients whose inputs are in ``total``.
        dropped: ``U2 - U3``: clients that passed the share check but sent no masked
            input; their pairwise masks were removed.
        responders: ``U5``: the clients that answered Unmasking.
        excluded: the clients the share check excluded (:class:`MaskingSet`).
    """

    total: np.ndarray
    contributors: tuple[int, ...]
    dropped: tuple[int, ...]
    responders: tuple[int, ...]
    excluded: tuple[int, ...] = ()
