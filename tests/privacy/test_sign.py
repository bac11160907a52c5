"""SignCompressor (paper Section 5.3: one or two bits per weight)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.aggregators import SignVote
from fedrank.core.codec import encode_message, payload_size
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy import SignCompressor


def test_two_bit_mode_keeps_zeros() -> None:
    comp = SignCompressor()
    message = Message(update=np.array([3.5, -0.01, 0.0, -0.0]))
    out = comp.privatize(message, np.random.default_rng(0))
    np.testing.assert_array_equal(out.update, [1.0, -1.0, 0.0, 0.0])
    assert not np.signbit(out.update[2:]).any()  # -0.0 comes out as +0.0
    assert comp.bits_per_weight == 2 and comp.encoding == "sign2"


def test_one_bit_mode_replaces_zeros_by_random_signs() -> None:
    comp = SignCompressor(with_zero=False)
    assert comp.bits_per_weight == 1 and comp.encoding == "sign1"
    out = comp.privatize_batch(np.zeros((1, 200_000)), np.random.default_rng(0))
    assert set(np.unique(out).tolist()) == {-1.0, 1.0}
    # unbiased: mean 0 within 5 standard errors (1 / sqrt(200000) ~ 0.0022)
    assert abs(out.mean()) < 5 / np.sqrt(out.size)
    np.testing.assert_array_equal(
        comp.privatize_batch(np.array([[2.0, -3.0]]), np.random.default_rng(0)), [[1.0, -1.0]]
    )


def test_one_bit_zero_replacement_does_not_bias_the_vote() -> None:
    rng = np.random.default_rng(3)
    comp = SignCompressor(with_zero=False)
    agg = SignVote(1)
    balance = 0
    for _ in range(400):
        state = agg.accumulate_batch(
            agg.zero(),
            MessageBatch.of_vectors(comp.privatize_batch(np.zeros((21, 1)), rng), np.ones(21)),
        )
        balance += int(agg.finalize(state)[0])
    assert abs(balance) < 5 * np.sqrt(400)  # positive and negative outcomes balance


def test_seeded_and_different_seeds_differ() -> None:
    comp = SignCompressor(with_zero=False)
    zeros = np.zeros((4, 50))
    a = comp.privatize_batch(zeros, np.random.default_rng(1))
    b = comp.privatize_batch(zeros, np.random.default_rng(1))
    c = comp.privatize_batch(zeros, np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_bits_per_weight_match_the_codec_payload() -> None:
    for comp in (SignCompressor(True), SignCompressor(False)):
        assert payload_size(comp.encoding, 22) == -(-22 * comp.bits_per_weight // 8)
        out = comp.privatize(Message(update=np.linspace(-1, 1, 22)), np.random.default_rng(0))
        encode_message(out, comp.encoding)  # lossless in its own encoding


def test_bad_inputs_are_refused() -> None:
    comp = SignCompressor()
    with pytest.raises(DataFormatError, match="NaN"):
        comp.privatize_batch(np.array([[np.nan]]), np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"\(C, d\)"):
        comp.privatize_batch(np.zeros(3), np.random.default_rng(0))
    with pytest.raises(ConfigError, match="1-D"):
        comp.privatize(Message(update=np.zeros((2, 2))), np.random.default_rng(0))
    with pytest.raises(ConfigError, match="with_zero"):
        SignCompressor(with_zero=1)  # type: ignore[arg-type]


def test_integer_updates_give_float64_signs() -> None:
    out = SignCompressor().privatize_batch(np.array([[3, -2, 0]]), np.random.default_rng(0))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[1.0, -1.0, 0.0]])


# ---------------------------------------------------------------------- randomized signs


def test_randomized_signs_keep_with_p_and_move_with_q_each() -> None:
    """3-ary randomized response: P(keep) = e^eps / (e^eps + 2), each other value 1 / (...):
    their ratio is e^eps, the per-weight LDP guarantee."""
    from fedrank.privacy.sign import RandomizedSigns

    eps = 1.2
    rr = RandomizedSigns(eps)
    n = 120_000
    x = np.tile(np.array([[-3.0, 0.0, 2.0]]), (n, 1))
    y = rr.privatize_batch(x, np.random.default_rng(4))
    assert set(np.unique(y)) == {-1.0, 0.0, 1.0}
    p, q = np.exp(eps) / (np.exp(eps) + 2), 1 / (np.exp(eps) + 2)
    se = np.sqrt(p * (1 - p) / n)
    for col, true in enumerate((-1.0, 0.0, 1.0)):
        freq = {v: np.mean(y[:, col] == v) for v in (-1.0, 0.0, 1.0)}
        assert abs(freq[true] - p) < 5 * se
        for v in {-1.0, 0.0, 1.0} - {true}:
            assert abs(freq[v] - q) < 5 * se
    assert rr.message_epsilon(22) == pytest.approx(22 * eps)


def test_randomized_signs_keep_the_vote_and_are_reproducible() -> None:
    from fedrank.privacy.sign import RandomizedSigns

    rng = np.random.default_rng(0)
    grads = rng.normal(loc=[0.5, -0.5, 0.0, 0.2], scale=1.0, size=(4000, 4))
    rr = RandomizedSigns(0.5)
    a = rr.privatize_batch(grads, np.random.default_rng(9))
    b = rr.privatize_batch(grads, np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, np.sign(grads))
    vote = SignVote(4, z=0.0)
    state = vote.accumulate_batch(vote.zero(), MessageBatch.of_vectors(a, np.ones(len(a))))
    np.testing.assert_array_equal(np.sign(vote.finalize(state))[[0, 1, 3]], [1, -1, 1])
    for bad in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ConfigError, match="epsilon"):
            RandomizedSigns(bad)  # type: ignore[arg-type]


def test_sign_epsilon_needs_sign_messages_and_sets_the_privatizer() -> None:
    from fedrank.privacy.sign import RandomizedSigns
    from fedrank.systems.frecency.client import FrecencyClient
    from fedrank.systems.frecency.config import FrecencyConfig

    with pytest.raises(ConfigError, match="message = sign"):
        FrecencyConfig(sign_epsilon=1.0)
    with pytest.raises(ConfigError, match="epsilon"):
        FrecencyConfig(message="sign", sign_epsilon=0.0)
    client = FrecencyClient(FrecencyConfig(message="sign", sign_epsilon=1.0))
    assert isinstance(client.privatizer, RandomizedSigns)
    plain = FrecencyClient(FrecencyConfig(message="sign"))
    assert isinstance(plain.privatizer, SignCompressor)
