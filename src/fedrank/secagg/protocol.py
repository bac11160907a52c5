"""The secure-aggregation protocol of Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017, Figure 4, as explicit client and server
objects exchanging in-process messages (no network). The honest-but-curious protocol, with
three parts of the active-adversary variant against clients that lie: signed key adverts
and masked inputs, duplicate keys refused, and a share check that drops a client whose
encrypted shares do not decrypt instead of aborting the round.

Rounds (the paper's names; ``U1 ⊇ U2 ⊇ U3 ⊇ U5`` are the clients left after each):

0. **AdvertiseKeys**: each client sends two X25519 public keys, ``c_u^PK`` (pairwise masks)
   and ``s_u^PK`` (encryption of shares), and its Ed25519 signing key ``d_u^PK``, signed
   (:mod:`.signing`). The server refuses a key another client already advertised
   (:class:`~.errors.DuplicateKeyError`) and broadcasts the ``U1`` directory.
1. **ShareKeys**: each client draws its self-mask seed ``b_u`` and Shamir-shares ``b_u`` and
   its mask private key ``c_u^SK`` among ``U1`` (itself included), threshold ``t``; the share
   for ``v`` is AES-GCM-encrypted under a key only ``u`` and ``v`` know
   (:mod:`.channel`). The server relays the ciphertexts to the clients that sent theirs.
1b. **ShareCheck** (this module's addition; the paper decrypts in Round 4 and aborts on a
   failure): each client decrypts every ciphertext addressed to it and names the senders
   whose ciphertext fails (:class:`ShareCheck`). Each accusation is an edge between two
   clients, one of whom lies; the server removes the clients with the most accusations (as
   accuser or accused) until no edge is left (:func:`exclusions`) and announces ``U2``: the
   clients that checked and were not excluded (:class:`MaskingSet`). Every client of ``U2``
   holds valid shares from every other, so the protocol goes on as if the excluded had
   dropped out before Round 2, and nothing of theirs is ever reconstructed.
2. **MaskedInputCollection**: each client in ``U2`` sends
   ``y_u = x_u + PRG(b_u) + sum_{v in U2 - u} sign(u, v) PRG(s_uv)`` (:mod:`.masks`),
   signed. The server adds the ``y_u`` it receives (``U3``) into a running total and
   announces ``U3``.
3. *ConsistencyCheck* is the active-adversary round (signatures over ``U3``) against a
   server that lies about ``U3``: not built (an honest-but-curious server); the protocol goes
   from Round 2 to Round 4 (``U4 = U3``).
4. **Unmasking**: each client in ``U3`` reveals its shares of ``b_v`` for ``v`` in ``U3`` and
   of ``c_v^SK`` for ``v`` in ``U2 - U3``, never both for one ``v``. The server reconstructs
   them from any ``t`` responders (``U5``), subtracts the self masks of ``U3`` and the
   pairwise masks between ``U3`` and the dropped ``U2 - U3``, and obtains
   ``sum_{u in U3} x_u mod q``.

Fewer than ``t`` clients at any round abort it (:class:`~.errors.RoundAbortedError`), on the
client and on the server. The server never learns both ``b_v`` and ``c_v^SK`` of a client:
Unmasking reveals ``b_v`` only for ``v`` in ``U3`` and ``c_v^SK`` only for ``v`` in ``U2 -
U3``, and an excluded client is in neither (docs/secagg.md, "Clients that lie"). The server
never holds an individual unmasked vector: it keeps only the running sum of masked inputs,
and its only unmasked result is the sum over ``U3`` (with ``|U3| >= t``).

Inputs are field vectors (``uint64`` in ``[0, 2**32)``): encode floats with
:class:`~fedrank.secagg.field.FixedPointEncoder` and decode the result with the same encoder
(``n_clients = len(result.contributors)``). Client ids are the Shamir evaluation points, so
they are integers in ``[1, 2**32)``, unique in a session.

Each client object and each server object serves one session: the rounds run once each, in
order (a client that answered Unmasking once must never answer again, or a server could
collect both secrets of a client). Messages carry ``nbytes()``: the payload size in a compact
binary encoding (4-byte ids and field elements, 32-byte keys, 66-byte shares, 64-byte
signatures, ciphertexts as they are), which the benchmark reports.
"""

from __future__ import annotations

import secrets as _secrets
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import NoReturn

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedrank.errors import ConfigError
from fedrank.secagg import channel, field, masks, shamir, signing
from fedrank.secagg.errors import (
    DuplicateKeyError,
    ProtocolError,
    RoundAbortedError,
    SecAggError,
    ShareReconstructionError,
)

#: Bytes of a client id on the wire.
ID_BYTES = 4
#: Client ids are Shamir points and 4-byte integers: ``1 <= id < MAX_CLIENT_ID``.
MAX_CLIENT_ID = 1 << (8 * ID_BYTES)
#: Plaintext of an encrypted share message: ``u || v || c_u^SK share || b_u share``.
_SHARE_PLAINTEXT = struct.Struct(f">II{shamir.SHARE_BYTES}s{shamir.SHARE_BYTES}s")

ROUND_NAMES = ("AdvertiseKeys", "ShareKeys", "ShareCheck", "MaskedInputCollection", "Unmasking")
#: The paper's number of each round (ShareCheck is this module's, between 1 and 2).
_ROUND_NUMBERS = ("0", "1", "1b", "2", "4")

RandBits = Callable[[int], int]


@dataclass(frozen=True)
class SecAggParams:
    """What every party of a session agrees on before Round 0.

    Args:
        session_id: 16 to 64 random bytes, fresh for every session
            (:meth:`new_session_id`); it salts every key derivation and authenticates every
            share, so nothing carries over between sessions.
        threshold: ``t``, the number of clients needed to reconstruct a secret, and the
            fewest clients with which a round completes. ``t >= 2``. Bonawitz et al. take
            ``t > n/2`` (``n = |U1|``); this module only requires ``t <= n``.
        dimension: ``d``, the length of every input vector (``>= 1``).
    """

    session_id: bytes
    threshold: int
    dimension: int

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, bytes) or not 16 <= len(self.session_id) <= 64:
            raise ConfigError(
                "session_id must be 16 to 64 random bytes, fresh for each session "
                "(SecAggParams.new_session_id())"
            )
        for name, low in (("threshold", 2), ("dimension", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")

    @staticmethod
    def new_session_id() -> bytes:
        """16 bytes from the OS CSPRNG."""
        return _secrets.token_bytes(16)


# --- messages ------------------------------------------------------------------------------


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


# --- client --------------------------------------------------------------------------------


class SecAggClient:
    """One client's side of one session (Bonawitz et al. 2017, Figure 4, "User").

    Call :meth:`advertise_keys`, :meth:`share_keys`, :meth:`check_shares`,
    :meth:`masked_input` and :meth:`unmask` once each, in that order, with the server's
    replies. Any failed check of what the server says puts the client in an aborted state:
    it sends nothing more in this session. A peer's ciphertext that fails to decrypt is not
    such a failure: the client names the peer in its share check and goes on without it.

    Args:
        client_id: this client's id, in ``[1, 2**32)`` and unique in the session.
        params: the session's parameters.
        randbits: the source of every secret (key pairs, ``b_u``, Shamir coefficients, AES-GCM
            nonces). Keep the default, :func:`secrets.randbits` (the OS CSPRNG); tests may
            pass a seeded one for reproducibility.
        signing_key: ``d_u``, the Ed25519 key that signs the key advert and the masked input:
            the device's key (:mod:`fedrank.identity`) when it has one, which the server
            checks against its registry; ``None``: a fresh key for this session, which the
            server binds to this client when it advertises it.
    """

    def __init__(
        self,
        client_id: int,
        params: SecAggParams,
        *,
        randbits: RandBits = _secrets.randbits,
        signing_key: Ed25519PrivateKey | None = None,
    ) -> None:
        _check_client_id(client_id)
        self.client_id = int(client_id)
        self.params = params
        self._randbits = randbits
        self._stage = 0  # index of the next round in ROUND_NAMES; -1 once aborted
        self._mask_key = masks.generate_private_key(randbits)  # c_u^SK
        self._share_key = masks.generate_private_key(randbits)  # s_u^SK
        self._signing_key = (
            signing.generate_signing_key(randbits) if signing_key is None else signing_key
        )
        self._directory: Mapping[int, AdvertiseKeys] = {}
        self._self_seed: bytes | None = None  # b_u
        # v -> (y of the share of c_v^SK, y of the share of b_v) held by this client.
        self._held: dict[int, tuple[int, int]] = {}
        self._shared: frozenset[int] = frozenset()  # the clients that shared keys
        self._rejected: frozenset[int] = frozenset()  # those whose shares failed to decrypt
        self._u2: frozenset[int] = frozenset()
        self._pair_keys: dict[int, bytes] = {}  # v -> AES-GCM key of the pair {u, v}

    @property
    def aborted(self) -> bool:
        """Whether a failed check ended this client's session."""
        return self._stage < 0

    def advertise_keys(self) -> AdvertiseKeys:
        """Round 0 (AdvertiseKeys): this client's three public keys, signed under ``d_u``."""
        self._enter(0)
        mask, share = masks.public_bytes(self._mask_key), masks.public_bytes(self._share_key)
        verify_key = signing.public_bytes(self._signing_key)
        digest = signing.advertise_digest(mask, share, verify_key)
        return AdvertiseKeys(self.client_id, mask, share, verify_key, self._sign(0, digest))

    def share_keys(self, directory: KeyDirectory) -> ShareKeys:
        """Round 1 (ShareKeys): check ``U1``, draw ``b_u``, Shamir-share ``c_u^SK`` and
        ``b_u`` among ``U1`` with threshold ``t``, and encrypt each peer's two shares."""
        self._enter(1)
        keys = directory.keys
        own = keys.get(self.client_id)
        mine = (masks.public_bytes(self._mask_key), masks.public_bytes(self._share_key))
        if own is None or (own.mask_public_key, own.share_public_key) != mine:
            self._fail(ProtocolError, "the key directory lacks this client's own keys")
        if any(keys[v].sender != v for v in keys):
            self._fail(ProtocolError, "the key directory files keys under the wrong client id")
        self._require(len(keys), 1)
        public = [k.mask_public_key for k in keys.values()] + [
            k.share_public_key for k in keys.values()
        ]
        if len(set(public)) != len(public):
            self._fail(
                ProtocolError,
                "two advertised public keys are equal (the paper's check that all key pairs "
                "differ): a client replayed another's keys",
            )
        self._directory = dict(keys)
        self._self_seed = masks.new_seed(self._randbits)
        u1 = sorted(keys)
        t = self.params.threshold
        key_shares = shamir.share(
            masks.private_key_to_int(self._mask_key), t, u1, randbits=self._randbits
        )
        seed_shares = shamir.share(
            masks.seed_to_int(self._self_seed), t, u1, randbits=self._randbits
        )
        ciphertexts: dict[int, bytes] = {}
        for key_share, seed_share in zip(key_shares, seed_shares, strict=True):
            v = key_share.x
            if v == self.client_id:
                self._held[v] = (key_share.y, seed_share.y)
                continue
            plaintext = _SHARE_PLAINTEXT.pack(
                self.client_id,
                v,
                key_share.y.to_bytes(shamir.SHARE_BYTES, "big"),
                seed_share.y.to_bytes(shamir.SHARE_BYTES, "big"),
            )
            ciphertexts[v] = channel.encrypt(
                self._pair_key(v),
                plaintext,
                session_id=self.params.session_id,
                sender=self.client_id,
                recipient=v,
                randbits=self._randbits,
            )
        return ShareKeys(self.client_id, ciphertexts)

    def check_shares(self, forwarded: ForwardedShares) -> ShareCheck:
        """Round 1b (ShareCheck): decrypt every share message addressed to this client, keep
        the valid shares and name the senders whose message fails AES-GCM authentication or
        names other parties (the paper's ``u = u', v = v'`` check). A peer that lies is left
        out of the round, not a reason to abort it; the decryption happens here, before this
        client reveals a masked input.

        Args:
            forwarded: the server's Round-1 reply to this client.
        """
        self._enter(2)
        if forwarded.recipient != self.client_id:
            self._fail(ProtocolError, f"shares addressed to client {forwarded.recipient}")
        shared = forwarded.clients
        if not shared <= set(self._directory):
            self._fail(ProtocolError, "the server relayed shares from clients outside U1")
        self._require(len(shared), 2)
        rejected = []
        for v, ciphertext in sorted(forwarded.ciphertexts.items()):
            held = self._open_share(v, ciphertext)
            if held is None:
                rejected.append(v)
            else:
                self._held[v] = held
        self._shared, self._rejected = shared, frozenset(rejected)
        self._pair_keys.clear()  # every share is decrypted: the keys are needed no more
        return ShareCheck(self.client_id, tuple(rejected))

    def masked_input(self, masking: MaskingSet, x: np.ndarray) -> MaskedInput:
        """Round 2 (MaskedInputCollection): given ``U2`` (the server's :class:`MaskingSet`),
        send ``y_u = x_u + PRG(b_u) + sum_{v in U2 - u} sign(u, v) PRG(s_uv)``, signed.

        Args:
            masking: the server's Round-1b reply.
            x: this client's input, a field vector of length ``d``
                (:meth:`FixedPointEncoder.encode <fedrank.secagg.field.FixedPointEncoder.encode>`).
        """
        d = self.params.dimension
        x = field.check_vector(x, d, f"client {self.client_id}'s input")  # before: retryable
        self._enter(3)
        u2 = frozenset(masking.members)
        if len(u2) != len(masking.members) or self.client_id not in u2 or not u2 <= self._shared:
            self._fail(
                ProtocolError,
                "U2 must list this client and only clients that shared keys, each once",
            )
        kept = sorted(u2 & self._rejected)
        if kept:
            self._fail(
                ProtocolError,
                f"U2 keeps clients {kept} whose shares to this client failed to decrypt: the "
                "server ignored its share check",
            )
        self._require(len(u2), 3)
        self._u2 = u2
        self._held = {v: held for v, held in self._held.items() if v in u2}
        assert self._self_seed is not None
        total = x + masks.self_mask(self._self_seed, d)
        for v in sorted(u2 - {self.client_id}):
            seed = masks.pairwise_seed(
                self._mask_key,
                self._directory[v].mask_public_key,
                session_id=self.params.session_id,
                u=self.client_id,
                v=v,
            )
            total += masks.pairwise_mask(seed, d, self.client_id, v)
        masked = total & np.uint64(field.MODULUS - 1)
        return MaskedInput(self.client_id, masked, self._sign(3, signing.masked_digest(masked)))

    def unmask(self, request: UnmaskRequest) -> UnmaskingShares:
        """Round 4 (Unmasking): given ``U3``, reveal the held shares of ``b_v`` for ``v`` in
        ``U3`` and of ``c_v^SK`` for ``v`` in ``U2 - U3``. Never both for one client: that
        would let the server unmask its input."""
        self._enter(4)
        u3 = frozenset(request.contributors)
        if len(u3) != len(request.contributors):
            self._fail(ProtocolError, "U3 lists a client twice")
        if self.client_id not in u3 or not u3 <= self._u2:
            self._fail(
                ProtocolError,
                "U3 must contain this client and only clients of U2 (those that shared keys)",
            )
        self._require(len(u3), 4)
        reply = UnmaskingShares(
            self.client_id,
            self_mask_shares={v: self._held[v][1] for v in sorted(u3)},
            key_shares={v: self._held[v][0] for v in sorted(self._u2 - u3)},
        )
        # This session is over for the client: forget its secrets.
        self._held.clear()
        self._self_seed = None
        return reply

    # -- helpers --

    def _open_share(self, v: int, ciphertext: bytes) -> tuple[int, int] | None:
        """``v``'s two shares for this client, or ``None`` when its message fails to decrypt
        or is not a share message from ``v`` to this client."""
        try:
            plaintext = channel.decrypt(
                self._pair_key(v),
                ciphertext,
                session_id=self.params.session_id,
                sender=v,
                recipient=self.client_id,
            )
        except SecAggError:
            return None
        if len(plaintext) != _SHARE_PLAINTEXT.size:
            return None
        sender, recipient, key_y, seed_y = _SHARE_PLAINTEXT.unpack(plaintext)
        if (sender, recipient) != (v, self.client_id):  # the paper's u = u', v = v'
            return None
        return int.from_bytes(key_y, "big"), int.from_bytes(seed_y, "big")

    def _sign(self, stage: int, digest: bytes) -> bytes:
        return signing.sign(
            self._signing_key,
            session_id=self.params.session_id,
            sender=self.client_id,
            stage=ROUND_NAMES[stage],
            digest=digest,
        )

    def _pair_key(self, v: int) -> bytes:
        """The AES-GCM key shared with ``v``, derived once (Round 1) and reused to decrypt
        ``v``'s shares (Round 1b)."""
        key = self._pair_keys.get(v)
        if key is None:
            key = self._pair_keys[v] = channel.share_key(
                self._share_key,
                self._directory[v].share_public_key,
                session_id=self.params.session_id,
                u=self.client_id,
                v=v,
            )
        return key

    def _abort(self) -> None:
        """End this client's session after a failed check, forgetting its secrets."""
        self._stage = -1
        self._held.clear()
        self._pair_keys.clear()
        self._self_seed = None

    def _enter(self, stage: int) -> None:
        if self._stage != stage:
            state = "aborted" if self._stage < 0 else f"expecting {_round(self._stage)}"
            raise ProtocolError(
                f"client {self.client_id} cannot run {_round(stage)}: it is {state}. Each "
                "round runs once, in order; start a new session with new client objects"
            )
        self._stage = stage + 1

    def _require(self, count: int, stage: int) -> None:
        t = self.params.threshold
        if count < t:
            self._fail(RoundAbortedError, _too_few(count, t, stage))

    def _fail(self, kind: type[Exception], message: str) -> NoReturn:
        self._abort()
        raise kind(f"client {self.client_id}: {message}")


# --- server --------------------------------------------------------------------------------


@dataclass
class _ServerState:
    keys: dict[int, AdvertiseKeys] = dataclass_field(default_factory=dict)  # U1
    ciphertexts: dict[int, Mapping[int, bytes]] = dataclass_field(default_factory=dict)
    shared: frozenset[int] = frozenset()  # the clients that shared keys
    checks: dict[int, ShareCheck] = dataclass_field(default_factory=dict)
    excluded: tuple[int, ...] = ()
    u2: frozenset[int] = frozenset()
    masked_total: np.ndarray | None = None
    u3: set[int] = dataclass_field(default_factory=set)
    unmasking: dict[int, UnmaskingShares] = dataclass_field(default_factory=dict)  # U5


def exclusions(accusations: Mapping[int, tuple[int, ...]]) -> frozenset[int]:
    """The clients to exclude after a share check: ``accusations[u]`` are the clients whose
    shares ``u`` could not decrypt. Each accusation is an edge between two clients, one of
    whom lies (the sender sent a bad ciphertext, or the accuser says so falsely); while edges
    remain, every client with the most of them is removed.

    A client that sent bad shares to ``k >= 2`` honest clients is removed alone; a client
    that accuses ``k >= 2`` honest clients falsely is removed alone; one accusation between
    two clients removes both. What a liar can do is get itself removed, and a coalition of
    liars that accuse the same honest client can have it removed with them: a loss of
    contributors, never of privacy (nothing of an excluded client is reconstructed)."""
    edges = {frozenset((u, v)) for u, named in accusations.items() for v in named if u != v}
    removed: set[int] = set()
    while edges:
        degree: dict[int, int] = {}
        for edge in edges:
            for w in edge:
                degree[w] = degree.get(w, 0) + 1
        top = max(degree.values())
        worst = {w for w, count in degree.items() if count == top}
        removed |= worst
        edges = {edge for edge in edges if not edge & worst}
    return frozenset(removed)


class SecAggServer:
    """The server's side of one session (Bonawitz et al. 2017, Figure 4, "Server").

    Each round has ``receive_*`` methods, called once per arriving message, and a
    ``close_*`` method, called when the round's deadline passes (clients that sent nothing
    by then have dropped out), which returns the messages to send to the clients that are
    still in. :meth:`finish` closes Unmasking and returns the sum.

    The server keeps the running sum of the masked inputs, not the inputs themselves. It
    verifies every signature against the signing key the client advertised in Round 0 (the
    caller checks that key against a device registry where there is one).
    """

    def __init__(self, params: SecAggParams) -> None:
        self.params = params
        self._stage = 0
        self._s = _ServerState()

    # Round 0
    def receive_advertise(self, message: AdvertiseKeys) -> None:
        """Round 0 (AdvertiseKeys): record a client's public keys, signed under the signing
        key it advertises (which is bound to it for the session). A key another client
        advertised already is refused (:class:`~.errors.DuplicateKeyError`): honest clients
        would abort on the duplicate (:meth:`SecAggClient.share_keys`)."""
        self._expect(0)
        u = message.sender
        _check_client_id(u)
        if u in self._s.keys:
            raise ProtocolError(f"client {u} advertised keys twice")
        sizes = (
            (message.mask_public_key, masks.KEY_BYTES),
            (message.share_public_key, masks.KEY_BYTES),
            (message.signing_public_key, signing.PUBLIC_KEY_BYTES),
        )
        if any(len(key) != size for key, size in sizes):
            raise ProtocolError(f"client {u}'s public keys must be {masks.KEY_BYTES} bytes each")
        self._verify(message.signing_public_key, message.signature, u, 0, message.digest)
        new = {key for key, _ in sizes}
        if len(new) != len(sizes):
            raise DuplicateKeyError(f"client {u} advertised one key for two purposes")
        for v, other in self._s.keys.items():
            if new & {other.mask_public_key, other.share_public_key, other.signing_public_key}:
                raise DuplicateKeyError(
                    f"client {u} advertised a public key of client {v}: each client needs "
                    "its own keys (a replayed key would make every honest client abort)"
                )
        self._s.keys[u] = message

    def close_advertise(self) -> KeyDirectory:
        """End Round 0: ``U1`` is every client that advertised; broadcast its keys."""
        self._expect(0)
        self._require(len(self._s.keys), 0)
        self._stage = 1
        return KeyDirectory(dict(sorted(self._s.keys.items())))

    # Round 1
    def receive_share_keys(self, message: ShareKeys) -> None:
        """Round 1 (ShareKeys): record a client's encrypted shares, one per peer of ``U1``."""
        self._expect(1)
        u = message.sender
        if u not in self._s.keys:
            raise ProtocolError(f"client {u} sent shares but did not advertise keys (not in U1)")
        if u in self._s.ciphertexts:
            raise ProtocolError(f"client {u} sent its shares twice")
        if set(message.ciphertexts) != self._s.keys.keys() - {u}:
            raise ProtocolError(
                f"client {u} must send exactly one encrypted share message to every other "
                "client of U1"
            )
        self._s.ciphertexts[u] = message.ciphertexts

    def close_share_keys(self) -> dict[int, ForwardedShares]:
        """End Round 1: relay to each client that sent its shares the ciphertexts addressed
        to it by the others that did."""
        self._expect(1)
        shared = frozenset(self._s.ciphertexts)
        self._require(len(shared), 1)
        out = {
            v: ForwardedShares(v, {u: self._s.ciphertexts[u][v] for u in sorted(shared) if u != v})
            for v in sorted(shared)
        }
        self._s.ciphertexts.clear()  # relayed: the server needs them no more
        self._s.shared = shared
        self._stage = 2
        return out

    # Round 1b
    def receive_share_check(self, message: ShareCheck) -> None:
        """Round 1b (ShareCheck): record which peers' shares a client could not decrypt."""
        self._expect(2)
        u = message.sender
        if u not in self._s.shared:
            raise ProtocolError(f"client {u} sent a share check but did not share keys")
        if u in self._s.checks:
            raise ProtocolError(f"client {u} sent its share check twice")
        named = set(message.rejected)
        if len(named) != len(message.rejected) or not named <= self._s.shared - {u}:
            raise ProtocolError(
                f"client {u} may name only other clients that shared keys, each once"
            )
        self._s.checks[u] = message

    def close_share_check(self) -> MaskingSet:
        """End Round 1b: exclude the liars (:func:`exclusions`, over the clients that sent
        their check) and announce ``U2``, the clients that checked and were not excluded.
        The excluded also counts the clients that did not check but were named."""
        self._expect(2)
        checked = frozenset(self._s.checks)
        named = {u: self._s.checks[u].rejected for u in checked}
        removed = exclusions({u: tuple(v for v in vs if v in checked) for u, vs in named.items()})
        silent = {v for vs in named.values() for v in vs if v not in checked}
        u2 = checked - removed
        self._s.excluded = tuple(sorted(removed | silent))
        self._s.checks.clear()
        self._require(len(u2), 2)
        self._s.u2 = u2
        self._s.masked_total = np.zeros(self.params.dimension, dtype=np.uint64)
        self._stage = 3
        return MaskingSet(tuple(sorted(u2)), self._s.excluded)

    # Round 2
    def receive_masked_input(self, message: MaskedInput) -> None:
        """Round 2 (MaskedInputCollection): check ``y_u``'s signature and add it to the
        running sum (the server does not keep ``y_u`` itself)."""
        self._expect(3)
        u = message.sender
        self._check_senders((u,))
        y = field.check_vector(message.masked, self.params.dimension, f"client {u}'s masked input")
        key = self._s.keys[u].signing_public_key
        self._verify(key, message.signature, u, 3, signing.masked_digest(y))
        assert self._s.masked_total is not None
        self._s.masked_total += y
        self._s.u3.add(u)

    def receive_masked_sum(self, message: MaskedSum) -> None:
        """Round 2 through a proxy: add the sum of several clients' ``y_u`` (each sender
        joins ``U3`` as if its masked input had come directly). Every sender must have
        signed a masked input of this session: a proxy cannot name a client that did not
        hand it one (:class:`~.errors.SignatureError`, naming the sender)."""
        self._expect(3)
        senders = message.senders
        if not senders or len(set(senders)) != len(senders):
            raise ProtocolError(f"a masked sum needs distinct senders, got {senders}")
        if not len(message.digests) == len(message.signatures) == len(senders):
            raise ProtocolError("a masked sum needs one digest and one signature per sender")
        self._check_senders(senders)
        for u, digest, signature in zip(senders, message.digests, message.signatures, strict=True):
            self._verify(self._s.keys[u].signing_public_key, signature, u, 3, digest)
        y = field.check_vector(message.masked, self.params.dimension, "a proxy's masked sum")
        assert self._s.masked_total is not None
        self._s.masked_total += y
        self._s.u3.update(senders)

    def close_masked_input(self) -> UnmaskRequest:
        """End Round 2: ``U3`` is every client whose masked input arrived; ask them to unmask."""
        self._expect(3)
        self._require(len(self._s.u3), 3)
        self._stage = 4
        return UnmaskRequest(tuple(sorted(self._s.u3)))

    # Round 4
    def receive_unmasking(self, message: UnmaskingShares) -> None:
        """Round 4 (Unmasking): record a client's revealed shares."""
        self._expect(4)
        w = message.sender
        u3 = self._s.u3
        if w not in u3:
            raise ProtocolError(
                f"client {w} is not in U3: only contributors take part in Unmasking"
            )
        if w in self._s.unmasking:
            raise ProtocolError(f"client {w} sent its unmasking shares twice")
        if set(message.self_mask_shares) != u3 or set(message.key_shares) != self._s.u2 - u3:
            raise ProtocolError(
                f"client {w} must reveal shares of b_v for exactly U3 and of c_v^SK for "
                "exactly U2 - U3"
            )
        self._s.unmasking[w] = message

    def finish(self) -> AggregationResult:
        """End Round 4: from ``t`` responders (``U5``), reconstruct ``b_u`` for ``u`` in
        ``U3`` and ``c_u^SK`` for ``u`` in ``U2 - U3``, remove all masks from the sum, and
        return ``sum_{u in U3} x_u mod q``.

        Each secret is interpolated from the first ``t`` responders (by id) and checked
        against the next one when there is one, so a single altered share is detected
        (:class:`~.errors.ShareReconstructionError`); a reconstructed key must also match
        the public key the client advertised.
        """
        self._expect(4)
        responses = self._s.unmasking
        self._require(len(responses), 3)
        t = self.params.threshold
        d = self.params.dimension
        holders = sorted(responses)[: t + 1]
        u3 = sorted(self._s.u3)
        dropped = sorted(self._s.u2 - self._s.u3)
        assert self._s.masked_total is not None
        total = self._s.masked_total.copy()
        for u in u3:
            seed_int = self._reconstruct(
                u, [(w, responses[w].self_mask_shares[u]) for w in holders]
            )
            try:
                seed = masks.seed_from_int(seed_int)
            except ValueError:
                raise ShareReconstructionError(
                    f"client {u}'s reconstructed self-mask seed is not 32 bytes: shares were "
                    "altered"
                ) from None
            total -= masks.self_mask(seed, d)
        for u in dropped:
            key_int = self._reconstruct(u, [(w, responses[w].key_shares[u]) for w in holders])
            try:
                key = masks.private_key_from_int(key_int)
            except ValueError:
                key = None
            if key is None or masks.public_bytes(key) != self._s.keys[u].mask_public_key:
                raise ShareReconstructionError(
                    f"the reconstructed mask key of dropped client {u} does not match its "
                    "advertised public key: shares were altered"
                )
            for v in u3:  # v added sign(v, u) PRG(s_vu) for the dropped u: take it out
                seed = masks.pairwise_seed(
                    key,
                    self._s.keys[v].mask_public_key,
                    session_id=self.params.session_id,
                    u=u,
                    v=v,
                )
                total -= masks.pairwise_mask(seed, d, v, u)
        self._stage = 5
        return AggregationResult(
            total=total & np.uint64(field.MODULUS - 1),
            contributors=tuple(u3),
            dropped=tuple(dropped),
            responders=tuple(sorted(responses)),
            excluded=self._s.excluded,
        )

    def _reconstruct(self, owner: int, points: list[tuple[int, int]]) -> int:
        shares = [shamir.Share(x, y) for x, y in points]
        try:
            return shamir.reconstruct(shares, self.params.threshold)
        except ShareReconstructionError as err:
            raise ShareReconstructionError(f"secret of client {owner}: {err}") from err

    def _check_senders(self, senders: tuple[int, ...]) -> None:
        outside = sorted(set(senders) - self._s.u2)
        if outside:
            raise ProtocolError(
                f"clients {outside} sent a masked input but are not in U2 (they did not share "
                "keys and pass the share check): their masks could not be removed"
            )
        again = sorted(set(senders) & self._s.u3)
        if again:
            raise ProtocolError(f"clients {again} sent a masked input twice")

    def _verify(self, key: bytes, signature: bytes, u: int, stage: int, digest: bytes) -> None:
        signing.verify(
            key,
            signature,
            session_id=self.params.session_id,
            sender=u,
            stage=ROUND_NAMES[stage],
            digest=digest,
        )

    def _expect(self, stage: int) -> None:
        if self._stage != stage:
            if self._stage < 0:
                now = "aborted"
            elif self._stage >= len(ROUND_NAMES):
                now = "finished"
            else:
                now = f"in {_round(self._stage)}"
            raise ProtocolError(
                f"the server cannot take a {_round(stage)} message: the session is {now} "
                "(a late message is dropped; the round's sets are fixed once it closes)"
            )

    def _require(self, count: int, stage: int) -> None:
        t = self.params.threshold
        if count < t:
            self._stage = -1
            raise RoundAbortedError(f"server: {_too_few(count, t, stage)}")


def _round(stage: int) -> str:
    if 0 <= stage < len(ROUND_NAMES):
        return f"Round {_ROUND_NUMBERS[stage]} ({ROUND_NAMES[stage]})"
    return "done"


def _too_few(count: int, t: int, stage: int) -> str:
    return (
        f"only {count} clients remain at {_round(stage)}, fewer than the threshold t={t}: "
        "the masks cannot be removed (or the sum would cover too few clients), so the round "
        "is aborted. Start a new session with more clients, or with a lower t if the "
        "collusion budget allows (t > n/2 is the usual choice)"
    )


def _check_client_id(client_id: object) -> None:
    if (
        isinstance(client_id, bool)
        or not isinstance(client_id, int | np.integer)
        or not 1 <= client_id < MAX_CLIENT_ID
    ):
        raise ProtocolError(
            f"client ids must be integers in [1, 2**{8 * ID_BYTES}) (they are Shamir "
            f"points), got {client_id!r}"
        )
