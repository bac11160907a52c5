"""``POST /v1/updates`` and ``POST /v1/updates:batch``: client updates, metrics-only pings,
proxies' forwarded batches and merged aggregates (docs/service.md).

``/v1/updates`` takes one message (JSON, or the compact binary form): ``202`` accepted,
``200`` duplicate (same ``message_id``), ``409`` stale / late / not selected, ``4xx`` with a
reason for anything malformed, ``503`` while paused, ``403 privacy_budget_spent`` once
``[privacy]``'s budget is used. ``/v1/updates:batch`` takes many messages (JSON, columnar
JSON, binary), or a proxy's merged aggregate. Messages are validated here
(:mod:`fedrank.server.parse`), checked against the open round and the issued seeds, and
handed to the writer; bad input never reaches it. With ``[rounds]`` every path obeys the
round: a message names its client (``client_id``, ``X-Client-Id``), a merged aggregate its
contributors (``clients``), and the batch forms that name none (binary and columnar) are
refused (409 ``not_selected``, naming what to send instead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from fedrank.server.auth import device_of, proxy_of
from fedrank.server.envelope import (
    BINARY,
    BINARY_BATCH,
    JSON,
    MAX_BATCH,
    BadRequest,
    batch_answer,
    json_body,
    json_response,
    media_type,
    read_body,
)
from fedrank.server.messages import Messages, Outcome
from fedrank.server.parse import Sent, UpdateParser
from fedrank.server.seeds import Claim, report_of

if TYPE_CHECKING:
    from fedrank.server.service import Service


class Ingest:
    """The update endpoints (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.parse = UpdateParser(service)

    def _open_for_updates(self) -> None:
        """Refuse while paused (503, retry later), after the privacy budget (403, for
        good), and with secure aggregation (403: updates go through its protocol)."""
        engine = self.service.engine
        snap = engine.snapshot()
        if snap.budget_spent:
            raise BadRequest(403, "privacy_budget_spent", engine.privacy.refusal())
        if snap.paused:
            raise BadRequest(503, "paused", "the server is paused by its operator; retry later")
        if self.service.secagg is not None:
            raise BadRequest(
                403,
                "secure_aggregation_only",
                "this server takes updates only through secure aggregation: POST /v1/checkin, "
                "then /v1/secagg (docs/secagg.md)",
            )

    def _check(self, sent: Sent) -> Claim | None:
        """The seed and round checks of one message; returns its seed claim, made (the
        client's report is reserved in its round too)."""
        service = self.service
        engine = service.engine
        (item, client), known = sent, engine.current.ids
        oldest = engine.snapshot().version - service.config.server.max_staleness
        claim = service.seeds.check(report_of(item, client), known, oldest)
        if service.rounds is not None:
            service.rounds.check_report(item, client, known)
        service.seeds.claim(claim)
        return claim

    def _settle(self, sent: Sent, claim: Claim | None, outcome: Outcome) -> None:
        """The writer answered one message: settle its round report and its seed claim."""
        if self.service.rounds is not None:
            self.service.rounds.reported(*sent, outcome)
        self.service.seeds.settle(claim, outcome.status)

    # -- POST /v1/updates ---------------------------------------------------------------

    async def updates(self, request: Request) -> Response:
        status, body = await self.update(request.headers, request.receive, request.scope)
        return Response(body, status_code=status, media_type=JSON)

    async def update(
        self, headers: Mapping[str, str], receive: Receive, scope: Scope
    ) -> tuple[int, bytes]:
        """``POST /v1/updates`` without a framework (the hot path, see
        :func:`fedrank.server.app.create_app`): ``(status, JSON body)``; the client of a
        device's update is the device (:func:`~fedrank.server.auth.as_client`)."""
        engine = self.service.engine
        counts = self.service.counts
        try:
            self._open_for_updates()
            body = await read_body(headers, receive, self.service.config.server)
            device = device_of(self.service, scope, headers, body)
            current = engine.snapshot().version
            ctype = media_type(headers)
            if ctype == BINARY:
                sent = self.parse.binary_message(headers, body, current, device)
            elif ctype in (JSON, ""):
                sent = self.parse.json_message(json_body(body), current, device)
            else:
                raise BadRequest(415, "media_type", f"send {JSON} or {BINARY}, not {ctype!r}")
            claim = self._check(sent)
        except BadRequest as err:
            counts.refuse("updates", err)
            return err.status, orjson.dumps({"error": err.code, "detail": err.detail})
        (outcome,) = await engine.writer.submit([sent[0]])
        self._settle(sent, claim, outcome)
        counts.answered("updates", outcome.status)
        return outcome.status, orjson.dumps(outcome.body)

    # -- POST /v1/updates:batch ---------------------------------------------------------

    async def batch(self, request: Request) -> Response:
        service = self.service
        engine = service.engine
        try:
            self._open_for_updates()
            body = await read_body(request.headers, request.receive, service.config.server)
            ctype = media_type(request.headers)
            if ctype == BINARY_BATCH:
                device = device_of(service, request.scope, request.headers, body)
                self._named_clients("a binary batch")
                return await self._binary_batch(body, device)
            if ctype not in (JSON, ""):
                raise BadRequest(415, "media_type", f"send {JSON} or {BINARY_BATCH}")
            data = json_body(body)
            if not isinstance(data, dict):
                raise BadRequest(422, "invalid", "send {'messages': [...]} or {'aggregate': ...}")
            if "aggregate" in data:  # a proxy's, authenticated by its token
                return await self._aggregate(data, request.headers)
            device = device_of(service, request.scope, request.headers, body)
            if "batch" in data:
                self._named_clients("a columnar batch")
                columns = _of_device(
                    self.parse.columnar_batch(data, engine.snapshot().version), device
                )
                result = await engine.writer.submit_columns(columns)
                service.counts.answered("batch", 200)
                return json_response(batch_answer(result.statuses, result.bodies))
            messages = data.get("messages")
            if set(data) != {"messages"} or not isinstance(messages, list):
                raise BadRequest(422, "invalid", "send {'messages': [...]} (a list of messages)")
            if not 1 <= len(messages) <= MAX_BATCH:
                raise BadRequest(422, "invalid", f"a batch holds 1..{MAX_BATCH} messages")
        except BadRequest as err:
            return service.counts.reject("batch", err)
        current = engine.snapshot().version
        # the fast path checks no rounds or issued seeds: with them, one by one
        plain = service.rounds is None and service.seeds.issuer is None
        fast = self.parse.batch_columns(messages, current) if plain else None
        if fast is not None and device is not None:  # a device's batch: its own messages
            mine = fast.clients is None or all(c in (None, device) for c in fast.clients)
            fast = _of_device(fast, device) if mine else None  # one by one: who is refused
        if fast is not None:
            result = await engine.writer.submit_columns(fast)
            statuses, errors = result.statuses, result.bodies
        else:
            statuses, errors = await self._one_by_one(messages, current, device)
        service.counts.answered("batch", 200)
        return json_response(batch_answer(statuses, errors))

    def _named_clients(self, form: str) -> None:
        """Refuse a batch form that names no client when the server selects clients per
        round (409): its reports could not be checked against the round's seats."""
        if self.service.rounds is not None:
            raise BadRequest(
                409,
                "not_selected",
                f"this server selects clients per round and {form} names no client: send "
                "each selected client's report with its client_id (POST /v1/updates, or "
                "{'messages': [...]} with client_id in each), or a merged aggregate naming "
                "its contributors in clients",
            )

    async def _binary_batch(self, body: bytes, device: str | None) -> Response:
        """A binary batch, refused whole by any bad message (a device's messages are its
        own)."""
        engine = self.service.engine
        msgs = _of_device(self.parse.binary_batch(body, engine.snapshot().version), device)
        result = await engine.writer.submit_columns(msgs)
        self.service.counts.answered("batch", 200)
        return json_response(batch_answer(result.statuses, result.bodies))

    async def _aggregate(self, data: dict[str, Any], headers: Mapping[str, str]) -> Response:
        """A proxy's merged aggregate, authenticated by its bearer token; under rounds it
        names its contributors, each seated and not yet reported (they are reserved until
        the writer answers)."""
        service = self.service
        engine = service.engine
        proxy = proxy_of(service.config, headers)
        item, clients = self.parse.aggregate(data, proxy, engine.snapshot().version)
        rounds = service.rounds
        if rounds is None and clients is not None:
            raise BadRequest(
                422, "invalid", "clients names a round's contributors: this server has no [rounds]"
            )
        reserved: list[str] = []
        if rounds is not None:
            if clients is None:
                raise BadRequest(
                    409,
                    "not_selected",
                    "this server selects clients per round: name the aggregate's contributors "
                    "in clients (one selected client_id per update it folds)",
                )
            reserved = rounds.check_contributors(item.message_id, clients, engine.current.ids)
        (outcome,) = await engine.writer.submit([item])
        if rounds is not None:
            rounds.contributed(reserved, outcome)
        service.counts.answered("batch", outcome.status)
        return json_response(outcome.body, outcome.status)

    async def _one_by_one(
        self, messages: list[Any], current: int, device: str | None
    ) -> tuple[np.ndarray, dict[int, dict[str, Any]]]:
        """The batch path for batches the fast path declines: every message validated
        alone, with its exact reason (a device's messages are its own)."""
        service = self.service
        statuses = np.zeros(len(messages), dtype=np.int64)
        errors: dict[int, dict[str, Any]] = {}
        valid: list[Sent] = []
        where: list[int] = []
        claimed: list[Claim | None] = []
        for i, m in enumerate(messages):
            try:
                sent = self.parse.json_message(m, current, device)
                claim = self._check(sent)
            except BadRequest as err:
                service.counts.refuse_message(err)
                statuses[i] = err.status
                errors[i] = {"error": err.code, "detail": err.detail}
                continue
            valid.append(sent)
            where.append(i)
            claimed.append(claim)
        if valid:
            outcomes = await service.engine.writer.submit([v[0] for v in valid])
            for i, sent, claim, outcome in zip(where, valid, claimed, outcomes, strict=True):
                self._settle(sent, claim, outcome)
                statuses[i] = outcome.status
                if outcome.status >= 400:
                    errors[i] = outcome.body
        return statuses, errors


def _of_device(msgs: Messages, device: str | None) -> Messages:
    """A batch sent by ``device``: every message is the device's own."""
    if device is None:
        return msgs
    return dataclasses.replace(msgs, clients=[device] * len(msgs))
