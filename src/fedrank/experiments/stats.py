"""Hypothesis tests and power analysis for the A/B study (Mozilla paper, Section 6.2-6.3).

The study compares branches with two-sided Mann-Whitney U tests; with three branches and two
metrics there are six comparisons, so the paper uses a Bonferroni-corrected level
``alpha = 0.05 / 6``. The power analysis answers, by simulation, how many users per branch
are needed to detect a given shift of a metric with that test (blog, "Power Analysis").

Searches of one user are correlated (the intra-user correlation of the simulated metrics is
about 0.11), so a test that treats every search as independent overstates significance:
users, not searches, are the randomized and independent units. :func:`compare_branches_by_user`
tests per-user means (reporting the pooled per-search test only as a secondary figure),
:func:`intra_user_correlation` measures the clustering, and :func:`user_mwu_power` /
:func:`required_users` size the study in users. :func:`compare_branches`, :func:`mwu_power`
and :func:`required_sample_size` are the older per-search versions, kept for their callers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from itertools import combinations
from typing import Any, NamedTuple

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

METRICS: tuple[str, ...] = ("chars_typed", "selected_rank")

# Sample-size search of required_sample_size / required_users: first n tried, and the
# bisection stops once the bracket is within 2% of n (simulated power is noisy anyway).
_SEARCH_START = 8
_SEARCH_REL_TOL = 0.02
# Largest number of resampled values held in memory at once; bigger draws run in row blocks.
_MAX_CELLS = 1 << 22


def compare_branches(
    samples: dict[str, dict[str, np.ndarray]], alpha: float = 0.05
) -> list[dict[str, Any]]:
    """Two-sided Mann-Whitney U tests of every metric between every pair of branches,
    judged at the Bonferroni level ``alpha / number_of_tests``.

    ``samples[branch][metric]`` holds per-search values. Pairs keep the order of
    ``samples`` (so ``treatment`` comes first when it is listed first).
    """
    from scipy import stats  # imported on use: the CLI starts faster

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
    return _resampled_mwu_power(control, treatment, n_per_group, alpha, repetitions, rng)


def _resampled_mwu_power(
    a: np.ndarray,
    b: np.ndarray,
    n: int,
    alpha: float,
    repetitions: int,
    rng: np.random.Generator,
) -> float:
    """Share of ``repetitions`` two-sided MWU tests, each on ``n`` values drawn with
    replacement from ``a`` and ``n`` from ``b``, with p < ``alpha``.

    All repetitions are drawn as one ``(repetitions, n)`` matrix per group and tested along
    axis 1; only when that exceeds ``_MAX_CELLS`` values do they run in blocks of rows."""
    from scipy import stats  # imported on use: the CLI starts faster

    rows = max(1, _MAX_CELLS // n)
    rejected = 0
    for first in range(0, repetitions, rows):
        size = (min(rows, repetitions - first), n)
        x = rng.choice(a, size=size)
        y = rng.choice(b, size=size)
        # Identical constant rows have no ranks to compare: p = 1 (no evidence of a difference).
        with np.errstate(invalid="ignore"):
            pvalue = stats.mannwhitneyu(x, y, alternative="two-sided", axis=1).pvalue
        rejected += int(np.count_nonzero(np.nan_to_num(pvalue, nan=1.0) < alpha))
    return rejected / repetitions


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
    ``n_max`` does not suffice). Returns the curve it evaluated too.

    This resamples *searches*; searches of one user are correlated, so prefer
    :func:`required_users`, which resamples users."""
    if not 0 < power < 1:
        raise ConfigError(f"power must lie in (0, 1), got {power}")
    return smallest_n(
        lambda n: mwu_power(control, treatment, n, alpha=alpha, repetitions=repetitions, rng=rng),
        power,
        2,
        n_max,
        start=_SEARCH_START,
        rel_tol=_SEARCH_REL_TOL,
    )


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
    from scipy import stats  # imported on use: the CLI starts faster

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


# ------------------------------------------------------------------ user-level analysis


def _searches(values: Any, users: Any, what: str = "values") -> tuple[np.ndarray, np.ndarray]:
    """``values`` as float64 and ``users`` as an array, checked to be one entry per search."""
    x = np.asarray(values, dtype=np.float64)
    u = np.asarray(users)
    if x.ndim != 1 or u.shape != x.shape:
        raise DataFormatError(
            f"{what} and users must be 1-D arrays of one length (one entry per search), got "
            f"shapes {x.shape} and {u.shape}"
        )
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise DataFormatError(
            f"{what} has {bad} non-finite entries (NaN or inf); drop searches without a "
            "value before testing"
        )
    return x, u


def _group(users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted distinct user ids, the index of each search's user among them, and counts."""
    ids, index, counts = np.unique(users, return_inverse=True, return_counts=True)
    return ids, index.reshape(-1), counts


def per_user_means(values: Any, users: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of a per-search metric for every user: the user-level observations (Sec. 6.3).

    ``values[i]`` is the metric (e.g. ``chars_typed``) of search ``i`` and ``users[i]`` the
    id of the user who made it (any sortable ids, e.g. ints or strings). Returns
    ``(user_ids, means, counts)``: the sorted distinct ids, each user's mean value and each
    user's number of searches. Empty input gives three empty arrays.

    >>> ids, means, counts = per_user_means([1.0, 3.0, 10.0], [7, 7, 2])
    >>> ids.tolist(), means.tolist(), counts.tolist()
    ([2, 7], [10.0, 2.0], [1, 2])
    """
    x, u = _searches(values, users)
    ids, index, counts = _group(u)
    sums = np.bincount(index, weights=x, minlength=ids.size)
    return ids, sums / np.maximum(counts, 1), counts


def intra_user_correlation(values: Any, users: Any) -> float:
    """Intra-user (intra-class) correlation of a per-search metric: ICC(1) of a one-way
    random-effects ANOVA with users as groups, for unbalanced group sizes.

    With ``k`` users, user ``i`` having ``n_i`` searches ``y_ij`` with mean ``m_i``,
    ``N = sum n_i`` searches and grand mean ``m``::

        MSB  = sum_i n_i (m_i - m)^2 / (k - 1)          (between users)
        MSW  = sum_ij (y_ij - m_i)^2 / (N - k)           (within users)
        n0   = (N - sum_i n_i^2 / N) / (k - 1)           (effective searches per user)
        ICC1 = (MSB - MSW) / (MSB + (n0 - 1) MSW)

    It estimates ``var(user effect) / (var(user effect) + var(search noise))``: 0 for
    independent searches, 1 when every user repeats one value. It is the reason the study
    analysis tests per-user means (design effect ``1 + (n0 - 1) ICC1`` on the variance of
    a per-search mean); the simulated metrics have about 0.11. The estimate is consistent,
    not clipped, and can be negative (down to ``-1 / (n0 - 1)``) when users are more alike
    than chance.

    Returns NaN when all values are equal (between and within variance are both 0, so the
    ratio is undefined). Raises :class:`ConfigError` with fewer than 2 users, or when no
    user has 2 searches (within-user variance cannot be estimated).

    >>> round(intra_user_correlation([1.0, 3.0, 5.0, 7.0], [0, 0, 1, 1]), 6)  # 14 / 18
    0.777778
    """
    x, u = _searches(values, users)
    ids, index, counts = _group(u)
    k, n = ids.size, x.size
    if k < 2:
        raise ConfigError(
            f"intra-user correlation needs searches of at least 2 users, got {k}; pass "
            "the searches of all users of a branch"
        )
    if n == k:
        raise ConfigError(
            "intra-user correlation needs at least one user with 2 or more searches (every "
            "user has one, so within-user variance cannot be estimated)"
        )
    if np.ptp(x) == 0:
        return float("nan")
    x = x - x.mean()  # centred: the sums of squares below lose no precision to the mean
    means = np.bincount(index, weights=x, minlength=k) / counts
    msb = float(np.sum(counts * means**2) / (k - 1))
    msw = float(np.sum((x - means[index]) ** 2) / (n - k))
    n0 = (n - float(np.sum(counts.astype(np.float64) ** 2)) / n) / (k - 1)
    return (msb - msw) / (msb + (n0 - 1.0) * msw)


class _Branch(NamedTuple):
    """Per-user summary of one branch: search values, per-user means, bootstrap means."""

    n_users: int
    n_searches: int
    values: dict[str, np.ndarray]
    means: dict[str, np.ndarray]
    boot: dict[str, np.ndarray]


def _bootstrap_means(means: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_metrics, n_boot)`` means of the rows of ``means`` (``(n_metrics, n_users)``) over
    users resampled with replacement; one ``(n_boot, n_users)`` index matrix (in row blocks
    only above ``_MAX_CELLS`` entries), shared by the metrics so a draw resamples users."""
    n_users = means.shape[1]
    out = np.empty((means.shape[0], n_boot))
    rows = max(1, _MAX_CELLS // n_users)
    for first in range(0, n_boot, rows):
        idx = rng.integers(0, n_users, size=(min(rows, n_boot - first), n_users))
        out[:, first : first + idx.shape[0]] = means[:, idx].mean(axis=2)
    return out


def _branch(name: str, branch: Mapping[str, Any], n_boot: int, rng: np.random.Generator) -> _Branch:
    missing = [key for key in ("user", *METRICS) if key not in branch]
    if missing:
        raise DataFormatError(
            f"branch {name!r} lacks {missing}; every branch needs the arrays 'user', "
            + ", ".join(repr(m) for m in METRICS)
            + " with one entry per search"
        )
    values = {m: _searches(branch[m], branch["user"], f"branch {name!r} {m}")[0] for m in METRICS}
    users = np.asarray(branch["user"])
    if users.size == 0:
        raise ConfigError(f"branch {name!r} has no searches; drop it or give it data")
    ids, index, counts = _group(users)
    if ids.size < 2:
        raise ConfigError(
            f"branch {name!r} has searches of {ids.size} user; the user-level test needs at "
            "least 2 users per branch"
        )
    means = {m: np.bincount(index, weights=values[m], minlength=ids.size) / counts for m in METRICS}
    boot = _bootstrap_means(np.stack([means[m] for m in METRICS]), n_boot, rng)
    return _Branch(
        int(ids.size), int(users.size), values, means, dict(zip(METRICS, boot, strict=True))
    )


def compare_branches_by_user(
    samples: Mapping[str, Mapping[str, Any]],
    *,
    alpha: float = 0.05,
    n_boot: int = 2000,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Compare branches with users as the unit of analysis (Sec. 6.3, Table 5).

    ``samples[branch]`` holds per-search arrays of one length: ``user`` (the user id of
    each search), ``chars_typed`` and ``selected_rank``. For every metric in
    :data:`METRICS` and every pair of branches (in the order of ``samples``), the primary
    test is a two-sided Mann-Whitney U test on the **per-user means**: users are the
    randomized, independent units, while searches of one user are correlated, so a test
    on pooled searches overstates significance (its p-value is reported only as the
    secondary ``pooled_pvalue``). Each test is judged at the Bonferroni level
    ``alpha / (pairs * metrics)`` (the paper's ``0.05 / 6`` for three branches).

    Each row has: ``metric``, ``a``, ``b``, ``unit`` (``"user"``), ``n_users_a/b``,
    ``n_searches_a/b``; ``mean_a/b`` (mean of the per-user means), ``diff``
    (``mean_a - mean_b``) and ``diff_ci95`` (``[low, high]``, percentile bootstrap with
    ``n_boot`` draws resampling users with replacement within each branch);
    ``statistic`` (scipy's U of ``a``: pairs of users with ``a`` above ``b``, ties half)
    and ``rank_biserial = 2 U / (n_users_a n_users_b) - 1 = P(a > b) - P(a < b)`` in
    [-1, 1], positive when ``a``'s users have larger values (the sign of ``diff``);
    ``pvalue``, ``alpha`` (the Bonferroni level), ``significant`` (``pvalue < alpha``);
    ``pooled_pvalue`` (MWU on all searches) and ``search_mean_a/b`` (means over searches,
    the figures of the paper's Table 5).

    Raises :class:`ConfigError` for fewer than 2 branches, a branch without searches or
    with fewer than 2 users, ``alpha`` outside (0, 1) or ``n_boot < 1``, and
    :class:`DataFormatError` for missing arrays, mismatched lengths or non-finite values.
    """
    from scipy import stats  # imported on use: the CLI starts faster

    if not 0 < alpha < 1:
        raise ConfigError(
            f"alpha must lie in (0, 1), got {alpha}",
            field="alpha",
            requirement=f"must lie in (0, 1), got {alpha}",
            value=alpha,
        )
    if n_boot < 1:
        raise ConfigError(f"n_boot must be >= 1 bootstrap draws (2000 is usual), got {n_boot}")
    names = list(samples)
    if len(names) < 2:
        raise ConfigError(f"need at least two branches to compare, got {names}")
    branches = {name: _branch(name, samples[name], n_boot, rng) for name in names}
    pairs = list(combinations(names, 2))
    level = alpha / (len(pairs) * len(METRICS))
    rows = []
    for metric in METRICS:
        for a, b in pairs:
            ba, bb = branches[a], branches[b]
            x, y = ba.means[metric], bb.means[metric]
            res = stats.mannwhitneyu(x, y, alternative="two-sided")
            pvalue = float(np.nan_to_num(res.pvalue, nan=1.0))
            pooled = stats.mannwhitneyu(
                ba.values[metric], bb.values[metric], alternative="two-sided"
            )
            low, high = np.quantile(ba.boot[metric] - bb.boot[metric], [0.025, 0.975])
            rows.append(
                {
                    "metric": metric,
                    "a": a,
                    "b": b,
                    "unit": "user",
                    "n_users_a": ba.n_users,
                    "n_users_b": bb.n_users,
                    "n_searches_a": ba.n_searches,
                    "n_searches_b": bb.n_searches,
                    "mean_a": float(x.mean()),
                    "mean_b": float(y.mean()),
                    "diff": float(x.mean() - y.mean()),
                    "diff_ci95": [float(low), float(high)],
                    "rank_biserial": float(2.0 * res.statistic / (x.size * y.size) - 1.0),
                    "statistic": float(res.statistic),
                    "pvalue": pvalue,
                    "alpha": level,
                    "significant": bool(pvalue < level),
                    "pooled_pvalue": float(np.nan_to_num(pooled.pvalue, nan=1.0)),
                    "search_mean_a": float(ba.values[metric].mean()),
                    "search_mean_b": float(bb.values[metric].mean()),
                }
            )
    return rows


def _per_user_sample(values: Any, what: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise DataFormatError(f"{what} must be a 1-D array of per-user means, got shape {x.shape}")
    if x.size == 0:
        raise ConfigError(f"{what} is empty; pass the per-user means of a pilot or simulation")
    if not np.isfinite(x).all():
        raise DataFormatError(f"{what} has NaN or inf entries; drop those users first")
    return x


def user_mwu_power(
    per_user_a: Any,
    per_user_b: Any,
    n_users: int,
    *,
    alpha: float,
    repetitions: int,
    rng: np.random.Generator,
) -> float:
    """Power of the user-level test of :func:`compare_branches_by_user` with ``n_users``
    users per branch, by simulation (Sec. 6.2; blog, "Power Analysis").

    ``per_user_a`` and ``per_user_b`` are per-user means of a metric (see
    :func:`per_user_means`), e.g. from a pilot or the simulation. Every repetition draws
    ``n_users`` of them from each branch's empirical distribution with replacement (all
    repetitions as one ``(repetitions, n_users)`` matrix, tested along axis 1); power is
    the share of two-sided MWU tests with p < ``alpha`` (the paper's ``0.05 / 6``).
    Constant rows that cannot be ranked count as p = 1. For a location shift ``effect``
    pass ``per_user_b = per_user_a + effect``.
    """
    a = _per_user_sample(per_user_a, "per_user_a")
    b = _per_user_sample(per_user_b, "per_user_b")
    if n_users < 2:
        raise ConfigError(f"n_users must be >= 2 per branch, got {n_users}")
    if repetitions < 1:
        raise ConfigError(f"repetitions must be >= 1, got {repetitions}")
    if not 0 < alpha < 1:
        raise ConfigError(
            f"alpha must lie in (0, 1), got {alpha}",
            field="alpha",
            requirement=f"must lie in (0, 1), got {alpha}",
            value=alpha,
        )
    return _resampled_mwu_power(a, b, int(n_users), alpha, int(repetitions), rng)


def required_users(
    per_user_a: Any,
    per_user_b: Any,
    *,
    alpha: float = 0.05 / 6,
    power: float = 0.8,
    repetitions: int = 200,
    n_max: int = 1_000_000,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Smallest number of users per branch at which :func:`user_mwu_power` reaches
    ``power`` at the Bonferroni level ``alpha`` (paper Sec. 6.2: the rank metric, MWU,
    ``0.05 / 6``).

    The search is :func:`smallest_n` as in :func:`required_sample_size`: n = 8, 16, 32, ...
    until the simulated power reaches ``power``, then bisection until the bracket is within
    2% of n. Returns ``{"n", "power", "curve", "reached"}``: ``n`` is None and
    ``reached`` False when ``n_max`` users do not suffice; ``curve`` lists every
    ``{"n", "power"}`` evaluated.
    """
    if not 0 < power < 1:
        raise ConfigError(f"power must lie in (0, 1), got {power}")
    a = _per_user_sample(per_user_a, "per_user_a")
    b = _per_user_sample(per_user_b, "per_user_b")
    return smallest_n(
        lambda n: user_mwu_power(a, b, n, alpha=alpha, repetitions=repetitions, rng=rng),
        power,
        2,
        n_max,
        start=_SEARCH_START,
        rel_tol=_SEARCH_REL_TOL,
    )


def smallest_n(
    power_at: Callable[[int], float],
    target: float,
    n_min: int,
    n_max: int,
    *,
    start: int | None = None,
    rel_tol: float = 0.0,
) -> dict[str, Any]:
    """Smallest ``n`` in ``[n_min, n_max]`` with ``power_at(n) >= target``, for a power
    curve that grows with ``n`` (blog, "Power Analysis").

    ``power_at`` may be a cheap resampling estimate (:func:`required_users`) or an
    expensive one, e.g. the share of whole simulated studies with ``n`` users whose
    trained model beats the baseline (the *training* part of the power analysis); each
    ``n`` is evaluated once. The search doubles ``n`` from ``start`` (default ``n_min``;
    capped at ``n_max``) until the target is reached, then bisects between the last ``n``
    that fell short (or ``n_min - 1``) and the first that reached it, until the bracket is
    at most ``max(1, floor(rel_tol * low))`` wide. With ``rel_tol = 0`` and a monotone
    ``power_at`` the answer is exact, after ``O(log(n / n_min))`` evaluations; for a noisy
    simulated curve it is a point where the estimate crosses ``target``.

    Returns ``{"n", "power", "curve", "reached"}``: ``n`` and its power, or ``None`` and
    the power at ``n_max`` with ``reached = False`` when even ``n_max`` falls short;
    ``curve`` lists every evaluated ``{"n", "power"}`` sorted by ``n``.

    >>> smallest_n(lambda n: n / 100, 0.37, 1, 1000)["n"]
    37
    """
    if not 0 < target <= 1:
        raise ConfigError(f"target power must lie in (0, 1], got {target}")
    if n_min < 1 or n_max < n_min:
        raise ConfigError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    if not 0 <= rel_tol < 1:
        raise ConfigError(f"rel_tol must lie in [0, 1), got {rel_tol}")
    if start is not None and start < n_min:
        raise ConfigError(f"start must be >= n_min={n_min}, got {start}")
    curve: dict[int, float] = {}

    def at(n: int) -> float:
        if n not in curve:
            value = float(power_at(n))
            if not math.isfinite(value):
                raise ConfigError(f"power_at({n}) returned {value}; it must return a number")
            curve[n] = value
        return curve[n]

    lo, hi = int(n_min) - 1, min(int(n_min if start is None else start), int(n_max))
    while at(hi) < target:
        if hi >= n_max:
            return {"n": None, "power": at(hi), "curve": _sorted(curve), "reached": False}
        lo, hi = hi, min(hi * 2, int(n_max))
    while hi - lo > max(1, math.floor(lo * rel_tol + 1e-9)):
        mid = (lo + hi) // 2
        if at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return {"n": hi, "power": at(hi), "curve": _sorted(curve), "reached": True}
