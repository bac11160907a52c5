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


def test_seed_user_test_hand_computed() -> None:
    """Two seeds, four queries of two users; every number by hand.

    d = a - b: seed 0 [.1 .3 .2 .4] (mean .25), seed 1 [.3 .1 .0 .2] (mean .15): diff .2,
    seed variance var([.25, .15]) / 2 = .0025. Seed-averaged d [.2 .2 .1 .3], residuals
    [0 0 -.1 .1]; users [0 1 0 1] sum them to -.1 and .1: user variance
    (.01 + .01) / 4**2 * 2 / 1 = .0025. se = sqrt(.005); Welch df = .005**2 / (2 * .0025**2)
    = 2; t = .2 / sqrt(.005) = 2 sqrt(2); with 2 df, p = 1 - t / sqrt(t**2 + 2)."""
    d = np.array([[0.1, 0.3, 0.2, 0.4], [0.3, 0.1, 0.0, 0.2]])
    b = np.full_like(d, 0.5)
    out = seed_user_test(b + d, b, np.array([0, 1, 0, 1]))
    t = 0.2 / np.sqrt(0.005)
    assert out["diff"] == pytest.approx(0.2)
    assert out["seed_se"] == pytest.approx(0.05) and out["user_se"] == pytest.approx(0.05)
    assert out["se"] == pytest.approx(np.sqrt(0.005))
    assert out["df"] == pytest.approx(2.0)
    assert out["t"] == pytest.approx(t)
    assert out["p"] == pytest.approx(1 - t / np.sqrt(t**2 + 2))  # 0.10557
    half = 4.302652729911275 * np.sqrt(0.005)  # t_{0.975, 2}
    assert out["ci95_low"] == pytest.approx(0.2 - half)
    assert out["ci95_high"] == pytest.approx(0.2 + half)
    assert (out["seeds"], out["users"], out["queries"]) == (2, 2, 4)


def test_seed_user_test_identical_is_symmetric_and_exactly_null() -> None:
    rng = np.random.default_rng(10)
    users = np.repeat(np.arange(40), 10)
    a = rng.random((3, users.size))
    out = seed_user_test(a, a.copy(), users)
    assert (out["diff"], out["se"], out["t"], out["p"]) == (0.0, 0.0, 0.0, 1.0)
    assert out["ci95_low"] == out["ci95_high"] == 0.0
    b = rng.random((3, users.size))
    ab, ba = seed_user_test(a, b, users), seed_user_test(b, a, users)
    assert ab["diff"] == pytest.approx(-ba["diff"]) and ab["p"] == pytest.approx(ba["p"])
    assert ab["ci95_low"] == pytest.approx(-ba["ci95_high"])


def _experiment(
    rng: np.random.Generator, shift: float, seeds: int = 3, users: int = 40, per_user: int = 10
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two methods on the same queries: each seed moves every query of a method alike
    (sd .03), users differ in how much ``a`` helps (sd .02), small per-query noise."""
    u = np.repeat(np.arange(users), per_user)
    base = rng.random(u.size)
    user_effect = rng.normal(0.0, 0.02, users)[u]
    b = base + rng.normal(0, 0.03, (seeds, 1)) + rng.normal(0, 0.01, (seeds, u.size))
    a = base + shift + user_effect + rng.normal(0, 0.03, (seeds, 1))
    a = a + rng.normal(0, 0.01, (seeds, u.size))
    return a, b, u


def test_seed_user_test_finds_a_shift_over_three_seeds() -> None:
    rng = np.random.default_rng(12)
    u = np.repeat(np.arange(40), 10)
    b = rng.random((3, u.size))
    a = b + 0.05 + rng.normal(0, 0.005, b.shape)
    out = seed_user_test(a, b, u)
    assert out["diff"] == pytest.approx(0.05, abs=0.002)
    assert out["p"] < 1e-8
    assert out["ci95_low"] < 0.05 < out["ci95_high"]
    assert out["ci95_high"] - out["ci95_low"] < 0.01


def test_seed_user_test_null_rate_with_random_seed_offsets() -> None:
    """No true difference, training randomness per seed: the test rejects at about its
    level; a paired t-test over (seed, query) pairs rejects almost always."""
    rng = np.random.default_rng(7)
    from scipy import stats as sps

    ours, naive = [], []
    for _ in range(300):
        a, b, u = _experiment(rng, 0.0)
        ours.append(seed_user_test(a, b, u)["p"] < 0.05)
        naive.append(sps.ttest_rel(a.ravel(), b.ravel()).pvalue < 0.05)
    assert np.mean(ours) < 0.1
    assert np.mean(naive) > 0.8


def test_seed_user_test_ci_covers_the_true_shift() -> None:
    rng = np.random.default_rng(13)
    covered = []
    for _ in range(300):
        a, b, u = _experiment(rng, 0.03)
        out = seed_user_test(a, b, u)
        covered.append(out["ci95_low"] <= 0.03 <= out["ci95_high"])
    assert 0.9 <= np.mean(covered) <= 0.99


def test_seed_user_test_user_clustered_ci_is_wider_than_the_iid_one() -> None:
    rng = np.random.default_rng(14)
    u = np.repeat(np.arange(40), 10)
    d = rng.normal(0.02, 0.05, 40)[u]  # constant within a user
    b = rng.random((2, u.size))
    a = b + d + rng.normal(0, 1e-4, b.shape)
    out = seed_user_test(a, b, u)
    from scipy import stats as sps

    dq = (a - b).mean(axis=0)
    iid_half = sps.t.ppf(0.975, dq.size - 1) * dq.std(ddof=1) / np.sqrt(dq.size)
    width = out["ci95_high"] - out["ci95_low"]
    assert width > 2.5 * (2 * iid_half)
    # the same differences spread over 400 distinct users: about the iid interval
    alone = seed_user_test(a, b, np.arange(u.size))
    assert alone["ci95_high"] - alone["ci95_low"] == pytest.approx(2 * iid_half, rel=0.05)


def test_seed_user_test_drops_nan_queries_and_accepts_one_seed() -> None:
    rng = np.random.default_rng(15)
    u = np.repeat(np.arange(20), 5)
    a, b = rng.random((3, u.size)), rng.random((3, u.size))
    a_nan, b_nan = a.copy(), b.copy()
    a_nan[1, 3] = np.nan  # one seed is enough to drop the query
    b_nan[0, 50:55] = np.nan  # user 10 entirely
    keep = np.ones(u.size, dtype=bool)
    keep[3] = False
    keep[50:55] = False
    got = seed_user_test(a_nan, b_nan, u)
    want = seed_user_test(a[:, keep], b[:, keep], u[keep])
    assert got == pytest.approx(want)
    assert got["queries"] == 94 and got["users"] == 19
    one = seed_user_test(a[0], b[0], u)  # 1-D: one seed
    assert one == pytest.approx(seed_user_test(a[:1], b[:1], u), nan_ok=True)
    assert one["seeds"] == 1 and np.isnan(one["seed_se"]) and one["se"] == one["user_se"]


def test_seed_user_test_rejects_bad_shapes() -> None:
    u = np.repeat(np.arange(5), 4)
    a = np.zeros((3, 20))
    with pytest.raises(ConfigError, match="shape"):
        seed_user_test(a, np.zeros((2, 20)), u)  # different seed counts
    with pytest.raises(ConfigError, match="shape"):
        seed_user_test(a, np.zeros((3, 19)), u)
    with pytest.raises(ConfigError, match="shape"):
        seed_user_test(a, a, u[:-1])  # users of the wrong length
    with pytest.raises(ConfigError, match="shape"):
        seed_user_test(a, a, u.reshape(4, 5))
    nan = np.full((3, 20), np.nan)
    nan[:, 0] = 1.0
    with pytest.raises(ConfigError, match="at least two"):
        seed_user_test(nan, a, u)
