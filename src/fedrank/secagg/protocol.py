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
1b. **ShareCheck** (this package's addition; the paper decrypts in Round 4 and aborts on a
   failure): each client decrypts every ciphertext addressed to it and names the senders
   whose ciphertext fails (:class:`~.messages.ShareCheck`). Each accusation is an edge
   between two clients, one of whom lies; the server removes the clients with the most
   accusations (as accuser or accused) until no edge is left (:func:`~.server.exclusions`)
   and announces ``U2``: the clients that checked and were not excluded
   (:class:`~.messages.MaskingSet`). Every client of ``U2`` holds valid shares from every
   other, so the protocol goes on as if the excluded had dropped out before Round 2, and
   nothing of theirs is ever reconstructed.
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
collect both secrets of a client).

This module holds the overview above and what every party shares: the session's parameters
(:class:`SecAggParams`), the round names and the client-id rule. The rounds' messages are in
:mod:`.messages`, the client's side in :mod:`.client` (:class:`~.client.SecAggClient`), the
server's side and the share check's exclusions in :mod:`.server`
(:class:`~.server.SecAggServer`).
"""

from __future__ import annotations

import secrets as _secrets
from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.secagg.errors import ProtocolError

#: Bytes of a client id on the wire.
ID_BYTES = 4
#: Client ids are Shamir points and 4-byte integers: ``1 <= id < MAX_CLIENT_ID``.
MAX_CLIENT_ID = 1 << (8 * ID_BYTES)

ROUND_NAMES = ("AdvertiseKeys", "ShareKeys", "ShareCheck", "MaskedInputCollection", "Unmasking")
#: The paper's number of each round (ShareCheck is this package's, between 1 and 2).
_ROUND_NUMBERS = ("0", "1", "1b", "2", "4")


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


def round_label(stage: int) -> str:
    """``Round <paper number> (<name>)`` of a stage (an index of :data:`ROUND_NAMES`), or
    ``done`` past the last."""
    if 0 <= stage < len(ROUND_NAMES):
        return f"Round {_ROUND_NUMBERS[stage]} ({ROUND_NAMES[stage]})"
    return "done"


def too_few(count: int, t: int, stage: int) -> str:
    """Why a round with ``count < t`` clients aborts, and what to do instead."""
    return (
        f"only {count} clients remain at {round_label(stage)}, fewer than the threshold t={t}: "
        "the masks cannot be removed (or the sum would cover too few clients), so the round "
        "is aborted. Start a new session with more clients, or with a lower t if the "
        "collusion budget allows (t > n/2 is the usual choice)"
    )


def check_client_id(client_id: object) -> None:
    """Refuse a client id that is not an integer in ``[1, MAX_CLIENT_ID)``."""
    if (
        isinstance(client_id, bool)
        or not isinstance(client_id, int | np.integer)
        or not 1 <= client_id < MAX_CLIENT_ID
    ):
        raise ProtocolError(
            f"client ids must be integers in [1, 2**{8 * ID_BYTES}) (they are Shamir "
            f"points), got {client_id!r}"
        )
