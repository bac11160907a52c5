"""The three workloads the server runs: each is a strategy (:mod:`fedrank.strategies`, the
same chain the simulators run) and the wire formats of its messages.

* ``frecency`` (Mozilla Sec. 4-5): ``{"gradient": [d floats], "n": int}``, or
  ``{"signs": base64}`` with 2-bit signs (binary form: the same bits); aggregated by
  :class:`~fedrank.aggregators.gated_mean.GatedMean` (or the median or trimmed mean, norm
  bounded or not: ``[frecency] aggregator``, ``norm_bound``) or
  :class:`~fedrank.aggregators.sign_vote.SignVote`; Rprop, then the safeguards
  (:class:`~fedrank.strategies.frecency.FrecencyStrategy`).
* ``foltr-es`` (FOLtR-ES Sec. 3): ``{"seed", "metric", "antithetic_metric"}`` (binary form:
  the 8 / 12-byte ES message); :class:`~fedrank.aggregators.es_gradient.ESGradient`
  (Eq. 6); Adam ascending the metric (:class:`~fedrank.strategies.foltr_es.FoltrEsStrategy`).
  With server-issued seeds (``[foltr_es] server_seeds``, :mod:`fedrank.server.seeds`) the
  payload also carries ``seed_token`` (64 hex characters), and the binary forms end in the
  token's 32 bytes.
* ``fedavg`` (FedPS Algorithm 1): ``{"delta": [d floats], "n": int}``;
  :class:`~fedrank.aggregators.mean.WeightedMean` (or a robust statistic, ``[fedavg]
  aggregator``); the server learning rate times the aggregate delta
  (:class:`~fedrank.strategies.fedavg.FedAvgStrategy`).

Payloads are parsed as sent: a norm bound (``norm_bound``) is the aggregator's
(:class:`~fedrank.aggregators.norm_bounded.NormBounded`), applied when the writer folds an
update in, so a restart or a recovery that replays the stored payloads bounds them the
same way again.

A payload of ``{}`` is a metrics-only ping (control branches, or a search without an
update): it is stored and summarized, never aggregated. Every check raises
:class:`PayloadError` with the reason a client should see; nothing is coerced silently.
"""

from __future__ import annotations

import base64
import binascii
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrank.core.codec import ES_MESSAGE_SIZES, decode_es_message, pack_signs, unpack_signs
from fedrank.core.message import MessageBatch
from fedrank.errors import CodecError, FedrankError
from fedrank.server.config import ServerConfig
from fedrank.server.seeds import TOKEN_BYTES, TOKEN_HEX, token_from_hex
from fedrank.strategies.base import Strategy
from fedrank.strategies.fedavg import FedAvgStrategy
from fedrank.strategies.foltr_es import FoltrEsStrategy
from fedrank.strategies.frecency import FrecencyStrategy


class PayloadError(FedrankError, ValueError):
    """An update the server refuses; ``str(err)`` is the reason sent to the client and
    ``code`` the error code it is answered with (422)."""

    code = "invalid_payload"


class SeedTokenError(PayloadError):
    """A FOLtR-ES update whose ``seed_token`` is malformed (:mod:`fedrank.server.seeds`)."""

    code = "bad_seed_token"


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


def _numbers(values: list[Any], what: str) -> np.ndarray:
    """A list of JSON numbers as float64 (bools and anything else refused)."""
    if not set(map(type, values)) <= {int, float}:
        raise PayloadError(f"{what} must be numbers")
    return np.array(values, dtype=np.float64)


def _vectors(values: list[Any], dim: int, name: str) -> np.ndarray:
    """``(m, dim)`` from ``m`` JSON lists of numbers, checked like :func:`_finite_vector`."""
    if not all(type(v) is list and len(v) == dim for v in values):
        raise PayloadError(f"{name} must be lists of {dim} numbers")
    flat = [x for v in values for x in v]
    mat = _numbers(flat, f"{name} entries").reshape(len(values), dim)
    if not np.all(np.abs(mat) <= MAX_ENTRY):  # also refuses NaN
        raise PayloadError(f"{name} entries must be finite, of magnitude <= {MAX_ENTRY:g}")
    return mat


def _counts(values: list[Any], limit: int) -> np.ndarray:
    if not set(map(type, values)) <= {int}:
        raise PayloadError("n must be integers")
    arr = np.array(values, dtype=np.float64)
    if arr.size and (arr.min() < 1 or arr.max() > limit):
        raise PayloadError(f"n must lie in 1..{limit} ([server] max_n)")
    return arr


def _finite_vector(value: Any, dim: int, name: str) -> np.ndarray:
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


def _count(value: Any, limit: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise PayloadError(f"n must be an integer in 1..{limit} ([server] max_n), got {value!r}")
    return float(value)


def _keys(payload: dict[str, Any], allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(payload) - allowed)
    if unknown:
        raise PayloadError(f"unknown payload field(s) {unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(payload))
    if missing:
        raise PayloadError(f"payload lacks {missing}")


class Workload(ABC):
    """What the server needs of a workload beyond its strategy (see the module docstring):
    the wire formats of its messages. The learning rule is the strategy's
    (:mod:`fedrank.strategies`): aggregator, optimizer chain, constraints."""

    name: str
    strategy: Strategy
    binary_type = "application/vnd.fedrank.update"

    @property
    def dim(self) -> int:
        return self.strategy.dim

    def initial_params(self) -> np.ndarray:
        """The published model of version 0."""
        return self.strategy.initial_params()

    def parameter_names(self) -> list[str] | None:
        return self.strategy.parameter_names()

    @abstractmethod
    def parse(self, payload: dict[str, Any]) -> Parsed:
        """Validate a JSON payload (not ``{}``, which the caller handles)."""

    def parse_binary(self, body: bytes) -> Parsed:
        """Validate a binary payload; workloads without a binary form refuse it."""
        raise PayloadError(f"the {self.name} workload has no binary update format; send JSON")

    def stored_payload(self, parsed: Parsed) -> dict[str, Any]:
        """The JSON form (what is stored) of a payload :meth:`parse_binary` accepted."""
        raise PayloadError(f"the {self.name} workload has no binary update format; send JSON")

    @abstractmethod
    def columns(self, items: list[Parsed]) -> MessageBatch:
        """The payload columns of single parsed payloads."""

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        """Validate many payloads at once (the batch endpoint's fast path); raises
        :class:`PayloadError` if any is invalid, without saying which (the caller then
        parses them one by one for exact reasons)."""
        return self.columns([self.parse(p) for p in payloads])

    @abstractmethod
    def payloads_of(self, batch: MessageBatch) -> list[dict[str, Any]]:
        """Each message of ``batch`` as its JSON payload (the inverse of
        :meth:`parse_batch`); raises :class:`PayloadError` if the batch has another
        workload's columns."""

    def parse_columns(self, batch: MessageBatch) -> tuple[MessageBatch, list[dict[str, Any]]]:
        """Validate a columnar batch (:meth:`MessageBatch.to_json`'s form on the wire):
        every message must be a payload :meth:`parse_batch` accepts. Returns the columns
        and each message's JSON payload (what is stored)."""
        payloads = self.payloads_of(batch)
        try:
            return self.parse_batch(payloads), payloads
        except PayloadError:  # the fast check does not say which: find the first, exactly
            for k, payload in enumerate(payloads):
                try:
                    self.parse(payload)
                except PayloadError as exc:
                    raise PayloadError(f"message {k}: {exc}") from None
            raise

    #: Bytes of one message's binary form (0: no binary batch for this workload).
    record_size = 0

    def parse_binary_batch(self, records: bytes) -> tuple[MessageBatch, list[dict[str, Any]]]:
        """Validate the concatenated binary records of a batch at once; returns the columns
        and each message's payload in its JSON form (what is stored)."""
        raise PayloadError(f"the {self.name} workload has no binary batch format; send JSON")


class FrecencyWorkload(Workload):
    """Federated frecency (Mozilla paper, Sections 4-5)."""

    name = "frecency"

    def __init__(self, config: ServerConfig) -> None:
        self.section = config.frecency
        self.strategy = FrecencyStrategy(config.frecency)
        self.max_n = config.max_n

    def parse(self, payload: dict[str, Any]) -> Parsed:
        if self.section.message == "full":
            _keys(payload, {"gradient", "n"}, {"gradient"})
            if "signs" in payload:
                raise PayloadError("this server takes full gradients ([frecency] message = full)")
            vec = _finite_vector(payload["gradient"], self.dim, "gradient")
            return Parsed(vector=vec, weight=_count(payload.get("n", 1), self.max_n))
        _keys(payload, {"signs", "n"}, {"signs"})
        raw = payload["signs"]
        if not isinstance(raw, str):
            raise PayloadError("signs must be a base64 string of 2-bit signs")
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PayloadError(f"signs is not valid base64: {exc}") from exc
        return Parsed(vector=self._signs(data), weight=_count(payload.get("n", 1), self.max_n))

    def _signs(self, data: bytes) -> np.ndarray:
        try:
            return unpack_signs(data, self.dim)
        except CodecError as exc:
            raise PayloadError(str(exc)) from exc

    def parse_binary(self, body: bytes) -> Parsed:
        if self.section.message != "sign":
            raise PayloadError(
                "binary frecency updates are sign bits; this server takes full gradients"
            )
        return Parsed(vector=self._signs(body))

    def stored_payload(self, parsed: Parsed) -> dict[str, Any]:
        assert parsed.vector is not None
        return {"signs": base64.b64encode(pack_signs(parsed.vector)).decode()}

    @property
    def record_size(self) -> int:  # type: ignore[override]
        return (2 * self.dim + 7) // 8 if self.section.message == "sign" else 0

    def parse_binary_batch(self, records: bytes) -> tuple[MessageBatch, list[dict[str, Any]]]:
        if self.section.message != "sign":
            return super().parse_binary_batch(records)
        size = self.record_size
        count = len(records) // size
        raw = np.frombuffer(records, dtype=np.uint8).reshape(count, size)
        bits = np.unpackbits(raw, axis=1, bitorder="little")
        if np.any(bits[:, 2 * self.dim :]):
            raise PayloadError("padding bits after the last weight are set")
        pairs = bits[:, : 2 * self.dim].reshape(count, self.dim, 2)
        if np.any(pairs[..., 0] & pairs[..., 1]):
            raise PayloadError("a weight is marked both +1 and -1")
        signs = pairs[..., 0].astype(np.float64) - pairs[..., 1]
        payloads = [
            {"signs": base64.b64encode(records[k * size : (k + 1) * size]).decode()}
            for k in range(count)
        ]
        return MessageBatch(count, vector=signs, weight=np.ones(count)), payloads

    def columns(self, items: list[Parsed]) -> MessageBatch:
        return _vector_columns(items, self.dim)

    def payloads_of(self, batch: MessageBatch) -> list[dict[str, Any]]:
        if self.section.message == "full":
            return _vector_payloads(batch, "gradient", self.name)
        payloads = _vector_payloads(batch, "signs", self.name)
        if payloads:
            assert batch.vector is not None
            if batch.vector.shape[1] != self.dim or not np.isin(batch.vector, (-1, 0, 1)).all():
                raise PayloadError(f"sign messages hold {self.dim} values in -1, 0, +1")
            for p, row in zip(payloads, batch.vector, strict=True):
                p["signs"] = base64.b64encode(pack_signs(row)).decode()
        return payloads

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        if self.section.message != "full":
            return super().parse_batch(payloads)
        keys = {"gradient", "n"}
        if not all(p.keys() <= keys and "gradient" in p for p in payloads):
            raise PayloadError("payload fields")
        vectors = _vectors([p["gradient"] for p in payloads], self.dim, "gradient")
        weights = _counts([p.get("n", 1) for p in payloads], self.max_n)
        return MessageBatch(len(payloads), vector=vectors, weight=weights)


class FoltrEsWorkload(Workload):
    """FOLtR-ES (Kharitonov 2019, Section 3).

    A payload may carry ``seed_token`` (the server-issued seed's token,
    :mod:`fedrank.server.seeds`): its format is checked here, whether the server issues
    seeds or not, so that updates stored under either setting are read back alike after a
    restart; whether a token is required, and whether it vouches for the seed, is decided by
    the front door (:mod:`fedrank.server.app`). The binary forms carry the token only when
    the server issues seeds: the 8 / 12-byte ES message, then its :data:`TOKEN_BYTES` bytes.
    """

    name = "foltr-es"

    def __init__(self, config: ServerConfig) -> None:
        self.section = config.foltr_es
        self.strategy = FoltrEsStrategy(config.foltr_es)
        self.max_n = config.max_n
        self.server_seeds = config.foltr_es_server_seeds

    def parse(self, payload: dict[str, Any]) -> Parsed:
        anti = self.section.antithetic
        required = {"seed", "metric", "antithetic_metric"} if anti else {"seed", "metric"}
        _keys(payload, {"seed", "metric", "antithetic_metric", "seed_token"}, required)
        if not anti and "antithetic_metric" in payload:
            raise PayloadError(
                "this server does not use antithetic variates; drop antithetic_metric"
            )
        seed = payload["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise PayloadError(f"seed must be an integer in [0, 2**32), got {seed!r}")
        values = [self._metric(payload["metric"], "metric")]
        if anti:
            values.append(self._metric(payload["antithetic_metric"], "antithetic_metric"))
        token = None
        if "seed_token" in payload:
            token = token_from_hex(payload["seed_token"])
            if token is None:
                raise SeedTokenError(
                    f"seed_token must be the {TOKEN_HEX} lowercase hex characters your check-in "
                    "(POST /v1/checkin) returned"
                )
        return Parsed(
            seed=seed, metric=values[0], antithetic=values[1] if anti else None, seed_token=token
        )

    @staticmethod
    def _metric(value: Any, name: str) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise PayloadError(f"{name} must be a finite number, got {value!r}")
        if not 0.0 <= value <= 1.0:
            raise PayloadError(f"{name} is a mean MaxRR, in [0, 1]; got {value}")
        return float(value)

    def parse_binary(self, body: bytes) -> Parsed:
        size = self.record_size
        if len(body) != size:
            token = f" (the message, then its {TOKEN_BYTES}-byte seed token)"
            raise PayloadError(
                f"an ES message here is {size} bytes{token if self.server_seeds else ''}, "
                f"got {len(body)}"
            )
        message = body[: size - TOKEN_BYTES] if self.server_seeds else body
        try:
            m = decode_es_message(message)
        except CodecError as exc:
            raise PayloadError(str(exc)) from exc
        payload: dict[str, Any] = {"seed": m.seed, "metric": m.metric}
        if m.antithetic_metric is not None:
            payload["antithetic_metric"] = m.antithetic_metric
        if self.server_seeds:
            payload["seed_token"] = body[size - TOKEN_BYTES :].hex()
        return self.parse(payload)

    def stored_payload(self, parsed: Parsed) -> dict[str, Any]:
        out: dict[str, Any] = {"seed": parsed.seed, "metric": parsed.metric}
        if parsed.antithetic is not None:
            out["antithetic_metric"] = parsed.antithetic
        if parsed.seed_token is not None:
            out["seed_token"] = parsed.seed_token.hex()
        return out

    @property
    def record_size(self) -> int:  # type: ignore[override]
        size = ES_MESSAGE_SIZES[1] if self.section.antithetic else ES_MESSAGE_SIZES[0]
        return size + (TOKEN_BYTES if self.server_seeds else 0)

    def parse_binary_batch(self, records: bytes) -> tuple[MessageBatch, list[dict[str, Any]]]:
        anti = self.section.antithetic
        fields = [("seed", "<u4"), ("metric", "<f4")] + ([("anti", "<f4")] if anti else [])
        if self.server_seeds:
            fields.append(("token", f"V{TOKEN_BYTES}"))
        rows = np.frombuffer(records, dtype=np.dtype(fields))
        metric = rows["metric"].astype(np.float64)
        columns = {"metric": metric}
        if anti:
            columns["antithetic"] = rows["anti"].astype(np.float64)
        for name, values in columns.items():
            bad = ~((values >= 0.0) & (values <= 1.0))  # also NaN
            if bad.any():
                k = int(np.argmax(bad))
                raise PayloadError(
                    f"message {k}: {name} is a mean MaxRR in [0, 1]; got {values[k]}"
                )
        seeds = rows["seed"].tolist()
        metrics = metric.tolist()
        if anti:
            payloads = [
                {"seed": a, "metric": b, "antithetic_metric": c}
                for a, b, c in zip(seeds, metrics, columns["antithetic"].tolist(), strict=True)
            ]
        else:
            payloads = [{"seed": a, "metric": b} for a, b in zip(seeds, metrics, strict=True)]
        if self.server_seeds:
            size = self.record_size
            for k, p in enumerate(payloads):
                p["seed_token"] = records[(k + 1) * size - TOKEN_BYTES : (k + 1) * size].hex()
        return MessageBatch(len(rows), seed=rows["seed"].astype(np.uint64), **columns), payloads

    def columns(self, items: list[Parsed]) -> MessageBatch:
        anti = np.array([p.antithetic for p in items]) if self.section.antithetic else None
        return MessageBatch(
            len(items),
            seed=np.array([p.seed for p in items], dtype=np.uint64),
            metric=np.array([p.metric for p in items], dtype=np.float64),
            antithetic=anti,
        )

    def payloads_of(self, batch: MessageBatch) -> list[dict[str, Any]]:
        if self.server_seeds:
            raise SeedTokenError(
                "a columnar batch carries no seed_token per message, and this server issues "
                "seeds ([foltr_es] server_seeds): send {'messages': [...]} with a seed_token "
                f"in each payload, or a binary batch whose records end in their {TOKEN_BYTES}-"
                "byte tokens"
            )
        anti = self.section.antithetic
        _only_columns(batch, {"seed", "metric", "antithetic"} if anti else {"seed", "metric"},
                      self.name)  # fmt: skip
        if not batch.size:
            return []
        assert batch.seed is not None and batch.metric is not None
        payloads = [
            {"seed": s, "metric": m}
            for s, m in zip(batch.seed.tolist(), batch.metric.tolist(), strict=True)
        ]
        if anti:
            assert batch.antithetic is not None
            for p, a in zip(payloads, batch.antithetic.tolist(), strict=True):
                p["antithetic_metric"] = a
        return payloads

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        anti = self.section.antithetic
        keys = {"seed", "metric", "antithetic_metric"} if anti else {"seed", "metric"}
        if not all(p.keys() == keys for p in payloads):
            raise PayloadError("payload fields")
        seeds = [p["seed"] for p in payloads]
        if not set(map(type, seeds)) <= {int}:
            raise PayloadError("seeds")
        seed = np.array(seeds, dtype=np.int64) if seeds else np.zeros(0, np.int64)
        if seed.size and (seed.min() < 0 or seed.max() >= 2**32):
            raise PayloadError("seed range")
        columns = {"metric": _numbers([p["metric"] for p in payloads], "metric")}
        if anti:
            columns["antithetic"] = _numbers(
                [p["antithetic_metric"] for p in payloads], "antithetic_metric"
            )
        for values in columns.values():
            if not np.all((values >= 0.0) & (values <= 1.0)):  # also refuses NaN
                raise PayloadError("metric range")
        return MessageBatch(len(payloads), seed=seed.astype(np.uint64), **columns)


class FedAvgWorkload(Workload):
    """FedAvg of shared-parameter deltas (FedPS, Algorithm 1)."""

    name = "fedavg"

    def __init__(self, config: ServerConfig) -> None:
        self.section = config.fedavg
        self.strategy = FedAvgStrategy(config.fedavg)
        self.max_n = config.max_n

    def parse(self, payload: dict[str, Any]) -> Parsed:
        _keys(payload, {"delta", "n"}, {"delta", "n"})
        return Parsed(
            vector=_finite_vector(payload["delta"], self.dim, "delta"),
            weight=_count(payload["n"], self.max_n),
        )

    def columns(self, items: list[Parsed]) -> MessageBatch:
        return _vector_columns(items, self.dim)

    def payloads_of(self, batch: MessageBatch) -> list[dict[str, Any]]:
        return _vector_payloads(batch, "delta", self.name)

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        if not all(p.keys() == {"delta", "n"} for p in payloads):
            raise PayloadError("payload fields")
        vectors = _vectors([p["delta"] for p in payloads], self.dim, "delta")
        return MessageBatch(
            len(payloads), vector=vectors, weight=_counts([p["n"] for p in payloads], self.max_n)
        )


def _only_columns(batch: MessageBatch, wanted: set[str], workload: str) -> None:
    """Refuse a batch whose columns are not exactly ``wanted`` (another workload's)."""
    used = {f for f in MessageBatch.FIELDS if getattr(batch, f) is not None}
    if batch.size and used != wanted:
        raise PayloadError(
            f"a {workload} batch has the columns {sorted(wanted)}; got {sorted(used)}"
        )


def _weights_as_sent(weight: np.ndarray) -> list[int | float]:
    """Weights as JSON numbers: whole values as integers, anything else as it is (so that
    the count check refuses 1.5 instead of truncating it)."""
    return [int(w) if float(w).is_integer() else float(w) for w in weight.tolist()]


def _vector_payloads(batch: MessageBatch, key: str, workload: str) -> list[dict[str, Any]]:
    _only_columns(batch, {"vector", "weight"}, workload)
    if not batch.size:
        return []
    assert batch.vector is not None and batch.weight is not None
    return [
        {key: row, "n": n}
        for row, n in zip(batch.vector.tolist(), _weights_as_sent(batch.weight), strict=True)
    ]


def _vector_columns(items: list[Parsed], dim: int) -> MessageBatch:
    if len(items) == 1:  # a group of one update: a view, no copy
        vectors = items[0].vector[None, :]  # type: ignore[index]
    else:
        vectors = np.stack([p.vector for p in items]) if items else np.zeros((0, dim))  # type: ignore[misc]
    return MessageBatch(len(items), vector=vectors, weight=np.array([p.weight for p in items]))


def make_workload(
    config: ServerConfig, wrap: Callable[[Strategy], Strategy] | None = None
) -> Workload:
    """The workload of ``config``; ``wrap`` replaces its strategy by a wrapper of it (the
    central-DP strategy of ``[privacy]``, :mod:`fedrank.server.privacy`)."""
    workload = {
        "frecency": FrecencyWorkload,
        "foltr-es": FoltrEsWorkload,
        "fedavg": FedAvgWorkload,
    }[config.workload](config)
    if wrap is not None:
        workload.strategy = wrap(workload.strategy)
    return workload
