"""FOLtR-ES's messages on the wire (Kharitonov, WSDM 2019, Sec. 3.2): a report is the
client's seed and its mean (privatized) MaxRR, and the antithetic one with antithetic
variates.

* JSON: ``{"seed": int in [0, 2**32), "metric": float, "antithetic_metric": float}``, the
  metrics mean MaxRR values in ``[0, 1]``;
* binary: the 8 / 12-byte ES message of :func:`fedrank.core.codec.encode_es_message`;
* with server-issued seeds (``[foltr_es] server_seeds``, :mod:`fedrank.server.seeds`) a
  report also carries ``seed_token`` (:data:`TOKEN_HEX` lowercase hex characters), and the
  binary forms end in the token's :data:`TOKEN_BYTES` bytes.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from fedrank.core.codec import ES_MESSAGE_SIZES, decode_es_message, encode_es_message
from fedrank.core.message import ESMessage, MessageBatch
from fedrank.errors import CodecError, FedrankError
from fedrank.models.rankers import make_ranker
from fedrank.systems.foltr_es.config import FoltrEsConfig
from fedrank.systems.wire import Parsed, PayloadError, Wire, check_keys, numbers, only_columns

#: Bytes of a seed token: model version u64, nonce, truncated MAC (:mod:`fedrank.server.seeds`).
TOKEN_BYTES = 32
#: Characters of a token in JSON: lowercase hex of :data:`TOKEN_BYTES`.
TOKEN_HEX = 2 * TOKEN_BYTES
_HEX_TOKEN = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}")


class SeedTokenError(PayloadError):
    """A FOLtR-ES update whose ``seed_token`` is malformed (:mod:`fedrank.server.seeds`)."""

    code = "bad_seed_token"


def token_from_hex(value: object) -> bytes | None:
    """The raw token of a JSON ``seed_token`` (exactly :data:`TOKEN_HEX` lowercase hex
    characters), or ``None`` if ``value`` is anything else."""
    if not isinstance(value, str) or len(value) != TOKEN_HEX or not _HEX_TOKEN.fullmatch(value):
        return None
    return bytes.fromhex(value)


def es_payload(
    seed: int,
    metric: float,
    antithetic_metric: float | None = None,
    seed_token: str | None = None,
) -> dict[str, Any]:
    """The JSON payload of a FOLtR-ES report (what ``POST /v1/updates`` takes); metrics are
    mean MaxRR values in ``[0, 1]``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**32:
        raise FedrankError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    payload: dict[str, Any] = {"seed": int(seed), "metric": _unit("metric", metric)}
    if antithetic_metric is not None:
        payload["antithetic_metric"] = _unit("antithetic_metric", antithetic_metric)
    if seed_token is not None:
        payload["seed_token"] = seed_token
    return payload


def es_record(
    seed: int,
    metric: float,
    antithetic_metric: float | None = None,
    seed_token: str | None = None,
) -> bytes:
    """The binary form of a FOLtR-ES report (``application/vnd.fedrank.update``, and one
    record of a binary batch): the 8 / 12-byte ES message, then the 32 bytes of the seed's
    token when the server issued the seed."""
    payload = es_payload(seed, metric, antithetic_metric, seed_token)
    anti = payload.get("antithetic_metric")
    message = encode_es_message(ESMessage(payload["seed"], payload["metric"], anti))
    if seed_token is None:
        return message
    try:
        return message + bytes.fromhex(seed_token)
    except ValueError as exc:
        raise FedrankError(f"seed_token must be hex, as the check-in returned it: {exc}") from exc


def _unit(name: str, value: float) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:  # also NaN
        raise FedrankError(f"{name} is a mean MaxRR, in [0, 1]; got {value}")
    return number


class FoltrEsWire(Wire):
    """FOLtR-ES (Kharitonov 2019, Section 3).

    A payload may carry ``seed_token`` (the server-issued seed's token,
    :mod:`fedrank.server.seeds`): its format is checked here, whether the server issues
    seeds or not, so that updates stored under either setting are read back alike after a
    restart; whether a token is required, and whether it vouches for the seed, is decided by
    the front door (:class:`fedrank.server.seeds.SeedChecks`). The binary forms carry the
    token only when the server issues seeds: the 8 / 12-byte ES message, then its
    :data:`TOKEN_BYTES` bytes.
    """

    name = "foltr-es"

    def __init__(self, config: FoltrEsConfig, max_n: int) -> None:
        self.section = config
        self.dim = make_ranker(config.ranker, config.n_features).dim
        self.max_n = int(max_n)
        self.server_seeds = config.server_seeds

    def parse(self, payload: dict[str, Any]) -> Parsed:
        anti = self.section.antithetic
        required = {"seed", "metric", "antithetic_metric"} if anti else {"seed", "metric"}
        check_keys(payload, {"seed", "metric", "antithetic_metric", "seed_token"}, required)
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

    def encode(self, batch: MessageBatch) -> list[dict[str, Any]]:
        if self.server_seeds:
            raise SeedTokenError(
                "a columnar batch carries no seed_token per message, and this server issues "
                "seeds ([foltr_es] server_seeds): send {'messages': [...]} with a seed_token "
                f"in each payload, or a binary batch whose records end in their {TOKEN_BYTES}-"
                "byte tokens"
            )
        anti = self.section.antithetic
        only_columns(batch, {"seed", "metric", "antithetic"} if anti else {"seed", "metric"},
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
        columns = {"metric": numbers([p["metric"] for p in payloads], "metric")}
        if anti:
            columns["antithetic"] = numbers(
                [p["antithetic_metric"] for p in payloads], "antithetic_metric"
            )
        for values in columns.values():
            if not np.all((values >= 0.0) & (values <= 1.0)):  # also refuses NaN
                raise PayloadError("metric range")
        return MessageBatch(len(payloads), seed=seed.astype(np.uint64), **columns)
