"""What every system's wire format shares (:mod:`fedrank.systems`): the payload checks, the
parsed form of one message, and the :class:`Wire` base a system's ``wire.py`` implements.

A wire both *encodes* a batch of client messages into the JSON payloads a client sends
(:meth:`Wire.encode`) and *parses* them back on the server, one by one
(:meth:`Wire.parse`), as a batch (:meth:`Wire.parse_batch`, the fast path) or in a binary
form where the system has one. Encoding and parsing live together so that they cannot
drift: ``parse_batch(encode(batch))`` gives ``batch`` back (tested for every system).

A payload of ``{}`` is a metrics-only ping (control branches, or a search without an
update): the server stores and summarizes it, never aggregates it. Every check raises
:class:`PayloadError` with the reason a client should see; nothing is coerced silently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.errors import FedrankError


class PayloadError(FedrankError, ValueError):
    """An update the server refuses; ``str(err)`` is the reason sent to the client and
    ``code`` the error code it is answered with (422)."""

    code = "invalid_payload"


@dataclass(frozen=True)
class Parsed:
    """A validated payload. ``vector`` for frecency and FedAvg, ``seed`` / ``metric`` /
    ``antithetic`` (and the raw ``seed_token`` of a server-issued seed, if sent) for ES;
    ``weight`` is the message's ``n``; ``empty`` marks a metrics-only ping."""

    vector: np.ndarray | None = None
    seed: int = 0
    metric: float = 0.0
    antithetic: float | None = None
    seed_token: bytes | None = None
    weight: float = 1.0
    empty: bool = False


EMPTY = Parsed(empty=True)

#: Largest magnitude of an update entry: weighted by ``n`` (<= 1e9) and squared (the gated
#: mean's second moment), the aggregate's sums stay finite, so no accepted message can make
#: the close of its iteration fail.
MAX_ENTRY = 1e100
_NUMBER_TYPES = frozenset({int, float})  # what JSON numbers parse to (bool is not one)


def numbers(values: list[Any], what: str) -> np.ndarray:
    """A list of JSON numbers as float64 (bools and anything else refused)."""
    if not set(map(type, values)) <= {int, float}:
        raise PayloadError(f"{what} must be numbers")
    return np.array(values, dtype=np.float64)


def parse_vectors(values: list[Any], dim: int, name: str) -> np.ndarray:
    """``(m, dim)`` from ``m`` JSON lists of numbers, checked like :func:`finite_vector`."""
    if not all(type(v) is list and len(v) == dim for v in values):
        raise PayloadError(f"{name} must be lists of {dim} numbers")
    flat = [x for v in values for x in v]
    mat = numbers(flat, f"{name} entries").reshape(len(values), dim)
    if not np.all(np.abs(mat) <= MAX_ENTRY):  # also refuses NaN
        raise PayloadError(f"{name} entries must be finite, of magnitude <= {MAX_ENTRY:g}")
    return mat


def counts(values: list[Any], limit: int) -> np.ndarray:
    """Message weights ``n``: JSON integers in ``1..limit``, as float64."""
    if not set(map(type, values)) <= {int}:
        raise PayloadError("n must be integers")
    arr = np.array(values, dtype=np.float64)
    if arr.size and (arr.min() < 1 or arr.max() > limit):
        raise PayloadError(f"n must lie in 1..{limit} ([server] max_n)")
    return arr


def finite_vector(value: Any, dim: int, name: str) -> np.ndarray:
    """One JSON list of ``dim`` finite numbers of magnitude at most :data:`MAX_ENTRY`."""
    if not isinstance(value, list):
        raise PayloadError(f"{name} must be a list of {dim} numbers")
    if len(value) != dim:
        raise PayloadError(f"{name} must have {dim} entries, got {len(value)}")
    if not set(map(type, value)) <= _NUMBER_TYPES:  # exact types: True and "1" are refused
        raise PayloadError(f"{name} entries must be numbers")
    vec = np.asarray(value, dtype=np.float64)
    if not (np.abs(vec) <= MAX_ENTRY).all():  # False for NaN and inf as well
        raise PayloadError(f"{name} entries must be finite, of magnitude <= {MAX_ENTRY:g}")
    return vec


def count(value: Any, limit: int) -> float:
    """One message weight ``n``: a JSON integer in ``1..limit``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise PayloadError(f"n must be an integer in 1..{limit} ([server] max_n), got {value!r}")
    return float(value)


def check_keys(payload: dict[str, Any], allowed: set[str], required: set[str]) -> None:
    """Refuse a payload with a field outside ``allowed`` or without one of ``required``."""
    unknown = sorted(set(payload) - allowed)
    if unknown:
        raise PayloadError(f"unknown payload field(s) {unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(payload))
    if missing:
        raise PayloadError(f"payload lacks {missing}")


class Wire(ABC):
    """The wire formats of one system's messages (module docstring). Subclasses set
    ``name`` (the system's), ``dim`` and ``max_n`` (the largest weight ``n`` a message may
    claim, ``[server] max_n``)."""

    name: str
    dim: int
    max_n: int
    binary_type = "application/vnd.fedrank.update"
    #: Bytes of one message's binary form (0: no binary batch for this system).
    record_size = 0

    @abstractmethod
    def parse(self, payload: dict[str, Any]) -> Parsed:
        """Validate a JSON payload (not ``{}``, which the caller handles)."""

    @abstractmethod
    def columns(self, items: list[Parsed]) -> MessageBatch:
        """The payload columns of single parsed payloads."""

    @abstractmethod
    def encode(self, batch: MessageBatch) -> list[dict[str, Any]]:
        """Each message of ``batch`` as the JSON payload a client sends (the inverse of
        :meth:`parse_batch`); raises :class:`PayloadError` if the batch has another
        system's columns."""

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        """Validate many payloads at once (the batch endpoint's fast path); raises
        :class:`PayloadError` if any is invalid, without saying which (the caller then
        parses them one by one for exact reasons)."""
        return self.columns([self.parse(p) for p in payloads])

    def parse_columns(self, batch: MessageBatch) -> tuple[MessageBatch, list[dict[str, Any]]]:
        """Validate a columnar batch (:meth:`MessageBatch.to_json`'s form on the wire):
        every message must be a payload :meth:`parse_batch` accepts. Returns the columns
        and each message's JSON payload (what is stored)."""
        payloads = self.encode(batch)
        try:
            return self.parse_batch(payloads), payloads
        except PayloadError:  # the fast check does not say which: find the first, exactly
            for k, payload in enumerate(payloads):
                try:
                    self.parse(payload)
                except PayloadError as exc:
                    raise PayloadError(f"message {k}: {exc}") from None
            raise

    def parse_binary(self, body: bytes) -> Parsed:
        """Validate a binary payload; systems without a binary form refuse it."""
        raise PayloadError(f"the {self.name} workload has no binary update format; send JSON")

    def stored_payload(self, parsed: Parsed) -> dict[str, Any]:
        """The JSON form (what is stored) of a payload :meth:`parse_binary` accepted."""
        raise PayloadError(f"the {self.name} workload has no binary update format; send JSON")

    def parse_binary_batch(self, records: bytes) -> tuple[MessageBatch, list[dict[str, Any]]]:
        """Validate the concatenated binary records of a batch at once; returns the columns
        and each message's payload in its JSON form (what is stored)."""
        raise PayloadError(f"the {self.name} workload has no binary batch format; send JSON")


class VectorWire(Wire):
    """Vector messages ``{key: [dim numbers], "n": int}``: a model delta or a gradient and
    the number of data points behind it (FedAvg's weight ``n_j``). ``n`` may be left out
    (weight 1) unless ``n_required``."""

    key: str
    n_required: bool = True

    def __init__(self, dim: int, max_n: int) -> None:
        self.dim, self.max_n = int(dim), int(max_n)

    def parse(self, payload: dict[str, Any]) -> Parsed:
        required = {self.key, "n"} if self.n_required else {self.key}
        check_keys(payload, {self.key, "n"}, required)
        return Parsed(
            vector=finite_vector(payload[self.key], self.dim, self.key),
            weight=count(payload.get("n", 1), self.max_n),
        )

    def columns(self, items: list[Parsed]) -> MessageBatch:
        return vector_columns(items, self.dim)

    def encode(self, batch: MessageBatch) -> list[dict[str, Any]]:
        return vector_payloads(batch, self.key, self.name)

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        key, keys = self.key, {self.key, "n"}
        if self.n_required:
            fields_ok = all(p.keys() == keys for p in payloads)
        else:
            fields_ok = all(p.keys() <= keys and key in p for p in payloads)
        if not fields_ok:
            raise PayloadError("payload fields")
        vectors = parse_vectors([p[key] for p in payloads], self.dim, key)
        weights = counts([p.get("n", 1) for p in payloads], self.max_n)
        return MessageBatch(len(payloads), vector=vectors, weight=weights)


def only_columns(batch: MessageBatch, wanted: set[str], workload: str) -> None:
    """Refuse a batch whose columns are not exactly ``wanted`` (another workload's)."""
    used = {f for f in MessageBatch.FIELDS if getattr(batch, f) is not None}
    if batch.size and used != wanted:
        raise PayloadError(
            f"a {workload} batch has the columns {sorted(wanted)}; got {sorted(used)}"
        )


def weights_as_sent(weight: np.ndarray) -> list[int | float]:
    """Weights as JSON numbers: whole values as integers, anything else as it is (so that
    the count check refuses 1.5 instead of truncating it)."""
    return [int(w) if float(w).is_integer() else float(w) for w in weight.tolist()]


def vector_payloads(batch: MessageBatch, key: str, workload: str) -> list[dict[str, Any]]:
    """``{key: row, "n": n}`` per message of a batch of vector messages."""
    only_columns(batch, {"vector", "weight"}, workload)
    if not batch.size:
        return []
    assert batch.vector is not None and batch.weight is not None
    return [
        {key: row, "n": n}
        for row, n in zip(batch.vector.tolist(), weights_as_sent(batch.weight), strict=True)
    ]


def vector_columns(items: list[Parsed], dim: int) -> MessageBatch:
    """The ``(vector, weight)`` columns of parsed vector messages."""
    if len(items) == 1:  # a group of one update: a view, no copy
        vectors = items[0].vector[None, :]  # type: ignore[index]
    else:
        vectors = np.stack([p.vector for p in items]) if items else np.zeros((0, dim))  # type: ignore[misc]
    return MessageBatch(len(items), vector=vectors, weight=np.array([p.weight for p in items]))
