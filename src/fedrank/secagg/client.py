"""The client's side of a secure-aggregation session (Bonawitz et al. 2017, Figure 4,
"User"; :mod:`.protocol` has the overview): key adverts, Shamir shares of ``b_u`` and
``c_u^SK`` encrypted to each peer, the share check, the masked input and the unmasking
shares.
"""

from __future__ import annotations

import secrets as _secrets
import struct
from collections.abc import Callable, Mapping
from typing import NoReturn

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedrank.secagg import channel, field, masks, shamir, signing
from fedrank.secagg.errors import ProtocolError, RoundAbortedError, SecAggError
from fedrank.secagg.messages import (
    AdvertiseKeys,
    ForwardedShares,
    KeyDirectory,
    MaskedInput,
    MaskingSet,
    ShareCheck,
    ShareKeys,
    UnmaskingShares,
    UnmaskRequest,
)
from fedrank.secagg.protocol import (
    ROUND_NAMES,
    SecAggParams,
    check_client_id,
    round_label,
    too_few,
)

#: Plaintext of an encrypted share message: ``u || v || c_u^SK share || b_u share``.
_SHARE_PLAINTEXT = struct.Struct(f">II{shamir.SHARE_BYTES}s{shamir.SHARE_BYTES}s")

RandBits = Callable[[int], int]


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
        check_client_id(client_id)
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
        """Round 2 (MaskedInputCollection): given ``U2`` (the server's
        :class:`~.messages.MaskingSet`), send
        ``y_u = x_u + PRG(b_u) + sum_{v in U2 - u} sign(u, v) PRG(s_uv)``, signed.

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
            state = "aborted" if self._stage < 0 else f"expecting {round_label(self._stage)}"
            raise ProtocolError(
                f"client {self.client_id} cannot run {round_label(stage)}: it is {state}. Each "
                "round runs once, in order; start a new session with new client objects"
            )
        self._stage = stage + 1

    def _require(self, count: int, stage: int) -> None:
        t = self.params.threshold
        if count < t:
            self._fail(RoundAbortedError, too_few(count, t, stage))

    def _fail(self, kind: type[Exception], message: str) -> NoReturn:
        self._abort()
        raise kind(f"client {self.client_id}: {message}")
