"""End-to-end tests of the simulated federated frecency study (small, fast configurations;
the issue's full-size figures are checked in test_frecency_study_acceptance.py)."""

import json

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.frecency_presets import hidden_weights
from fedrank.experiments.frecency_study import FrecencyStudyConfig, compare_messages, run_study
from fedrank.experiments.plots import plot_study
from fedrank.experiments.report import write_report
from fedrank.models.frecency.modern import (
    MODERN_DEFAULTS,
    MODERN_WEIGHT_NAMES,
    ModernFrecency,
    modern_samples_from_histories,
)
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, classic_defaults
from fedrank.optim.constraints import frecency_safeguards, modern_frecency_safeguards
from fedrank.simulation.frecency_world import MIN_HALF_LIFE_DAYS, NOW_DAY, FrecencyWorld

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
    traj = small_result.weight_trajectory()
    assert traj.shape == (len(small_result.loss_per_iteration) + 1, len(CLASSIC_WEIGHT_NAMES))
    np.testing.assert_array_equal(traj[0], classic_defaults())
    np.testing.assert_array_equal(
        traj[-1], [small_result.final_weights[n] for n in CLASSIC_WEIGHT_NAMES]
    )
    chain = frecency_safeguards(max_change=3.0)
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


# ----------------------------------------------------------------------------------------
# Modern frecency (5 parameters)
# ----------------------------------------------------------------------------------------

MODERN_SMALL = dict(model="modern", **SMALL)


@pytest.fixture(scope="module")
def modern_result():
    return run_study(FrecencyStudyConfig(seed=7, **MODERN_SMALL))


def _trajectory(result, names) -> list[np.ndarray]:
    traj = [np.array([w[n] for n in names]) for w in result.weights_per_iteration]
    traj.append(np.array([result.final_weights[n] for n in names]))
    return traj


def test_classic_defaults_are_resolved_into_the_json(small_result) -> None:
    config = FrecencyStudyConfig()
    assert (config.model, config.score_scale, config.delta) == ("classic", None, None)
    resolved = config.resolved()
    assert (resolved.score_scale, resolved.delta) == ("log", 0.1)
    data = small_result.to_json()["config"]
    assert (data["model"], data["score_scale"], data["delta"]) == ("classic", "log", 0.1)
    # An explicit scale gets the model's margin for that scale; an explicit margin stays.
    assert FrecencyStudyConfig(score_scale="raw").resolved().delta == 0.1
    modern_log = FrecencyStudyConfig(model="modern", score_scale="log").resolved()
    assert modern_log.delta == pytest.approx(np.log1p(NOW_DAY + 6.0) - np.log1p(NOW_DAY))
    assert FrecencyStudyConfig(model="modern", delta=2.0).resolved().score_scale == "raw"


def test_modern_json_uses_the_five_modern_names(modern_result) -> None:
    data = json.loads(json.dumps(modern_result.to_json()))
    config = data["config"]
    assert (config["model"], config["score_scale"], config["delta"]) == ("modern", "raw", 6.0)
    assert len(data["loss_per_iteration"]) == 6
    assert all(np.isfinite(x) and x >= 0 for x in data["loss_per_iteration"])
    assert len(data["weights_per_iteration"]) == 6
    for weights in data["weights_per_iteration"]:
        assert list(weights) == list(MODERN_WEIGHT_NAMES)
    assert list(data["final_weights"]) == list(MODERN_WEIGHT_NAMES)
    assert data["weights_per_iteration"][0] == dict(MODERN_DEFAULTS)
    assert data["constraints_held"] is True
    assert set(data["eval"]) == {"treatment", "control", "control-no-decay"}
    assert all(ev["n"] > 0 and ev["chars_typed_mean"] >= 1.0 for ev in data["eval"].values())
    assert data["oracle"]["n"] == data["eval"]["treatment"]["n"]
    assert set(data["tests"]) == {"treatment_vs_control", "treatment_vs_control_no_decay"}


def test_modern_iterates_satisfy_the_modern_safeguards(modern_result) -> None:
    traj = _trajectory(modern_result, MODERN_WEIGHT_NAMES)
    np.testing.assert_array_equal(traj[0], ModernFrecency.defaults())
    chain = modern_frecency_safeguards(max_change=3.0)
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
        assert np.abs(cur - prev).max() <= 3.0 + 1e-9
    assert any(np.abs(t - traj[0]).max() > 0 for t in traj[1:]), "the model never moved"


def test_modern_run_is_reproducible_with_a_seed(modern_result) -> None:
    again = run_study(FrecencyStudyConfig(seed=7, **MODERN_SMALL))
    assert again.to_json() == modern_result.to_json()
    other = run_study(FrecencyStudyConfig(seed=8, **MODERN_SMALL))
    assert other.loss_per_iteration != modern_result.loss_per_iteration


def test_modern_control_branches_both_use_the_default_scores() -> None:
    world = FrecencyWorld(60, ModernFrecency.defaults(), np.random.default_rng(0), model="modern")
    np.testing.assert_array_equal(world.control_scores, world.no_decay_scores)
    samples = modern_samples_from_histories(world.population.pages, now_day=NOW_DAY)
    np.testing.assert_array_equal(
        world.control_scores, ModernFrecency().score(ModernFrecency.defaults(), samples)
    )
    assert (world.delta, world.score_scale) == (6.0, "raw")
    # Subsets score like the whole population; a half-life pushed to <= 0 by a
    # finite-difference step is scored in the vanishing half-life limit instead of failing.
    index = np.array([5, 1, 5])
    theta = ModernFrecency.defaults()
    np.testing.assert_array_equal(world.scorer.score(theta, index), world.control_scores[index])
    rows = np.tile(theta, (3, 1))
    rows[:, 4] = [0.0, -1.0, MIN_HALF_LIFE_DAYS]
    scores = world.scorer.score(rows)
    assert np.isfinite(scores).all()
    np.testing.assert_array_equal(scores[0], scores[2])
    np.testing.assert_array_equal(scores[1], scores[2])


def test_modern_sign_messages_and_explicit_loss_settings_run() -> None:
    res = run_study(
        FrecencyStudyConfig(seed=1, message="sign", delta=2.0, **{**MODERN_SMALL, "iterations": 3})
    )
    assert res.constraints_held
    assert res.to_json()["config"]["delta"] == 2.0
    assert list(res.final_weights) == list(MODERN_WEIGHT_NAMES)


def test_modern_compare_messages_report_and_plots(modern_result, tmp_path) -> None:
    res = compare_messages(FrecencyStudyConfig(**{**MODERN_SMALL, "iterations": 2}), seeds=[0])
    assert res["config"]["model"] == "modern" and res["config"]["delta"] == 6.0
    assert np.isfinite(res["ratio"])
    plots = plot_study(modern_result, tmp_path)
    assert [p.name for p in plots] == ["loss.png", "weights.png", "chars_typed.png"]
    report = write_report(modern_result, tmp_path / "report.md", "test", plots).read_text()
    assert "Model `modern` frecency" in report
    start = modern_result.weights_per_iteration[0]
    moved = [n for n in MODERN_WEIGHT_NAMES if modern_result.final_weights[n] != start[n]]
    assert moved
    for name in moved:
        assert f"| {name} | {start[name]:g} |" in report


def test_bad_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="model must be one of classic, modern"):
        FrecencyStudyConfig(model="newest")
    with pytest.raises(ConfigError, match="unknown frecency model"):
        hidden_weights("paper", "newest")


def test_modern_shifted_preset_is_feasible_and_reachable() -> None:
    hidden = hidden_weights("shifted", "modern")
    defaults = ModernFrecency.defaults()
    np.testing.assert_array_equal(hidden_weights("paper", "modern"), defaults)
    assert not np.array_equal(hidden, defaults)
    assert modern_frecency_safeguards(max_change=120.0).holds(hidden, defaults)
