"""The server's side of a secure-aggregation session (Bonawitz et al. 2017, Figure 4,
"Server"; :mod:`.protocol` has the overview): it collects each round's messages, keeps only
the running sum of the masked inputs, excludes the clients a share check shows to lie
(:func:`exclusions`), and removes the masks from the sum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field

import numpy as np

from fedrank.secagg import field, masks, shamir, signing
from fedrank.secagg.errors import (
    DuplicateKeyError,
    ProtocolError,
    RoundAbortedError,
    ShareReconstructionError,
)
from fedrank.secagg.messages import (
    AdvertiseKeys,
    AggregationResult,
    ForwardedShares,
    KeyDirectory,
    MaskedInput,
    MaskedSum,
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
        would abort on the duplicate (:meth:`~.client.SecAggClient.share_keys`)."""
        self._expect(0)
        u = message.sender
        check_client_id(u)
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
                now = f"in {round_label(self._stage)}"
            raise ProtocolError(
                f"the server cannot take a {round_label(stage)} message: the session is {now} "
                "(a late message is dropped; the round's sets are fixed once it closes)"
            )

    def _require(self, count: int, stage: int) -> None:
        t = self.params.threshold
        if count < t:
            self._stage = -1
            raise RoundAbortedError(f"server: {too_few(count, t, stage)}")
