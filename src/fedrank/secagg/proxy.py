"""A proxy that sums masked inputs (secure aggregation through the FedPSProxy hierarchy,
FedPS Sec. 3.4; Bonawitz et al., CCS 2017, Round 2).

In Round 2 each client ``u`` sends ``y_u = x_u + PRG(b_u) + sum_v +-PRG(s_uv) mod q``. A
proxy between its clients and the server adds the ``y_u`` it receives and forwards one
:class:`~fedrank.secagg.protocol.MaskedSum` (the sum and its senders), so the server takes
one vector per proxy instead of one per client; the server adds it to its running sum and
puts the senders in ``U3`` (:meth:`SecAggServer.receive_masked_sum`), and the rest of the
protocol is unchanged (Rounds 0, 1 and 4 pass through the proxy as they are).

What the proxy learns: the set of its senders and a sum that still carries every sender's
self mask ``PRG(b_u)``, which is uniform in ``Z_q^d`` to anyone without ``b_u`` (only the
server reconstructs it, in Round 4, from the other clients' shares). What the server
learns is what it learns without proxies: a proxy's partial sum also keeps the pairwise
masks with clients under other proxies, which cancel only in the total. Honest-but-curious
proxies, as the rest of the protocol.
"""

from __future__ import annotations

import numpy as np

from fedrank.secagg import field
from fedrank.secagg.errors import ProtocolError
from fedrank.secagg.protocol import MaskedInput, MaskedSum


class MaskedInputProxy:
    """Sums the masked inputs of a session's clients under one proxy (module docstring).

    Args:
        dimension: ``d``, the session's vector length.
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = int(dimension)
        self._total = np.zeros(self.dimension, dtype=np.uint64)
        self._senders: list[int] = []
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
        return MaskedSum(tuple(sorted(self._senders)), self._total.copy())
