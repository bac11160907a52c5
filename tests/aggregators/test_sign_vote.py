"""SignVote: most common sign per weight (paper Section 5.3)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.aggregators import SignVote
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError, DataFormatError


def vote(agg: SignVote, rows: list[list[float]], n: list[int] | None = None) -> np.ndarray:
    weights = np.ones(len(rows), dtype=np.int64) if n is None else np.array(n)
    return agg.finalize(
        agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(np.array(rows, float), weights))
    )


def test_majority_sign_wins_and_ties_give_zero() -> None:
    agg = SignVote(4)
    out = vote(agg, [[1, -1, 1, 0], [2, -3, -1, 0], [-5, 0.5, 0, 7]])
    np.testing.assert_array_equal(out, [1.0, -1.0, 0.0, 1.0])
    assert out.dtype == np.float64


def test_magnitudes_do_not_matter() -> None:
    agg = SignVote(1)
    # a huge negative update is outvoted by two tiny positive ones (unlike the mean)
    np.testing.assert_array_equal(vote(agg, [[-1e9], [1e-9], [1e-9]]), [1.0])


def test_zeros_are_counted_separately_and_never_decide() -> None:
    agg = SignVote(2)
    state = agg.accumulate_batch(
        agg.zero(),
        MessageBatch.of_vectors(np.array([[0.0, 1.0], [0.0, 0.0], [0.0, -0.0]]), np.ones(3)),
    )
    np.testing.assert_array_equal(state.zero, [3, 2])
    np.testing.assert_array_equal(state.pos, [0, 1])
    np.testing.assert_array_equal(agg.finalize(state), [0.0, 1.0])


def test_weighted_vote_counts_n_votes_per_message() -> None:
    rows = [[1.0], [-1.0], [-1.0]]
    np.testing.assert_array_equal(vote(SignVote(1), rows, [5, 1, 1]), [-1.0])
    np.testing.assert_array_equal(vote(SignVote(1, weighted=True), rows, [5, 1, 1]), [1.0])
    state = SignVote(1, weighted=True).accumulate(
        SignVote(1, weighted=True).zero(), Message(update=np.array([2.0]), n=4)
    )
    assert state.pos.tolist() == [4] and state.count == 1


def test_weighted_vote_refuses_fractional_weights() -> None:
    agg = SignVote(1, weighted=True)
    with pytest.raises(DataFormatError, match="integer"):
        agg.accumulate_batch(
            agg.zero(), MessageBatch.of_vectors(np.ones((2, 1)), np.array([1.5, 1.0]))
        )


def test_counts_are_exact_integers_at_scale() -> None:
    rng = np.random.default_rng(1)
    signs = rng.choice([-1.0, 0.0, 1.0], size=(10_000, 22))
    agg = SignVote(22)
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(signs, np.ones(10_000)))
    assert state.pos.dtype == np.int64
    np.testing.assert_array_equal(state.pos + state.neg + state.zero, np.full(22, 10_000))
    np.testing.assert_array_equal(state.pos, (signs > 0).sum(axis=0))
    # split into 7 uneven chunks and merge in reverse: identical state
    merged = agg.zero()
    for chunk in reversed(np.array_split(signs, 7)):
        merged = agg.merge(
            merged,
            agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(chunk, np.ones(len(chunk)))),
        )
    assert agg.state_to_json(merged) == agg.state_to_json(state)


def test_restoring_with_other_settings_is_refused() -> None:
    data = SignVote(3).state_to_json(SignVote(3).zero())
    with pytest.raises(ConfigError, match="weighted"):
        SignVote(3, weighted=True).state_from_json(data)
    with pytest.raises(ConfigError, match="dimension"):
        SignVote(4).state_from_json(data)
    with pytest.raises(ConfigError, match="weighted must be"):
        SignVote(3, weighted="yes")  # type: ignore[arg-type]
