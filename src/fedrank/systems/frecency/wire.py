"""Federated frecency's messages on the wire (Mozilla Sec. 5.3).

* full gradients: ``{"gradient": [d floats], "n": int}`` (``n``: the searches behind it,
  1 when left out);
* sign messages: ``{"signs": base64, "n": int}``, two bits per weight (first +1, second -1,
  both clear for 0: :func:`fedrank.core.codec.pack_signs`); their binary form and the
  records of a binary batch are the same bits, ``ceil(2 d / 8)`` bytes.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from fedrank.core.codec import pack_signs, unpack_signs
from fedrank.core.message import MessageBatch
from fedrank.errors import CodecError
from fedrank.models.frecency.scorer import page_scorer
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.wire import (
    Parsed,
    PayloadError,
    VectorWire,
    check_keys,
    count,
    vector_payloads,
)


class FrecencyWire(VectorWire):
    """Full gradients or sign messages, as ``config.message`` says (module docstring)."""

    name = "frecency"
    key = "gradient"
    n_required = False

    def __init__(self, config: FrecencyConfig, max_n: int) -> None:
        super().__init__(len(page_scorer(config.model).names), max_n)
        self.sign = config.message == "sign"

    @property
    def record_size(self) -> int:  # type: ignore[override]
        return (2 * self.dim + 7) // 8 if self.sign else 0

    def parse(self, payload: dict[str, Any]) -> Parsed:
        if not self.sign:
            return super().parse(payload)
        check_keys(payload, {"signs", "n"}, {"signs"})
        raw = payload["signs"]
        if not isinstance(raw, str):
            raise PayloadError("signs must be a base64 string of 2-bit signs")
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PayloadError(f"signs is not valid base64: {exc}") from exc
        return Parsed(vector=self._signs(data), weight=count(payload.get("n", 1), self.max_n))

    def _signs(self, data: bytes) -> np.ndarray:
        try:
            return unpack_signs(data, self.dim)
        except CodecError as exc:
            raise PayloadError(str(exc)) from exc

    def parse_binary(self, body: bytes) -> Parsed:
        if not self.sign:
            raise PayloadError(
                "binary frecency updates are sign bits; this server takes full gradients"
            )
        return Parsed(vector=self._signs(body))

    def stored_payload(self, parsed: Parsed) -> dict[str, Any]:
        assert parsed.vector is not None
        return {"signs": base64.b64encode(pack_signs(parsed.vector)).decode()}

    def parse_binary_batch(self, records: bytes) -> tuple[MessageBatch, list[dict[str, Any]]]:
        if not self.sign:
            return super().parse_binary_batch(records)
        size = self.record_size
        n_records = len(records) // size
        raw = np.frombuffer(records, dtype=np.uint8).reshape(n_records, size)
        bits = np.unpackbits(raw, axis=1, bitorder="little")
        if np.any(bits[:, 2 * self.dim :]):
            raise PayloadError("padding bits after the last weight are set")
        pairs = bits[:, : 2 * self.dim].reshape(n_records, self.dim, 2)
        if np.any(pairs[..., 0] & pairs[..., 1]):
            raise PayloadError("a weight is marked both +1 and -1")
        signs = pairs[..., 0].astype(np.float64) - pairs[..., 1]
        payloads = [
            {"signs": base64.b64encode(records[k * size : (k + 1) * size]).decode()}
            for k in range(n_records)
        ]
        return MessageBatch(n_records, vector=signs, weight=np.ones(n_records)), payloads

    def encode(self, batch: MessageBatch) -> list[dict[str, Any]]:
        if not self.sign:
            return super().encode(batch)
        payloads = vector_payloads(batch, "signs", self.name)
        if payloads:
            assert batch.vector is not None
            if batch.vector.shape[1] != self.dim or not np.isin(batch.vector, (-1, 0, 1)).all():
                raise PayloadError(f"sign messages hold {self.dim} values in -1, 0, +1")
            for p, row in zip(payloads, batch.vector, strict=True):
                p["signs"] = base64.b64encode(pack_signs(row)).decode()
        return payloads

    def parse_batch(self, payloads: list[dict[str, Any]]) -> MessageBatch:
        if self.sign:
            return self.columns([self.parse(p) for p in payloads])
        return super().parse_batch(payloads)
