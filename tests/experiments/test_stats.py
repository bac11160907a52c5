from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as sps

from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments import stats as stats_module
from fedrank.experiments.stats import (
    METRICS,
    compare_branches,
    compare_branches_by_user,
    intra_user_correlation,
    mwu_power,
    per_user_means,
    required_sample_size,
    required_users,
    seed_user_test,
    smallest_n,
    user_mwu_power,
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


# ------------------------------------------------------------------ user-level analysis


def _branch(
    rng: np.random.Generator,
    n_users: int,
    per_user: float,
    *,
    mu: float = 0.0,
    sd_user: float = 1.0,
    sd_search: float = 1.0,
    first_id: int = 0,
) -> dict[str, np.ndarray]:
    """Searches of one branch: user ``i`` makes ``1 + Poisson(per_user)`` searches, each
    ``mu + user effect (sd_user) + search noise (sd_search)``; ICC = sd_user^2 / total.
    Both metrics get independent draws of the same model."""
    counts = rng.poisson(per_user, n_users) + 1
    index = np.repeat(np.arange(n_users), counts)
    out: dict[str, np.ndarray] = {"user": index + first_id}
    for metric in METRICS:
        effect = rng.normal(mu, sd_user, n_users)
        out[metric] = effect[index] + rng.normal(0.0, sd_search, index.size)
    return out


def test_per_user_means_by_hand() -> None:
    ids, means, counts = per_user_means(
        np.array([1.0, 3.0, 10.0, 4.0, 2.0]), np.array([7, 7, 2, 9, 7])
    )
    assert ids.tolist() == [2, 7, 9]
    assert means.tolist() == [10.0, 2.0, 4.0]
    assert counts.tolist() == [1, 3, 1]
    ids, means, counts = per_user_means([0.5, 1.5], ["bob", "al"])  # any sortable ids
    assert ids.tolist() == ["al", "bob"] and means.tolist() == [1.5, 0.5]
    ids, means, counts = per_user_means(np.array([]), np.array([], dtype=int))
    assert ids.size == means.size == counts.size == 0


def test_per_user_means_keeps_the_total_and_rejects_bad_input() -> None:
    rng = np.random.default_rng(20)
    data = _branch(rng, 300, 8)
    _, means, counts = per_user_means(data["chars_typed"], data["user"])
    assert counts.sum() == data["user"].size
    assert (means * counts).sum() == pytest.approx(data["chars_typed"].sum())
    with pytest.raises(DataFormatError, match="one length"):
        per_user_means(np.zeros(3), np.zeros(4))
    with pytest.raises(DataFormatError, match="1-D"):
        per_user_means(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(DataFormatError, match="non-finite"):
        per_user_means(np.array([1.0, np.nan]), np.array([0, 1]))


def test_intra_user_correlation_by_hand() -> None:
    """Balanced: users [0 0 1 1], values [1 3 5 7]: means 2, 6, grand 4; MSB = 2 (4 + 4) / 1
    = 16, MSW = (1 + 1 + 1 + 1) / 2 = 2, n0 = (4 - 8 / 4) / 1 = 2; ICC = 14 / 18.
    Unbalanced: users [0 0 0 1], values [1 2 3 10]: means 2, 10, grand 4; MSB = 3 * 4 + 36
    = 48, MSW = 2 / 2 = 1, n0 = (4 - 10 / 4) / 1 = 1.5; ICC = 47 / 48.5."""
    assert intra_user_correlation([1.0, 3.0, 5.0, 7.0], [0, 0, 1, 1]) == pytest.approx(14 / 18)
    assert intra_user_correlation([1.0, 2.0, 3.0, 10.0], [0, 0, 0, 1]) == pytest.approx(47 / 48.5)
    # every user repeats one value: all variance is between users
    users = np.array([3, 1, 3, 2, 1, 1, 2])
    values = np.array([0.3, -1.2, 0.3, 4.1, -1.2, -1.2, 4.1])
    assert intra_user_correlation(values, users) == pytest.approx(1.0)
    # users identical on average, varied within: the estimate is negative, not clipped
    assert intra_user_correlation([0.0, 1.0, 0.0, 1.0], [0, 0, 1, 1]) == pytest.approx(-1.0)


def test_intra_user_correlation_recovers_a_simulated_value() -> None:
    """2000 users of 1 + Poisson(10) searches with ICC 0.11 (the study's value): the
    estimator's standard error is about 0.006 (Donner's large-sample formula), so 0.02 is
    over 3 standard errors; i.i.d. searches (500 users x 10) give 0 within 0.02 (3 SE)."""
    rng = np.random.default_rng(21)
    data = _branch(rng, 2000, 10, sd_user=np.sqrt(0.11), sd_search=np.sqrt(0.89))
    assert intra_user_correlation(data["chars_typed"], data["user"]) == pytest.approx(
        0.11, abs=0.02
    )
    users = np.repeat(np.arange(500), 10)
    iid = intra_user_correlation(rng.normal(size=users.size), users)
    assert abs(iid) < 0.02


def test_intra_user_correlation_edge_cases() -> None:
    assert np.isnan(intra_user_correlation(np.full(6, 2.5), [0, 0, 1, 1, 2, 2]))
    with pytest.raises(ConfigError, match="at least 2 users"):
        intra_user_correlation([1.0, 2.0, 3.0], [4, 4, 4])
    with pytest.raises(ConfigError, match="2 or more searches"):
        intra_user_correlation([1.0, 2.0, 3.0], [1, 2, 3])
    with pytest.raises(DataFormatError):
        intra_user_correlation([1.0, 2.0], [1])


def test_compare_branches_by_user_by_hand() -> None:
    """a: users 1 (1, 3) and 2 (5): per-user means 2, 5 (mean 3.5), search mean 3.
    b: users 7 (0) and 8 (1, 1, 4): per-user means 0, 2 (mean 1), search mean 1.5.
    U of a over the 4 user pairs: 5 > 0, 5 > 2, 2 > 0, 2 = 2 (half): 3.5; r = 7 / 4 - 1."""
    a = {"user": np.array([1, 1, 2]), "chars_typed": np.array([1.0, 3.0, 5.0])}
    b = {"user": np.array([7, 8, 8, 8]), "chars_typed": np.array([0.0, 1.0, 1.0, 4.0])}
    a["selected_rank"], b["selected_rank"] = -a["chars_typed"], -b["chars_typed"]
    rows = compare_branches_by_user({"a": a, "b": b}, n_boot=500, rng=np.random.default_rng(0))
    assert [(r["metric"], r["a"], r["b"]) for r in rows] == [
        ("chars_typed", "a", "b"),
        ("selected_rank", "a", "b"),
    ]
    r = rows[0]
    assert (r["n_users_a"], r["n_users_b"], r["n_searches_a"], r["n_searches_b"]) == (2, 2, 3, 4)
    assert (r["mean_a"], r["mean_b"], r["diff"]) == (3.5, 1.0, 2.5)
    assert (r["search_mean_a"], r["search_mean_b"]) == (3.0, 1.5)
    assert r["statistic"] == 3.5 and r["rank_biserial"] == pytest.approx(0.75)
    assert r["pvalue"] == pytest.approx(sps.mannwhitneyu([2.0, 5.0], [0.0, 2.0]).pvalue)
    pooled = sps.mannwhitneyu(a["chars_typed"], b["chars_typed"]).pvalue
    assert r["pooled_pvalue"] == pytest.approx(pooled)
    # bootstrap means of a lie in {2, 3.5, 5} and of b in {0, 1, 2}
    low, high = r["diff_ci95"]
    assert 0.0 <= low <= 2.5 <= high <= 5.0
    flipped = rows[1]  # selected_rank = -chars_typed: every sign turns
    assert flipped["diff"] == -2.5 and flipped["rank_biserial"] == pytest.approx(-0.75)
    assert flipped["pvalue"] == pytest.approx(r["pvalue"])


def test_compare_branches_by_user_rows_and_bonferroni_level() -> None:
    rng = np.random.default_rng(22)
    samples = {
        "treatment": _branch(rng, 60, 6, mu=-1.0),
        "control": _branch(rng, 50, 6, first_id=1000),
        "control-no-decay": _branch(rng, 40, 6, first_id=2000),
    }
    rows = compare_branches_by_user(samples, n_boot=200, rng=rng)
    assert len(rows) == 6
    keys = {
        "metric", "a", "b", "unit", "n_users_a", "n_users_b", "n_searches_a", "n_searches_b",
        "mean_a", "mean_b", "diff", "diff_ci95", "rank_biserial", "statistic", "pvalue",
        "alpha", "significant", "pooled_pvalue", "search_mean_a", "search_mean_b",
    }  # fmt: skip
    assert all(set(r) == keys for r in rows)
    assert all(r["unit"] == "user" and r["alpha"] == pytest.approx(0.05 / 6) for r in rows)
    assert all(r["significant"] == (r["pvalue"] < 0.05 / 6) for r in rows)
    pairs = [(r["a"], r["b"]) for r in rows[:3]]
    assert pairs == [
        ("treatment", "control"),
        ("treatment", "control-no-decay"),
        ("control", "control-no-decay"),
    ]
    assert [r["metric"] for r in rows] == ["chars_typed"] * 3 + ["selected_rank"] * 3
    by = {(r["metric"], r["a"], r["b"]): r for r in rows}
    shifted = by[("chars_typed", "treatment", "control")]
    assert shifted["significant"] and shifted["diff"] < 0 and shifted["rank_biserial"] < -0.3
    assert (shifted["n_users_a"], shifted["n_users_b"]) == (60, 50)
    assert shifted["n_searches_a"] == samples["treatment"]["user"].size
    assert not by[("chars_typed", "control", "control-no-decay")]["significant"]
    assert all(r["diff_ci95"][0] <= r["diff"] <= r["diff_ci95"][1] for r in rows)
    two = compare_branches_by_user(
        {k: samples[k] for k in ("control", "treatment")}, alpha=0.1, n_boot=50, rng=rng
    )
    assert len(two) == 2 and all(r["alpha"] == pytest.approx(0.1 / 2) for r in two)


def test_pooled_searches_overstate_significance_the_user_test_does_not() -> None:
    """Design motivation. Both branches come from one distribution; users differ by a
    strong random effect (ICC 0.5) and make about 200 searches each. The branches' means
    differ only by the luck of which users they drew, which the pooled test mistakes for
    a treatment effect: its z is about sqrt(200 * 0.5) = 10 times the user-level z.

    One draw (seed 3) shown; how small the pooled p gets depends on the draw: over seeds
    0-9 the pooled p was below the user-level p in all 20 comparisons and below 1e-3 in
    15, while the user-level p stayed above 0.05 in 19. The seed-free statement is the
    rejection-rate test below."""
    rng = np.random.default_rng(3)
    samples = {
        "treatment": _branch(rng, 40, 200),
        "control": _branch(rng, 40, 200, first_id=1000),
    }
    icc = intra_user_correlation(samples["control"]["chars_typed"], samples["control"]["user"])
    assert icc == pytest.approx(0.5, abs=0.1)  # measured 0.52
    rows = compare_branches_by_user(samples, n_boot=200, rng=rng)
    # measured: chars_typed user p 0.58, pooled 6.3e-16; selected_rank 0.12 and 2.0e-57
    for row in rows:
        assert row["pvalue"] > 0.05 and not row["significant"]
        assert row["pooled_pvalue"] < 1e-12
        assert row["pooled_pvalue"] < row["pvalue"] * 1e-10


def test_user_level_test_keeps_its_level_where_the_pooled_test_does_not() -> None:
    """200 null studies at the study's ICC of 0.11 (30 users per branch, about 100
    searches each): the pooled per-search test rejects at 5% in over 40% of them (its z
    is inflated by sqrt(1 + 100 * 0.11) = 3.5), the user-level test in about 5% (binomial
    SD 1.5 points with 200 studies; < 10% is 3 SD)."""
    rng = np.random.default_rng(23)
    user_level, pooled = [], []
    for _ in range(200):
        samples = {
            "a": _branch(rng, 30, 100, sd_user=np.sqrt(0.11), sd_search=np.sqrt(0.89)),
            "b": _branch(rng, 30, 100, sd_user=np.sqrt(0.11), sd_search=np.sqrt(0.89)),
        }
        row = compare_branches_by_user(samples, n_boot=1, rng=rng)[0]
        user_level.append(row["pvalue"] < 0.05)
        pooled.append(row["pooled_pvalue"] < 0.05)
    assert np.mean(user_level) < 0.1
    assert np.mean(pooled) > 0.4


def test_bootstrap_ci_covers_the_difference_with_user_level_width() -> None:
    """2000 users per branch, true difference of the per-user means 0.3, ICC 0.5 and
    about 10 searches per user. The 95% interval covers 0.3; its width is that of the
    normal interval of a difference of two means of per-user means, 3.92 SE (within 10%:
    2000 bootstrap draws estimate a 2.5% quantile to a few percent), and over twice the
    width an analysis that treats the searches as independent would give."""
    rng = np.random.default_rng(24)
    samples = {
        "a": _branch(rng, 2000, 9, mu=0.3),
        "b": _branch(rng, 2000, 9, first_id=10_000),
    }
    row = compare_branches_by_user(samples, n_boot=2000, rng=rng)[0]
    low, high = row["diff_ci95"]
    assert low < 0.3 < high
    ma = per_user_means(samples["a"]["chars_typed"], samples["a"]["user"])[1]
    mb = per_user_means(samples["b"]["chars_typed"], samples["b"]["user"])[1]
    user_se = np.sqrt(ma.var(ddof=1) / ma.size + mb.var(ddof=1) / mb.size)
    assert high - low == pytest.approx(3.92 * user_se, rel=0.1)
    xa, xb = samples["a"]["chars_typed"], samples["b"]["chars_typed"]
    search_se = np.sqrt(xa.var(ddof=1) / xa.size + xb.var(ddof=1) / xb.size)
    assert high - low > 2 * 3.92 * search_se


def test_bootstrap_ci_coverage_rate() -> None:
    """100 studies of 100 users per branch: the percentile interval covers the true
    difference in about 95% of them (binomial SD 2.2 points; 87%-99% is about 3 SD)."""
    rng = np.random.default_rng(25)
    covered = []
    for _ in range(100):
        samples = {"a": _branch(rng, 100, 4, mu=0.5), "b": _branch(rng, 100, 4)}
        low, high = compare_branches_by_user(samples, n_boot=400, rng=rng)[0]["diff_ci95"]
        covered.append(low <= 0.5 <= high)
    assert 0.87 <= np.mean(covered) <= 0.99


def test_compare_branches_by_user_is_reproducible() -> None:
    rng = np.random.default_rng(26)
    samples = {"t": _branch(rng, 30, 5, mu=0.2), "c": _branch(rng, 30, 5)}
    one = compare_branches_by_user(samples, n_boot=300, rng=np.random.default_rng(7))
    two = compare_branches_by_user(samples, n_boot=300, rng=np.random.default_rng(7))
    assert one == two
    other = compare_branches_by_user(samples, n_boot=300, rng=np.random.default_rng(8))
    assert [r["diff_ci95"] for r in other] != [r["diff_ci95"] for r in one]
    # only the bootstrap is random: the tests themselves do not depend on the seed
    assert [r["pvalue"] for r in other] == [r["pvalue"] for r in one]


def test_bootstrap_in_row_blocks_matches_one_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above _MAX_CELLS resampled values the bootstrap runs in blocks of rows; the
    interval is the same up to the bootstrap's own noise."""
    rng = np.random.default_rng(27)
    samples = {"t": _branch(rng, 200, 3, mu=0.5), "c": _branch(rng, 200, 3)}
    whole = compare_branches_by_user(samples, n_boot=1000, rng=np.random.default_rng(1))
    monkeypatch.setattr(stats_module, "_MAX_CELLS", 1000)
    blocks = compare_branches_by_user(samples, n_boot=1000, rng=np.random.default_rng(1))
    for w, b in zip(whole, blocks, strict=True):
        assert b["diff_ci95"] == pytest.approx(w["diff_ci95"], abs=0.05)
        assert b["pvalue"] == w["pvalue"]


def test_compare_branches_by_user_rejects_bad_input() -> None:
    rng = np.random.default_rng(28)
    good = _branch(rng, 5, 2)
    empty = {"user": np.array([], dtype=int), **{m: np.array([]) for m in METRICS}}
    lone = {"user": np.zeros(4, dtype=int), **{m: np.arange(4.0) for m in METRICS}}
    with pytest.raises(ConfigError, match="no searches"):
        compare_branches_by_user({"a": good, "b": empty}, rng=rng)
    with pytest.raises(ConfigError, match="at least 2 users"):
        compare_branches_by_user({"a": lone, "b": good}, rng=rng)
    with pytest.raises(ConfigError, match="two branches"):
        compare_branches_by_user({"a": good}, rng=rng)
    with pytest.raises(DataFormatError, match="lacks"):
        compare_branches_by_user({"a": good, "b": {"user": good["user"]}}, rng=rng)
    short = dict(good, selected_rank=good["selected_rank"][:-1])
    with pytest.raises(DataFormatError, match="one length"):
        compare_branches_by_user({"a": good, "b": short}, rng=rng)
    nan = dict(good, chars_typed=np.where(good["user"] == 0, np.nan, good["chars_typed"]))
    with pytest.raises(DataFormatError, match="non-finite"):
        compare_branches_by_user({"a": good, "b": nan}, rng=rng)
    with pytest.raises(ConfigError, match="alpha"):
        compare_branches_by_user({"a": good, "b": good}, alpha=1.5, rng=rng)
    with pytest.raises(ConfigError, match="n_boot"):
        compare_branches_by_user({"a": good, "b": good}, n_boot=0, rng=rng)


# ------------------------------------------------------------------ user-level power


def test_user_mwu_power_grows_with_n() -> None:
    """Per-user means N(0, 1) against N(0.3, 1) at alpha 0.05: the normal approximation
    of the MWU (efficiency 3 / pi) gives power 0.15, 0.45 and 0.96 at 20, 80, 320 users."""
    rng = np.random.default_rng(30)
    a = rng.normal(0.0, 1.0, 5000)
    powers = [
        user_mwu_power(a, a + 0.3, n, alpha=0.05, repetitions=400, rng=rng) for n in (20, 80, 320)
    ]
    assert powers[0] < powers[1] < powers[2]
    assert powers[0] < 0.3 and powers[2] > 0.9


def test_user_mwu_power_is_alpha_without_a_difference() -> None:
    """Same per-user distribution in both branches: the rejection rate estimates the
    test's size, 0.05 (slightly less with the continuity correction). With 4000
    repetitions its binomial SD is 0.0034, so [0.035, 0.065] is over 4 SD either side."""
    rng = np.random.default_rng(31)
    a = rng.normal(0.0, 1.0, 5000)
    null = user_mwu_power(a, a, 50, alpha=0.05, repetitions=4000, rng=rng)
    assert 0.035 <= null <= 0.065
    ones = np.ones(30)
    assert user_mwu_power(ones, ones, 40, alpha=0.05, repetitions=20, rng=rng) == 0.0


def test_user_mwu_power_in_row_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_module, "_MAX_CELLS", 500)  # 200 x 100 values in 40 blocks
    rng = np.random.default_rng(32)
    a = rng.normal(0.0, 1.0, 2000)
    assert user_mwu_power(a, a + 1.0, 100, alpha=0.05, repetitions=200, rng=rng) == 1.0
    assert user_mwu_power(a, a, 100, alpha=0.05, repetitions=400, rng=rng) < 0.1


def test_user_mwu_power_is_reproducible_and_rejects_bad_input() -> None:
    a = np.random.default_rng(33).normal(size=100)
    once = user_mwu_power(a, a + 0.2, 30, alpha=0.05, repetitions=50, rng=np.random.default_rng(1))
    again = user_mwu_power(a, a + 0.2, 30, alpha=0.05, repetitions=50, rng=np.random.default_rng(1))
    assert once == again
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="n_users"):
        user_mwu_power(a, a, 1, alpha=0.05, repetitions=10, rng=rng)
    with pytest.raises(ConfigError, match="repetitions"):
        user_mwu_power(a, a, 10, alpha=0.05, repetitions=0, rng=rng)
    with pytest.raises(ConfigError, match="alpha"):
        user_mwu_power(a, a, 10, alpha=0.0, repetitions=10, rng=rng)
    with pytest.raises(ConfigError, match="empty"):
        user_mwu_power(a, np.array([]), 10, alpha=0.05, repetitions=10, rng=rng)
    with pytest.raises(DataFormatError, match="NaN"):
        user_mwu_power(a, np.array([1.0, np.nan]), 10, alpha=0.05, repetitions=10, rng=rng)
    with pytest.raises(DataFormatError, match="1-D"):
        user_mwu_power(a.reshape(10, 10), a, 10, alpha=0.05, repetitions=10, rng=rng)


def test_required_users_matches_noether_formula() -> None:
    """Per-user means N(0, 1) against N(0.25, 1) at the paper's alpha 0.05 / 6 and power
    0.8. Noether's sample size for the MWU, n = (z_{1 - alpha / 2} + z_{0.8})^2 /
    (6 (p - 1/2)^2) per branch with p = P(b > a) measured on the pools, is about 400; the
    simulated search must land within 20% (with 400 repetitions it was within 4% for five
    seeds: power SE 0.02 against a slope of 0.1% per user near the answer)."""
    rng = np.random.default_rng(34)
    a, b = rng.normal(0.0, 1.0, 20_000), rng.normal(0.25, 1.0, 20_000)
    p = sps.mannwhitneyu(b, a).statistic / (a.size * b.size)
    z = sps.norm.ppf(1 - 0.05 / 12) + sps.norm.ppf(0.8)
    noether = z**2 / (6 * (p - 0.5) ** 2)
    res = required_users(a, b, repetitions=400, rng=rng)
    assert res["reached"] and res["power"] >= 0.8
    assert res["n"] == pytest.approx(noether, rel=0.2)
    ns = [c["n"] for c in res["curve"]]
    assert {8, 16, 32, 64, 128, 256, 512} <= set(ns) and max(ns) == 512 and res["n"] in ns
    assert set(res) == {"n", "power", "curve", "reached"}


def test_required_users_reports_an_unreachable_target() -> None:
    ones = np.ones(50)
    res = required_users(ones, ones, n_max=64, repetitions=20, rng=np.random.default_rng(35))
    assert res == {"n": None, "power": 0.0, "curve": res["curve"], "reached": False}
    assert [c["n"] for c in res["curve"]] == [8, 16, 32, 64]
    with pytest.raises(ConfigError, match="power"):
        required_users(ones, ones, power=1.0, rng=np.random.default_rng(0))


# ------------------------------------------------------------------ smallest_n


def _step_power(threshold: int) -> tuple[list[int], Callable[[int], float]]:
    calls: list[int] = []

    def power_at(n: int) -> float:
        calls.append(n)
        return 1.0 - np.exp(-n / threshold)

    return calls, power_at


@pytest.mark.parametrize("target", [0.1, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("n_min", [1, 2, 7])
def test_smallest_n_is_exact_on_a_monotone_curve(target: float, n_min: int) -> None:
    calls, power_at = _step_power(300)
    res = smallest_n(power_at, target, n_min, 100_000)
    exact = max(n_min, int(np.ceil(-300 * np.log(1 - target))))
    while 1 - np.exp(-(exact - 1) / 300) >= target and exact - 1 >= n_min:
        exact -= 1  # guard the ceil against rounding
    assert res["reached"] and res["n"] == exact
    assert res["power"] == pytest.approx(1 - np.exp(-exact / 300))
    assert len(calls) == len(set(calls)) == len(res["curve"])  # each n evaluated once
    # doubling: log2(exact / n_min) + 2 calls; bisection of a bracket < exact wide
    assert len(calls) <= np.log2(exact / n_min) + np.log2(exact) + 3


def test_smallest_n_edges() -> None:
    linear = lambda n: n / 100  # noqa: E731
    assert smallest_n(linear, 0.37, 1, 1000)["n"] == 37
    assert smallest_n(linear, 0.05, 5, 1000)["n"] == 5  # already reached at n_min
    assert smallest_n(linear, 0.05, 2, 1000, start=8)["n"] == 5  # searched below start
    assert smallest_n(linear, 1.0, 1, 100)["n"] == 100
    res = smallest_n(linear, 0.9, 1, 50)
    assert res["reached"] is False and res["n"] is None and res["power"] == 0.5
    assert [c["n"] for c in res["curve"]] == [1, 2, 4, 8, 16, 32, 50]
    # rel_tol stops the bisection early: a bracket of at most 10% of its lower end
    coarse = smallest_n(linear, 0.5, 1, 10_000, rel_tol=0.1)
    assert coarse["power"] >= 0.5 and 50 <= coarse["n"] <= 56


def test_smallest_n_rejects_bad_arguments() -> None:
    def f(n: int) -> float:
        return n / 10

    with pytest.raises(ConfigError, match="target"):
        smallest_n(f, 0.0, 1, 10)
    with pytest.raises(ConfigError, match="n_min"):
        smallest_n(f, 0.5, 0, 10)
    with pytest.raises(ConfigError, match="n_min"):
        smallest_n(f, 0.5, 20, 10)
    with pytest.raises(ConfigError, match="start"):
        smallest_n(f, 0.5, 4, 10, start=2)
    with pytest.raises(ConfigError, match="rel_tol"):
        smallest_n(f, 0.5, 1, 10, rel_tol=1.0)
    with pytest.raises(ConfigError, match="nan"):
        smallest_n(lambda n: float("nan"), 0.5, 1, 10)
