import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.stats import (
    compare_branches,
    mwu_power,
    required_sample_size,
    seed_user_test,
)


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


# ------------------------------------------------------------------ seed_user_test


def _queries(rng: np.random.Generator, n_users: int = 40, per_user: int = 10) -> np.ndarray:
    return np.repeat(np.arange(n_users), per_user)


def test_seed_user_test_identical_methods() -> None:
    rng = np.random.default_rng(0)
    users = _queries(rng)
    a = rng.random((3, users.size))
    out = seed_user_test(a, a.copy(), users)
    assert out["diff"] == 0.0 and out["p"] == 1.0
    assert out["seeds"] == 3 and out["users"] == 40 and out["queries"] == 400


def test_seed_user_test_finds_a_real_shift() -> None:
    rng = np.random.default_rng(1)
    users = _queries(rng)
    b = rng.random((3, users.size))
    a = b + 0.05 + rng.normal(0, 0.01, size=b.shape)
    out = seed_user_test(a, b, users)
    assert out["p"] < 1e-6 and out["ci95_low"] < 0.05 < out["ci95_high"]


def test_seed_user_test_covers_training_randomness() -> None:
    """Each seed shifts every query of a model alike (a seed's model is better or worse
    everywhere): a per-query test over pooled seeds calls that noise significant, this
    test does not."""
    rng = np.random.default_rng(2)
    users = _queries(rng)
    base = rng.random(users.size)
    b = base + rng.normal(0, 0.002, size=(3, users.size))
    a = base + np.array([0.04, -0.03, 0.01])[:, None] + rng.normal(0, 0.002, (3, users.size))
    out = seed_user_test(a, b, users)
    assert out["p"] > 0.3 and out["seed_se"] > out["user_se"]
    from scipy import stats as sps

    naive = sps.ttest_rel(a.ravel(), b.ravel()).pvalue  # queries x seeds as independent
    assert naive < 1e-6


def test_seed_user_test_clusters_by_user() -> None:
    """Differences constant within a user: 40 users are 40 observations, not 400."""
    rng = np.random.default_rng(3)
    users = _queries(rng)
    per_user = rng.normal(0.01, 0.05, size=40)
    d = per_user[users]
    b = np.zeros((1, users.size))
    out = seed_user_test(b + d, b, users)
    iid_se = d.std(ddof=1) / np.sqrt(d.size)
    assert out["user_se"] > 2.5 * iid_se and np.isnan(out["seed_se"])
    with pytest.raises(ConfigError, match="shape"):
        seed_user_test(b, b[:, :10], users)
