"""Secure aggregation of one round in the service (``[secagg]``; Bonawitz et al., CCS 2017,
with the library :mod:`fedrank.secagg`; docs/secagg.md, "In the service").

The round's cohort is the clients selected at ``/v1/checkin`` (:mod:`fedrank.server.rounds`);
each gets a secure-aggregation id (1..K, in the order of selection), the session id, the
threshold ``t`` and the fixed-point encoding in its check-in answer. The round then runs the
protocol's four rounds over two endpoints:

* ``POST /v1/secagg {client_id, session, stage, message}`` with ``stage`` one of
  ``advertise``, ``share_keys``, ``masked_input``, ``unmasking`` (the message's JSON form,
  :mod:`fedrank.secagg.wire`);
* ``GET /v1/secagg?client_id=...&session=...``: the stage the session is in, its deadline and
  what this client needs for it (the key directory, its forwarded shares, the contributors);
* ``POST /v1/secagg {session, stage: "masked_sum", message}`` with a proxy's bearer token
  (``[[proxies]]``): the sum of its clients' masked inputs (:meth:`SecAggRound.receive_sum`;
  the clients hand their masked input to the proxy instead of the server).

A stage closes when every client expected in it has sent its message, or at its deadline
(``[secagg] stage_seconds`` after it opened; the first opens at the first check-in). The
server holds no masked input either: :class:`~fedrank.secagg.protocol.SecAggServer` adds each
into a running sum. When Unmasking completes, the round's result is the *sum* of the
contributors' clipped deltas (decoded from ``Z_{2^32}``, error at most
``FixedPointEncoder.error_bound``), which the server folds into the iteration as one
aggregate standing for ``|U3|`` updates (an unweighted mean: each client's weight is 1) and
closes. With ``[privacy] mode = 'distributed'`` each client also adds its share of Skellam
noise (:mod:`fedrank.privacy.skellam`) and the sum carries the calibrated noise; the
encoder's scale is then the plan's, which leaves room for the noise. Nothing of one client
is stored or logged. A round that cannot complete (fewer than
``t`` clients at some stage) is aborted: no aggregate, and the next round starts.

The session lives in memory: after a restart the round starts afresh (its clients check in
again). Honest-but-curious server and clients (the paper's semi-honest setting).
"""

from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrank.secagg import wire
from fedrank.secagg.errors import SecAggError
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.protocol import (
    ForwardedShares,
    KeyDirectory,
    SecAggParams,
    SecAggServer,
    UnmaskRequest,
)
from fedrank.server.envelope import BadRequest

if TYPE_CHECKING:
    from fedrank.privacy.skellam import SkellamPlan

#: The protocol's stages in order, as the endpoints name them.
STAGES = ("advertise", "share_keys", "masked_input", "unmasking")


@dataclass
class SecAggResult:
    """A completed round: the decoded sum of the contributors' clipped deltas."""

    total: np.ndarray
    contributors: int
    dropped: int
    responders: int


@dataclass
class SecAggRound:
    """One round's session (module docstring). ``clients_per_round`` is ``K``, ``threshold``
    ``t``; ``encoder`` bounds every delta at ``l2_bound`` and fits ``K`` of them."""

    number: int
    dimension: int
    clients_per_round: int
    threshold: int
    l2_bound: float
    stage_seconds: float
    #: The clients' distributed DP noise (``[privacy] mode = 'distributed'``): its scale
    #: replaces the finest one, and each client adds its share (``noise_variance``).
    noise: SkellamPlan | None = None
    session_id: bytes = field(default_factory=SecAggParams.new_session_id)
    ids: dict[str, int] = field(default_factory=dict)
    stage: int = 0
    deadline: float | None = None
    done: set[int] = field(default_factory=set)
    result: SecAggResult | None = None
    aborted: str | None = None
    #: Unmasking has closed: :meth:`finish` may run.
    ready: bool = False
    #: The server has stored the round's aggregate (its close may still be retried).
    stored: bool = False

    def __post_init__(self) -> None:
        self.params = SecAggParams(self.session_id, self.threshold, self.dimension)
        self.encoder = (
            FixedPointEncoder.with_max_scale(self.clients_per_round, l2_bound=self.l2_bound)
            if self.noise is None
            else FixedPointEncoder(self.noise.scale, self.clients_per_round, l2_bound=self.l2_bound)
        )
        self.server = SecAggServer(self.params)
        self._directory: KeyDirectory | None = None
        self._forwarded: dict[int, ForwardedShares] = {}
        self._request: UnmaskRequest | None = None
        self._expected: frozenset[int] = frozenset()
        self._u2: frozenset[int] = frozenset()

    @property
    def session(self) -> str:
        return base64.b64encode(self.session_id).decode("ascii")

    @property
    def finished(self) -> bool:
        return self.result is not None or self.aborted is not None

    @property
    def stage_name(self) -> str:
        """The open stage of :data:`STAGES`, or ``finishing`` (Unmasking closed),
        ``finished`` or ``aborted``."""
        if self.result is not None:
            return "finished"
        if self.aborted is not None:
            return "aborted"
        return "finishing" if self.ready else STAGES[self.stage]

    def summary(self) -> dict[str, Any]:
        """For ``/v1/status``: the round, its stage and how many clients are in it."""
        return {"round": self.number, "stage": self.stage_name, "cohort": len(self.ids)}

    # -- check-in -------------------------------------------------------------------------

    def join(self, client_id: str, now: float) -> dict[str, Any]:
        """The ``secagg`` block of a selected client's check-in answer (its id assigned on
        first check-in, while the advertise stage is open)."""
        if client_id not in self.ids:
            if self.stage != 0 or self.finished:
                raise BadRequest(
                    409, "secagg_stage_closed", "the round's key advertisement has closed"
                )
            self.ids[client_id] = len(self.ids) + 1
            if self.deadline is None:
                self.deadline = now + self.stage_seconds
        return {
            "session": self.session,
            "id": self.ids[client_id],
            "threshold": self.threshold,
            "dimension": self.dimension,
            "l2_bound": self.l2_bound,
            "scale": self.encoder.scale,
            "max_clients": self.clients_per_round,
            "stage_seconds": self.stage_seconds,
            "noise_variance": 0.0 if self.noise is None else self.noise.client_variance,
        }

    # -- requests --------------------------------------------------------------------------

    def _check_session(self, session: Any) -> None:
        if not isinstance(session, str) or not hmac.compare_digest(
            session.encode(), self.session.encode()
        ):
            raise BadRequest(409, "secagg_wrong_session", "not the current session: check in again")

    def _member(self, client_id: Any, session: Any) -> int:
        self._check_session(session)
        if not isinstance(client_id, str) or client_id not in self.ids:
            raise BadRequest(403, "not_selected", "this client is not in the round's cohort")
        return self.ids[client_id]

    def receive(self, body: Any, now: float) -> None:
        """``POST /v1/secagg``: one client's message for the open stage."""
        if not isinstance(body, dict) or set(body) != {"client_id", "session", "stage", "message"}:
            raise BadRequest(
                422, "invalid", "send {client_id, session, stage, message} (docs/secagg.md)"
            )
        u = self._member(body["client_id"], body["session"])
        stage = body["stage"]
        if stage not in STAGES:
            raise BadRequest(422, "invalid", f"stage must be one of {', '.join(STAGES)}")
        if self.stage_name != stage:
            raise BadRequest(
                409, "secagg_wrong_stage", f"the session is at {self.stage_name}, not {stage}"
            )
        if self.stage > 0 and u not in self._expected:
            raise BadRequest(409, "secagg_dropped", f"client {u} dropped out of an earlier stage")
        if u in self.done:
            raise BadRequest(409, "secagg_repeated", f"client {u} already sent its {stage}")
        try:
            message = self._parse(stage, body["message"], u)
            if message.sender != u:
                raise wire.WireError(f"sender must be this client's id {u}")
            getattr(self.server, f"receive_{stage}")(message)
        except (wire.WireError, SecAggError) as exc:
            raise BadRequest(422, "invalid_secagg_message", str(exc)) from exc
        self.done.add(u)
        self.advance(now)

    def receive_sum(self, body: Any, max_senders: int, now: float) -> None:
        """``POST /v1/secagg`` from a proxy (``[[proxies]]``; the app checked its token):
        ``{session, stage: "masked_sum", message: {senders, masked}}``, the sum of at most
        ``max_senders`` cohort clients' masked inputs
        (:class:`~fedrank.secagg.proxy.MaskedInputProxy`). Its senders join ``U3`` as if
        their inputs had come one by one; the proxy learns nothing the server does not
        (their self masks stay on the sum)."""
        if not isinstance(body, dict) or set(body) != {"session", "stage", "message"}:
            raise BadRequest(
                422, "invalid", "a proxy sends {session, stage: 'masked_sum', message}"
            )
        self._check_session(body["session"])
        if body["stage"] != "masked_sum":
            raise BadRequest(422, "invalid", "a proxy's stage is 'masked_sum'")
        if self.stage_name != "masked_input":
            raise BadRequest(
                409, "secagg_wrong_stage", f"the session is at {self.stage_name}, not masked_input"
            )
        try:
            # no more senders than the cohort, whatever the proxy's max_clients allows
            limit = min(max_senders, len(self.ids))
            message = wire.masked_sum_from_json(body["message"], self.dimension, limit)
        except wire.WireError as exc:
            raise BadRequest(422, "invalid_secagg_message", str(exc)) from exc
        senders = set(message.senders)
        if not senders <= self._expected:
            out = sorted(senders - self._expected)[:10]
            raise BadRequest(409, "secagg_dropped", f"clients {out} did not share their keys")
        if senders & self.done:
            again = sorted(senders & self.done)[:10]
            raise BadRequest(409, "secagg_repeated", f"clients {again} already sent an input")
        try:
            self.server.receive_masked_sum(message)
        except SecAggError as exc:
            raise BadRequest(422, "invalid_secagg_message", str(exc)) from exc
        self.done |= senders
        self.advance(now)

    def _parse(self, stage: str, message: Any, u: int) -> Any:
        if stage == "advertise":
            return wire.advertise_from_json(message)
        if stage == "share_keys":
            return wire.share_keys_from_json(message, self._expected - {u})
        if stage == "masked_input":
            return wire.masked_from_json(message, self.dimension)
        assert self._request is not None
        u3 = frozenset(self._request.contributors)
        return wire.unmasking_from_json(message, u3, self._u2 - u3)

    def view(self, client_id: Any, session: Any, now: float) -> dict[str, Any]:
        """``GET /v1/secagg``: the stage, its deadline, and this client's input for it."""
        u = self._member(client_id, session)
        self.advance(now)
        out: dict[str, Any] = {"stage": self.stage_name}
        if self.result is not None:
            return {**out, "contributors": self.result.contributors}
        if self.aborted is not None:
            return {**out, "reason": self.aborted}
        if self.ready:
            return out
        out["deadline"] = self.deadline
        # The stage's input only to a client that still has to send in it (once it has
        # sent, it polls for the next stage: no need to resend the directory every time).
        expected = (self.stage == 0 or u in self._expected) and u not in self.done
        out["expected"] = expected
        if expected and self.stage == 1:
            assert self._directory is not None
            out["directory"] = wire.directory_to_json(self._directory)
        elif expected and self.stage == 2:
            out["forwarded"] = wire.forwarded_to_json(self._forwarded[u])
        elif expected and self.stage == 3:
            assert self._request is not None
            out["contributors"] = wire.request_to_json(self._request)
        return out

    # -- stages ----------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Close the open stage when everyone expected has sent, or at its deadline. The
        last stage only becomes :attr:`ready`: :meth:`finish` (Shamir reconstruction and
        mask expansion, the costly part of a round) runs off the event loop."""
        if self.finished or self.ready or self.deadline is None:
            return
        everyone = self._expected if self.stage > 0 else frozenset(self.ids.values())
        full = self.stage == 0 and len(self.ids) >= self.clients_per_round
        if not ((full or self.stage > 0) and self.done >= everyone) and now <= self.deadline:
            return
        if self.stage == 3:
            self.ready = True
            return
        try:
            self._close_stage()
        except SecAggError as exc:
            self.aborted = str(exc)
            return
        self.stage += 1
        self.done = set()
        self.deadline = now + self.stage_seconds

    def finish(self) -> None:
        """End Unmasking (once :attr:`ready`): reconstruct, unmask, decode the sum into
        :attr:`result` (or set :attr:`aborted`). Runs in a worker thread; the requests of
        the session are refused meanwhile (:attr:`ready`)."""
        assert self.ready and not self.finished
        try:
            outcome = self.server.finish()
        except SecAggError as exc:
            self.aborted = str(exc)
            return
        n = len(outcome.contributors)
        self.result = SecAggResult(
            self.encoder.decode(outcome.total, n),
            n,
            len(outcome.dropped),
            len(outcome.responders),
        )

    def _close_stage(self) -> None:
        s = self.server
        if self.stage == 0:
            self._directory = s.close_advertise()
            self._expected = frozenset(self._directory.keys)
        elif self.stage == 1:
            self._forwarded = s.close_share_keys()
            self._u2 = self._expected = frozenset(self._forwarded)
        else:
            self._request = s.close_masked_input()
            self._expected = frozenset(self._request.contributors)
            self._forwarded = {}
