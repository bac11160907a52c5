"""Binary message codec: round trips, payload sizes (paper Section 5.3: 1-2 bits per weight),
and clear errors on foreign or damaged data."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.core.codec import (
    BATCH_HEADER_SIZE,
    BATCH_MAGIC,
    ENCODINGS,
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    decode_batch,
    decode_message,
    encode_batch,
    encode_message,
    encoded_size,
    payload_size,
)
from fedrank.core.message import Message
from fedrank.errors import CodecError

SETTINGS = settings(max_examples=100, deadline=None)

metric_dicts = st.dictionaries(
    st.text(min_size=1, max_size=20),
    st.floats(allow_nan=False),
    max_size=4,
)
counts = st.integers(0, 2**63 - 1)
versions = st.integers(-(2**63), 2**63 - 1)


def _vectors(elements: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(elements, max_size=70).map(lambda v: np.array(v, dtype=np.float64))


def _assert_same(decoded: Message, original: Message) -> None:
    assert decoded.update.dtype == np.float64
    assert decoded.update.tobytes() == np.asarray(original.update, np.float64).tobytes()
    assert decoded.n == original.n and decoded.model_version == original.model_version
    assert decoded.metrics == original.metrics


@SETTINGS
@given(_vectors(st.floats(allow_nan=False)), counts, versions, metric_dicts)
def test_float64_round_trip_is_bit_exact(update, n, version, metrics) -> None:
    m = Message(update=update, n=n, model_version=version, metrics=metrics)
    data = encode_message(m, "float64")
    assert len(data) == encoded_size(m, "float64")
    _assert_same(decode_message(data), m)


@SETTINGS
@given(_vectors(st.floats(width=32, allow_nan=False)), counts, metric_dicts)
def test_float32_round_trip_of_float32_values(update, n, metrics) -> None:
    m = Message(update=update, n=n, metrics=metrics)
    _assert_same(decode_message(encode_message(m, "float32")), m)


@SETTINGS
@given(_vectors(st.sampled_from([-1.0, 1.0])), counts, versions, metric_dicts)
def test_sign1_round_trip(update, n, version, metrics) -> None:
    m = Message(update=update, n=n, model_version=version, metrics=metrics)
    data = encode_message(m, "sign1")
    assert len(data) == encoded_size(m, "sign1")
    _assert_same(decode_message(data), m)


@SETTINGS
@given(_vectors(st.sampled_from([-1.0, 0.0, 1.0, -0.0])), counts, versions, metric_dicts)
def test_sign2_round_trip(update, n, version, metrics) -> None:
    m = Message(update=update, n=n, model_version=version, metrics=metrics)
    decoded = decode_message(encode_message(m, "sign2"))
    np.testing.assert_array_equal(decoded.update, update)
    assert not np.signbit(decoded.update[decoded.update == 0]).any()
    assert (decoded.n, decoded.model_version, decoded.metrics) == (n, version, metrics)


def test_payload_sizes_for_22_weights() -> None:
    assert payload_size("sign1", 22) == 3
    assert payload_size("sign2", 22) == 6
    assert payload_size("float64", 22) == 176
    assert payload_size("float32", 22) == 88
    signs = np.where(np.arange(22) % 3 == 0, 1.0, -1.0)
    for encoding, size in (("sign1", 3), ("sign2", 6), ("float64", 176), ("float32", 88)):
        data = encode_message(Message(update=signs), encoding)
        assert len(data) == HEADER_SIZE + size + 2  # header, payload, empty metric count


def test_header_layout() -> None:
    data = encode_message(Message(update=np.ones(3), n=5, model_version=9), "sign1")
    magic, version, enc, dim, n, model_version = struct.unpack("<3sBBIqq", data[:HEADER_SIZE])
    assert (magic, version, enc, dim, n, model_version) == (
        MAGIC,
        FORMAT_VERSION,
        ENCODINGS.index("sign1"),
        3,
        5,
        9,
    )


def test_non_sign_vectors_are_refused_for_sign_encodings() -> None:
    with pytest.raises(CodecError, match="SignCompressor"):
        encode_message(Message(update=np.array([1.0, 0.5])), "sign1")
    with pytest.raises(CodecError, match=r"SignCompressor\(with_zero=False\)"):
        encode_message(Message(update=np.array([1.0, 0.0])), "sign1")
    with pytest.raises(CodecError, match=r"SignCompressor\(with_zero=True\)"):
        encode_message(Message(update=np.array([2.0, 0.0])), "sign2")


def test_bad_encode_arguments() -> None:
    with pytest.raises(CodecError, match="unknown encoding"):
        encode_message(Message(update=np.ones(2)), "int8")
    with pytest.raises(CodecError, match="float32 range"):
        encode_message(Message(update=np.array([1e300])), "float32")
    with pytest.raises(CodecError, match="n must lie"):
        encode_message(Message(update=np.ones(2), n=-1))
    with pytest.raises(CodecError, match="1-D"):
        encode_message(Message(update=np.ones((2, 2))))


@pytest.fixture
def encoded() -> bytes:
    return encode_message(
        Message(update=np.array([1.0, -1.0, 0.0]), n=4, metrics={"loss": 0.5}), "sign2"
    )


def test_wrong_magic(encoded: bytes) -> None:
    with pytest.raises(CodecError, match="not a fedrank message"):
        decode_message(b"PNG" + encoded[3:])


def test_wrong_version(encoded: bytes) -> None:
    with pytest.raises(CodecError, match="format version 9"):
        decode_message(encoded[:3] + bytes([9]) + encoded[4:])


def test_unknown_encoding_id(encoded: bytes) -> None:
    with pytest.raises(CodecError, match="encoding id 7"):
        decode_message(encoded[:4] + bytes([7]) + encoded[5:])


def test_every_truncation_is_detected(encoded: bytes) -> None:
    for cut in range(len(encoded)):
        with pytest.raises(CodecError, match="truncated|not a fedrank"):
            decode_message(encoded[:cut])


def test_trailing_bytes_are_detected(encoded: bytes) -> None:
    with pytest.raises(CodecError, match="unexpected bytes"):
        decode_message(encoded + b"\x00")


def test_corrupt_sign_payloads_are_detected() -> None:
    data = bytearray(encode_message(Message(update=np.array([1.0, -1.0, 0.0])), "sign2"))
    data[HEADER_SIZE] |= 0b11  # first weight marked both +1 and -1
    with pytest.raises(CodecError, match="both"):
        decode_message(bytes(data))
    data = bytearray(encode_message(Message(update=np.array([1.0, -1.0, 1.0])), "sign1"))
    data[HEADER_SIZE] |= 0b1000_0000  # a padding bit
    with pytest.raises(CodecError, match="padding"):
        decode_message(bytes(data))


def test_decode_refuses_non_bytes() -> None:
    with pytest.raises(CodecError, match="bytes"):
        decode_message("FRM")  # type: ignore[arg-type]


def test_decoded_update_is_writeable() -> None:
    out = decode_message(encode_message(Message(update=np.ones(2))))
    out.update[0] = 5.0


_BATCH_IDS = st.lists(
    st.text(alphabet="abcXYZ019._:-", min_size=1, max_size=20), min_size=0, max_size=30
)


@given(_BATCH_IDS, st.integers(0, 2**32 - 1), st.sampled_from([6, 8, 12]), st.data())
def test_batch_round_trip(ids: list[str], version: int, size: int, data: st.DataObject) -> None:
    records = data.draw(st.binary(min_size=size * len(ids), max_size=size * len(ids)))
    encoded = encode_batch(ids, version, records)
    assert encoded[:4] == BATCH_MAGIC
    assert struct.unpack_from("<III", encoded, 4)[:2] == (len(ids), version)
    assert len(encoded) == BATCH_HEADER_SIZE + sum(len(i) + 1 for i in ids) + len(records)
    assert decode_batch(encoded, size) == (ids, version, records)


def test_batch_refusals() -> None:
    good = encode_batch(["a", "b"], 3, b"\x00" * 24)
    with pytest.raises(CodecError, match="16-byte header"):
        decode_batch(good[:10], 12)
    with pytest.raises(CodecError, match="magic"):
        decode_batch(b"XXXX" + good[4:], 12)
    for bad in (good[:-1], good + b"\x00"):
        with pytest.raises(CodecError, match="declares 2 messages of 12 bytes"):
            decode_batch(bad, 12)
    with pytest.raises(CodecError, match="declares 2 messages of 8 bytes"):
        decode_batch(good, 8)
    with pytest.raises(CodecError, match="hold 2 ids"):  # one id of three lines
        decode_batch(good.replace(b"a\nb\n", b"a\n\nb\n").replace(b"\x04", b"\x05", 1), 12)
    for bad_id in ("a\nb", ""):
        with pytest.raises(CodecError, match="no newline"):
            encode_batch([bad_id], 3, b"\x00" * 12)
    with pytest.raises(CodecError, match="ASCII"):
        decode_batch(good.replace(b"a\n", b"\xff\n"), 12)
    with pytest.raises(CodecError, match="model_version"):
        encode_batch(["a"], -1, b"")
