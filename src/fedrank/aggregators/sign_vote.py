"""Sign-majority vote over client updates (paper Section 5.3, last paragraph).

"Rather than computing the sign of the sum of gradients in Equation 1, one can take the most
common sign in the set of received gradients." Clients then need to send only one bit per
weight (two bits if a zero gradient is allowed), see :class:`fedrank.privacy.sign.SignCompressor`.

For every coordinate the state counts the ``+1``, ``-1`` and ``0`` votes (zeros are counted
separately, for diagnostics: they never decide the vote). ``finalize`` returns
``sign(pos - neg)``: ``+1``/``-1`` where that sign is in the majority, ``0`` on a tie. The
result is a vector of signs, which Rprop (Eq. 1) consumes directly.

Counts are integers, so the aggregate is *exactly* the same for any order or grouping of
messages. With ``weighted=True`` each message votes ``n_i`` times (``n_i`` must then be an
integer).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.aggregators.mean import check_dim, check_update, check_weight, vector_columns
from fedrank.core.message import Message, MessageBatch
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError


class SignVoteState(NamedTuple):
    """Partial aggregate of :class:`SignVote`: int64 vote counts of shape ``(dim,)`` and the
    number of messages."""

    pos: npt.NDArray[np.int64]
    neg: npt.NDArray[np.int64]
    zero: npt.NDArray[np.int64]
    count: int


def _integer_weights(n: np.ndarray) -> np.ndarray:
    """``n`` as int64, refusing fractional weights (votes must stay integer counts)."""
    arr = np.asarray(n)
    if arr.dtype.kind == "f":
        if not np.all(arr == np.floor(arr)):
            raise DataFormatError(
                "weighted sign vote needs integer weights n (each message votes n times); "
                "got fractional values"
            )
        if arr.size and arr.max() >= 2.0**62:
            raise DataFormatError("weights n are too large for int64 vote counts")
    return arr.astype(np.int64)


class SignVote:
    """Most common sign per coordinate (paper Section 5.3).

    Args:
        dim: length of the update vectors.
        weighted: if True, a message counts ``n_i`` votes instead of one (default False, as
            in the paper: one client, one vote).
        z: significance gate (default 0: plain majority, as in the paper). With ``z > 0`` a
            coordinate's majority counts only if ``|pos - neg| > z * sqrt(pos + neg)``, a
            sign test (under "no preferred sign" ``pos - neg`` has standard deviation
            ``sqrt(pos + neg)``); otherwise it finalizes to 0, which Rprop treats as no
            gradient. See :mod:`fedrank.aggregators.gated_mean` for why.

    Accepts any update vectors and uses their sign. ``finalize`` returns float64 values in
    ``{-1, 0, +1}``; the empty state finalizes to ``zeros(dim)`` (no votes, no step).
    """

    def __init__(self, dim: int, weighted: bool = False, z: float = 0.0) -> None:
        self.dim = check_dim(dim)
        if not isinstance(weighted, bool | np.bool_):
            raise ConfigError(f"weighted must be True or False, got {weighted!r}")
        self.weighted = bool(weighted)
        if not (np.isfinite(z) and z >= 0):
            raise ConfigError(f"z (the gate, in standard deviations) must be finite and >= 0: {z}")
        self.z = float(z)

    def __repr__(self) -> str:
        return f"SignVote(dim={self.dim}, weighted={self.weighted}, z={self.z:g})"

    def zero(self) -> SignVoteState:
        """The empty aggregate (no votes)."""
        z = np.zeros(self.dim, dtype=np.int64)
        return SignVoteState(z, z.copy(), z.copy(), 0)

    def _check_state(self, state: SignVoteState) -> None:
        for name in ("pos", "neg", "zero"):
            arr = getattr(state, name)
            if arr.shape != (self.dim,):
                raise ConfigError(
                    f"expected a state of dimension {self.dim}, got {name} of shape {arr.shape}"
                )

    def check_consistent(self, state: SignVoteState) -> None:
        """Refuse a state no sequence of messages can produce: negative votes, or a
        coordinate whose votes do not add up to the same total as every other (each
        message votes once per coordinate, ``n_i >= 0`` times when weighted), or, unweighted,
        a total other than the count. Raises :class:`~fedrank.errors.DataFormatError`."""
        self._check_state(state)
        votes = np.stack([state.pos, state.neg, state.zero])
        if state.count < 0 or np.any(votes < 0):
            raise DataFormatError("votes and the count must be >= 0")
        totals = votes.sum(axis=0)
        if np.any(totals != totals[0]):
            raise DataFormatError("every coordinate must hold the same number of votes")
        if totals.size and not self.weighted and totals[0] != state.count:
            raise DataFormatError(
                f"{int(totals[0])} votes per coordinate cannot come from {state.count} messages"
            )

    def accumulate(self, state: SignVoteState, message: Message) -> SignVoteState:
        """Add the votes of one message."""
        self._check_state(state)
        vec = check_update(message.update, self.dim)
        w = int(_integer_weights(np.array([check_weight(message.n)]))[0]) if self.weighted else 1
        return SignVoteState(
            state.pos + w * (vec > 0),
            state.neg + w * (vec < 0),
            state.zero + w * (vec == 0),
            state.count + 1,
        )

    def accumulate_batch(self, state: SignVoteState, batch: MessageBatch) -> SignVoteState:
        """Add the votes of ``C`` messages at once (rows of ``batch.vector``, weights
        ``batch.weight``, used only when ``weighted``); exactly equal to accumulating the
        rows one by one."""
        self._check_state(state)
        mat, weights = vector_columns(batch, self.dim)
        if self.weighted:
            w = _integer_weights(weights)
            pos = w @ (mat > 0).astype(np.int64)
            neg = w @ (mat < 0).astype(np.int64)
            zer = w @ (mat == 0).astype(np.int64)
        else:
            pos = np.count_nonzero(mat > 0, axis=0).astype(np.int64)
            neg = np.count_nonzero(mat < 0, axis=0).astype(np.int64)
            zer = np.count_nonzero(mat == 0, axis=0).astype(np.int64)
        return SignVoteState(
            state.pos + pos, state.neg + neg, state.zero + zer, state.count + int(mat.shape[0])
        )

    def merge(self, a: SignVoteState, b: SignVoteState) -> SignVoteState:
        """Add two partial vote counts."""
        self._check_state(a)
        self._check_state(b)
        return SignVoteState(a.pos + b.pos, a.neg + b.neg, a.zero + b.zero, a.count + b.count)

    def finalize(self, state: SignVoteState) -> np.ndarray:
        """``sign(pos - neg)`` as float64 of shape ``(dim,)`` (ties, and with ``z > 0``
        majorities that fail the sign test, give 0)."""
        self._check_state(state)
        margin = state.pos - state.neg
        votes = np.sign(margin).astype(np.float64)
        if self.z > 0:
            votes[np.abs(margin) <= self.z * np.sqrt(state.pos + state.neg)] = 0.0
        return votes

    def state_to_json(self, state: SignVoteState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check_state(state)
        settings = {"dim": self.dim, "weighted": self.weighted}
        return encode_state(state, "SignVote", settings=settings)

    def state_from_json(self, data: dict[str, Any]) -> SignVoteState:
        """Inverse of :meth:`state_to_json`; refuses the votes of another ``dim`` or
        ``weighted``."""
        settings = {"dim": self.dim, "weighted": self.weighted}
        state = decode_state(data, SignVoteState, "SignVote", settings=settings)
        self._check_state(state)
        return state
