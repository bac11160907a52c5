"""Exceptions of the secure-aggregation protocol. Each message says what went wrong and what
to do about it. Parameter errors use :class:`fedrank.errors.ConfigError`."""

from __future__ import annotations

from fedrank.errors import FedrankError


class SecAggError(FedrankError):
    """Base class of every secure-aggregation failure."""


class ProtocolError(SecAggError, ValueError):
    """A message arrived out of order, twice, from a client outside the round's set, or with
    the wrong shape. The round's state is unchanged: drop the message."""


class DuplicateKeyError(ProtocolError):
    """A client advertised a public key that another client of the session already
    advertised (a replay of its keys): it is refused, and the directory keeps the first."""


class SignatureError(SecAggError, ValueError):
    """A message's Ed25519 signature is not its sender's (:mod:`fedrank.secagg.signing`): it
    was forged, or relayed (by a proxy) under a sender that did not sign it."""


class RoundAbortedError(SecAggError):
    """Fewer than ``threshold`` clients are left at some round. The masks can no longer be
    removed (or the server would learn too much), so the round is over: start a new one."""


class ShareAuthenticationError(SecAggError):
    """An encrypted share failed AES-GCM authentication: it was altered in transit, forwarded
    under the wrong sender or recipient, or encrypted under another session's key (or its
    sender lied). The recipient names the sender in its share check and goes on without it
    (:meth:`fedrank.secagg.client.SecAggClient.check_shares`)."""


class ShareReconstructionError(SecAggError, ValueError):
    """Shamir reconstruction got too few shares, or shares that do not lie on one polynomial
    of degree ``threshold - 1`` (a share was altered)."""
