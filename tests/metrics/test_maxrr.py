"""MaxRR values, from clicks, and its exact expectation."""

from __future__ import annotations

import numpy as np

from fedrank.metrics.maxrr import (
    expected_maxrr,
    maxrr_from_index,
    maxrr_index_from_clicks,
    maxrr_values,
)
from fedrank.models.click_models import CascadeClickModel, click_model


def test_values_and_indices() -> None:
    values = maxrr_values(10)
    assert values.size == 11 and values[0] == 0.0 and values[1] == 1.0 and values[10] == 0.1
    clicks = np.zeros((4, 11), dtype=bool)
    clicks[1, 0] = True
    clicks[2, [2, 3]] = True
    clicks[3, 10] = True  # a click below the top 10 does not count
    index = maxrr_index_from_clicks(clicks, 10)
    assert index.tolist() == [0, 1, 3, 0]
    np.testing.assert_allclose(maxrr_from_index(index), [0.0, 1.0, 1 / 3, 0.0])


def test_expected_maxrr_matches_hand_computation_and_sampling() -> None:
    # the reference implementation's docstring example: click only, always, on grade 2
    model = CascadeClickModel("m", np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0]))
    assert expected_maxrr(model, np.array([[1, 0, 0, 2, 0, 1]]))[0] == 0.25
    assert expected_maxrr(model, np.array([[1, 0, 0, 0, 0, 1]]))[0] == 0.0
    nav = click_model("navigational")
    ranked = np.array([[2, 0, 1, -1, -1, -1, -1, -1, -1, -1]])
    exact = 0.95 + 0.05 * 0.05 / 2 + 0.05 * 0.95 * 0.5 / 3
    np.testing.assert_allclose(expected_maxrr(nav, ranked)[0], exact)
    clicks = nav.simulate(np.tile(ranked, (200_000, 1)), np.random.default_rng(0))
    sampled = maxrr_from_index(maxrr_index_from_clicks(clicks)).mean()
    assert abs(sampled - exact) < 3e-3
