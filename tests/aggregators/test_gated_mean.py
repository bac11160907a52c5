"""GatedMean and the SignVote gate: significance tests per coordinate."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.aggregators import GatedMean, SignVote, WeightedMean
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError


def test_z_zero_is_the_weighted_mean() -> None:
    rng = np.random.default_rng(0)
    updates, n = rng.normal(size=(50, 4)), rng.integers(1, 5, size=50)
    gated, plain = GatedMean(4, z=0.0), WeightedMean(4)
    a = gated.finalize(gated.accumulate_batch(gated.zero(), MessageBatch.of_vectors(updates, n)))
    b = plain.finalize(plain.accumulate_batch(plain.zero(), MessageBatch.of_vectors(updates, n)))
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_noise_coordinates_are_gated_and_signal_passes() -> None:
    rng = np.random.default_rng(1)
    updates = rng.normal(0.0, 1.0, size=(2000, 3))
    updates[:, 0] += 0.5  # clear signal: mean 0.5, se ~0.022
    updates[:, 2] = 0.0  # no client sees this weight
    agg = GatedMean(3, z=2.0)
    out = agg.finalize(
        agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(updates, np.ones(2000)))
    )
    assert out[0] == pytest.approx(updates[:, 0].mean())
    assert out[2] == 0.0
    mean1 = updates[:, 1].mean()
    se1 = updates[:, 1].std() / np.sqrt(2000)
    assert (out[1] == 0.0) == (abs(mean1) <= 2.0 * se1)


def test_standard_error_matches_the_weighted_formula() -> None:
    rng = np.random.default_rng(2)
    updates, n = rng.normal(size=(30, 2)), rng.integers(1, 9, size=30).astype(float)
    agg = GatedMean(2)
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(updates, n))
    mean = n @ updates / n.sum()
    var = n @ (updates - mean) ** 2 / n.sum()
    n_eff = n.sum() ** 2 / (n @ n)
    np.testing.assert_allclose(agg.standard_error(state), np.sqrt(var / n_eff), rtol=1e-9)


def test_one_message_is_returned_ungated_and_empty_is_zero() -> None:
    agg = GatedMean(2, z=5.0)
    assert np.array_equal(agg.finalize(agg.zero()), np.zeros(2))
    one = agg.accumulate(agg.zero(), Message(update=np.array([0.1, -3.0]), n=2))
    np.testing.assert_array_equal(agg.finalize(one), [0.1, -3.0])


def test_sign_vote_gate_is_a_sign_test() -> None:
    def votes(pos: int, neg: int) -> np.ndarray:
        updates = np.array([[1.0]] * pos + [[-1.0]] * neg)
        agg = SignVote(1, z=2.0)
        return agg.finalize(
            agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(updates, np.ones(pos + neg)))
        )

    assert votes(60, 40)[0] == 0.0  # margin 20 = 2 * sqrt(100): not significant
    assert votes(61, 39)[0] == 1.0  # margin 22 > 20
    assert votes(30, 70)[0] == -1.0
    plain = SignVote(1)
    state = plain.accumulate_batch(
        plain.zero(), MessageBatch.of_vectors(np.array([[1.0], [1.0], [-1.0]]), np.ones(3))
    )
    assert plain.finalize(state)[0] == 1.0  # z = 0: the paper's plain majority


@pytest.mark.parametrize("z", [-1.0, float("nan"), float("inf")])
def test_bad_gates_are_refused(z: float) -> None:
    with pytest.raises(ConfigError, match="z"):
        GatedMean(2, z=z)
    with pytest.raises(ConfigError, match="z"):
        SignVote(2, z=z)
