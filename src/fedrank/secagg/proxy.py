"""A proxy that sums masked inputs (secure aggregation through the FedPSProxy hierarchy,
FedPS Sec. 3.4; Bonawitz et al., CCS 2017, Round 2).

In Round 2 each client ``u`` sends ``y_u = x_u + PRG(b_u) + sum_v +-PRG(s_uv) mod q``. A
proxy between its clients and the server adds the ``y_u`` it receives and forwards one
:class:`~fedrank.secagg.messages.MaskedSum` (the sum, its senders, and each sender's digest
and signature of its ``y_u``), so the server takes one vector per proxy instead of one per
client; the server checks each sender's signature, adds the sum to its running sum and puts
the senders in ``U3`` (:meth:`SecAggServer.receive_masked_sum`), and the rest of the
protocol is unchanged (the other rounds pass through the proxy as they are).

What the proxy learns: the set of its senders and a sum that still carries every sender's
self mask ``PRG(b_u)``, which is uniform in ``Z_q^d`` to anyone without ``b_u`` (only the
server reconstructs it, in Round 4, from the other clients' shares). What the server
learns is what it learns without proxies: a proxy's partial sum also keeps the pairwise
masks with clients under other proxies, which cancel only in the total. A proxy cannot name
a client as its sender unless that client signed a masked input of the session and handed it
over (:mod:`fedrank.secagg.signing`); it can still forward a sum other than the one of what
it received (the server cannot tell), so its clients trust it with their contribution, not
with their privacy.
"""

from __future__ import annotations

import numpy as np

from fedrank.secagg import field, signing
from fedrank.secagg.errors import ProtocolError
from fedrank.secagg.messages import MaskedInput, MaskedSum


class MaskedInputProxy:
    """Sums the masked inputs of a session's clients under one proxy (module docstring).

    Args:
        dimension: ``d``, the session's vector length.
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = int(dimension)
        self._total = np.zeros(self.dimension, dtype=np.uint64)
        self._senders: list[int] = []
        self._signed: list[tuple[bytes, bytes]] = []  # each sender's digest and signature
        self._forwarded = False

    def receive(self, message: MaskedInput) -> None:
        """Add one client's ``y_u`` (a client may send once)."""
        if self._forwarded:
            raise ProtocolError("the proxy has forwarded its sum: Round 2 is over for it")
        if message.sender in self._senders:
            raise ProtocolError(f"client {message.sender} sent a masked input twice")
        y = field.check_vector(
            message.masked, self.dimension, f"client {message.sender}'s masked input"
        )
        self._total = field.add(self._total, y)
        self._senders.append(message.sender)
        self._signed.append((signing.masked_digest(y), message.signature))

    @property
    def senders(self) -> tuple[int, ...]:
        """The clients whose masked input arrived so far."""
        return tuple(self._senders)

    def forward(self) -> MaskedSum:
        """The sum of what arrived, for the server (once; a proxy nothing reached has
        nothing to forward)."""
        if self._forwarded:
            raise ProtocolError("the proxy forwards its sum once")
        if not self._senders:
            raise ProtocolError("no masked input reached this proxy: nothing to forward")
        self._forwarded = True
        order = sorted(range(len(self._senders)), key=self._senders.__getitem__)
        return MaskedSum(
            tuple(self._senders[i] for i in order),
            self._total.copy(),
            tuple(self._signed[i][0] for i in order),
            tuple(self._signed[i][1] for i in order),
        )
