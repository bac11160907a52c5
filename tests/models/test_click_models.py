"""Click models: the paper's Table 1 parameters, sequential simulation against the exact
first-click distribution, and input checks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError, DataFormatError
from fedrank.metrics.maxrr import maxrr_index_from_clicks
from fedrank.models.click_models import (
    CascadeClickModel,
    PositionBasedModel,
    click_model,
    first_click_distribution,
    grades_of,
)


def test_table_1_parameters() -> None:
    perfect = click_model("perfect")
    assert perfect.click_prob.tolist() == [0.0, 0.5, 1.0]
    assert perfect.stop_prob.tolist() == [0.0, 0.0, 0.0]
    nav = click_model("navigational")
    assert nav.click_prob.tolist() == [0.05, 0.5, 0.95]
    assert nav.stop_prob.tolist() == [0.2, 0.5, 0.9]
    info = click_model("informational")
    assert info.click_prob.tolist() == [0.4, 0.7, 0.9]
    assert info.stop_prob.tolist() == [0.1, 0.3, 0.5]
    assert perfect.depth == nav.depth == info.depth == 10
    assert click_model("navigational", n_grades=5).click_prob.tolist() == [
        0.05,
        0.3,
        0.5,
        0.7,
        0.95,
    ]
    pbm = click_model("position-based")
    assert isinstance(pbm, PositionBasedModel)
    np.testing.assert_allclose(pbm.examination, 1.0 / np.arange(1, 11))


@pytest.mark.parametrize("name", ["perfect", "navigational", "informational", "position-based"])
def test_simulated_first_clicks_follow_the_exact_distribution(name: str) -> None:
    model = click_model(name)
    rng = np.random.default_rng(3)
    lists = rng.integers(-1, 3, size=(6, 12))
    lists[:, 0] = np.maximum(lists[:, 0], 0)  # a list starts with a document
    for ranked in lists:
        clicks = model.simulate(np.tile(ranked, (20_000, 1)), rng)
        index = maxrr_index_from_clicks(clicks, model.depth)
        observed = np.bincount(index, minlength=model.depth + 1)
        dist = first_click_distribution(model, ranked[None, :])[0]
        # reorder to value indices: 0 = no click, v = first click at position v - 1
        expected = np.concatenate([dist[-1:], dist[:-1]]) * index.size
        keep = expected > 0
        assert observed[~keep].sum() == 0
        if keep.sum() > 1:
            assert stats.chisquare(observed[keep], expected[keep]).pvalue > 1e-4


def test_cascade_users_stop_after_a_click() -> None:
    model = CascadeClickModel("always-stop", np.array([1.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0]))
    clicks = model.simulate(np.array([[0, 1, 2, 2]]), np.random.default_rng(0))
    assert clicks.tolist() == [[True, False, False, False]]
    never_stop = click_model("perfect").simulate(
        np.array([[2, 0, 2, 1, -1]]), np.random.default_rng(0)
    )
    assert never_stop[0, [0, 2]].all() and not never_stop[0, [1, 4]].any()


def test_clicks_stay_within_depth_and_on_documents() -> None:
    model = click_model("informational")
    ranked = np.tile(np.array([[0, 1, 2, -1, -1, 2, 2, 2, 2, 2, 2, 2, 2, 2]]), (500, 1))
    clicks = model.simulate(ranked, np.random.default_rng(1))
    assert not clicks[:, 10:].any()
    assert not clicks[:, 3:5].any()


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(DataFormatError, match="grades 0..2"):
        click_model("perfect").hazard(np.array([[0, 3]]))
    with pytest.raises(DataFormatError, match=r"\(I, K\)"):
        click_model("perfect").hazard(np.array([0, 1]))
    with pytest.raises(ConfigError, match="unknown click model"):
        click_model("lazy")
    with pytest.raises(ConfigError, match="3 grades"):
        click_model("perfect", n_grades=4)
    with pytest.raises(ConfigError, match="probabilities"):
        CascadeClickModel("bad", np.array([0.5, 1.5]), np.array([0.0, 0.0]))
    with pytest.raises(ConfigError, match="one value per grade"):
        CascadeClickModel("bad", np.array([0.5, 0.5]), np.array([0.0]))


def test_grades_of() -> None:
    assert grades_of(np.array([0, 1, 2])) == 3
    assert grades_of(np.array([0, 4])) == 5
    with pytest.raises(DataFormatError, match="up to 7"):
        grades_of(np.array([7]))
