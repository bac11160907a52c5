"""End-to-end tests of the simulated federated frecency study (small, fast configurations;
the issue's full-size figures are checked in test_frecency_study_acceptance.py)."""

import json

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.frecency_presets import hidden_weights
from fedrank.experiments.frecency_study import FrecencyStudyConfig, run_study
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, classic_defaults
from fedrank.optim.constraints import frecency_safeguards

SMALL = dict(n_users=300, iterations=6, eval_searches_per_user=2)


@pytest.fixture(scope="module")
def small_result():
    return run_study(FrecencyStudyConfig(seed=7, **SMALL))


def test_result_json_has_the_documented_fields(small_result) -> None:
    data = json.loads(json.dumps(small_result.to_json()))
    assert len(data["loss_per_iteration"]) == 6
    assert len(data["weights_per_iteration"]) == 6
    assert set(data["weights_per_iteration"][0]) == set(CLASSIC_WEIGHT_NAMES)
    assert data["constraints_held"] is True
    assert set(data["eval"]) == {"treatment", "control", "control-no-decay"}
    for ev in data["eval"].values():
        assert {"chars_typed_mean", "selected_rank_mean", "n"} <= set(ev)
        assert ev["n"] > 0
    for key in ("treatment_vs_control", "treatment_vs_control_no_decay"):
        assert {"pvalue", "statistic"} <= set(data["tests"][key])
    assert data["bonferroni_alpha"] == pytest.approx(0.05 / 6)


def test_starts_from_defaults_and_every_iterate_is_safe(small_result) -> None:
    first = np.array([small_result.weights_per_iteration[0][n] for n in CLASSIC_WEIGHT_NAMES])
    np.testing.assert_array_equal(first, classic_defaults())
    chain = frecency_safeguards(max_change=3.0)
    traj = [
        np.array([w[n] for n in CLASSIC_WEIGHT_NAMES]) for w in small_result.weights_per_iteration
    ]
    traj.append(np.array([small_result.final_weights[n] for n in CLASSIC_WEIGHT_NAMES]))
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
        assert np.abs(cur - prev).max() <= 3.0 + 1e-9
    assert any(np.abs(t - traj[0]).max() > 0 for t in traj[1:]), "the model never moved"


def test_same_seed_same_result_and_other_seed_differs(small_result) -> None:
    again = run_study(FrecencyStudyConfig(seed=7, **SMALL))
    assert again.to_json() == small_result.to_json()
    other = run_study(FrecencyStudyConfig(seed=8, **SMALL))
    assert other.loss_per_iteration != small_result.loss_per_iteration


def test_sign_messages_and_other_optimizers_run() -> None:
    for kwargs in (
        {"message": "sign"},
        {"optimizer": "adam", "learning_rate": 1.0},
        {"optimizer": "sgd", "learning_rate": 0.01},
    ):
        res = run_study(FrecencyStudyConfig(seed=1, **{**SMALL, "iterations": 3}, **kwargs))
        assert res.constraints_held
        assert len(res.loss_per_iteration) == 3


def test_stability_tracking_gives_one_entry_per_iteration() -> None:
    res = run_study(
        FrecencyStudyConfig(
            seed=2,
            track_stability=True,
            stability_sample=50,
            stability_draws=5,
            **{**SMALL, "iterations": 3},
        )
    )
    assert len(res.stability) == 3
    assert all(s["sample"] == min(50, s["n_reports"]) and s["mean"] >= 0 for s in res.stability)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="preset"):
        FrecencyStudyConfig(preset="nope")
    with pytest.raises(ConfigError):
        FrecencyStudyConfig(n_users=2)
    with pytest.raises(ConfigError):
        FrecencyStudyConfig(message="bits")


def test_shifted_preset_differs_from_defaults_and_is_feasible() -> None:
    hidden = hidden_weights("shifted")
    assert not np.array_equal(hidden, classic_defaults())
    assert frecency_safeguards(max_change=1e9).holds(hidden, classic_defaults())
