import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError, DataFormatError
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores


def test_hand_computed_example() -> None:
    # selected item scores 50; others 80 (above), 49 (within margin), 10 (far below)
    scores = np.array([[80.0, 50.0, 49.0, 10.0]])
    loss = pointwise_svm_loss(scores, np.array([1]), np.ones((1, 4), bool), delta=5.0)
    assert loss.tolist() == [(80 + 5 - 50) + (49 + 5 - 50)]


def test_padding_slots_are_ignored_and_leading_axes_kept() -> None:
    scores = np.array([[[3.0, 1.0, 100.0], [0.0, 0.0, 0.0]], [[1.0, 3.0, 100.0], [2.0, 0.0, 0.0]]])
    valid = np.array([[True, True, False], [True, True, False]])
    loss = pointwise_svm_loss(scores, np.array([0, 1]), valid, delta=1.0)
    assert loss.shape == (2, 2)
    assert loss.tolist() == [[0.0, 1.0], [3.0, 3.0]]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(2, 10), st.integers(0, 1000), st.floats(0, 50))
def test_loss_is_zero_iff_selected_beats_all_by_margin(
    s: int, k: int, seed: int, delta: float
) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(s, k)) * 100
    selected = rng.integers(0, k, size=s)
    valid = np.ones((s, k), bool)
    loss = pointwise_svm_loss(scores, selected, valid, delta)
    chosen = scores[np.arange(s), selected]
    others = np.where(np.arange(k)[None, :] == selected[:, None], -np.inf, scores)
    assert np.all(loss >= 0)
    np.testing.assert_array_equal(loss == 0, others.max(axis=1) + delta <= chosen)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError):
        pointwise_svm_loss(np.zeros((1, 2)), np.array([0]), np.ones((1, 2), bool), delta=-1)
    with pytest.raises(DataFormatError, match="empty list slot"):
        pointwise_svm_loss(np.zeros((1, 2)), np.array([1]), np.array([[True, False]]), delta=1)
    with pytest.raises(DataFormatError):
        pointwise_svm_loss(np.zeros((2, 2)), np.array([0]), np.ones((1, 2), bool), delta=1)


def test_log_scale_is_scale_free_and_raw_scale_rewards_shrinking() -> None:
    rng = np.random.default_rng(0)
    scores = rng.uniform(100.0, 5000.0, size=(50, 10))
    selected = rng.integers(0, 10, size=50)
    valid = np.ones((50, 10), dtype=bool)
    raw = pointwise_svm_loss(scaled_scores(scores, "raw"), selected, valid, 10.0).sum()
    raw_small = pointwise_svm_loss(scaled_scores(scores / 10, "raw"), selected, valid, 10.0).sum()
    assert raw_small < 0.2 * raw  # the paper's raw loss drops by shrinking every score
    log = pointwise_svm_loss(scaled_scores(scores, "log"), selected, valid, 0.1).sum()
    log_small = pointwise_svm_loss(scaled_scores(scores / 10, "log"), selected, valid, 0.1).sum()
    assert log_small == pytest.approx(log, rel=0.01)  # log1p: scale-free up to the +1


def test_log_scale_maps_nonpositive_frecency_to_zero_and_rejects_unknown_scales() -> None:
    assert np.array_equal(scaled_scores(np.array([-1.0, 0.0, np.e - 1]), "log"), [0.0, 0.0, 1.0])
    with pytest.raises(ConfigError, match="score scale"):
        scaled_scores(np.zeros(2), "linear")
