"""What travels between the front door and the writer thread: validated messages (one by one,
:class:`Incoming`, or column by column, :class:`Messages`) and the answers to them
(:class:`Outcome` per message, :class:`BatchResult` per batch), plus the stored form of a
group commit (:func:`stored_group`) and its way back (:func:`reparse`) for a restart's replay
(docs/service.md)."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from fedrank.core.message import MessageBatch
from fedrank.server.store import Row
from fedrank.server.workloads import Workload
from fedrank.systems.wire import EMPTY, Parsed

#: Message kinds: a client update, a metrics-only ping, a proxy's merged aggregate.
UPDATE, PING, AGGREGATE = 0, 1, 2
_KIND_CODE = {"update": UPDATE, "ping": PING, "aggregate": AGGREGATE}


@dataclass(frozen=True)
class Incoming:
    """A validated message waiting for the writer.

    ``kind`` is ``update`` (``parsed`` set), ``ping`` (metrics only) or ``aggregate`` (a
    proxy's merged state in ``aggregate``, standing for ``count`` updates). ``client`` is
    the device that sent it (the authenticated one; ``None``: unknown): the privacy ledger
    counts its contributions (:mod:`fedrank.server.privacy`).
    """

    message_id: str
    model_version: int
    branch: str
    kind: str
    payload: str
    metrics: dict[str, float]
    parsed: Parsed = EMPTY
    aggregate: Any = None
    count: int = 1
    client: str | None = None


@dataclass(frozen=True)
class Outcome:
    """The answer to one message: an HTTP status and a JSON body."""

    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class BatchResult:
    """The compact answer to a batch: a status per message, and the bodies of the messages
    that were not accepted (by position)."""

    statuses: np.ndarray
    bodies: dict[int, dict[str, Any]]


@dataclass(frozen=True)
class Messages:
    """Validated messages column by column: what the writer decides, stores and folds in.

    ``columns`` holds the payloads of the ``update`` messages only, in their order;
    ``aggregates`` maps the position of each ``aggregate`` message to its state;
    ``clients`` the device of each message (:attr:`Incoming.client`), ``None`` when no
    message names one.
    """

    ids: list[str]
    versions: np.ndarray
    branches: list[str]
    kinds: list[str]
    payloads: list[str | dict[str, Any]]  # JSON text, or the payload itself
    metrics: list[dict[str, float]]
    counts: np.ndarray
    columns: MessageBatch
    aggregates: dict[int, Any]
    clients: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def kind_codes(self) -> np.ndarray:
        """``(m,)`` int8: :data:`UPDATE`, :data:`PING` or :data:`AGGREGATE` per message."""
        kinds = self.kinds
        if len(set(kinds)) == 1:
            return np.full(len(kinds), _KIND_CODE[kinds[0]], dtype=np.int8)
        return np.array([_KIND_CODE[k] for k in kinds], dtype=np.int8)

    @staticmethod
    def of(items: list[Incoming], workload: Workload) -> Messages:
        updates = [i.parsed for i in items if i.kind == "update"]
        clients = [i.client for i in items]
        return Messages(
            ids=[i.message_id for i in items],
            versions=np.array([i.model_version for i in items], dtype=np.int64),
            branches=[i.branch for i in items],
            kinds=[i.kind for i in items],
            payloads=[i.payload for i in items],
            metrics=[i.metrics for i in items],
            counts=np.array([i.count for i in items], dtype=np.int64),
            columns=workload.wire.columns(updates) if updates else MessageBatch(0),
            aggregates={k: i.aggregate for k, i in enumerate(items) if i.kind == "aggregate"},
            clients=clients if any(c is not None for c in clients) else None,
        )

    @staticmethod
    def concat(parts: list[Messages]) -> Messages:
        if len(parts) == 1:
            return parts[0]
        aggregates, offset = {}, 0
        for part in parts:
            aggregates.update({offset + k: v for k, v in part.aggregates.items()})
            offset += len(part)
        return Messages(
            ids=[x for m in parts for x in m.ids],
            versions=np.concatenate([m.versions for m in parts]),
            branches=[x for m in parts for x in m.branches],
            kinds=[x for m in parts for x in m.kinds],
            payloads=[x for m in parts for x in m.payloads],
            metrics=[x for m in parts for x in m.metrics],
            counts=np.concatenate([m.counts for m in parts]),
            columns=MessageBatch.concat([m.columns for m in parts]),
            aggregates=aggregates,
            clients=(
                [c for m in parts for c in m.client_list()]
                if any(m.clients is not None for m in parts)
                else None
            ),
        )

    def client_list(self) -> list[str | None]:
        """The device of every message (``None`` where unknown)."""
        return [None] * len(self) if self.clients is None else self.clients


def pick(values: list[Any], index: list[int], everything: bool) -> list[Any]:
    """``values`` at ``index`` (the list itself when every position is taken)."""
    if everything:
        return values
    return list(operator.itemgetter(*index)(values)) if len(index) > 1 else [values[index[0]]]


def stored_group(msgs: Messages, accepted: np.ndarray, clients: bool) -> bytes:
    """The stored form of a group: ``[message_id, model_version, branch, kind, payload,
    metrics, count]`` per accepted message, and its ``client`` last when ``clients`` (the
    privacy ledger counts devices: only then is who sent what kept) and any message of the
    group names one (see :mod:`fedrank.server.store`), built with
    C-level iteration (``zip``): this runs for every message at full ingestion speed.
    Payloads that are JSON text are embedded as they are."""
    index = accepted.tolist()
    everything = len(index) == len(msgs)
    payloads = pick(msgs.payloads, index, everything)
    if any(type(p) is str for p in payloads):
        payloads = [orjson.Fragment(p) if type(p) is str else p for p in payloads]
    columns = [
        pick(msgs.ids, index, everything),
        msgs.versions[accepted].tolist(),
        pick(msgs.branches, index, everything),
        pick(msgs.kinds, index, everything),
        payloads,
        pick(msgs.metrics, index, everything),
        msgs.counts[accepted].tolist(),
    ]
    if clients and msgs.clients is not None:
        columns.append(pick(msgs.clients, index, everything))
    return orjson.dumps(list(zip(*columns, strict=True)))


def reparse(row: Row, workload: Workload) -> Incoming:
    """A stored message as the writer first took it: an update's payload parsed again by
    the workload's wire format, an aggregate's state read again by its aggregator."""
    payload = json.loads(row.payload)
    stored = (row.message_id, row.model_version, row.branch, row.kind, row.payload)
    metrics = json.loads(row.metrics)
    if row.kind == "update":
        parsed = workload.wire.parse(payload)
        return Incoming(*stored, metrics, parsed=parsed, client=row.client)
    if row.kind == "aggregate":
        state = workload.strategy.aggregator.state_from_json(payload)
        return Incoming(*stored, metrics, aggregate=state, count=row.count, client=row.client)
    return Incoming(*stored, metrics, client=row.client)
