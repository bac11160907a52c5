"""Exceptions of the secure-aggregation protocol. Each message says what went wrong and what
to do about it. Parameter errors use :class:`fedrank.errors.ConfigError`."""

from __future__ import annotations

from fedrank.errors import FedrankError


class SecAggError(FedrankError):
    """Base class of every secure-aggregation failure."""


class ProtocolError(SecAggError, ValueError):
    """A message arrived out of order, twice, from a client outside the round's set, or with
    the wrong shape. The round's state is unchanged: drop the message."""


class RoundAbortedError(SecAggError):
    """Fewer than ``threshold`` clients are left at some round. The masks can no longer be
    removed (or the server would learn too much), so the round is over: start a new one."""


class ShareAuthenticationError(SecAggError):
    """An encrypted share failed AES-GCM authentication: it was altered in transit, forwarded
    under the wrong sender or recipient, or encrypted under another session's key."""


class ShareReconstructionError(SecAggError, ValueError):
    """Shamir reconstruction got too few shares, or shares that do not lie on one polynomial
    of degree ``threshold - 1`` (a share was altered)."""
