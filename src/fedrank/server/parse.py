"""Update messages from a request, validated, in every form the API takes (docs/service.md):
a JSON envelope (``POST /v1/updates`` and a batch's ``messages``), the compact binary update
(``application/vnd.fedrank.update``, ids in headers), a binary batch
(``application/vnd.fedrank.batch``), a columnar JSON batch, and a proxy's merged aggregate.
A message that passes is an :class:`~fedrank.server.messages.Incoming` or, for a batch
validated at once, columns (:class:`~fedrank.server.messages.Messages`); anything else is a
:class:`~fedrank.server.envelope.BadRequest` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from fedrank.core.codec import decode_batch
from fedrank.core.message import MessageBatch
from fedrank.errors import CodecError, DataFormatError, FedrankError
from fedrank.server.auth import as_client
from fedrank.server.envelope import (
    ENVELOPE,
    MAX_BATCH,
    BadRequest,
    MetricSchema,
    all_ids,
    identifier,
    known_version,
)
from fedrank.server.messages import Incoming, Messages
from fedrank.server.sections import Proxy
from fedrank.systems.wire import EMPTY, Parsed, PayloadError

if TYPE_CHECKING:
    from fedrank.server.service import Service

#: A message and the ``client_id`` it was sent with (rounds check it).
Sent = tuple[Incoming, str | None]


class UpdateParser:
    """Validates messages against the running engine's workload (its wire formats and
    aggregator), the study's branches and the metric schema (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.metric_schema = MetricSchema(service.config.metrics)

    # -- one message --------------------------------------------------------------------

    def json_message(self, data: Any, current: int, device: str | None = None) -> Sent:
        """A JSON message envelope, validated; ``current`` is the served model version,
        ``device`` the request's enrolled device, if any: its client
        (:func:`~fedrank.server.auth.as_client`)."""
        if not isinstance(data, dict):
            raise BadRequest(422, "invalid", "a message must be a JSON object")
        unknown = sorted(set(data) - ENVELOPE)
        if unknown:
            raise BadRequest(422, "invalid", f"unknown field(s) {unknown}")
        message_id = identifier(data.get("message_id"), "message_id")
        version = known_version(data.get("model_version"), current)
        enrollment = identifier(data.get("enrollment_id"), "enrollment_id", required=False)
        client = as_client(device, identifier(data.get("client_id"), "client_id", required=False))
        payload = data.get("payload", {})
        if not isinstance(payload, dict):
            raise BadRequest(422, "invalid", "payload must be a JSON object")
        metrics = self.metric_schema.check(data.get("metrics"))
        parsed: Parsed = EMPTY
        if payload:
            try:
                parsed = self.service.engine.workload.wire.parse(payload)
            except PayloadError as exc:
                raise BadRequest(422, exc.code, str(exc)) from exc
        item = self._make(message_id, version, enrollment, payload, metrics, parsed, client)
        return item, client

    def binary_message(
        self, h: Mapping[str, str], body: bytes, current: int, device: str | None = None
    ) -> Sent:
        """A compact binary update: its ids in ``X-Message-Id``, ``X-Model-Version``,
        ``X-Enrollment-Id`` and ``X-Client-Id`` headers, its payload the body (``device``:
        as for :meth:`json_message`)."""
        message_id = identifier(h.get("x-message-id"), "X-Message-Id header")
        raw_version = h.get("x-model-version", "")
        if not (raw_version.isascii() and raw_version.isdigit()) or len(raw_version) > 12:
            raise BadRequest(422, "invalid", "X-Model-Version header must be an integer")
        version = known_version(int(raw_version), current)
        enrollment = identifier(h.get("x-enrollment-id"), "X-Enrollment-Id", required=False)
        client = as_client(device, identifier(h.get("x-client-id"), "X-Client-Id", required=False))
        wire = self.service.engine.workload.wire
        try:
            parsed = wire.parse_binary(body)
        except PayloadError as exc:
            raise BadRequest(422, exc.code, str(exc)) from exc
        payload = wire.stored_payload(parsed)
        return self._make(message_id, version, enrollment, payload, {}, parsed, client), client

    def _make(
        self,
        message_id: str | None,
        version: int,
        enrollment: str | None,
        payload: dict[str, Any],
        metrics: dict[str, float],
        parsed: Parsed,
        client: str | None,
    ) -> Incoming:
        """The message, of the device ``client`` (its ``client_id``; the privacy ledger
        counts a device's updates, :mod:`fedrank.server.privacy`)."""
        assert message_id is not None
        branches = self.service.branches
        branch = branches.of(enrollment)
        kind = "ping" if parsed.empty else "update"
        if kind == "update" and branches.served(branch) == "defaults":
            raise BadRequest(
                422,
                "control_branch",
                f"branch {branch!r} is served fixed parameters: it sends metrics only "
                "(an empty payload)",
            )
        text = orjson.dumps(payload).decode()
        return Incoming(
            message_id, version, branch, kind, text, metrics, parsed=parsed, client=client
        )

    # -- batches validated at once ------------------------------------------------------

    def batch_columns(self, messages: list[Any], current: int) -> Messages | None:
        """The batch endpoint's fast path: validate all messages at once with C-level
        checks (one regex over all ids, type sets, numpy ranges) and build their columns.
        Returns ``None`` whenever anything is unusual (an invalid message, a control-branch
        update), and the caller then validates message by message, so every refusal still
        gets its exact reason."""
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
        if min(raw_versions) < 0 or max(raw_versions) > current:  # before int64: no overflow
            return None
        versions = np.array(raw_versions, dtype=np.int64)
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
        study = self.service.branches
        branches = [study.of(m.get("enrollment_id")) for m in messages]
        kinds = ["update" if p else "ping" for p in payloads]
        updates = [p for p in payloads if p]
        if any(
            k == "update" and study.served(b) != "trained"
            for k, b in zip(kinds, branches, strict=True)
        ):
            return None
        try:
            wire = self.service.engine.workload.wire
            columns = wire.parse_batch(updates) if updates else MessageBatch(0)
        except PayloadError:
            return None
        clients = [m.get("client_id") for m in messages]
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
            clients=clients if any(c is not None for c in clients) else None,
        )

    def binary_batch(self, body: bytes, current: int) -> Messages:
        """A binary batch (``application/vnd.fedrank.batch``, see
        :func:`fedrank.core.codec.encode_batch`) of the workload's tiny messages, validated
        at once and all-or-nothing: any bad message refuses the whole request with its index
        and reason. Its messages are updates of the trained branch (what a proxy forwards;
        it names no clients, so a server with rounds refuses it before parsing)."""
        workload = self.service.engine.workload
        size = workload.wire.record_size
        if size == 0:
            detail = f"the {workload.name} workload has no binary batch format; send JSON"
            raise BadRequest(415, "media_type", detail)
        try:
            ids, version, records = decode_batch(body, size)
        except CodecError as exc:
            raise BadRequest(422, "invalid", str(exc)) from exc
        if not 1 <= len(ids) <= MAX_BATCH:
            raise BadRequest(422, "invalid", f"a batch holds 1..{MAX_BATCH} messages")
        if not all_ids(ids):
            raise BadRequest(422, "invalid", "message ids must be 1-128 of A-Z a-z 0-9 . _ : -")
        known_version(version, current)
        try:
            columns, payloads = workload.wire.parse_binary_batch(records)
        except PayloadError as exc:
            raise BadRequest(422, exc.code, str(exc)) from exc
        return self._trained_updates(ids, version, columns, payloads)

    def columnar_batch(self, data: dict[str, Any], current: int) -> Messages:
        """A columnar JSON batch, ``{"batch": <MessageBatch JSON>, "message_ids": [...],
        "model_version": v}`` (:meth:`fedrank.core.message.MessageBatch.to_json`; what
        :meth:`fedrank.client.sdk.Client.send_batch` sends), validated at once and
        all-or-nothing like a binary batch: updates of the trained branch."""
        if set(data) != {"batch", "message_ids", "model_version"}:
            raise BadRequest(
                422, "invalid", "a columnar batch is {'batch', 'message_ids', 'model_version'}"
            )
        ids = data["message_ids"]
        if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_BATCH:
            raise BadRequest(422, "invalid", f"a batch holds 1..{MAX_BATCH} message ids")
        if not all_ids(ids):
            raise BadRequest(422, "invalid", "message ids must be 1-128 of A-Z a-z 0-9 . _ : -")
        version = known_version(data["model_version"], current)
        try:
            batch = MessageBatch.from_json(data["batch"])
            if batch.size != len(ids):
                raise PayloadError(f"the batch has {batch.size} messages and {len(ids)} ids")
            columns, payloads = self.service.engine.workload.wire.parse_columns(batch)
        except PayloadError as exc:
            raise BadRequest(422, exc.code, str(exc)) from exc
        except DataFormatError as exc:
            raise BadRequest(422, "invalid_payload", str(exc)) from exc
        return self._trained_updates(ids, version, columns, payloads)

    def _trained_updates(
        self, ids: list[str], version: int, columns: MessageBatch, payloads: list[dict[str, Any]]
    ) -> Messages:
        """Validated updates of the trained branch (a proxy's forwarded batch)."""
        n = len(ids)
        return Messages(
            ids=ids,
            versions=np.full(n, version, dtype=np.int64),
            branches=[self.service.branches.trained] * n,
            kinds=["update"] * n,
            payloads=payloads,
            metrics=[{}] * n,
            counts=np.ones(n, dtype=np.int64),
            columns=columns,
            aggregates={},
        )

    # -- a proxy's aggregate ------------------------------------------------------------

    def aggregate(
        self, data: dict[str, Any], proxy: Proxy, current: int
    ) -> tuple[Incoming, list[str] | None]:
        """A proxy's merged aggregator state standing for ``count`` updates: at most the
        proxy's ``max_clients``, and internally consistent (a state some messages could
        produce: ``Aggregator.check_consistent``); with the ``clients`` it names (distinct
        client ids, one per update it folds: a round's contributors), if any."""
        aggregator = self.service.engine.aggregator
        if not {"aggregate", "count", "batch_id", "model_version"} <= set(data) <= {
            "aggregate", "count", "batch_id", "model_version", "clients"
        }:  # fmt: skip
            raise BadRequest(
                422,
                "invalid",
                "an aggregate batch has exactly: aggregate, count, batch_id, model_version "
                "(and, under rounds, clients)",
            )
        batch_id = identifier(data["batch_id"], "batch_id")
        assert batch_id is not None
        version = known_version(data["model_version"], current)
        count = data["count"]
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10**9:
            raise BadRequest(422, "invalid", "count must be an integer in 1..1e9")
        if count > proxy.max_clients:
            raise BadRequest(
                422,
                "invalid",
                f"count {count} exceeds proxy {proxy.name!r}'s max_clients ({proxy.max_clients})",
            )
        clients = data.get("clients")
        if clients is not None and not (
            isinstance(clients, list)
            and len(clients) == count
            and all_ids(clients)
            and len(set(clients)) == count
        ):
            raise BadRequest(
                422,
                "invalid",
                f"clients must list {count} (count) distinct client ids of 1-128 of "
                "A-Z a-z 0-9 . _ : -",
            )
        try:
            state = aggregator.state_from_json(data["aggregate"])
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
            aggregator.check_consistent(state)  # before finalize: it may divide
            if not np.all(np.isfinite(aggregator.finalize(state))):
                raise huge
        except (FedrankError, TypeError, ValueError, KeyError, ArithmeticError) as exc:
            raise BadRequest(
                422, "invalid_aggregate", f"not a valid aggregate state: {exc}"
            ) from exc
        text = orjson.dumps(data["aggregate"]).decode()
        branch = self.service.branches.first
        item = Incoming(
            batch_id, version, branch, "aggregate", text, {}, aggregate=state, count=count
        )
        return item, clients
