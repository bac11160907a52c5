"""The frecency study's headline at full size (3,000 users, 40 iterations): treatment types
fewer characters than control, significantly at the level of users. Its own module so that
the test runner can place it beside the smaller studies of
``test_frecency_study_acceptance.py`` (the suite spreads modules over its workers)."""

from __future__ import annotations

import pytest

from fedrank.experiments.frecency.study import FrecencyStudyConfig, run_study


def test_full_size_treatment_types_fewer_characters() -> None:
    """The issue's headline: ``fedrank frecency simulate --preset shifted --users 3000
    --iterations 40 --seed 11``."""
    result = run_study(FrecencyStudyConfig(preset="shifted", n_users=3000, iterations=40, seed=11))
    ev = result.eval
    assert 3.0 <= ev["control"]["chars_typed_mean"] <= 5.5
    assert 0.2 <= ev["control"]["selected_rank_mean"] <= 0.6
    assert ev["treatment"]["chars_typed_mean"] < ev["control"]["chars_typed_mean"]
    assert result.bonferroni_alpha == pytest.approx(0.05 / 6)
    test = result.tests["treatment_vs_control"]
    assert test["unit"] == "user" and test["pvalue"] < 0.05 / 6
    assert test["diff_ci95"][1] < 0  # the whole interval below zero
