"""fedrank.core.hmac_sha256 computes RFC 2104's HMAC-SHA256, the standard library's value,
for keys shorter than, equal to and longer than SHA-256's block, and for bodies on both
sides of the 2 KiB at which hashing releases the GIL."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import pytest

from fedrank.core.hmac_sha256 import BLOCK, HmacSha256, hmac_sha256


@pytest.mark.parametrize("key_bytes", [0, 1, 32, BLOCK - 1, BLOCK, BLOCK + 1, 200])
@pytest.mark.parametrize("body_bytes", [0, 330, 2047, 2048, 100_000])
def test_equals_the_standard_library(key_bytes: int, body_bytes: int) -> None:
    rng = np.random.default_rng(key_bytes * 1_000_003 + body_bytes)
    key = rng.bytes(key_bytes)
    head, body = rng.bytes(40), rng.bytes(body_bytes)
    expected = hmac.new(key, head + body, hashlib.sha256)
    keyed = HmacSha256(key)
    assert keyed.hexdigest(head, body) == expected.hexdigest()
    assert keyed.hexdigest(head, body) == expected.hexdigest()  # the key's state is reused
    assert hmac_sha256(key, head + body) == expected.digest()


def test_rfc_4231_case_2() -> None:
    """RFC 4231, test case 2 (a short key, "Jefe")."""
    data = b"what do ya want for nothing?"
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert HmacSha256(b"Jefe").hexdigest(data[:7], data[7:]) == expected


def test_a_different_key_or_message_gives_a_different_mac() -> None:
    keyed = HmacSha256(b"k" * 32)
    assert keyed.hexdigest(b"POST\n", b"{}") != HmacSha256(b"K" * 32).hexdigest(b"POST\n", b"{}")
    assert keyed.hexdigest(b"POST\n", b"{}") != keyed.hexdigest(b"POST\n", b"{ }")
