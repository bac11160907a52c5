"""Secure aggregation of one round in the service (``[secagg]``; Bonawitz et al., CCS 2017,
with the library :mod:`fedrank.secagg`; docs/secagg.md, "In the service").

The round's cohort is the clients selected at ``/v1/checkin`` (:mod:`fedrank.server.rounds`);
each gets a secure-aggregation id (1..K, in the order of selection), the session id, the
threshold ``t`` and the fixed-point encoding in its check-in answer. The round then runs the
protocol's five stages over two endpoints:

* ``POST /v1/secagg {client_id, session, stage, message}`` with ``stage`` one of
  ``advertise``, ``share_keys``, ``check_shares``, ``masked_input``, ``unmasking`` (the
  message's JSON form, :mod:`fedrank.secagg.wire`);
* ``GET /v1/secagg?client_id=...&session=...``: the stage the session is in, its deadline and
  what this client needs for it (the key directory, its forwarded shares, the masking set,
  the contributors);
* ``POST /v1/secagg {session, stage: "masked_sum", message}`` with a proxy's bearer token
  (``[[proxies]]``): the sum of its clients' masked inputs (:meth:`SecAggRound.receive_sum`;
  the clients hand their masked input to the proxy instead of the server).

A stage closes when every client expected in it has sent its message, or at its deadline
(``[secagg] stage_seconds`` after it opened; the first opens at the first check-in). The
server holds no masked input either: :class:`~fedrank.secagg.server.SecAggServer` adds each
into a running sum. When Unmasking completes, the round's result is the *sum* of the
contributors' clipped deltas (decoded from ``Z_{2^32}``, error at most
``FixedPointEncoder.error_bound``), which the server folds into the iteration as one
aggregate standing for ``|U3|`` updates (an unweighted mean: each client's weight is 1) and
closes. With ``[privacy] mode = 'distributed'`` each client also adds its share of Skellam
noise (:mod:`fedrank.privacy.skellam`) and the sum carries the calibrated noise; the
encoder's scale is then the plan's, which leaves room for the noise. Nothing of one client
is stored or logged. A round that cannot complete (fewer than ``t`` clients at some stage)
is aborted: no aggregate, and the next round starts.

Against clients that lie (docs/secagg.md, "Clients that lie"): the key advert and the masked
input are signed with the client's Ed25519 key, checked against the device registry
(``public_key_of``) or, without one, bound at the advert; a key another member advertised is
refused (409); a member whose encrypted shares fail to decrypt is excluded at the share
check and reported (:meth:`summary`, the log) while the others finish; and a decoded sum
whose L2 norm exceeds what ``|U3|`` clipped deltas (and the noise) can reach is refused
(:meth:`norm_bound`): nothing is published.

The session lives in memory: after a restart the round starts afresh (its clients check in
again). The server is honest but curious (the paper's semi-honest setting).
"""

from __future__ import annotations

import base64
import hmac
import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import brentq

from fedrank.secagg import wire
from fedrank.secagg.errors import DuplicateKeyError, SecAggError, SignatureError
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.messages import ForwardedShares, KeyDirectory, MaskingSet, UnmaskRequest
from fedrank.secagg.protocol import SecAggParams
from fedrank.secagg.server import SecAggServer
from fedrank.server.envelope import BadRequest

if TYPE_CHECKING:
    from fedrank.privacy.skellam import SkellamPlan

log = logging.getLogger("fedrank.server")

#: The protocol's stages in order, as the endpoints name them.
STAGES = ("advertise", "share_keys", "check_shares", "masked_input", "unmasking")
#: ``ln(1 / p)`` for the probability ``p = 2**-40`` that an honest round's noise exceeds
#: :func:`noise_norm_bound` (and the round is refused).
NOISE_NORM_LOG_FAILURE = 40 * math.log(2.0)


def no_registry(client: str) -> bytes | None:
    """The ``public_key_of`` of a server without device identity: no client has an enrolled
    key, so each binds the signing key it advertises for the session."""
    return None


def noise_norm_bound(variance: float, dimension: int) -> float:
    """A bound on the L2 norm of ``dimension`` independent symmetric Skellam draws of
    ``variance`` each (integer units), exceeded with probability at most ``2**-40``.

    Derivation. ``Z_i ~ Sk(V)`` has ``E exp(l Z_i) = exp(V (cosh l - 1))``. For a unit vector
    ``a``, ``cosh(l a_i) - 1 <= a_i**2 (cosh l - 1)`` (the series of ``cosh`` with
    ``a_i**2 <= 1``), so ``E exp(l <a, Z>) <= exp(V (cosh l - 1))``: ``<a, Z>`` has the
    one-dimensional Chernoff bound ``P(<a, Z> >= r) <= exp(V (cosh s - 1) - s r)`` at
    ``s = asinh(r / V)`` (as :func:`fedrank.privacy.skellam.tail_bound`). A ``1/2``-net of
    the unit sphere has at most ``5**d`` points and ``||Z|| <= 2 max_a <a, Z>`` over it
    (Vershynin, *High-Dimensional Probability*, Cor. 4.2.13 and Lemma 4.4.1), so
    ``P(||Z|| >= 2 r) <= 5**d exp(V (cosh s - 1) - s r)``; the bound is ``2 r`` for the ``r``
    that makes the right side ``2**-40``. For ``V`` large against ``d``, it is about
    ``2 sqrt(2 (d ln 5 + 40 ln 2) V)``: ``3.6 sqrt(d V)`` for large ``d``, where the norm
    itself is about ``sqrt(d V)``."""
    if variance <= 0:
        return 0.0
    target = -(dimension * math.log(5.0) + NOISE_NORM_LOG_FAILURE)

    def log_tail(r: float) -> float:
        x = r / variance
        return variance * (math.sqrt(1.0 + x * x) - 1.0) - r * math.asinh(x) - target

    hi = math.sqrt(-2.0 * variance * target) - target
    while log_tail(hi) > 0:
        hi *= 2.0
    return 2.0 * float(brentq(log_tail, 0.0, hi, xtol=1e-9 * hi))


@dataclass
class SecAggResult:
    """A completed round: the decoded sum of the contributors' clipped deltas."""

    total: np.ndarray
    contributors: int
    dropped: int
    responders: int
    excluded: int


@dataclass
class SecAggRound:
    """One round's session (module docstring). ``clients_per_round`` is ``K``, ``threshold``
    ``t``; ``encoder`` bounds every delta at ``l2_bound`` and fits ``K`` of them.
    ``public_key_of`` gives a client's enrolled Ed25519 key (the device registry,
    :mod:`fedrank.identity`), or ``None`` when it has none: then the key it advertises is
    bound to it for the session."""

    number: int
    dimension: int
    clients_per_round: int
    threshold: int
    l2_bound: float
    stage_seconds: float
    #: The clients' distributed DP noise (``[privacy] mode = 'distributed'``): its scale
    #: replaces the finest one, and each client adds its share (``noise_variance``).
    noise: SkellamPlan | None = None
    public_key_of: Callable[[str], bytes | None] = no_registry
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
    #: The client ids the share check excluded (their shares failed to decrypt).
    excluded: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        majority = self.clients_per_round // 2 + 1
        if self.number == 0 and self.threshold < majority:
            log.warning(
                "[secagg] threshold t=%d is below a majority of the cohort (%d of K=%d; "
                "allow_low_threshold = true): the sum of as few as %d clients is published, "
                "and fewer colluding members suffice to unmask one (docs/secagg.md)",
                self.threshold,
                majority,
                self.clients_per_round,
                self.threshold,
            )
        self.params = SecAggParams(self.session_id, self.threshold, self.dimension)
        self.encoder = (
            FixedPointEncoder.with_max_scale(self.clients_per_round, l2_bound=self.l2_bound)
            if self.noise is None
            else FixedPointEncoder(self.noise.scale, self.clients_per_round, l2_bound=self.l2_bound)
        )
        self.server = SecAggServer(self.params)
        self._directory: KeyDirectory | None = None
        self._forwarded: dict[int, ForwardedShares] = {}
        self._masking: MaskingSet | None = None
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

    def summary(self, previous: SecAggRound | None = None) -> dict[str, Any]:
        """For ``/v1/status``: the round, its stage, how many clients are in it, the
        secure-aggregation ids of the members excluded for shares that failed to decrypt,
        why the round was aborted or refused (``None`` while it is not), and the same of
        the ``previous`` round (how it ended; ``None`` before the second round)."""
        return {
            **self._outcome(),
            "previous": None if previous is None else previous._outcome(),
        }

    def _outcome(self) -> dict[str, Any]:
        return {
            "round": self.number,
            "stage": self.stage_name,
            "cohort": len(self.ids),
            "excluded": sorted(self.ids[c] for c in self.excluded),
            "reason": self.aborted,
        }

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
            raise BadRequest(
                409, "secagg_dropped", f"client {u} dropped out of (or was excluded at) an "
                "earlier stage",
            )  # fmt: skip
        if u in self.done:
            raise BadRequest(409, "secagg_repeated", f"client {u} already sent its {stage}")
        with _refusals():
            message = self._parse(stage, body["message"], u)
            if message.sender != u:
                raise wire.WireError(f"sender must be this client's id {u}")
            if stage == "advertise":
                self._check_device_key(body["client_id"], message.signing_public_key)
            getattr(self.server, _RECEIVERS[stage])(message)
        self.done.add(u)
        self.advance(now)

    def _check_device_key(self, client_id: str, advertised: bytes) -> None:
        """With a device registry, the advertised signing key must be the device's own."""
        enrolled = self.public_key_of(client_id)
        if enrolled is not None and not hmac.compare_digest(enrolled, advertised):
            raise BadRequest(
                403,
                "secagg_wrong_key",
                "the advertised signing_public_key is not this device's enrolled key: sign "
                "with the device key (send_secure's signing_key)",
            )

    def receive_sum(self, body: Any, max_senders: int, now: float) -> None:
        """``POST /v1/secagg`` from a proxy (``[[proxies]]``; the app checked its token):
        ``{session, stage: "masked_sum", message: {senders, masked, digests,
        signatures}}``, the sum of at most ``max_senders`` cohort clients' masked inputs
        (:class:`~fedrank.secagg.proxy.MaskedInputProxy`) with each sender's signature of
        its own. Its senders join ``U3`` as if their inputs had come one by one; a sender
        without its own signature gets the sum refused (403, naming it) and may still send
        its input; the proxy learns nothing the server does not (their self masks stay on
        the sum)."""
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
            raise BadRequest(
                409, "secagg_dropped", f"clients {out} are not in U2 (they did not share "
                "their keys, or were excluded)",
            )  # fmt: skip
        if senders & self.done:
            again = sorted(senders & self.done)[:10]
            raise BadRequest(409, "secagg_repeated", f"clients {again} already sent an input")
        with _refusals():
            self.server.receive_masked_sum(message)
        self.done |= senders
        self.advance(now)

    def _parse(self, stage: str, message: Any, u: int) -> Any:
        if stage == "advertise":
            return wire.advertise_from_json(message)
        if stage == "share_keys":
            return wire.share_keys_from_json(message, self._expected - {u})
        if stage == "check_shares":
            return wire.share_check_from_json(message, len(self.ids))
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
            assert self._masking is not None
            out["masking"] = wire.masking_to_json(self._masking)
        elif expected and self.stage == 4:
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
        if self.stage == len(STAGES) - 1:
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
        :attr:`result`, or set :attr:`aborted` when that fails or the sum's L2 norm exceeds
        :meth:`norm_bound` (a contributor sent an input it did not clip: the round is
        refused, nothing of it is published). Runs in a worker thread; the requests of the
        session are refused meanwhile (:attr:`ready`)."""
        assert self.ready and not self.finished
        try:
            outcome = self.server.finish()
        except SecAggError as exc:
            self.aborted = str(exc)
            return
        n = len(outcome.contributors)
        total = self.encoder.decode(outcome.total, n)
        norm, bound = float(np.linalg.norm(total)), self.norm_bound(n)
        if not norm <= bound:
            self.aborted = (
                f"the decoded sum of {n} contributors has L2 norm {norm:.6g}, beyond the "
                f"{bound:.6g} that {n} deltas clipped to l2_bound = {self.l2_bound:g} can "
                "reach (with the fixed-point rounding and the noise): a contributor sent an "
                "input it did not clip; the round is refused and nothing is published"
            )
            return
        self.result = SecAggResult(
            total, n, len(outcome.dropped), len(outcome.responders), len(outcome.excluded)
        )

    def norm_bound(self, contributors: int) -> float:
        """The largest L2 norm the decoded sum of ``contributors`` honest inputs can have:
        ``|U3| x l2_bound`` (each delta is clipped to ``l2_bound``), plus the fixed-point
        rounding (``sqrt(d)`` times :meth:`FixedPointEncoder.error_bound
        <fedrank.secagg.field.FixedPointEncoder.error_bound>` per coordinate), plus, under
        distributed DP, the norm of the contributors' Skellam noise
        (:func:`noise_norm_bound` of ``|U3| x client_variance``, over the scale), which an
        honest round exceeds with probability at most ``2**-40``."""
        signal = contributors * self.l2_bound
        rounding = math.sqrt(self.dimension) * self.encoder.error_bound(contributors)
        if self.noise is None:
            return signal + rounding
        variance = contributors * self.noise.client_variance
        return signal + rounding + noise_norm_bound(variance, self.dimension) / self.encoder.scale

    def _close_stage(self) -> None:
        s = self.server
        if self.stage == 0:
            self._directory = s.close_advertise()
            self._expected = frozenset(self._directory.keys)
        elif self.stage == 1:
            self._forwarded = s.close_share_keys()
            self._expected = frozenset(self._forwarded)
        elif self.stage == 2:
            self._forwarded = {}
            self._masking = s.close_share_check()
            self._u2 = self._expected = frozenset(self._masking.members)
            names = {u: c for c, u in self.ids.items()}
            self.excluded = [names[u] for u in self._masking.excluded]
            if self.excluded:
                log.warning(
                    "secure aggregation of round %d: excluded %s (secagg ids %s): their "
                    "encrypted shares failed to decrypt, or they accused others falsely",
                    self.number,
                    ", ".join(self.excluded),
                    list(self._masking.excluded),
                )
        else:
            self._request = s.close_masked_input()
            self._expected = frozenset(self._request.contributors)


#: The :class:`~fedrank.secagg.server.SecAggServer` method that takes each stage's message.
_RECEIVERS = {
    "advertise": "receive_advertise",
    "share_keys": "receive_share_keys",
    "check_shares": "receive_share_check",
    "masked_input": "receive_masked_input",
    "unmasking": "receive_unmasking",
}


@contextmanager
def _refusals() -> Iterator[None]:
    """A message the protocol refuses, as the client's 4xx: a replayed key is a conflict
    (409), a signature not the sender's is forbidden (403), anything else is invalid."""
    try:
        yield
    except DuplicateKeyError as exc:
        raise BadRequest(409, "secagg_duplicate_keys", str(exc)) from exc
    except SignatureError as exc:
        raise BadRequest(403, "secagg_bad_signature", str(exc)) from exc
    except (wire.WireError, SecAggError) as exc:
        raise BadRequest(422, "invalid_secagg_message", str(exc)) from exc
