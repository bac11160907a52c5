"""Pairwise and self masks (fedrank.secagg.masks) and the share channel
(fedrank.secagg.channel): symmetric key agreement, cancelling masks, a uniform PRG, and
AES-GCM authentication of relayed shares."""

from __future__ import annotations

import random

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from fedrank.secagg import channel, field, masks
from fedrank.secagg.errors import ProtocolError, ShareAuthenticationError

SESSION = b"0123456789abcdef"


def keypair(seed: int):
    key = masks.generate_private_key(random.Random(seed).getrandbits)
    return key, masks.public_bytes(key)


def test_both_sides_derive_the_same_pairwise_seed_and_nothing_else_does() -> None:
    (a, a_pub), (b, b_pub), (_, c_pub) = keypair(1), keypair(2), keypair(3)
    ab = masks.pairwise_seed(a, b_pub, session_id=SESSION, u=3, v=9)
    assert masks.pairwise_seed(b, a_pub, session_id=SESSION, u=9, v=3) == ab
    assert len(ab) == masks.SEED_BYTES
    others = {
        masks.pairwise_seed(a, c_pub, session_id=SESSION, u=3, v=9),  # another peer
        masks.pairwise_seed(a, b_pub, session_id=b"another-session!", u=3, v=9),
        masks.pairwise_seed(a, b_pub, session_id=SESSION, u=3, v=8),  # another pair id
        channel.share_key(a, b_pub, session_id=SESSION, u=3, v=9),  # another purpose
    }
    assert ab not in others and len(others) == 4


def test_pairwise_masks_of_a_pair_cancel() -> None:
    seed = bytes(range(32))
    m_uv = masks.pairwise_mask(seed, 1000, 3, 9)
    m_vu = masks.pairwise_mask(seed, 1000, 9, 3)
    assert np.array_equal(m_uv, masks.prg(seed, 1000))  # + for u < v
    assert not np.array_equal(m_uv, m_vu)
    assert not field.add(m_uv, m_vu).any()
    assert masks.pairwise_sign(3, 9) == 1 and masks.pairwise_sign(9, 3) == -1


def test_prg_is_the_aes_256_ctr_keystream_read_as_little_endian_uint32() -> None:
    seed = bytes(range(32))
    stream = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(40))
    expected = [int.from_bytes(stream[i : i + 4], "little") for i in range(0, 40, 4)]
    out = masks.prg(seed, 10)
    assert out.dtype == np.uint64 and out.tolist() == expected
    assert np.array_equal(masks.prg(seed, 3), out[:3])  # a prefix: deterministic per seed
    assert not np.array_equal(masks.prg(bytes(32), 10), out)
    with pytest.raises(ValueError, match="32 bytes"):
        masks.prg(b"short", 3)


def test_prg_output_is_uniform_on_z_q() -> None:
    """KS test of the values against U[0, q) and chi-square of their bytes (fixed seed, so
    the test is deterministic)."""
    values = masks.prg(b"\x07" * 32, 50_000)
    assert int(values.max()) < field.MODULUS
    assert stats.kstest(values / field.MODULUS, "uniform").pvalue > 1e-4
    byte_counts = np.bincount(values.astype("<u4").view(np.uint8), minlength=256)
    assert stats.chisquare(byte_counts).pvalue > 1e-4


def test_keys_and_seeds_round_trip_through_integers() -> None:
    key, pub = keypair(5)
    value = masks.private_key_to_int(key)
    assert 0 <= value < 2**256
    assert masks.public_bytes(masks.private_key_from_int(value)) == pub
    seed = masks.new_seed(random.Random(2).getrandbits)
    assert masks.seed_from_int(masks.seed_to_int(seed)) == seed
    with pytest.raises(ValueError):
        masks.private_key_from_int(2**256)
    with pytest.raises(ValueError):
        masks.seed_from_int(-1)


def test_invalid_peer_keys_are_refused() -> None:
    key, _ = keypair(1)
    with pytest.raises(ProtocolError, match="32 bytes"):
        masks.pairwise_seed(key, b"\x01" * 31, session_id=SESSION, u=1, v=2)
    with pytest.raises(ProtocolError, match="invalid"):  # a low-order point
        masks.pairwise_seed(key, bytes(32), session_id=SESSION, u=1, v=2)


def test_shares_channel_round_trip_and_tampering() -> None:
    (a, a_pub), (b, b_pub) = keypair(1), keypair(2)
    k_ab = channel.share_key(a, b_pub, session_id=SESSION, u=1, v=2)
    assert channel.share_key(b, a_pub, session_id=SESSION, u=2, v=1) == k_ab
    ct = channel.encrypt(k_ab, b"shares", session_id=SESSION, sender=1, recipient=2)
    assert len(ct) == len(b"shares") + channel.OVERHEAD_BYTES
    assert channel.decrypt(k_ab, ct, session_id=SESSION, sender=1, recipient=2) == b"shares"
    flipped = bytearray(ct)
    flipped[-20] ^= 1
    cases = [
        (bytes(flipped), SESSION, 1, 2),  # altered
        (ct, SESSION, 2, 1),  # relayed as if the other direction
        (ct, SESSION, 3, 2),  # under another sender
        (ct, b"fedcba9876543210", 1, 2),  # in another session
        (ct[:20], SESSION, 1, 2),  # truncated
    ]
    for data, session, sender, recipient in cases:
        with pytest.raises(ShareAuthenticationError, match=f"from client {sender}"):
            channel.decrypt(k_ab, data, session_id=session, sender=sender, recipient=recipient)
