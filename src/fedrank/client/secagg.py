"""The client half of secure aggregation in the service (Bonawitz et al., CCS 2017;
:mod:`fedrank.server.secagg_round` is the server's; docs/secagg.md, "In the service").

:func:`send_secure` takes a selected client's check-in (its ``secagg`` block) and its
FedAvg delta, and runs the protocol with the server: advertise two fresh X25519 public
keys, signed with the device's enrolled Ed25519 key (the server checks the advert against
it; a client that is no device signs with a fresh key), Shamir-share its secrets with the
cohort (encrypted to each peer), check the shares the others sent it (naming any that fail
to decrypt, whom the server then excludes), send its delta clipped to the round's
``l2_bound``, fixed-point encoded in ``Z_{2^32}``, masked and signed, then reveal the
shares the server needs to unmask the sum. The server never receives the delta in the
clear. When the server runs distributed DP (``[privacy] mode = 'distributed'``), the
block's ``noise_variance`` is this client's share of the noise: Skellam noise of that
variance (:mod:`fedrank.privacy.skellam`) is added to the encoded delta before masking.
Between stages the client polls ``GET /v1/secagg``.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedrank.client.sdk import Checkin, Client, ClientError, _body
from fedrank.client.user_ledger import PrivacyBudgetError
from fedrank.errors import FedrankError
from fedrank.privacy.skellam import sensitivities, skellam_noise
from fedrank.secagg import field, wire
from fedrank.secagg.client import SecAggClient
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.protocol import SecAggParams
from fedrank.secagg.proxy import MaskedInputProxy

#: The default longest pause between two polls (they start at ``poll_seconds`` and double).
MAX_POLL_SECONDS = 1.0
#: The largest per-client noise variance a check-in may ask for: more could not fit the
#: protocol's 32-bit sums (its standard deviation would exceed ``2**31``).
MAX_NOISE_VARIANCE = 2.0**62
#: The stages a client sends in, in order.
STAGES = ("advertise", "share_keys", "check_shares", "masked_input", "unmasking")


@dataclass(frozen=True)
class SecureReport:
    """What :func:`send_secure` did: the last stage it sent and the session's end
    (``finished`` with the number of contributors, or ``aborted``; ``None`` when it
    stopped early)."""

    sent: str
    outcome: str | None = None
    contributors: int | None = None


def _session(checkin: Checkin) -> tuple[SecAggParams, int, FixedPointEncoder, str, float]:
    block = checkin.secagg
    if not checkin.selected or block is None:
        raise FedrankError(
            "send_secure needs the check-in of a client selected by a [secagg] server"
        )
    try:
        session = str(block["session"])
        params = SecAggParams(
            base64.b64decode(session, validate=True),
            int(block["threshold"]),
            int(block["dimension"]),
        )
        encoder = FixedPointEncoder(
            float(block["scale"]), int(block["max_clients"]), l2_bound=float(block["l2_bound"])
        )
        noise_variance = float(block.get("noise_variance", 0.0))
        if not 0 <= noise_variance <= MAX_NOISE_VARIANCE:
            raise ValueError(
                f"noise_variance must be in [0, {MAX_NOISE_VARIANCE:g}] (noise that fits "
                f"32-bit sums), got {noise_variance}"
            )
        return params, int(block["id"]), encoder, session, noise_variance
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise FedrankError(f"the check-in's secagg block is malformed ({exc}): {block}") from exc


def _admit_secure(
    client: Client,
    checkin: Checkin,
    params: SecAggParams,
    encoder: FixedPointEncoder,
    noise_variance: float,
) -> None:
    """Record the round in the user's ledger: Skellam noise of ``noise_variance x t`` on
    the sum (at least ``t`` clients add their share) over encoded updates clipped to the
    round's ``l2_bound``; a round without distributed noise is refused."""
    assert client.ledger is not None
    if noise_variance <= 0:
        raise PrivacyBudgetError(
            "this client has a privacy budget, but the secure round adds no distributed "
            "noise (secure aggregation alone hides the message, not what the sum reveals): "
            "nothing was sent"
        )
    l1, l2 = sensitivities(encoder.scale, encoder.l2_bound, params.dimension)
    client.ledger.admit_skellam(
        client.base_url, checkin.round, noise_variance * params.threshold, l1, l2
    )


def send_secure(
    client: Client,
    checkin: Checkin,
    delta: np.ndarray,
    *,
    poll_seconds: float = 0.05,
    max_poll_seconds: float = MAX_POLL_SECONDS,
    timeout: float = 600.0,
    drop_after: str | None = None,
    noise_rng: np.random.Generator | None = None,
    masked_input_to: Callable[[dict[str, Any]], None] | None = None,
    signing_key: Ed25519PrivateKey | None = None,
) -> SecureReport:
    """Take part in the round's secure aggregation with ``delta`` (module docstring).

    Args:
        client: the SDK client of a ``[secagg]`` server.
        checkin: this client's selected check-in (:meth:`Client.checkin`).
        delta: the FedAvg delta, ``dimension`` floats; clipped to the round's ``l2_bound``.
        poll_seconds: the first pause between polls of ``GET /v1/secagg``; it doubles up
            to ``max_poll_seconds`` while a stage stays open (a large cohort polls less
            often: each poll is a request the server answers).
        timeout: give up (:class:`FedrankError`) after this many seconds.
        drop_after: stop after sending this stage, as a client that loses its connection
            would (to study dropouts); ``None``: run to the end.
        noise_rng: draws this client's share of distributed DP noise (when the block
            asks for one); ``None``: a generator seeded from OS entropy. A seeded one is
            for tests only: the server must not be able to predict the noise.
        masked_input_to: hand the masked input (its request body) to this client's proxy
            (:meth:`SecureProxy.receive`, over whatever transport joins them) instead of
            sending it to the server; every other stage goes to the server.
        signing_key: the Ed25519 key that signs the key advert and the masked input; a
            server that requires enrolled devices refuses any but the device's own (403
            ``secagg_wrong_key``). ``None``: the device's own key when ``client`` is an
            enrolled device (:mod:`fedrank.identity`), else a fresh key for this session
            (which the server binds to this client at the advert).

    Raises:
        ClientError: the server refused a message (e.g. this client dropped out of a stage
            whose deadline passed).
        FedrankError: the session was aborted, or the timeout passed.
        PrivacyBudgetError: ``client`` keeps a privacy budget, and the round has no
            distributed noise or would take the user over it: nothing is sent.
    """
    if not 0 < poll_seconds <= max_poll_seconds:
        raise FedrankError(
            f"poll_seconds must be in (0, max_poll_seconds], got {poll_seconds} and "
            f"{max_poll_seconds}"
        )
    if drop_after is not None and drop_after not in STAGES:
        raise FedrankError(f"drop_after must be one of {', '.join(STAGES)}, got {drop_after!r}")
    params, uid, encoder, session, noise_variance = _session(checkin)
    if client.ledger is not None:
        _admit_secure(client, checkin, params, encoder, noise_variance)
    x = np.asarray(delta, dtype=np.float64)
    if x.shape != (params.dimension,):
        raise FedrankError(f"delta must have {params.dimension} entries, got shape {x.shape}")
    encoded = encoder.encode(x)
    if noise_variance > 0:
        rng = np.random.default_rng() if noise_rng is None else noise_rng
        noise = skellam_noise(rng, noise_variance, params.dimension)
        encoded = field.add(encoded, noise.astype(np.uint64))  # two's complement, mod q
    if signing_key is None:
        device = client.device.enrolled(client.http)
        signing_key = None if device is None else device.key.private_key
    me = SecAggClient(uid, params, signing_key=signing_key)
    limit = encoder.max_clients
    ident = {"client_id": checkin.client_id, "session": session}
    deadline = time.monotonic() + timeout

    def post(stage: str, message: dict[str, Any]) -> None:
        body = {**ident, "stage": stage, "message": message}
        response = client._request("POST", "/v1/secagg", json=body)
        if response.status_code != 202:
            raise ClientError(response.status_code, _body(response))

    def wait_for(stage: str) -> dict[str, Any]:
        pause = poll_seconds
        while True:
            response = client._request("GET", "/v1/secagg", params=ident)
            if response.status_code != 200:
                raise ClientError(response.status_code, _body(response))
            view = dict(response.json())
            if view["stage"] == "aborted":
                raise FedrankError(f"the secure aggregation was aborted: {view.get('reason')}")
            if view["stage"] == stage:
                if not view.get("expected"):
                    raise FedrankError(
                        f"this client is not expected at {stage}: it dropped out, or the share "
                        "check excluded it"
                    )
                return view
            if stage != "end" and (
                view["stage"] in ("finishing", "finished")
                or STAGES.index(view["stage"]) > STAGES.index(stage)
            ):
                raise FedrankError(f"the session moved past {stage}: this client dropped out")
            if stage == "end" and view["stage"] == "finished":
                return view
            if time.monotonic() > deadline:
                raise FedrankError(f"no {stage} stage within {timeout} s")
            time.sleep(pause)
            pause = min(2 * pause, max_poll_seconds)  # a stage may wait for its deadline

    def message(stage: str, view: dict[str, Any]) -> dict[str, Any]:
        """This client's message of ``stage``, from the server's input for it."""
        if stage == "advertise":
            return wire.advertise_to_json(me.advertise_keys())
        if stage == "share_keys":
            directory = wire.directory_from_json(view["directory"], limit)
            return wire.share_keys_to_json(me.share_keys(directory))
        if stage == "check_shares":
            forwarded = wire.forwarded_from_json(view["forwarded"], limit)
            return wire.share_check_to_json(me.check_shares(forwarded))
        if stage == "masked_input":
            masking = wire.masking_from_json(view["masking"], limit)
            return wire.masked_to_json(me.masked_input(masking, encoded))
        request = wire.request_from_json(view["contributors"], limit)
        return wire.unmasking_to_json(me.unmask(request))

    for stage in STAGES:
        out = message(stage, {} if stage == "advertise" else wait_for(stage))
        if stage == "masked_input" and masked_input_to is not None:
            masked_input_to({**ident, "stage": stage, "message": out})
        else:
            post(stage, out)
        if drop_after == stage:
            return SecureReport(stage)
    end = wait_for("end")
    return SecureReport("unmasking", "finished", int(end["contributors"]))


class SecureProxy:
    """A proxy between its clients and a ``[secagg]`` server (FedPS's proxies, Sec. 3.4;
    docs/secagg.md, "Through proxies in the service"): it takes its clients' masked inputs
    (the bodies their :func:`send_secure` hands to ``masked_input_to``), adds them
    (:class:`~fedrank.secagg.proxy.MaskedInputProxy`) and sends the server one sum with its
    bearer token (``[[proxies]]``), with each client's signature of its masked input (the
    server accepts a sender only with its own signature). It sees each client's masked
    input, which still carries the client's self mask: nothing of a delta. Thread-safe: many
    clients may hand in at once.

    Args:
        client: the SDK client whose connection (and retries) the proxy uses.
        token: this proxy's token in the server's ``[[proxies]]``.
        dimension: the model's dimension (``[fedavg] dim``; the check-in's ``secagg``
            block says it too).
        max_clients: the most inputs it sums (the server refuses a sum over the proxy's
            ``max_clients``).
    """

    def __init__(self, client: Client, token: str, dimension: int, max_clients: int = 1000) -> None:
        self.client = client
        self.dimension = int(dimension)
        self._auth = {"Authorization": f"Bearer {token}"}
        self.max_clients = int(max_clients)
        self._lock = threading.Lock()
        self._session: str | None = None
        self._sum: MaskedInputProxy | None = None

    def receive(self, body: dict[str, Any]) -> None:
        """One client's masked-input body; every body of one sum is of one session."""
        if not isinstance(body, dict) or set(body) != {"client_id", "session", "stage", "message"}:
            raise FedrankError("a masked input's body has client_id, session, stage, message")
        if body["stage"] != "masked_input":
            raise FedrankError(f"a proxy takes masked inputs only, got stage {body['stage']!r}")
        masked = wire.masked_from_json(body["message"], self.dimension)
        with self._lock:
            if self._sum is None:
                self._session = str(body["session"])
                self._sum = MaskedInputProxy(self.dimension)
            if body["session"] != self._session:
                raise FedrankError("a masked input of another session: forward this sum first")
            if len(self._sum.senders) >= self.max_clients:
                raise FedrankError(f"this proxy sums at most {self.max_clients} inputs")
            self._sum.receive(masked)

    @property
    def senders(self) -> tuple[int, ...]:
        """The secure-aggregation ids of the clients whose input arrived."""
        with self._lock:
            return () if self._sum is None else self._sum.senders

    def forward(self) -> int:
        """Send the sum to the server (before the masked-input stage's deadline) and start
        afresh; returns how many clients it stands for.

        Raises:
            ClientError: the server refused the sum (the stage closed, a client's input
                also came directly, the token is wrong, ...).
        """
        with self._lock:
            if self._sum is None:
                raise FedrankError("no masked input reached this proxy: nothing to forward")
            total, session = self._sum.forward(), self._session
            self._sum = self._session = None
        message = wire.masked_sum_to_json(total)
        body = {"session": session, "stage": "masked_sum", "message": message}
        response = self.client._request("POST", "/v1/secagg", json=body, headers=self._auth)
        if response.status_code != 202:
            raise ClientError(response.status_code, _body(response))
        return len(total.senders)
