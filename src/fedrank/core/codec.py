"""Binary wire format of a :class:`~fedrank.core.message.Message`.

Paper Section 5.3: sending signs instead of floats shrinks each weight from "32 or 64 bits"
to one bit (signs only) or two bits (signs and zero). The four encodings:

============ =================== ==============================================
encoding     payload per weight  values
============ =================== ==============================================
``float64``  8 bytes             any (bit exact)
``float32``  4 bytes             any within float32 range (rounded)
``sign1``    1 bit               ``-1`` or ``+1`` only
``sign2``    2 bits              ``-1``, ``0`` or ``+1`` only
============ =================== ==============================================

For 22 classic frecency weights the payload is 176, 88, 3 and 6 bytes. Apply
:class:`fedrank.privacy.sign.SignCompressor` before encoding as ``sign1``/``sign2``.

Layout (all integers little-endian)::

    header   magic b"FRM" | format version u8 | encoding id u8 | dim u32 | n i64 |
             model_version i64                                             (25 bytes)
    payload  float64/float32: dim little-endian floats;
             sign1: np.packbits(bit = value > 0, bitorder="little"), ceil(dim / 8) bytes;
             sign2: two bits per weight (first: +1, second: -1; 0 is both clear),
                    np.packbits(..., bitorder="little"), ceil(2 * dim / 8) bytes
    metrics  count u16, then per metric: name length u16 | utf-8 name | value f64

Unused padding bits must be zero. Decoding checks every length, so truncated, padded, or
foreign data raises :class:`~fedrank.errors.CodecError` instead of producing a wrong message.

FOLtR-ES messages (:class:`~fedrank.core.message.ESMessage`) have their own, minimal format
(:func:`encode_es_message`): the paper's "s and f take 4 bytes each, the whole message size
would be 8 bytes" -- ``seed u32 | metric f32`` (8 bytes), or ``seed u32 | metric f32 |
antithetic_metric f32`` (12 bytes), little-endian. The length tells the two apart. Metrics
are rounded to float32; a metric that is not finite, or beyond float32 range, is refused.
"""

from __future__ import annotations

import struct

import numpy as np

from fedrank.core.message import ESMessage, Message
from fedrank.errors import CodecError

MAGIC = b"FRM"
FORMAT_VERSION = 1
ENCODINGS: tuple[str, ...] = ("float64", "float32", "sign1", "sign2")

_HEADER = struct.Struct("<3sBBIqq")
HEADER_SIZE = _HEADER.size
_U16 = struct.Struct("<H")
_F64 = struct.Struct("<d")
_MAX_U16 = 0xFFFF
_MAX_U32 = 0xFFFFFFFF
_INT64_RANGE = (-(2**63), 2**63 - 1)


def payload_size(encoding: str, dim: int) -> int:
    """Bytes the update of length ``dim`` takes in ``encoding``."""
    if encoding == "float64":
        return 8 * dim
    if encoding == "float32":
        return 4 * dim
    if encoding == "sign1":
        return (dim + 7) // 8
    if encoding == "sign2":
        return (2 * dim + 7) // 8
    raise CodecError(f"unknown encoding {encoding!r}; choose one of {', '.join(ENCODINGS)}")


def _encode_payload(update: np.ndarray, encoding: str) -> bytes:
    if encoding == "float64":
        return update.astype("<f8").tobytes()
    if encoding == "float32":
        with np.errstate(over="ignore"):
            narrowed = update.astype("<f4")
        if np.any(np.isinf(narrowed) & np.isfinite(update)):
            raise CodecError(
                "update has values beyond the float32 range (about 3.4e38); use encoding 'float64'"
            )
        return narrowed.tobytes()
    pos = update == 1
    neg = update == -1
    if encoding == "sign1":
        if not np.all(pos | neg):
            raise CodecError(
                "encoding 'sign1' stores only -1 and +1; apply "
                "SignCompressor(with_zero=False) to the message first"
            )
        return np.packbits(pos, bitorder="little").tobytes()
    if not np.all(pos | neg | (update == 0)):
        raise CodecError(
            "encoding 'sign2' stores only -1, 0 and +1; apply SignCompressor(with_zero=True) "
            "to the message first"
        )
    bits = np.stack([pos, neg], axis=1).reshape(-1)
    return np.packbits(bits, bitorder="little").tobytes()


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise CodecError(f"message {name} must be an integer, got {value!r}")
    if not low <= int(value) <= high:
        raise CodecError(f"message {name} must lie in [{low}, {high}], got {value}")
    return int(value)


def encode_message(message: Message, encoding: str = "float64") -> bytes:
    """The bytes of ``message`` in ``encoding`` (one of :data:`ENCODINGS`)."""
    if encoding not in ENCODINGS:
        raise CodecError(f"unknown encoding {encoding!r}; choose one of {', '.join(ENCODINGS)}")
    update = np.asarray(message.update)
    if update.ndim != 1:
        raise CodecError(f"message update must be a 1-D vector, got shape {update.shape}")
    if update.dtype.kind not in "fiub":
        raise CodecError(f"message update must be numeric, got dtype {update.dtype}")
    dim = _check_int("dimension", update.size, 0, _MAX_U32)
    n = _check_int("n", message.n, 0, _INT64_RANGE[1])
    version = _check_int("model_version", message.model_version, *_INT64_RANGE)
    metrics = dict(message.metrics)
    if len(metrics) > _MAX_U16:
        raise CodecError(f"a message carries at most {_MAX_U16} metrics, got {len(metrics)}")

    parts = [
        _HEADER.pack(MAGIC, FORMAT_VERSION, ENCODINGS.index(encoding), dim, n, version),
        _encode_payload(update.astype(np.float64, copy=False), encoding),
        _U16.pack(len(metrics)),
    ]
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise CodecError(f"metric names must be strings, got {name!r}")
        raw = name.encode("utf-8")
        if len(raw) > _MAX_U16:
            raise CodecError(f"metric name {name[:40]!r}... is longer than {_MAX_U16} bytes")
        try:
            number = float(value)
        except (TypeError, ValueError) as exc:
            raise CodecError(f"metric {name!r} must be a number, got {value!r}") from exc
        parts += [_U16.pack(len(raw)), raw, _F64.pack(number)]
    return b"".join(parts)


class _Reader:
    """Sequential reader that names what is missing when the data ends early."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int, what: str) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise CodecError(
                f"truncated message: {what} needs {size} bytes at offset {self.pos}, only "
                f"{len(self.data) - self.pos} left"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk


def _decode_payload(raw: bytes, encoding: str, dim: int) -> np.ndarray:
    if encoding == "float64":
        return np.frombuffer(raw, dtype="<f8").astype(np.float64)
    if encoding == "float32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    width = 1 if encoding == "sign1" else 2
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
    if np.any(bits[width * dim :]):
        raise CodecError(f"corrupt {encoding} payload: padding bits after the last weight are set")
    if encoding == "sign1":
        return np.where(bits[:dim] == 1, 1.0, -1.0)
    pairs = bits[: 2 * dim].reshape(dim, 2)
    if np.any(pairs[:, 0] & pairs[:, 1]):
        raise CodecError("corrupt sign2 payload: a weight is marked both +1 and -1")
    return pairs[:, 0].astype(np.float64) - pairs[:, 1].astype(np.float64)


def decode_message(data: bytes | bytearray | memoryview) -> Message:
    """Inverse of :func:`encode_message`; the update comes back as float64."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"expected bytes to decode, got {type(data).__name__}")
    reader = _Reader(bytes(data))
    if len(reader.data) >= len(MAGIC) and reader.data[: len(MAGIC)] != MAGIC:
        raise CodecError(
            f"not a fedrank message: expected magic {MAGIC!r}, got {reader.data[: len(MAGIC)]!r}"
        )
    _magic, version, enc_id, dim, n, model_version = _HEADER.unpack(
        reader.take(HEADER_SIZE, "the header")
    )
    if version != FORMAT_VERSION:
        raise CodecError(
            f"unsupported message format version {version}; this fedrank reads version "
            f"{FORMAT_VERSION} (upgrade the side that is older)"
        )
    if enc_id >= len(ENCODINGS):
        raise CodecError(f"unknown encoding id {enc_id}; known ids are 0..{len(ENCODINGS) - 1}")
    if n < 0:
        raise CodecError(f"corrupt header: n is negative ({n})")
    encoding = ENCODINGS[enc_id]
    update = _decode_payload(
        reader.take(payload_size(encoding, dim), f"the {encoding} payload of {dim} weights"),
        encoding,
        dim,
    )
    (count,) = _U16.unpack(reader.take(_U16.size, "the metric count"))
    metrics: dict[str, float] = {}
    for i in range(count):
        (length,) = _U16.unpack(reader.take(_U16.size, f"the length of metric name {i}"))
        raw = reader.take(length, f"metric name {i}")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError(f"metric name {i} is not valid utf-8") from exc
        if name in metrics:
            raise CodecError(f"metric {name!r} appears twice")
        (value,) = _F64.unpack(reader.take(_F64.size, f"the value of metric {name!r}"))
        metrics[name] = value
    if reader.pos != len(reader.data):
        raise CodecError(
            f"{len(reader.data) - reader.pos} unexpected bytes after the end of the message"
        )
    return Message(update=update, n=n, model_version=model_version, metrics=metrics)


#: Binary batches of tiny messages (``application/vnd.fedrank.batch``): header ``magic "FRB1"
#: | count u32 | model_version u32 | id bytes u32``, then the message ids (ASCII, each
#: ending in ``\n``), then ``count`` fixed-size records: each the message's own binary
#: form (a 12-byte ES message, or a frecency client's sign bits).
BATCH_MAGIC = b"FRB1"
_BATCH_HEADER = struct.Struct("<4sIII")
BATCH_HEADER_SIZE = _BATCH_HEADER.size


def encode_batch(message_ids: list[str], model_version: int, records: bytes) -> bytes:
    """A binary batch of ``len(message_ids)`` messages whose records are concatenated in
    ``records`` (what a proxy forwards)."""
    if any(not m or "\n" in m for m in message_ids):
        raise CodecError("message ids must be non-empty and hold no newline")
    ids = "".join(f"{m}\n" for m in message_ids).encode("ascii")
    version = _check_int("model_version", model_version, 0, _MAX_U32)
    return _BATCH_HEADER.pack(BATCH_MAGIC, len(message_ids), version, len(ids)) + ids + records


def decode_batch(data: bytes, record_size: int) -> tuple[list[str], int, bytes]:
    """``(message_ids, model_version, records)`` of a binary batch whose records have
    ``record_size`` bytes each; every length is checked."""
    if len(data) < BATCH_HEADER_SIZE:
        raise CodecError(f"a binary batch starts with a {BATCH_HEADER_SIZE}-byte header")
    magic, count, version, id_bytes = _BATCH_HEADER.unpack_from(data)
    if magic != BATCH_MAGIC:
        raise CodecError(f"not a fedrank binary batch: magic {magic!r}, expected {BATCH_MAGIC!r}")
    records = data[BATCH_HEADER_SIZE + id_bytes :]
    if len(data) < BATCH_HEADER_SIZE + id_bytes or len(records) != count * record_size:
        raise CodecError(
            f"the batch declares {count} messages of {record_size} bytes and {id_bytes} id "
            f"bytes, but holds {len(data)} bytes in all"
        )
    try:
        ids = data[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + id_bytes].decode("ascii")
    except UnicodeDecodeError as exc:
        raise CodecError("message ids must be ASCII") from exc
    names = ids.split("\n")
    if names[-1] != "" or len(names) - 1 != count:
        raise CodecError(f"the id block must hold {count} ids, each ending in a newline")
    return names[:-1], version, records


def pack_signs(signs: np.ndarray) -> bytes:
    """Bare sign2 payload of a vector of -1 / 0 / +1 (2 bits per weight, no header): what a
    sign-only frecency client sends, ``ceil(2 * dim / 8)`` bytes (6 for 22 weights)."""
    vec = np.asarray(signs, dtype=np.float64)
    if vec.ndim != 1:
        raise CodecError(f"signs must be a 1-D vector, got shape {vec.shape}")
    return _encode_payload(vec, "sign2")


def unpack_signs(raw: bytes, dim: int) -> np.ndarray:
    """Inverse of :func:`pack_signs` for ``dim`` weights; the length and padding are checked."""
    expected = payload_size("sign2", dim)
    if len(raw) != expected:
        raise CodecError(f"{dim} signs take {expected} bytes (2 bits each), got {len(raw)}")
    return _decode_payload(bytes(raw), "sign2", dim)


def encoded_size(message: Message, encoding: str) -> int:
    """Length in bytes of ``encode_message(message, encoding)`` (without encoding it)."""
    dim = int(np.asarray(message.update).size)
    names = sum(len(str(k).encode("utf-8")) for k in message.metrics)
    return (
        HEADER_SIZE
        + payload_size(encoding, dim)
        + _U16.size
        + len(message.metrics) * (_U16.size + _F64.size)
        + names
    )


_ES_PLAIN = struct.Struct("<If")
_ES_ANTITHETIC = struct.Struct("<Iff")
#: Sizes of an ES message without and with the antithetic metric.
ES_MESSAGE_SIZES = (_ES_PLAIN.size, _ES_ANTITHETIC.size)


def _es_metric(name: str, value: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"ES message {name} must be a number, got {value!r}") from exc
    if not np.isfinite(number) or abs(number) > float(np.finfo(np.float32).max):
        raise CodecError(f"ES message {name} must be finite and within float32 range, got {value}")
    return number


def encode_es_message(message: ESMessage) -> bytes:
    """The 8 (or 12, with the antithetic metric) bytes of a FOLtR-ES message."""
    seed = _check_int("seed", message.seed, 0, _MAX_U32)
    metric = _es_metric("metric", message.metric)
    if message.antithetic_metric is None:
        return _ES_PLAIN.pack(seed, metric)
    return _ES_ANTITHETIC.pack(
        seed, metric, _es_metric("antithetic_metric", message.antithetic_metric)
    )


def decode_es_message(data: bytes | bytearray | memoryview, model_version: int = 0) -> ESMessage:
    """Inverse of :func:`encode_es_message` (metrics come back as the float32 values sent);
    ``model_version`` is the version the request named."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"expected bytes to decode, got {type(data).__name__}")
    raw = bytes(data)
    if len(raw) == _ES_PLAIN.size:
        seed, metric = _ES_PLAIN.unpack(raw)
        anti = None
    elif len(raw) == _ES_ANTITHETIC.size:
        seed, metric, anti = _ES_ANTITHETIC.unpack(raw)
    else:
        raise CodecError(
            f"an ES message is {_ES_PLAIN.size} or {_ES_ANTITHETIC.size} bytes (seed and one or "
            f"two float32 metrics), got {len(raw)}"
        )
    for name, value in (("metric", metric), ("antithetic_metric", anti)):
        if value is not None and not np.isfinite(value):
            raise CodecError(f"corrupt ES message: {name} is not finite")
    return ESMessage(int(seed), float(metric), None if anti is None else float(anti), model_version)


__all__ = [
    "ENCODINGS",
    "ES_MESSAGE_SIZES",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "BATCH_HEADER_SIZE",
    "BATCH_MAGIC",
    "decode_batch",
    "decode_es_message",
    "encode_batch",
    "decode_message",
    "encode_es_message",
    "encode_message",
    "encoded_size",
    "pack_signs",
    "unpack_signs",
    "payload_size",
]
