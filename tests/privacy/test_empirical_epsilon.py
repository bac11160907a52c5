"""The empirical privacy loss of FOLtR-ES Section 6.1 (Table 2)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedrank.models.click_models import click_model
from fedrank.privacy.empirical_epsilon import (
    all_label_placements,
    empirical_epsilon,
    epsilon_table,
    maxrr_distributions,
    theoretical_epsilon,
)
from fedrank.privacy.randomized_response import RandomizedResponse

PS = [0.25, 0.5, 0.75, 0.9, 0.95, 0.99]
MODELS = {name: click_model(name) for name in ("perfect", "navigational", "informational")}


def test_enumerates_every_placement() -> None:
    lists = all_label_placements(5)
    assert lists.shape == (243, 5)
    assert len({tuple(x) for x in lists.tolist()}) == 243
    dist = maxrr_distributions(MODELS["navigational"], 5)
    assert dist.shape == (243, 6)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0)


def test_decomposition_equals_the_brute_force_pair_search() -> None:
    # Eq. (9) literally: every ordered pair of lists, every output
    for name, model in MODELS.items():
        for p in (0.3, 0.9):
            dist = maxrr_distributions(model, 3)
            out = dist @ RandomizedResponse(np.arange(4.0), p).transition_matrix()
            brute = max(
                float(np.max(np.log(out[a]) - np.log(out[b])))
                for a, b in itertools.permutations(range(out.shape[0]), 2)
            )
            assert empirical_epsilon(model, 3, p) == pytest.approx(brute, rel=1e-12), name


def test_table_2_properties() -> None:
    table = epsilon_table(MODELS, 5, PS)
    assert list(table) == ["theoretical", "perfect", "navigational", "informational"]
    np.testing.assert_allclose(table["theoretical"], [theoretical_epsilon(5, p) for p in PS])
    # "The values obtained from Equation (10) and the estimates for the Perfect model coincide"
    np.testing.assert_allclose(table["perfect"], table["theoretical"], rtol=1e-12)
    for name in ("navigational", "informational"):
        assert all(e <= t + 1e-12 for e, t in zip(table[name], table["theoretical"], strict=True))
        assert all(np.diff(table[name]) > 0)  # less privacy as p grows
    # "close to the estimated value for the Navigational model ... for Informational it is
    # very far from being tight"
    gap_nav = np.subtract(table["theoretical"], table["navigational"])
    gap_info = np.subtract(table["theoretical"], table["informational"])
    assert np.all(gap_nav < gap_info)
    assert np.max(gap_nav / table["theoretical"]) < 0.1
