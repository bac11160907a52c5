"""The client SDK: what an application embeds to take part in federated training.

:class:`Client` talks to a fedrank server (:mod:`fedrank.server.app`):

* ``fetch_model()`` -- the model this client is served, cached with its ``ETag`` (a poll
  that finds nothing new costs a ``304`` with no body);
* ``send(...)`` -- one update, with a client-made ``message_id`` (the idempotency key: a
  resend after a lost answer is answered ``200 duplicate`` and never counted twice),
  retried with exponential backoff and jitter on connection errors, ``5xx`` and ``429``;
  if every retry fails the message goes to an offline queue on disk, and ``flush()``
  resends it later with the same ``message_id``;
* ``checkin()`` -- ask to be selected for the current round (FedAvg / FOLtR-ES servers),
  polling through the round's check-in window until the server has drawn its seats
  (:mod:`fedrank.server.cohort`); a :class:`Checkin`, with the server-issued ``seed`` and
  ``seed_token`` when the server issues FOLtR-ES seeds (``[foltr_es] server_seeds``,
  :mod:`fedrank.server.seeds`);
* FOLtR-ES (Kharitonov, WSDM 2019, Sec. 3.2): ``es_task(checkin, model)`` gives the seed to
  perturb the model with (the server's when it issued one, else one the client draws) and
  the perturbed models; ``send_es(task, metric, ...)`` reports the seed and the metric, with
  the seed's token.

With ``privacy_budget`` the client keeps the user's own privacy ledger
(:mod:`fedrank.client.user_ledger`): an update goes out only to a server that announces
central DP or a local mechanism (randomized signs, randomized response), or in a secure
round with distributed noise, and only while the user's epsilon over the rounds it took
part in stays within the budget.

Identity: the client's study branch comes from its ``enrollment_id``, a random UUID it
makes itself and keeps in ``state_dir`` (never anything identifying). On a server that
requires enrolled devices (docs/devices.md) the client is also a device: given the
operator's ``enrollment_token`` it makes an Ed25519 key in ``state_dir`` (0600), enrolls it
once, and signs every request with a session key (:class:`fedrank.identity.device.
DeviceAuth`); its check-ins, updates and secure-aggregation messages are then its device's.
Nothing else about the user is sent: updates are gradients, signs, seeds and metrics
computed on the device.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedrank.client.outbox import Outbox
from fedrank.client.user_ledger import PrivacyBudgetError, UserLedger
from fedrank.core.message import MessageBatch
from fedrank.errors import FedrankError
from fedrank.federation.registry import system
from fedrank.identity.device import DeviceState
from fedrank.systems.foltr_es.client import ESTask, FoltrEsClient
from fedrank.systems.foltr_es.wire import es_payload

#: Statuses worth retrying: the server may succeed on the next attempt.
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ClientError(FedrankError):
    """The server refused a request for a reason a retry cannot fix (``status``, ``body``)."""

    def __init__(self, status: int, body: Any) -> None:
        detail = body.get("detail", body) if isinstance(body, dict) else body
        super().__init__(f"the server answered {status}: {detail}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ServedModel:
    """The model a client is served."""

    version: int
    iteration: int
    workload: str
    branch: str
    served: str  # "trained", or "defaults" in a control branch (send metrics only)
    params: np.ndarray
    parameter_names: list[str] | None
    config: dict[str, Any]
    etag: str | None


@dataclass(frozen=True)
class SendResult:
    """``status``: ``accepted`` (202), ``duplicate`` (200), ``stale`` (409: recompute on the
    new model), ``refused`` (other 409: late, not selected) or ``queued`` (offline)."""

    status: str
    message_id: str
    http_status: int | None
    body: Any


@dataclass(frozen=True)
class Checkin:
    """The server's decision on ``POST /v1/checkin``, once the round's seats are drawn
    (:meth:`Client.checkin` polls through the check-in window before).

    ``selected`` clients get the round's ``model_version`` and reporting ``deadline``; the
    others ``retry_after_seconds`` (the next round). ``seed`` and ``seed_token`` are set
    when the server issues FOLtR-ES seeds: perturb the model with that seed and send the
    token with the report (:meth:`Client.es_task`, :meth:`Client.send_es`). The answer's
    JSON fields also read by name, ``checkin["selected"]``.
    """

    client_id: str
    selected: bool
    round: int
    model_version: int | None = None
    deadline: float | None = None
    retry_after_seconds: float | None = None
    seed: int | None = None
    seed_token: str | None = None
    #: The round's secure-aggregation session (``[secagg]`` servers): ``session``, ``id``,
    #: ``threshold``, ``dimension``, ``l2_bound``, ``scale``, ``max_clients``,
    #: ``noise_variance`` (:func:`fedrank.client.secagg.send_secure`).
    secagg: dict[str, Any] | None = None

    def __getitem__(self, key: str) -> Any:
        if key == "client_id" or getattr(self, key, None) is None:
            raise KeyError(key)
        return getattr(self, key)

    @staticmethod
    def from_answer(client_id: str, answer: dict[str, Any]) -> Checkin:
        """Read the server's JSON answer; anything unexpected raises :class:`FedrankError`."""
        try:
            seed = answer.get("seed")
            token = answer.get("seed_token")
            if (seed is None) != (token is None):
                raise ValueError("seed and seed_token come together")
            return Checkin(
                client_id=client_id,
                selected=bool(answer["selected"]),
                round=int(answer["round"]),
                model_version=_maybe(int, answer.get("model_version")),
                deadline=_maybe(float, answer.get("deadline")),
                retry_after_seconds=_maybe(float, answer.get("retry_after_seconds")),
                seed=_maybe(int, seed),
                seed_token=_maybe(str, token),
                secagg=_maybe(dict, answer.get("secagg")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FedrankError(
                f"the server's check-in answer is malformed ({exc}): {answer}"
            ) from exc


def _maybe(kind: Any, value: Any) -> Any:
    return None if value is None else kind(value)


class Client:
    """A fedrank client (see the module docstring).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        state_dir: where the enrollment id and the offline queue live (``None``: in memory
            only; the enrollment id is then new for every Client).
        enrollment_id: use this id instead of the stored or a new one.
        timeout: seconds per request.
        max_attempts: attempts per message before it is queued offline (>= 1).
        backoff: first retry delay in seconds; doubles every attempt, with jitter.
        rng: randomness for ids and jitter (seed it for reproducible runs).
        http: an ``httpx.Client`` to share connections between many clients.
        privacy_budget: the user's own epsilon budget over every round it takes part in
            (:class:`~fedrank.client.user_ledger.UserLedger`, kept in ``state_dir``): each
            update is sent only to a server running central DP or a local mechanism, or in
            a secure round with distributed noise, and only while the user's epsilon over
            its own rounds stays within it; ``None``: no ledger.
        privacy_delta: the delta of ``privacy_budget``.
        enrollment_token: the operator's single-use token: the device's key is enrolled
            with it on the first request (once; later runs find the enrollment in
            ``state_dir``). Without it a device enrolled before still signs its requests.
    """

    def __init__(
        self,
        base_url: str,
        state_dir: Path | None = None,
        enrollment_id: str | None = None,
        timeout: float = 10.0,
        max_attempts: int = 5,
        backoff: float = 0.2,
        rng: np.random.Generator | None = None,
        http: httpx.Client | None = None,
        privacy_budget: float | None = None,
        privacy_delta: float = 1e-6,
        enrollment_token: str | None = None,
    ) -> None:
        if max_attempts < 1:
            raise FedrankError(f"max_attempts must be >= 1, got {max_attempts}")
        self.base_url = base_url.rstrip("/")
        self.state_dir = None if state_dir is None else Path(state_dir)
        self.rng = rng or np.random.default_rng()
        self.max_attempts = max_attempts
        self.backoff = backoff
        self._own_http = http is None
        self.http = http or httpx.Client(timeout=timeout)
        self.enrollment_id = enrollment_id or self._stored_enrollment()
        self.device = DeviceState(self.base_url, self.state_dir, enrollment_token)
        self.outbox = Outbox(self.state_dir)
        self._model: ServedModel | None = None
        self.ledger = (
            None
            if privacy_budget is None
            else UserLedger(self.state_dir, privacy_budget, privacy_delta)
        )

    def close(self) -> None:
        if self._own_http:
            self.http.close()
        if self.ledger is not None:
            self.ledger.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- identity and the offline queue -------------------------------------------------

    def new_id(self) -> str:
        """A random UUID (version 4) from the client's generator."""
        return str(uuid.UUID(bytes=self.rng.bytes(16), version=4))

    def _stored_enrollment(self) -> str:
        if self.state_dir is None:
            return self.new_id()
        path = self.state_dir / "enrollment.json"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("x") as created:  # exclusive: two clients starting at once agree
                enrollment = self.new_id()
                created.write(json.dumps({"enrollment_id": enrollment}))
                return enrollment
        except FileExistsError:
            pass
        for _ in range(100):  # the other client may still be writing it
            text = path.read_text()
            if text:
                return str(json.loads(text)["enrollment_id"])
            time.sleep(0.01)
        raise FedrankError(f"{path} stays empty; delete it to enroll again")

    @property
    def device_id(self) -> str | None:
        """This client's enrolled device id (``None``: not an enrolled device)."""
        auth = self.device.auth
        return None if auth is None else auth.device_id

    def queued(self) -> list[dict[str, Any]]:
        """Messages waiting in the offline queue (:mod:`fedrank.client.outbox`)."""
        return self.outbox.messages()

    # -- requests -------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request with retries and backoff, signed as this device when it is one
        (enrolled first, with the token given); raises the last error when all fail."""
        device = self.device.enrolled(self.http)
        last: Exception | None = None
        for attempt in range(self.max_attempts):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1)
                time.sleep(delay * (0.5 + self.rng.random()))
            try:
                auth = device or httpx.USE_CLIENT_DEFAULT
                response = self.http.request(method, self.base_url + path, auth=auth, **kwargs)
            except httpx.TransportError as exc:
                last = exc
                continue
            if response.status_code not in RETRYABLE:
                return response
            last = ClientError(response.status_code, _body(response))
        assert last is not None
        raise last

    def fetch_model(self) -> ServedModel:
        """The served model; a cached copy when the server answers ``304 Not Modified``."""
        headers = {}
        if self._model is not None and self._model.etag:
            headers["If-None-Match"] = self._model.etag
        response = self._request(
            "GET", "/v1/model", params={"enrollment_id": self.enrollment_id}, headers=headers
        )
        if response.status_code == 304 and self._model is not None:
            return self._model
        if response.status_code != 200:
            raise ClientError(response.status_code, _body(response))
        data = response.json()
        self._model = ServedModel(
            version=int(data["model_version"]),
            iteration=int(data["iteration"]),
            workload=str(data["workload"]),
            branch=str(data["branch"]),
            served=str(data["served"]),
            params=np.asarray(data["params"], dtype=np.float64),
            parameter_names=data.get("parameter_names"),
            config=dict(data["config"]),
            etag=response.headers.get("etag"),
        )
        return self._model

    def send(
        self,
        payload: dict[str, Any],
        model_version: int,
        metrics: dict[str, float] | None = None,
        client_id: str | None = None,
        message_id: str | None = None,
        local_epsilon: float | None = None,
    ) -> SendResult:
        """Send one message (``payload`` ``{}``: metrics only); queued offline when the
        server cannot be reached after every retry. ``local_epsilon``: the epsilon per
        message of a local randomization this device applied to ``payload`` (randomized
        signs, randomized response); with ``privacy_budget`` the ledger records the
        device's own figure, not the server's announcement.

        Raises:
            PrivacyBudgetError: with ``privacy_budget``, an update the user's ledger does
                not admit (nothing is sent or queued).
        """
        if payload and self.ledger is not None:
            self._admit(model_version, local_epsilon)
        message: dict[str, Any] = {
            "message_id": message_id or self.new_id(),
            "model_version": int(model_version),
            "enrollment_id": self.enrollment_id,
            "payload": payload,
            "metrics": metrics or {},
        }
        if client_id is not None:
            message["client_id"] = client_id
        return self._deliver(message, queue_on_failure=True)

    def _admit(self, model_version: int, local_epsilon: float | None = None) -> None:
        """Record the round of an update in the user's ledger: with ``local_epsilon``, the
        device's own local randomization; else from the server's announced mechanism
        (``/v1/status``'s ``privacy``): central DP with a noise multiplier, or a local
        mechanism with a finite epsilon per message; else refuse it."""
        assert self.ledger is not None
        if local_epsilon is not None:
            self.ledger.admit_local(self.base_url, int(model_version), float(local_epsilon))
            return
        response = self._request("GET", "/v1/status")
        if response.status_code != 200:
            raise ClientError(response.status_code, _body(response))
        privacy = dict(response.json().get("privacy") or {})
        mechanism = str(privacy.get("mechanism", "no privacy mechanism"))
        z = privacy.get("noise_multiplier")
        per_message = privacy.get("per_message")
        if mechanism == "gaussian (central)" and isinstance(z, int | float):
            self.ledger.admit(self.base_url, int(model_version), float(z))
        elif (
            mechanism.endswith("(local)")
            and isinstance(per_message, dict)
            and per_message.get("delta") == 0
            and isinstance(per_message.get("epsilon"), int | float)
        ):
            self.ledger.admit_local(self.base_url, int(model_version), per_message["epsilon"])
        else:
            raise PrivacyBudgetError(
                f"this client has a privacy budget, but the server announces {mechanism!r}, "
                "neither central DP with a noise multiplier nor a local mechanism with an "
                "epsilon per message: nothing was sent"
            )

    def _deliver(self, message: dict[str, Any], queue_on_failure: bool) -> SendResult:
        mid = message["message_id"]
        try:
            response = self._request("POST", "/v1/updates", json=message)
        except (httpx.TransportError, ClientError) as exc:
            if not queue_on_failure:
                raise
            self.outbox.add(message)
            return SendResult("queued", mid, getattr(exc, "status", None), str(exc))
        body = _body(response)
        if response.status_code == 202:
            return SendResult("accepted", mid, 202, body)
        if response.status_code == 200:
            return SendResult("duplicate", mid, 200, body)
        if response.status_code == 409:
            kind = "stale" if isinstance(body, dict) and body.get("error") == "stale" else "refused"
            return SendResult(kind, mid, 409, body)
        raise ClientError(response.status_code, body)

    def flush(self) -> list[SendResult]:
        """Resend queued messages (same ``message_id``); the ones the server answered are
        removed from the queue, the ones it still cannot take stay."""
        results, done = [], []
        for message in self.queued():
            try:
                results.append(self._deliver(message, queue_on_failure=False))
            except (httpx.TransportError, ClientError) as exc:
                if isinstance(exc, ClientError) and exc.status not in RETRYABLE:
                    results.append(
                        SendResult("refused", message["message_id"], exc.status, exc.body)
                    )
                    done.append(message["message_id"])
                continue
            done.append(message["message_id"])
        # Only what this flush settled leaves the queue: messages another client queued
        # meanwhile stay.
        self.outbox.remove(done)
        return results

    def send_update(
        self,
        model: ServedModel,
        message: MessageBatch,
        metrics: dict[str, float] | None = None,
        client_id: str | None = None,
        message_id: str | None = None,
    ) -> SendResult:
        """Send this device's update for ``model``: ``message`` is what the system's client
        half computed (one message, :mod:`fedrank.systems`), encoded here by the system's
        own wire format (``systems/<name>/wire.py``) and sent with :meth:`send`; the
        client half's local epsilon goes to the user's ledger. Works for every system of
        the registry, so an application needs no payload code of its own."""
        if message.size != 1:
            raise FedrankError(f"send_update sends one device's message, got {message.size}")
        sys = system(model.workload)
        config = sys.config_from_view(model.config)
        max_n = int(model.config.get("max_n") or sys.max_n)
        (payload,) = sys.wire(config, max_n).encode(message)
        local = sys.client(config).message_epsilon()
        return self.send(payload, model.version, metrics, client_id, message_id, local)

    def send_batch(
        self,
        batch: MessageBatch,
        model_version: int,
        message_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Send many clients' messages at once in their columnar form (what a proxy or a
        simulator forwards: :meth:`MessageBatch.to_json` under ``"batch"``). The batch is
        updates of the trained branch, accepted or refused whole; the answer has one status
        per message (202 accepted, 200 duplicate). Resending with the same
        ``message_ids`` is safe.

        Raises:
            ClientError: the server refused the batch (e.g. 422 with the reason).
            PrivacyBudgetError: this client keeps a user's privacy budget: a batch holds
                many clients' messages, which one user's ledger cannot account.
        """
        if self.ledger is not None:
            raise PrivacyBudgetError(
                "this client keeps one user's privacy budget; a batch forwards many clients' "
                "messages, which that ledger cannot account: nothing was sent (use a Client "
                "without privacy_budget to forward batches)"
            )
        ids = message_ids if message_ids is not None else [self.new_id() for _ in range(batch.size)]
        body = {"batch": batch.to_json(), "message_ids": ids, "model_version": int(model_version)}
        response = self._request("POST", "/v1/updates:batch", json=body)
        if response.status_code != 200:
            raise ClientError(response.status_code, _body(response))
        return dict(response.json())

    def checkin(self, client_id: str | None = None, wait_seconds: float = 120.0) -> Checkin:
        """Ask to be selected for the current round (``client_id``: the client's own random
        id for rounds; an enrolled device is its device id, the default). While the round's
        check-in window is open the server answers "waiting" with when to poll again; this
        polls then, for at most ``wait_seconds`` (:class:`FedrankError` after that), and
        returns the server's decision: selected (with the issued seed when the server issues
        them) or not (retry next round)."""
        device = self.device.enrolled(self.http)
        client_id = client_id or (None if device is None else device.device_id)
        if client_id is None:
            raise FedrankError("checkin needs a client_id, or an enrolled device")
        give_up = time.monotonic() + wait_seconds
        while True:
            response = self._request("POST", "/v1/checkin", json={"client_id": client_id})
            if response.status_code != 200:
                raise ClientError(response.status_code, _body(response))
            answer = response.json()
            if not (isinstance(answer, dict) and answer.get("waiting") is True):
                return Checkin.from_answer(client_id, answer)
            left = give_up - time.monotonic()
            if left <= 0:
                raise FedrankError(
                    f"round {answer.get('round')}'s check-in window is still open after "
                    f"{wait_seconds} s (the server waits for more clients); check in again "
                    "later, or wait longer (wait_seconds)"
                )
            try:
                delay = float(answer["retry_after_seconds"])
            except (KeyError, TypeError, ValueError) as exc:
                raise FedrankError(f"the server's check-in answer is malformed: {answer}") from exc
            time.sleep(min(max(delay, 0.01), left))

    def es_task(self, checkin: Checkin | None, model: ServedModel) -> ESTask:
        """The FOLtR-ES report this client computes on ``model``: with the seed the server
        issued at ``checkin`` (and its token), or, on a server that lets clients choose
        (``config["server_seeds"]`` false), a seed drawn from the client's generator
        (:meth:`FoltrEsClient.task <fedrank.systems.foltr_es.client.FoltrEsClient.task>`).

        Raises:
            FedrankError: not a FOLtR-ES server; not selected; the server issues seeds but
                none was issued; or the seed was issued for another model version than
                ``model`` (check in again: a new version gets a new seed).
        """
        half = self.client_half(model)
        if not isinstance(half, FoltrEsClient):
            raise FedrankError(f"the server runs the {model.workload} workload, not foltr-es")
        client_id = None if checkin is None else checkin.client_id
        if checkin is not None and not checkin.selected:
            raise FedrankError(
                f"client {client_id!r} is not selected in round {checkin.round}; check in "
                f"again in {checkin.retry_after_seconds} s"
            )
        issued = None
        if checkin is not None and checkin.seed is not None:
            if checkin.model_version != model.version:
                raise FedrankError(
                    f"the seed was issued for model version {checkin.model_version}, but the "
                    f"served model is version {model.version}: check in again for its seed"
                )
            assert checkin.seed_token is not None  # they come together (from_answer)
            issued = (checkin.seed, checkin.seed_token)
        return half.task(model.version, self.rng, issued, client_id)

    def client_half(self, model: ServedModel) -> Any:
        """The client half of the system ``model`` is from (``systems/<name>/client.py``),
        built from the section the server serves with it."""
        sys = system(model.workload)
        return sys.client(sys.config_from_view(model.config))

    def send_es(
        self,
        task: ESTask,
        metric: float,
        antithetic_metric: float | None = None,
        metrics: dict[str, float] | None = None,
        message_id: str | None = None,
        local_epsilon: float | None = None,
    ) -> SendResult:
        """Report a FOLtR-ES task's (privatized) metric, and the antithetic one when the
        server uses antithetic variates, with the seed's token (:meth:`send`: retries, the
        offline queue; ``local_epsilon``: the randomized response's epsilon per message,
        for the user's ledger)."""
        payload = es_payload(task.seed, metric, antithetic_metric, task.seed_token)
        return self.send(
            payload,
            task.model_version,
            metrics,
            client_id=task.client_id,
            message_id=message_id,
            local_epsilon=local_epsilon,
        )


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
