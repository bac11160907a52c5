"""The HTTP API of the federation server (Starlette on uvicorn).

Endpoints (all JSON unless noted; the OpenAPI document is at ``/openapi.json``):

* ``GET /v1/model`` -- the model this client is served (its branch from ``enrollment_id``),
  with ``ETag`` / ``If-None-Match`` for cheap polling; ``GET /v1/model/{version}``.
* ``POST /v1/updates`` -- one message; ``202`` accepted, ``200`` duplicate (same
  ``message_id``), ``409`` stale / late / not selected, ``4xx`` with a reason for anything
  malformed, ``503`` while paused, ``403 privacy_budget_spent`` once ``[privacy]``'s budget
  is used (:mod:`fedrank.server.privacy`; also on check-ins and closes). Also in the
  compact binary form (``Content-Type: application/vnd.fedrank.update``, ids in ``X-Message-Id`` /
  ``X-Model-Version`` / ``X-Enrollment-Id`` / ``X-Client-Id`` headers).
* ``POST /v1/updates:batch`` -- many messages, or a proxy's merged aggregate.
* ``POST /v1/checkin`` -- round selection (every workload but frecency, with ``[rounds]``); with
  ``[foltr_es] server_seeds`` a selected client also gets its ``seed`` and ``seed_token``
  (:mod:`fedrank.server.seeds`), and its update must carry the token.
* ``GET /v1/status`` (``privacy``: each user's guarantee so far), ``GET /v1/summary``,
  ``GET /metrics`` (Prometheus text).
* ``POST /v1/admin/{close,pause,resume}`` -- bearer token of ``[server] admin_token``.

Bad input never reaches the writer: it is answered here, counted in
``updates_rejected_total``, and changes nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive

from fedrank.aggregators.mean import WeightedMeanState
from fedrank.core.codec import decode_batch
from fedrank.core.message import MessageBatch
from fedrank.errors import CodecError, DataFormatError, FedrankError
from fedrank.server.cohort import Cohort
from fedrank.server.config import Proxy, ServerConfig
from fedrank.server.engine import Engine, Incoming, Messages, Outcome
from fedrank.server.envelope import (
    BINARY,
    BINARY_BATCH,
    ENVELOPE,
    JSON,
    MAX_BATCH,
    BadRequest,
    MetricSchema,
    all_ids,
    batch_answer,
    identifier,
    json_response,
    known_version,
)
from fedrank.server.openapi import openapi_document
from fedrank.server.prometheus import prometheus_text
from fedrank.server.secagg_round import SecAggRound
from fedrank.server.seeds import ClaimKey, SeedClaims, SeedIssuer, open_seeds
from fedrank.server.store import ModelVersion, Store
from fedrank.systems.wire import EMPTY, Parsed, PayloadError

log = logging.getLogger("fedrank.server")
#: The endpoints whose refusals count as refused updates (``updates_rejected_total``).
UPDATE_ENDPOINTS = frozenset({"updates", "batch"})


class Server:
    """The API's handlers around one :class:`Engine` (created at start-up)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.metric_schema = MetricSchema(config.metrics)
        self.engine: Engine | None = None
        self.requests: Counter[tuple[str, int]] = Counter()
        #: Refused requests that are not updates (model, check-in, admin), by endpoint and code.
        self.refused: Counter[tuple[str, str]] = Counter()
        self._branches: dict[str | None, str] = {}
        self.cohort: Cohort | None = None
        #: The round's secure-aggregation session (``[secagg]``), else ``None``, and the
        #: previous round's (its clients may still ask how it ended).
        self.secagg: SecAggRound | None = None
        self.secagg_previous: SecAggRound | None = None
        #: Server-issued FOLtR-ES seeds (``[foltr_es] server_seeds``): the issuer and the
        #: seeds reported so far; ``None`` when clients draw their own seeds.
        self.seeds: SeedIssuer | None = None
        self.claims: SeedClaims | None = None
        self._scheduler: asyncio.Task[None] | None = None
        #: Scheduled closes that failed (safeguards, a failing store): in a row, in all,
        #: the last error, and when the scheduler may try again (back-off, never a loop).
        self.close_failures = 0
        self.close_failures_total = 0
        self.last_close_error: dict[str, Any] | None = None
        self._close_retry_at = 0.0

    # -- lifecycle ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        self.engine = await loop.run_in_executor(None, Engine, self.config, loop)
        if self.config.server_seeds:
            oldest = self.engine.snapshot().version - self.config.server.max_staleness
            self.seeds, self.claims = await loop.run_in_executor(
                None, open_seeds, self.engine.store.directory, oldest
            )
        if self.config.rounds.enabled:
            self.cohort = self._new_cohort(0)
        self._scheduler = asyncio.create_task(self._schedule())
        try:
            yield
        finally:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
            await loop.run_in_executor(None, self.engine.stop)

    def _new_cohort(self, number: int) -> Cohort:
        r, sa = self.config.rounds, self.config.secagg
        issue = None if self.seeds is None else self.seeds.issue
        if sa.enabled:
            assert self.engine is not None  # started before the first round
            self.secagg_previous = self.secagg
            self.secagg = SecAggRound(
                number,
                self.engine.workload.dim,
                r.clients_per_round,
                sa.threshold_for(r.clients_per_round),
                sa.l2_bound,
                sa.stage_seconds,
                self.engine.privacy.plan,
            )
        return Cohort(number, r.clients_per_round, r.t_max_seconds, issue_seed=issue)

    async def _schedule(self) -> None:
        """Close iterations by the configured policy (or when a round completes)."""
        tick = self.config.iteration.tick_seconds
        memory: tuple[int, np.ndarray | None, int] = (0, None, -1)
        while True:
            await asyncio.sleep(tick)
            try:
                memory = await self._tick(*memory)
            except Exception:  # keep scheduling: a failed tick is logged, the next one runs
                log.exception("the iteration scheduler failed; continuing")

    async def _tick(
        self, stable: int, last_sign: np.ndarray | None, last_iteration: int
    ) -> tuple[int, np.ndarray | None, int]:
        """One look at the open iteration. ``stable`` counts ticks over which the
        aggregate's sign has not changed (the adaptive policy); returns the new memory."""
        assert self.engine is not None
        engine = self.engine
        snap = engine.snapshot()
        if snap.paused or snap.budget_spent or time.monotonic() < self._close_retry_at:
            return stable, last_sign, last_iteration
        if snap.iteration != last_iteration:
            stable, last_sign, last_iteration = 0, None, snap.iteration
        if self.cohort is not None:
            await self._schedule_round(snap.updates_in_iteration)
            return stable, last_sign, last_iteration
        if self.config.iteration.stable_ticks and snap.updates_in_iteration:
            sign = engine.aggregate_sign()
            same = last_sign is not None and np.array_equal(sign, last_sign)
            stable, last_sign = (stable + 1 if same else 0), sign
        if engine.policy.should_close(engine.policy_view(stable)):
            await self._scheduled_close(engine.policy.name)
        return stable, last_sign, last_iteration

    async def _scheduled_close(self, reason: str) -> bool:
        """Close the iteration for the scheduler; returns whether it closed. A close that
        fails (a safeguard refuses the step, the store fails) is logged and retried after
        an exponential back-off of ``tick * 2**k`` seconds, at most 5 minutes, never in a
        loop; ``/v1/status`` shows the failures and the last error until a close succeeds.
        An operator's pause applied after the scheduler looked wins: no close."""
        assert self.engine is not None
        outcome = await self.engine.command("close", reason=reason, scheduled=True)
        if outcome.status == 200:
            self.close_failures, self.last_close_error = 0, None
            return True
        if outcome.body.get("error") in ("empty", "too_few", "paused"):
            return False  # nothing to close yet, or paused meanwhile: not a failure
        self.close_failures += 1
        self.close_failures_total += 1
        self.last_close_error = outcome.body
        delay = min(self.config.iteration.tick_seconds * 2.0**self.close_failures, 300.0)
        self._close_retry_at = time.monotonic() + delay
        log.error(
            "closing the iteration failed (%s: %s); next try in %.2g s",
            outcome.body.get("error"),
            outcome.body.get("detail"),
            delay,
        )
        return False

    async def _schedule_round(self, n_updates: int) -> None:
        assert self.engine is not None and self.cohort is not None
        now = time.time()
        if self.secagg is not None:
            await self._schedule_secagg(now)
            return
        if not self.cohort.complete(now):
            return
        if n_updates >= self.config.iteration.min_updates and not await self._scheduled_close(
            f"round {self.cohort.number} complete"
        ):
            return  # the round stays open until its close succeeds
        self.cohort = self._new_cohort(self.cohort.number + 1)

    async def _schedule_secagg(self, now: float) -> None:
        """Advance the round's secure aggregation; once it has the sum, fold it in as one
        aggregate of ``|U3|`` unit-weight updates and close the iteration; after a finished
        or aborted session the next round starts."""
        assert self.engine is not None and self.cohort is not None and self.secagg is not None
        sa = self.secagg
        sa.advance(now)
        if sa.ready and not sa.finished:
            await asyncio.get_running_loop().run_in_executor(None, sa.finish)
        if sa.aborted is not None:
            log.warning("secure aggregation of round %d aborted: %s", sa.number, sa.aborted)
        elif sa.result is not None:
            if not sa.stored:
                n = sa.result.contributors
                state = WeightedMeanState(sa.result.total, float(n), n)
                text = orjson.dumps(self.engine.aggregator.state_to_json(state)).decode()
                version = self.engine.snapshot().version
                item = Incoming(
                    f"secagg-{sa.session_id.hex()}", version, self.config.branches[0].name,
                    "aggregate", text, {}, aggregate=state, count=n,
                )  # fmt: skip
                (outcome,) = await self.engine.submit([item])
                sa.stored = outcome.status == 202
                if not sa.stored:
                    log.error("the secure aggregate was refused: %s", outcome.body)
            if sa.stored:  # stored once; a failed close is retried, never the aggregate
                await self._scheduled_close(f"round {sa.number} securely aggregated")
                if self.close_failures:
                    return  # the round stays until its close succeeds
        else:
            return
        self.cohort = self._new_cohort(self.cohort.number + 1)

    # -- helpers -----------------------------------------------------------------------

    def _count_rejection(self, endpoint: str, err: BadRequest) -> None:
        """Count a refusal: as a refused *update* only on the endpoints that carry updates;
        a refused model fetch, check-in or admin call is a refused request, not an update."""
        assert self.engine is not None
        if endpoint in UPDATE_ENDPOINTS:
            self.engine.loop_rejected[err.code] += 1
        else:
            self.refused[(endpoint, err.code)] += 1
        self.requests[(endpoint, err.status)] += 1

    def _reject(self, endpoint: str, err: BadRequest) -> Response:
        self._count_rejection(endpoint, err)
        return json_response({"error": err.code, "detail": err.detail}, err.status)

    async def _body(self, request: Request) -> bytes:
        return await self._read(request.headers, request.receive)

    async def _read(self, headers: Mapping[str, str], receive: Receive) -> bytes:
        """The body from the ASGI ``receive`` callable, refusing it (413) as soon as it
        exceeds ``max_body_bytes`` and (408) when it is not complete within
        ``body_timeout`` (a slow body cannot hold the connection). A client that
        disconnects mid-body raises ``ClientDisconnect``: a partial body is never read as a
        whole one."""
        limit = self.config.server.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BadRequest(413, "too_large", f"the body exceeds {limit} bytes")
        parts, size = [], 0
        seconds = self.config.server.body_timeout
        # the deadline as one timer that cancels this task (asyncio.timeout's mechanism,
        # at a third of its cost: this runs for every request)
        task = asyncio.current_task()
        assert task is not None
        expired: list[bool] = []

        def expire() -> None:
            expired.append(True)
            task.cancel()

        handle = asyncio.get_running_loop().call_later(seconds, expire)
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BadRequest(413, "too_large", f"the body exceeds {limit} bytes")
                parts.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(parts)
        except asyncio.CancelledError:
            if expired and task.uncancel() == 0:  # our deadline, not a shutdown
                raise BadRequest(
                    408, "body_timeout", f"the body did not arrive within {seconds:g} s"
                ) from None
            raise
        finally:
            handle.cancel()

    def _incoming(self, data: Any, current: int) -> tuple[Incoming, str | None]:
        """A JSON message envelope, validated; returns it and its ``client_id``."""
        assert self.engine is not None
        if not isinstance(data, dict):
            raise BadRequest(422, "invalid", "a message must be a JSON object")
        unknown = sorted(set(data) - ENVELOPE)
        if unknown:
            raise BadRequest(422, "invalid", f"unknown field(s) {unknown}")
        message_id = identifier(data.get("message_id"), "message_id")
        version = known_version(data.get("model_version"), current)
        enrollment = identifier(data.get("enrollment_id"), "enrollment_id", required=False)
        client = identifier(data.get("client_id"), "client_id", required=False)
        payload = data.get("payload", {})
        if not isinstance(payload, dict):
            raise BadRequest(422, "invalid", "payload must be a JSON object")
        metrics = self.metric_schema.check(data.get("metrics"))
        parsed: Parsed = EMPTY
        if payload:
            try:
                parsed = self.engine.workload.wire.parse(payload)
            except PayloadError as exc:
                raise BadRequest(422, exc.code, str(exc)) from exc
        return self._make(message_id, version, enrollment, payload, metrics, parsed), client

    def _make(
        self,
        message_id: str | None,
        version: int,
        enrollment: str | None,
        payload: dict[str, Any],
        metrics: dict[str, float],
        parsed: Parsed,
    ) -> Incoming:
        assert self.engine is not None and message_id is not None
        branch = self.engine.branch(enrollment)
        kind = "ping" if parsed.empty else "update"
        if kind == "update" and self.engine.served(branch) == "defaults":
            raise BadRequest(
                422,
                "control_branch",
                f"branch {branch!r} is served fixed parameters: it sends metrics only "
                "(an empty payload)",
            )
        text = orjson.dumps(payload).decode()
        return Incoming(message_id, version, branch, kind, text, metrics, parsed=parsed)

    def _round_check(self, items: list[tuple[Incoming, str | None]]) -> None:
        """Refuse reports from clients not selected, late or already reported; reserve the
        others (one report per client, even when two arrive at once)."""
        if self.cohort is None:
            return
        assert self.engine is not None
        now = time.time()
        for item, client in items:
            # A message already stored is a retry: the writer answers it 200 duplicate.
            if item.kind == "update" and item.message_id not in self.engine.ids:
                refused = self.cohort.refusal(client, now)
                if refused is not None:
                    raise BadRequest(409, *refused)

    def _round_reported(self, items: list[tuple[Incoming, str | None]], out: list[Outcome]) -> None:
        if self.cohort is None:
            return
        for (item, client), outcome in zip(items, out, strict=True):
            if item.kind == "update" and client and client in self.cohort.pending:
                self.cohort.settle(client, accepted=outcome.status == 202)

    @staticmethod
    def _reports(
        items: list[tuple[Incoming, str | None]],
    ) -> list[tuple[str, int, int, bytes | None] | None]:
        """``(message_id, model_version, seed, seed token)`` of each update (``None`` for a
        ping or an aggregate): what :meth:`_seed_check` looks at."""
        return [
            (i.message_id, i.model_version, i.parsed.seed, i.parsed.seed_token)
            if i.kind == "update"
            else None
            for i, _ in items
        ]

    def _seed_check(
        self, reports: list[tuple[str, int, int, bytes | None] | None], numbered: bool = False
    ) -> list[tuple[int, ClaimKey, str]]:
        """Server-issued FOLtR-ES seeds (:mod:`fedrank.server.seeds`): refuse an update
        whose ``seed_token`` is missing or was not issued for its seed (422
        ``bad_seed_token``), was issued for another model version than the message names
        (409 ``stale``), or whose seed was already reported under another ``message_id``
        (409 ``duplicate_seed``). Returns ``(index, claim, message_id)`` of the claims to
        make with :meth:`_seed_claim` once every other check has passed (nothing is
        reserved here). A server that does not issue seeds refuses a token. A message
        already stored is a retry, answered 200 duplicate by the writer: not checked.
        ``numbered``: refusals name the message's index (a batch refused whole)."""
        assert self.engine is not None
        engine = self.engine
        if self.seeds is None or self.claims is None:
            for k, report in enumerate(reports):
                if report is not None and report[3] is not None and report[0] not in engine.ids:
                    where = f"message {k}: " if numbered else ""
                    raise BadRequest(
                        422,
                        "invalid_payload",
                        f"{where}this server does not issue seeds ([foltr_es] server_seeds = "
                        "false): drop seed_token and report the seed you drew",
                    )
            return []
        self.claims.forget_before(engine.snapshot().version - self.config.server.max_staleness)
        out: list[tuple[int, ClaimKey, str]] = []
        here: dict[ClaimKey, tuple[int, str]] = {}  # seeds reported earlier in this request
        for k, report in enumerate(reports):
            if report is None or report[0] in engine.ids:
                continue
            message_id, version, seed, token = report
            where = f"message {k}: " if numbered else ""
            if token is None:
                raise BadRequest(
                    422,
                    "bad_seed_token",
                    f"{where}this server issues the seeds ([foltr_es] server_seeds): check in "
                    "(POST /v1/checkin) and send the seed and seed_token it returned",
                )
            refused = self.seeds.refusal(token, seed, version)
            key = SeedIssuer.claim_key(token)
            if refused is None:
                refused = self.claims.refusal(key, message_id)
            if refused is None and here.get(key, (k, message_id))[1] != message_id:
                first = here[key][0]
                detail = f"message {first} reports the same issued seed; each counts once"
                refused = (409, "duplicate_seed", detail)
            if refused is not None:
                status, code, detail = refused
                raise BadRequest(status, code, where + detail)
            here[key] = (k, message_id)
            out.append((k, key, message_id))
        return out

    def _seed_claim(self, claims: list[tuple[int, ClaimKey, str]]) -> None:
        """Claim the seeds :meth:`_seed_check` passed (their updates go to the writer)."""
        if self.claims is not None:
            for _, key, message_id in claims:
                self.claims.claim(key, message_id)

    def _seed_settle(self, claims: list[tuple[int, ClaimKey, str]], statuses: list[int]) -> None:
        """The writer answered: keep the claims of stored updates, release the others."""
        if self.claims is not None:
            for k, key, message_id in claims:
                self.claims.settle(key, message_id, int(statuses[k]))

    def _open_for_updates(self) -> None:
        """Refuse while paused (503, retry later) and after the privacy budget (403, for
        good)."""
        assert self.engine is not None
        snap = self.engine.snapshot()
        if snap.budget_spent:
            raise BadRequest(403, "privacy_budget_spent", self.engine.privacy.refusal())
        if snap.paused:
            raise BadRequest(503, "paused", "the server is paused by its operator; retry later")
        if self.secagg is not None:
            raise BadRequest(
                403,
                "secure_aggregation_only",
                "this server takes updates only through secure aggregation: POST /v1/checkin, "
                "then /v1/secagg (docs/secagg.md)",
            )

    # -- endpoints ---------------------------------------------------------------------

    async def model(self, request: Request) -> Response:
        assert self.engine is not None
        engine = self.engine
        enrollment = request.query_params.get("enrollment_id")
        try:
            identifier(enrollment, "enrollment_id", required=False)
        except BadRequest as err:
            return self._reject("model", err)
        branch = engine.branch(enrollment)
        snap = engine.snapshot()
        etag = f'"{snap.version}-{branch}"'
        if request.headers.get("if-none-match") == etag:
            self.requests[("model", 304)] += 1
            return Response(status_code=304, headers={"ETag": etag})
        served = next(b for b in self.config.branches if b.name == branch)
        params = snap.params if served.served == "trained" else engine.defaults
        body = {
            "model_version": snap.version,
            "iteration": snap.iteration,
            "workload": engine.workload.name,
            "branch": branch,
            "served": served.served,
            "params": params.tolist(),
            "parameter_names": engine.workload.parameter_names(),
            "config": {**self.config.client_view(), "decay": served.decay},
        }
        if snap.norm_bound is not None:  # it changes only with the version (the ETag)
            body["norm_bound"] = snap.norm_bound
        self.requests[("model", 200)] += 1
        return json_response(body, headers={"ETag": etag, "Cache-Control": "no-cache"})

    async def model_version(self, request: Request) -> Response:
        assert self.engine is not None
        raw = request.path_params["version"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
            return self._reject("model", BadRequest(422, "invalid", "version must be an integer"))
        version = int(raw)
        loop = asyncio.get_running_loop()
        model = await loop.run_in_executor(None, self._read_model, version)
        if model is None:
            return self._reject(
                "model", BadRequest(404, "not_found", f"no model version {version}")
            )
        body = {
            "model_version": model.version,
            "iteration": model.iteration,
            "params": model.params.tolist(),
            "created_at": model.created_at,
        }
        return json_response(
            body, headers={"ETag": f'"{version}"', "Cache-Control": "max-age=86400"}
        )

    def _read_model(self, version: int) -> ModelVersion | None:
        assert self.engine is not None
        reader = Store(self.engine.store.directory, read_only=True)
        try:
            return reader.model(version)
        finally:
            reader.close()

    async def updates(self, request: Request) -> Response:
        status, body = await self.update(request.headers, request.receive)
        return Response(body, status_code=status, media_type=JSON)

    async def update(self, headers: Mapping[str, str], receive: Receive) -> tuple[int, bytes]:
        """``POST /v1/updates`` without a framework (the hot path, see :func:`create_app`):
        ``(status, JSON body)``."""
        assert self.engine is not None
        engine = self.engine
        try:
            self._open_for_updates()
            body = await self._read(headers, receive)
            current = engine.snapshot().version
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == BINARY:
                item = self._binary(headers, body, current)
            elif ctype in (JSON, ""):
                try:
                    data = orjson.loads(body)
                except orjson.JSONDecodeError as exc:
                    raise BadRequest(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
                item = self._incoming(data, current)
            else:
                raise BadRequest(415, "media_type", f"send {JSON} or {BINARY}, not {ctype!r}")
            claims = self._seed_check(self._reports([item]))
            self._round_check([item])
            self._seed_claim(claims)
        except BadRequest as err:
            self._count_rejection("updates", err)
            return err.status, orjson.dumps({"error": err.code, "detail": err.detail})
        (outcome,) = await engine.submit([item[0]])
        self._round_reported([item], [outcome])
        self._seed_settle(claims, [outcome.status])
        self.requests[("updates", outcome.status)] += 1
        return outcome.status, orjson.dumps(outcome.body)

    def _binary(
        self, h: Mapping[str, str], body: bytes, current: int
    ) -> tuple[Incoming, str | None]:
        assert self.engine is not None
        message_id = identifier(h.get("x-message-id"), "X-Message-Id header")
        raw_version = h.get("x-model-version", "")
        if not (raw_version.isascii() and raw_version.isdigit()) or len(raw_version) > 12:
            raise BadRequest(422, "invalid", "X-Model-Version header must be an integer")
        version = known_version(int(raw_version), current)
        enrollment = identifier(h.get("x-enrollment-id"), "X-Enrollment-Id", required=False)
        client = identifier(h.get("x-client-id"), "X-Client-Id", required=False)
        try:
            parsed = self.engine.workload.wire.parse_binary(body)
        except PayloadError as exc:
            raise BadRequest(422, exc.code, str(exc)) from exc
        payload = self.engine.workload.wire.stored_payload(parsed)
        return self._make(message_id, version, enrollment, payload, {}, parsed), client

    async def batch(self, request: Request) -> Response:
        assert self.engine is not None
        engine = self.engine
        try:
            self._open_for_updates()
            body = await self._body(request)
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == BINARY_BATCH:
                messages_in_columns, claims = self._binary_batch(body)
                self._seed_claim(claims)
                result = await engine.submit_columns(messages_in_columns)
                if claims:
                    self._seed_settle(claims, result.statuses.tolist())
                self.requests[("batch", 200)] += 1
                return json_response(batch_answer(result.statuses, result.bodies))
            if ctype not in (JSON, ""):
                raise BadRequest(415, "media_type", f"send {JSON} or {BINARY_BATCH}")
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
            if not isinstance(data, dict):
                raise BadRequest(422, "invalid", "send {'messages': [...]} or {'aggregate': ...}")
            if "aggregate" in data:
                return await self._aggregate(data, self._proxy(request.headers))
            if "batch" in data:
                result = await engine.submit_columns(self._columnar_batch(data))
                self.requests[("batch", 200)] += 1
                return json_response(batch_answer(result.statuses, result.bodies))
            messages = data.get("messages")
            if set(data) != {"messages"} or not isinstance(messages, list):
                raise BadRequest(422, "invalid", "send {'messages': [...]} (a list of messages)")
            if not 1 <= len(messages) <= MAX_BATCH:
                raise BadRequest(422, "invalid", f"a batch holds 1..{MAX_BATCH} messages")
        except BadRequest as err:
            return self._reject("batch", err)
        current = engine.snapshot().version
        fast = self._batch_columns(messages, current)
        if fast is not None:
            result = await engine.submit_columns(fast)
            statuses, errors = result.statuses, result.bodies
        else:
            statuses, errors = await self._batch_one_by_one(messages, current)
        self.requests[("batch", 200)] += 1
        return json_response(batch_answer(statuses, errors))

    def _binary_batch(self, body: bytes) -> tuple[Messages, list[tuple[int, ClaimKey, str]]]:
        """A binary batch (``application/vnd.fedrank.batch``, see
        :func:`fedrank.core.codec.encode_batch`) of the workload's tiny messages, validated
        at once and all-or-nothing: any bad message refuses the whole request with its index
        and reason. Its messages are updates of the trained branch (what a proxy forwards).
        With server-issued seeds each record ends in its seed token; returns the messages and
        the seed claims to make (:meth:`_seed_check`)."""
        assert self.engine is not None
        engine = self.engine
        size = engine.workload.wire.record_size
        if size == 0:
            detail = f"the {engine.workload.name} workload has no binary batch format; send JSON"
            raise BadRequest(415, "media_type", detail)
        try:
            ids, version, records = decode_batch(body, size)
        except CodecError as exc:
            raise BadRequest(422, "invalid", str(exc)) from exc
        if not 1 <= len(ids) <= MAX_BATCH:
            raise BadRequest(422, "invalid", f"a batch holds 1..{MAX_BATCH} messages")
        if not all_ids(ids):
            raise BadRequest(422, "invalid", "message ids must be 1-128 of A-Z a-z 0-9 . _ : -")
        known_version(version, engine.snapshot().version)
        try:
            columns, payloads = engine.workload.wire.parse_binary_batch(records)
        except PayloadError as exc:
            raise BadRequest(422, exc.code, str(exc)) from exc
        claims: list[tuple[int, ClaimKey, str]] = []
        if self.seeds is not None:  # records carry their seed tokens only with server seeds
            reports = [
                (mid, version, p["seed"], bytes.fromhex(p["seed_token"]))
                for mid, p in zip(ids, payloads, strict=True)
            ]
            claims = self._seed_check(reports, numbered=True)
        return self._trained_updates(ids, version, columns, payloads), claims

    def _columnar_batch(self, data: dict[str, Any]) -> Messages:
        """A columnar JSON batch, ``{"batch": <MessageBatch JSON>, "message_ids": [...],
        "model_version": v}`` (:meth:`fedrank.core.message.MessageBatch.to_json`; what
        :meth:`fedrank.client.sdk.Client.send_batch` sends), validated at once and
        all-or-nothing like a binary batch: updates of the trained branch."""
        assert self.engine is not None
        engine = self.engine
        if set(data) != {"batch", "message_ids", "model_version"}:
            raise BadRequest(
                422, "invalid", "a columnar batch is {'batch', 'message_ids', 'model_version'}"
            )
        ids = data["message_ids"]
        if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_BATCH:
            raise BadRequest(422, "invalid", f"a batch holds 1..{MAX_BATCH} message ids")
        if not all_ids(ids):
            raise BadRequest(422, "invalid", "message ids must be 1-128 of A-Z a-z 0-9 . _ : -")
        version = known_version(data["model_version"], engine.snapshot().version)
        try:
            batch = MessageBatch.from_json(data["batch"])
            if batch.size != len(ids):
                raise PayloadError(f"the batch has {batch.size} messages and {len(ids)} ids")
            columns, payloads = engine.workload.wire.parse_columns(batch)
        except PayloadError as exc:
            raise BadRequest(422, exc.code, str(exc)) from exc
        except DataFormatError as exc:
            raise BadRequest(422, "invalid_payload", str(exc)) from exc
        return self._trained_updates(ids, version, columns, payloads)

    def _trained_updates(
        self, ids: list[str], version: int, columns: MessageBatch, payloads: list[dict[str, Any]]
    ) -> Messages:
        """Validated updates of the trained branch (a proxy's forwarded batch)."""
        branch = next(b.name for b in self.config.branches if b.served == "trained")
        n = len(ids)
        return Messages(
            ids=ids,
            versions=np.full(n, version, dtype=np.int64),
            branches=[branch] * n,
            kinds=["update"] * n,
            payloads=payloads,
            metrics=[{}] * n,
            counts=np.ones(n, dtype=np.int64),
            columns=columns,
            aggregates={},
        )

    async def _batch_one_by_one(
        self, messages: list[Any], current: int
    ) -> tuple[np.ndarray, dict[int, dict[str, Any]]]:
        """The batch path for batches the fast path declines: every message validated
        alone, with its exact reason."""
        assert self.engine is not None
        engine = self.engine
        statuses = np.zeros(len(messages), dtype=np.int64)
        errors: dict[int, dict[str, Any]] = {}
        valid: list[tuple[Incoming, str | None]] = []
        where: list[int] = []
        claimed: list[list[tuple[int, ClaimKey, str]]] = []
        for i, m in enumerate(messages):
            try:
                item = self._incoming(m, current)
                claims = self._seed_check(self._reports([item]))
                self._round_check([item])
                self._seed_claim(claims)
            except BadRequest as err:
                engine.loop_rejected[err.code] += 1
                statuses[i] = err.status
                errors[i] = {"error": err.code, "detail": err.detail}
                continue
            valid.append(item)
            where.append(i)
            claimed.append(claims)
        if valid:
            outcomes = await engine.submit([v[0] for v in valid])
            self._round_reported(valid, outcomes)
            for claims, outcome in zip(claimed, outcomes, strict=True):
                self._seed_settle(claims, [outcome.status])
            for i, outcome in zip(where, outcomes, strict=True):
                statuses[i] = outcome.status
                if outcome.status >= 400:
                    errors[i] = outcome.body
        return statuses, errors

    def _batch_columns(self, messages: list[Any], current: int) -> Messages | None:
        """The batch endpoint's fast path: validate all messages at once with C-level
        checks (one regex over all ids, type sets, numpy ranges) and build their columns.
        Returns ``None`` whenever anything is unusual (an invalid message, a control-branch
        update, rounds, server-issued seeds), and the caller then validates message by
        message, so every refusal still gets its exact reason."""
        assert self.engine is not None
        engine = self.engine
        if self.cohort is not None or self.seeds is not None:
            return None
        if not all(type(m) is dict for m in messages):
            return None
        if not all(m.keys() <= ENVELOPE for m in messages):
            return None
        ids = [m.get("message_id") for m in messages]
        named = [v for m in messages for v in (m.get("enrollment_id"), m.get("client_id"))]
        if not (all_ids(ids) and all_ids([v for v in named if v is not None])):
            return None
        raw_versions = [m.get("model_version") for m in messages]
        if not set(map(type, raw_versions)) <= {int}:
            return None
        versions = np.array(raw_versions, dtype=np.int64)
        if versions.min() < 0 or versions.max() > current:
            return None
        payloads = [m.get("payload", {}) for m in messages]
        metrics = [m.get("metrics") for m in messages]
        if not set(map(type, payloads)) <= {dict} or not set(map(type, metrics)) <= {
            dict,
            type(None),
        }:
            return None
        if not self.metric_schema.all_valid([mt for mt in metrics if mt]):
            return None
        metrics = [
            {}
            if not mt
            else mt
            if set(map(type, mt.values())) <= {float}
            else {k: float(v) for k, v in mt.items()}
            for mt in metrics
        ]
        branches = [self._branch(m.get("enrollment_id")) for m in messages]
        kinds = ["update" if p else "ping" for p in payloads]
        updates = [p for p in payloads if p]
        if any(
            k == "update" and engine.served(b) != "trained"
            for k, b in zip(kinds, branches, strict=True)
        ):
            return None
        try:
            columns = engine.workload.wire.parse_batch(updates) if updates else MessageBatch(0)
        except PayloadError:
            return None
        return Messages(
            ids=ids,
            versions=versions,
            branches=branches,
            kinds=kinds,
            payloads=payloads,
            metrics=metrics,
            counts=np.ones(len(messages), dtype=np.int64),
            columns=columns,
            aggregates={},
        )

    def _branch(self, enrollment: str | None) -> str:
        """``engine.branch``, memoized: the hash is the costly part of a batch message."""
        assert self.engine is not None
        branch = self._branches.get(enrollment)
        if branch is None:
            if len(self._branches) > 100_000:
                self._branches.clear()
            branch = self._branches[enrollment] = self.engine.branch(enrollment)
        return branch

    def _proxy(self, headers: Mapping[str, str]) -> Proxy:
        """The configured proxy whose bearer token ``headers`` carry (compared in constant
        time); 403 when the server takes no aggregates, 401 for any other token."""
        if not self.config.proxies:
            raise BadRequest(
                403,
                "aggregates_disabled",
                "this server accepts no aggregates; configure [[proxies]] with a token each",
            )
        given = headers.get("authorization", "").encode()
        found = None
        for proxy in self.config.proxies:  # every token compared: no timing hint of which
            if hmac.compare_digest(given, f"Bearer {proxy.token}".encode()):
                found = proxy
        if found is None:
            raise BadRequest(401, "unauthorized", "an aggregate needs a proxy's bearer token")
        return found

    async def _aggregate(self, data: dict[str, Any], proxy: Proxy) -> Response:
        """A proxy's merged aggregator state standing for ``count`` updates: authenticated,
        at most the proxy's ``max_clients``, and internally consistent (a state some
        messages could produce: ``Aggregator.check_consistent``)."""
        assert self.engine is not None
        engine = self.engine
        if set(data) != {"aggregate", "count", "batch_id", "model_version"}:
            raise BadRequest(
                422,
                "invalid",
                "an aggregate batch has exactly: aggregate, count, batch_id, model_version",
            )
        batch_id = identifier(data["batch_id"], "batch_id")
        version = known_version(data["model_version"], engine.snapshot().version)
        count = data["count"]
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10**9:
            raise BadRequest(422, "invalid", "count must be an integer in 1..1e9")
        if count > proxy.max_clients:
            raise BadRequest(
                422,
                "invalid",
                f"count {count} exceeds proxy {proxy.name!r}'s max_clients ({proxy.max_clients})",
            )
        try:
            state = engine.aggregator.state_from_json(data["aggregate"])
            stated = getattr(state, "count", count)
            if stated != count:
                raise BadRequest(422, "invalid", f"the state folds {stated} messages, not {count}")
            finite = all(
                np.all(np.abs(np.asarray(v, dtype=np.float64)) <= 1e250)  # finite, and sums stay so
                for v in state
                if isinstance(v, np.ndarray | float)
            )
            huge = BadRequest(
                422, "invalid", "the aggregate holds non-finite or huge (> 1e250) values"
            )
            if not finite:
                raise huge
            engine.aggregator.check_consistent(state)  # before finalize: it may divide
            if not np.all(np.isfinite(engine.aggregator.finalize(state))):
                raise huge
        except (FedrankError, TypeError, ValueError, KeyError, ArithmeticError) as exc:
            if isinstance(exc, BadRequest):
                raise
            raise BadRequest(
                422, "invalid_aggregate", f"not a valid aggregate state: {exc}"
            ) from exc
        text = orjson.dumps(data["aggregate"]).decode()
        branch = self.config.branches[0].name
        item = Incoming(
            batch_id, version, branch, "aggregate", text, {}, aggregate=state, count=count
        )
        (outcome,) = await engine.submit([item])
        self.requests[("batch", outcome.status)] += 1
        return json_response(outcome.body, outcome.status)

    async def checkin(self, request: Request) -> Response:
        assert self.engine is not None
        try:
            if self.cohort is None:
                raise BadRequest(404, "no_rounds", "this server does not select clients per round")
            if self.engine.snapshot().budget_spent:
                raise BadRequest(403, "privacy_budget_spent", self.engine.privacy.refusal())
            body = await self._body(request)
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
            if not isinstance(data, dict) or set(data) != {"client_id"}:
                raise BadRequest(422, "invalid", "send {'client_id': <your random id>}")
            client = identifier(data["client_id"], "client_id")
        except BadRequest as err:
            return self._reject("checkin", err)
        assert client is not None
        now = time.time()
        version = self.engine.snapshot().version
        sa = self.secagg
        if sa is not None and client not in sa.ids and (sa.stage > 0 or sa.finished):
            answer: dict[str, Any] = {
                "selected": False,
                "round": self.cohort.number,
                "retry_after_seconds": sa.stage_seconds,
            }
        else:
            answer = self.cohort.checkin(client, now, version)
            if sa is not None and answer["selected"]:
                answer["secagg"] = sa.join(client, now)
        self.requests[("checkin", 200)] += 1
        return json_response(answer)

    async def secagg_post(self, request: Request) -> Response:
        """``POST /v1/secagg``: a client's message of the open protocol stage, or a proxy's
        sum of its clients' masked inputs (stage ``masked_sum``, with its bearer token)."""
        try:
            sa = self._secagg_session()
            body = await self._body(request)
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
            if isinstance(data, dict) and data.get("stage") == "masked_sum":
                proxy = self._proxy(request.headers)
                sa.receive_sum(data, proxy.max_clients, time.time())
            else:
                sa.receive(data, time.time())
        except BadRequest as err:
            return self._reject("secagg", err)
        self.requests[("secagg", 202)] += 1
        return json_response({"accepted": True}, 202)

    async def secagg_get(self, request: Request) -> Response:
        """``GET /v1/secagg?client_id=&session=``: the stage and this client's input for it."""
        try:
            sa = self._secagg_session()
            q = request.query_params
            previous = self.secagg_previous
            if previous is not None and q.get("session") == previous.session:
                sa = previous  # a round that ended: how it ended
            answer = sa.view(q.get("client_id"), q.get("session"), time.time())
        except BadRequest as err:
            return self._reject("secagg", err)
        self.requests[("secagg", 200)] += 1
        return json_response(answer)

    def _secagg_session(self) -> SecAggRound:
        if self.secagg is None:
            raise BadRequest(404, "no_secagg", "this server does not run secure aggregation")
        return self.secagg

    def _counts_visible(self, request: Request) -> bool:
        """Whether ``request`` may see the exact counts: always without ``[privacy]`` (or
        with ``public_counts``), else only with the admin token. Under DP the counts of an
        iteration's updates, polled, tell who took part, which a fixed denominator hides in
        the model."""
        privacy = self.config.privacy
        return not privacy.enabled or privacy.public_counts or self._is_admin(request)

    def _is_admin(self, request: Request) -> bool:
        """The request carries ``[server] admin_token`` as its bearer token (compared in
        constant time; never true without a configured token)."""
        token = self.config.server.admin_token
        given = request.headers.get("authorization", "").encode()
        return bool(token) and hmac.compare_digest(given, f"Bearer {token}".encode())

    def _counts_withheld(self, endpoint: str) -> Response:
        return self._reject(
            endpoint,
            BadRequest(
                403,
                "counts_withheld",
                "[privacy] is on: the exact counts and summaries tell who took part; send "
                "the admin token (Authorization: Bearer ...) or set [privacy] public_counts "
                "= true",
            ),
        )

    async def status(self, request: Request) -> Response:
        assert self.engine is not None
        e, snap = self.engine, self.engine.snapshot()
        counts: dict[str, Any] = {
            "updates_accepted_total": e.accepted_total,
            "updates_counted_total": e.counted_total,
            "updates_in_iteration": snap.updates_in_iteration,
            "updates_rejected_total": sum(e.rejected().values()),
            "updates_duplicate_total": e.duplicates_total,
            "requests_refused_total": sum(self.refused.values()),
        }
        withheld = not self._counts_visible(request)
        if withheld:
            counts = dict.fromkeys(counts)
        return json_response(
            {
                "model_version": snap.version,
                "iteration": snap.iteration,
                "workload": e.workload.name,
                **counts,
                "counts_withheld": withheld,
                "close_failures_total": self.close_failures_total,
                "last_close_error": self.last_close_error,
                "paused": snap.paused,
                "policy": e.policy.name if self.cohort is None else "rounds",
                "privacy": e.privacy.status(snap.iteration),
                "secagg": None if self.secagg is None else self.secagg.summary(),
            }
        )

    async def summary(self, request: Request) -> Response:
        assert self.engine is not None
        if not self._counts_visible(request):
            return self._counts_withheld("summary")
        loop = asyncio.get_running_loop()
        iterations = await loop.run_in_executor(None, self.engine.summary)
        return json_response({"iterations": iterations})

    async def metrics(self, request: Request) -> Response:
        assert self.engine is not None
        if not self._counts_visible(request):
            return self._counts_withheld("metrics")
        text = prometheus_text(self.engine, self.requests, self.refused)
        return Response(text, media_type="text/plain; version=0.0.4")

    async def admin(self, request: Request) -> Response:
        assert self.engine is not None
        token = self.config.server.admin_token
        action = request.path_params["action"]
        try:
            if not token:
                raise BadRequest(403, "admin_disabled", "set [server] admin_token to enable admin")
            if not self._is_admin(request):
                raise BadRequest(401, "unauthorized", "a valid bearer token is required")
            if action not in ("close", "pause", "resume"):
                raise BadRequest(404, "not_found", f"unknown admin action {action!r}")
        except BadRequest as err:
            return self._reject("admin", err)
        if action == "close":
            outcome = await self.engine.command("close", reason="admin", force=True)
        else:
            outcome = await self.engine.command(action)
        return json_response(outcome.body, outcome.status)

    async def openapi(self, request: Request) -> Response:
        return json_response(openapi_document())


ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


def create_app(config: ServerConfig) -> ASGIApp:
    """The ASGI application: ``POST /v1/updates`` is answered by a lean ASGI handler (it is
    the endpoint every client calls, and Starlette's request and middleware machinery
    costs about a fifth of its time); every other route goes through Starlette."""
    server = Server(config)
    routes = [
        Route("/v1/model", server.model, methods=["GET"]),
        Route("/v1/model/{version}", server.model_version, methods=["GET"]),
        Route("/v1/updates", server.updates, methods=["POST"]),
        Route("/v1/updates:batch", server.batch, methods=["POST"]),
        Route("/v1/checkin", server.checkin, methods=["POST"]),
        Route("/v1/secagg", server.secagg_post, methods=["POST"]),
        Route("/v1/secagg", server.secagg_get, methods=["GET"]),
        Route("/v1/status", server.status, methods=["GET"]),
        Route("/v1/summary", server.summary, methods=["GET"]),
        Route("/v1/admin/{action}", server.admin, methods=["POST"]),
        Route("/metrics", server.metrics, methods=["GET"]),
        Route("/openapi.json", server.openapi, methods=["GET"]),
    ]
    framework = Starlette(routes=routes, lifespan=server.lifespan)
    framework.state.server = server
    response_headers = [(b"content-type", JSON.encode())]

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if not (
            scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/updates"
        ):
            await framework(scope, receive, send)
            return
        # ASGI servers send header names lowercased
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            status, body = await server.update(headers, receive)
        except ClientDisconnect:  # nobody to answer
            return
        except Exception:  # a bug, not bad input: answer 500 and keep serving
            log.exception("POST /v1/updates failed")
            status, body = 500, orjson.dumps({"error": "internal", "detail": "server error"})
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})

    app.server = server  # type: ignore[attr-defined]
    return app
