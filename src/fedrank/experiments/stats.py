"""Hypothesis tests and power analysis for the A/B study (Mozilla paper, Section 6.2-6.3).

The study compares branches with two-sided Mann-Whitney U tests; with three branches and two
metrics there are six comparisons, so the paper uses a Bonferroni-corrected level
``alpha = 0.05 / 6``. The power analysis answers, by simulation, how many users per branch
are needed to detect a given shift of a metric with that test.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats

from fedrank.errors import ConfigError

METRICS: tuple[str, ...] = ("chars_typed", "selected_rank")


def compare_branches(
    samples: dict[str, dict[str, np.ndarray]], alpha: float = 0.05
) -> list[dict[str, Any]]:
    """Two-sided Mann-Whitney U tests of every metric between every pair of branches,
    judged at the Bonferroni level ``alpha / number_of_tests``.

    ``samples[branch][metric]`` holds per-search values. Pairs keep the order of
    ``samples`` (so ``treatment`` comes first when it is listed first).
    """
    names = list(samples)
    pairs = list(combinations(names, 2))
    n_tests = len(pairs) * len(METRICS)
    level = alpha / n_tests
    rows = []
    for metric in METRICS:
        for a, b in pairs:
            x, y = samples[a][metric], samples[b][metric]
            if x.size == 0 or y.size == 0:
                raise ConfigError(
                    f"branch {a if x.size == 0 else b} has no {metric} samples to test"
                )
            res = stats.mannwhitneyu(x, y, alternative="two-sided")
            rows.append(
                {
                    "metric": metric,
                    "a": a,
                    "b": b,
                    "mean_a": float(x.mean()),
                    "mean_b": float(y.mean()),
                    "statistic": float(res.statistic),
                    "pvalue": float(res.pvalue),
                    "alpha": level,
                    "significant": bool(res.pvalue < level),
                }
            )
    return rows


def mwu_power(
    control: np.ndarray,
    treatment: np.ndarray,
    n_per_group: int,
    *,
    alpha: float,
    repetitions: int,
    rng: np.random.Generator,
) -> float:
    """Power of a two-sided MWU test to tell ``treatment`` from ``control`` with
    ``n_per_group`` values per group, by simulation.

    Each repetition draws ``n_per_group`` values from each empirical distribution (with
    replacement); power is the share of repetitions with p < ``alpha``. For a location
    shift ``effect`` of one distribution, pass ``treatment = control + effect``.
    """
    if n_per_group < 2 or repetitions < 1:
        raise ConfigError("n_per_group must be >= 2 and repetitions >= 1")
    if np.asarray(control).size == 0 or np.asarray(treatment).size == 0:
        raise ConfigError("control and treatment need at least one observed value each")
    a = rng.choice(control, size=(repetitions, n_per_group))
    b = rng.choice(treatment, size=(repetitions, n_per_group))
    # Identical constant rows have no ranks to compare: p = 1 (no evidence of a difference).
    with np.errstate(invalid="ignore"):
        pvalue = stats.mannwhitneyu(a, b, alternative="two-sided", axis=1).pvalue
    return float(np.mean(np.nan_to_num(pvalue, nan=1.0) < alpha))


def required_sample_size(
    control: np.ndarray,
    treatment: np.ndarray,
    *,
    alpha: float = 0.05 / 6,
    power: float = 0.8,
    repetitions: int = 200,
    n_max: int = 1_000_000,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Smallest number of values per group at which :func:`mwu_power` reaches ``power``
    (found by doubling, then bisection on the simulated power curve; ``n`` is None when
    ``n_max`` does not suffice). Returns the curve it evaluated too."""
    if not 0 < power < 1:
        raise ConfigError(f"power must lie in (0, 1), got {power}")
    curve: dict[int, float] = {}

    def power_at(n: int) -> float:
        if n not in curve:
            curve[n] = mwu_power(
                control, treatment, n, alpha=alpha, repetitions=repetitions, rng=rng
            )
        return curve[n]

    hi = 8
    while power_at(hi) < power:
        if hi >= n_max:
            return {"n": None, "power": power_at(hi), "curve": _sorted(curve), "reached": False}
        hi = min(hi * 2, n_max)
    lo = max(hi // 2, 2)
    while hi - lo > max(1, lo // 50):
        mid = (lo + hi) // 2
        if power_at(mid) >= power:
            hi = mid
        else:
            lo = mid
    return {"n": hi, "power": power_at(hi), "curve": _sorted(curve), "reached": True}


def _sorted(curve: dict[int, float]) -> list[dict[str, float]]:
    return [{"n": n, "power": p} for n, p in sorted(curve.items())]


def seed_user_test(a: np.ndarray, b: np.ndarray, users: np.ndarray) -> dict[str, float]:
    """Is method ``a`` better than ``b`` beyond training randomness and user sampling?

    ``a`` and ``b`` are ``(S, Q)`` per-query values (e.g. AP) of two methods on the same
    ``Q`` queries, one row per training seed; seed ``s`` of ``a`` and of ``b`` share the
    seed (paired). ``users`` is ``(Q,)``: the user of every query. Queries that are NaN in
    either are left out. The difference of the means (over queries, as MAP) is
    ``diff = mean_s mean_q (a - b)``, with two sources of noise added:

    * **training randomness**: the variance over seeds of the per-seed difference,
      divided by ``S`` (``S - 1`` degrees of freedom; not estimable with one seed, then 0
      and reported as ``seed_se = nan``);
    * **user sampling**: the user-clustered (sandwich) variance of the seed-averaged
      differences -- queries of one user are correlated, so users, not queries, are the
      independent units (``U - 1`` degrees of freedom).

    ``se`` is the root of their sum, the degrees of freedom follow Welch-Satterthwaite,
    ``p`` is the two-sided t-test of ``diff = 0`` and ``ci95`` its 95% interval. The two
    parts count the query-level noise twice, so the test is slightly conservative.
    """
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    u = np.asarray(users)
    if a.shape != b.shape or u.shape != a.shape[1:]:
        raise ConfigError(
            f"a and b must be (seeds, queries) of one shape and users (queries,), got "
            f"{a.shape}, {b.shape} and {u.shape}"
        )
    ok = np.isfinite(a).all(axis=0) & np.isfinite(b).all(axis=0)
    d = (a - b)[:, ok]
    if d.shape[1] < 2:
        raise ConfigError("need at least two queries with values for both methods")
    n_seeds = d.shape[0]
    per_seed = d.mean(axis=1)
    diff = float(per_seed.mean())
    seed_var = float(per_seed.var(ddof=1) / n_seeds) if n_seeds > 1 else 0.0
    _, user_index = np.unique(u[ok], return_inverse=True)
    n_users = int(user_index.max()) + 1
    per_user = np.bincount(user_index, weights=d.mean(axis=0) - diff, minlength=n_users)
    n_q = d.shape[1]
    user_var = float((per_user**2).sum() / n_q**2 * n_users / max(n_users - 1, 1))
    se = float(np.sqrt(seed_var + user_var))
    parts = [(user_var, n_users - 1)] + ([(seed_var, n_seeds - 1)] if n_seeds > 1 else [])
    denominator = sum(v**2 / k for v, k in parts if k > 0 and v > 0)
    df = (seed_var + user_var) ** 2 / denominator if denominator > 0 else float(n_users - 1)
    t = diff / se if se > 0 else (0.0 if diff == 0 else np.inf * np.sign(diff))
    p = float(2.0 * stats.t.sf(abs(t), df)) if np.isfinite(t) else 0.0
    half = float(stats.t.ppf(0.975, df) * se)
    return {
        "diff": diff,
        "se": se,
        "seed_se": float(np.sqrt(seed_var)) if n_seeds > 1 else float("nan"),
        "user_se": float(np.sqrt(user_var)),
        "df": float(df),
        "t": float(t),
        "p": p,
        "ci95_low": diff - half,
        "ci95_high": diff + half,
        "seeds": n_seeds,
        "users": n_users,
        "queries": int(n_q),
    }
