"""The simulated frecency study tuning *modern* Firefox frecency (5 parameters), at full size
(3,000 users, 40 iterations, seed 0; each study takes a few seconds)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.experiments.frecency_presets import hidden_weights
from fedrank.experiments.frecency_study import FrecencyStudyConfig, run_study
from fedrank.experiments.report import loss_reduction
from fedrank.models.frecency.modern import MODERN_DEFAULTS as DEFAULT_PAIRS
from fedrank.models.frecency.modern import MODERN_WEIGHT_NAMES
from fedrank.optim.constraints import modern_frecency_safeguards

MODERN_DEFAULTS = dict(DEFAULT_PAIRS)


def _study(preset: str):
    return run_study(
        FrecencyStudyConfig(model="modern", preset=preset, n_users=3000, iterations=40, seed=0)
    )


@pytest.fixture(scope="module")
def shifted():
    return _study("shifted")


def test_shifted_loss_falls_by_at_least_20_percent(shifted) -> None:
    assert loss_reduction(shifted) >= 0.20
    first5 = np.mean(shifted.loss_per_iteration[:5])
    last5 = np.mean(shifted.loss_per_iteration[-5:])
    assert last5 <= 0.8 * first5


def test_shifted_treatment_types_fewer_characters_than_control(shifted) -> None:
    ev = shifted.eval
    assert ev["treatment"]["chars_typed_mean"] < ev["control"]["chars_typed_mean"]
    assert ev["treatment"]["chars_typed_mean"] < ev["control-no-decay"]["chars_typed_mean"]
    assert shifted.bonferroni_alpha == pytest.approx(0.05 / 6)
    assert shifted.tests["treatment_vs_control"]["pvalue"] < 0.05 / 6
    assert shifted.tests["treatment_vs_control_no_decay"]["pvalue"] < 0.05 / 6


def test_shifted_constraints_held_and_weights_moved_towards_the_hidden_ones(shifted) -> None:
    assert shifted.constraints_held
    chain = modern_frecency_safeguards(max_change=3.0)
    traj = [np.array([w[n] for n in MODERN_WEIGHT_NAMES]) for w in shifted.weights_per_iteration]
    traj.append(np.array([shifted.final_weights[n] for n in MODERN_WEIGHT_NAMES]))
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
    # Hidden: low 0, medium 5, high 120, half-life 20 days (defaults 20, 50, 100, 30). Only
    # the ratios of the class weights matter, so compare high / medium, not the values.
    final = shifted.final_weights
    hidden = dict(zip(MODERN_WEIGHT_NAMES, hidden_weights("shifted", "modern"), strict=True))
    assert final["mediumWeight"] < 15
    assert final["highWeight"] / final["mediumWeight"] > 10
    assert abs(final["halfLifeDays"] - hidden["halfLifeDays"]) < 3
    assert final["veryHighWeight"] == MODERN_DEFAULTS["veryHighWeight"]  # no signal


def test_paper_preset_keeps_the_weights_near_the_defaults() -> None:
    result = _study("paper")
    assert result.constraints_held
    for name, default in MODERN_DEFAULTS.items():
        assert abs(result.final_weights[name] - default) <= 5 + 0.05 * default, name
