import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.stats import compare_branches, mwu_power, required_sample_size


def test_compare_branches_runs_six_tests_at_bonferroni_level() -> None:
    rng = np.random.default_rng(0)
    samples = {
        "treatment": {
            "chars_typed": rng.poisson(3, 400) + 1.0,
            "selected_rank": rng.poisson(0.3, 400) * 1.0,
        },
        "control": {
            "chars_typed": rng.poisson(5, 400) + 1.0,
            "selected_rank": rng.poisson(0.3, 400) * 1.0,
        },
        "control-no-decay": {
            "chars_typed": rng.poisson(5, 400) + 1.0,
            "selected_rank": rng.poisson(0.3, 400) * 1.0,
        },
    }
    rows = compare_branches(samples)
    assert len(rows) == 6
    assert all(r["alpha"] == pytest.approx(0.05 / 6) for r in rows)
    by = {(r["metric"], r["a"], r["b"]): r for r in rows}
    assert by[("chars_typed", "treatment", "control")]["significant"]
    assert by[("chars_typed", "treatment", "control")]["pvalue"] < 1e-10
    assert not by[("chars_typed", "control", "control-no-decay")]["significant"]


def test_power_grows_with_sample_size_and_is_alpha_without_effect() -> None:
    rng = np.random.default_rng(1)
    baseline = rng.poisson(4, 5000) + 1.0
    small = mwu_power(baseline, baseline - 0.5, 20, alpha=0.05, repetitions=300, rng=rng)
    large = mwu_power(baseline, baseline - 0.5, 400, alpha=0.05, repetitions=300, rng=rng)
    assert small < large
    assert large > 0.9
    null = mwu_power(baseline, baseline, 100, alpha=0.05, repetitions=600, rng=rng)
    assert null < 0.1


def test_required_sample_size_reaches_power() -> None:
    rng = np.random.default_rng(2)
    baseline = rng.poisson(4, 5000) + 1.0
    res = required_sample_size(
        baseline, baseline - 0.5, alpha=0.05 / 6, power=0.8, repetitions=200, rng=rng
    )
    assert res["reached"]
    assert res["power"] >= 0.8
    below = [c for c in res["curve"] if c["n"] < res["n"]]
    assert below and max(c["power"] for c in below if c["n"] <= res["n"] // 2 + 1) < 0.8
    with pytest.raises(ConfigError):
        required_sample_size(baseline, baseline, power=1.5, rng=rng)


def test_identical_distributions_are_never_detected_and_n_max_is_reported() -> None:
    rng = np.random.default_rng(3)
    ones = np.ones(100)
    assert mwu_power(ones, ones, 50, alpha=0.05, repetitions=50, rng=rng) == 0.0
    res = required_sample_size(ones, ones, n_max=64, repetitions=20, rng=rng)
    assert res == {"n": None, "power": 0.0, "curve": res["curve"], "reached": False}
    assert [c["n"] for c in res["curve"]] == [8, 16, 32, 64]
