"""What a frecency study in the calibrated synthetic world must show, for the classic
frecency the paper tuned (at the headline's full size: treatment types fewer characters
than control, significantly at the level of users) and for today's modern frecency
(studies from ``conftest.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.experiments.frecency.report import loss_reduction
from fedrank.experiments.frecency.study import (
    PAPER_EVAL,
    StudyResult,
)
from fedrank.models.frecency.scorer import page_scorer
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, classic_defaults

BRANCHES = ("treatment", "control", "control-no-decay")


def test_shifted_loss_falls_by_at_least_20_percent(shifted_study: StudyResult) -> None:
    assert loss_reduction(shifted_study) >= 0.20
    first5 = np.mean(shifted_study.loss_per_iteration[:5])
    last5 = np.mean(shifted_study.loss_per_iteration[-5:])
    assert last5 <= 0.8 * first5


def test_safeguards_hold_in_every_iteration(shifted_study: StudyResult) -> None:
    assert shifted_study.constraints_held
    chain = page_scorer(shifted_study.config.model).safeguards(max_change=3.0)
    traj = shifted_study.weight_trajectory()
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)


def test_the_paper_loss_is_reported_beside_the_study_loss(shifted_study: StudyResult) -> None:
    paper = shifted_study.paper_loss_per_iteration
    assert set(paper) == set(BRANCHES)
    assert len(paper["treatment"]) == shifted_study.config.iterations
    assert all(np.isfinite(paper["treatment"]))
    for name in BRANCHES:
        assert np.isfinite(shifted_study.eval[name]["paper_loss_mean"])


def test_evaluation_is_reported_per_user_beside_the_paper(shifted_study: StudyResult) -> None:
    ev = shifted_study.eval
    for name in BRANCHES:
        assert 0 < ev[name]["n_users"] <= ev[name]["n"]
        assert set(PAPER_EVAL[name]) <= set(ev[name])
    test = shifted_study.tests["treatment_vs_control"]
    assert test["unit"] == "user"
    lo, hi = test["diff_ci95"]
    assert lo <= test["diff"] <= hi
    assert test["n_users_a"] == ev["treatment"]["n_users"]


def test_full_size_treatment_types_fewer_characters(classic_shifted: StudyResult) -> None:
    """The issue's headline: ``fedrank frecency simulate --preset shifted --users 3000
    --iterations 40 --seed 11``."""
    assert classic_shifted.config.n_users == 3000 and classic_shifted.config.iterations == 40
    ev = classic_shifted.eval
    assert ev["treatment"]["chars_typed_mean"] < ev["control"]["chars_typed_mean"]
    assert classic_shifted.bonferroni_alpha == pytest.approx(0.05 / 6)
    test = classic_shifted.tests["treatment_vs_control"]
    assert test["unit"] == "user" and test["pvalue"] < 0.05 / 6
    assert test["diff_ci95"][1] < 0  # the whole interval below zero


def test_classic_calibrated_world_types_like_the_paper_control(
    classic_shifted: StudyResult,
) -> None:
    # The window for the default world: 3.0-5.5 characters, rank 0.2-0.6.
    for name in ("control", "control-no-decay"):
        assert 3.0 <= classic_shifted.eval[name]["chars_typed_mean"] <= 5.5
        assert 0.2 <= classic_shifted.eval[name]["selected_rank_mean"] <= 0.6
    # The oracle ranks by the hidden weights but types more than one character.
    assert classic_shifted.oracle["chars_typed_mean"] > 2.0


def test_classic_weights_move_towards_the_hidden_ones(classic_shifted: StudyResult) -> None:
    hidden = dict(zip(CLASSIC_WEIGHT_NAMES, hidden_weights("shifted"), strict=True))
    defaults = dict(zip(CLASSIC_WEIGHT_NAMES, classic_defaults(), strict=True))
    final = classic_shifted.final_weights
    # The weights with the most signal: link visits (hidden 200, default 100) and typed
    # visits (hidden 1900, default 2000).
    assert final["linkVisitBonus"] > defaults["linkVisitBonus"] + 25
    assert final["typedVisitBonus"] < defaults["typedVisitBonus"] - 25
    before = sum(abs(defaults[n] - hidden[n]) for n in CLASSIC_WEIGHT_NAMES)
    after = sum(abs(final[n] - hidden[n]) for n in CLASSIC_WEIGHT_NAMES)
    assert after < before - 50


def test_modern_leaves_the_weight_without_signal_alone(modern_shifted: StudyResult) -> None:
    # Synthetic histories have no interactions: no sample is veryHigh.
    assert modern_shifted.final_weights["veryHighWeight"] == pytest.approx(200.0)
