"""Search intent: noisy true frecency, wanted page drawn proportionally (paper Sec. 6.1)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.data.synthetic_history import generate_population, population_from_titles
from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.intent import sample_targets


def _population(pages_per_user: list[int]):
    return population_from_titles(
        [[f"page{u}x{j}" for j in range(n)] for u, n in enumerate(pages_per_user)]
    )


def test_frequencies_proportional_to_scores_chi_square() -> None:
    pop = _population([4, 2, 5])
    scores = np.array([100.0, 200.0, 300.0, 400.0, 10.0, 30.0, 1.0, 2.0, 3.0, 4.0, 0.0])
    rng = np.random.default_rng(2024)
    for user in range(3):
        pages = pop.pages_of(user)
        users = np.full(60_000, user)
        targets = sample_targets(pop, users, scores, rng, noise_var=0.0)
        assert (pop.page_user[targets] == user).all()
        observed = np.bincount(targets - pages[0], minlength=pages.size)
        p = scores[pages] / scores[pages].sum()
        positive = p > 0
        assert observed[~positive].sum() == 0  # zero-score pages are never wanted
        chi = stats.chisquare(observed[positive], 60_000 * p[positive])
        assert chi.pvalue > 1e-3, (user, observed, p)


def test_noise_keeps_frequencies_close_to_proportional() -> None:
    pop = _population([3])
    scores = np.array([100.0, 300.0, 600.0])
    targets = sample_targets(
        pop, np.zeros(100_000, dtype=np.int64), scores, np.random.default_rng(5), noise_var=30.0
    )
    freq = np.bincount(targets, minlength=3) / targets.size
    assert np.allclose(freq, scores / scores.sum(), atol=0.01)


def test_noise_matters_for_small_scores() -> None:
    """sigma^2 = 30: a zero-score page gets a positive utility half of the time and is then
    chosen; otherwise every utility is <= 0 and the choice is uniform: P = 1/2 + 1/4."""
    pop = _population([2])
    scores = np.array([0.0, -1e6])
    targets = sample_targets(
        pop, np.zeros(40_000, dtype=np.int64), scores, np.random.default_rng(1), noise_var=30.0
    )
    assert abs(np.mean(targets == 0) - 0.75) < 0.01


def test_all_nonpositive_is_uniform() -> None:
    pop = _population([5, 1])
    scores = np.full(6, -1000.0)
    users = np.zeros(50_000, dtype=np.int64)
    targets = sample_targets(pop, users, scores, np.random.default_rng(3))
    observed = np.bincount(targets, minlength=5)[:5]
    assert stats.chisquare(observed).pvalue > 1e-3
    single = sample_targets(pop, np.ones(10, dtype=np.int64), scores, np.random.default_rng(3))
    assert (single == 5).all()


def test_mixed_users_vectorized_and_deterministic() -> None:
    pop = generate_population(300, np.random.default_rng(0))
    scores = pop.pages.visit_count * 50.0
    rng_users = np.random.default_rng(9)
    users = rng_users.integers(0, 300, size=5000)
    a = sample_targets(pop, users, scores, np.random.default_rng(4))
    b = sample_targets(pop, users, scores, np.random.default_rng(4))
    assert np.array_equal(a, b)
    assert a.dtype == np.int64 and a.shape == (5000,)
    assert (pop.page_user[a] == users).all()
    # frecent pages are wanted more often
    assert scores[a].mean() > scores.mean() * 1.5


def test_empty_batch() -> None:
    pop = _population([2])
    out = sample_targets(pop, np.zeros(0, dtype=np.int64), np.ones(2), np.random.default_rng(0))
    assert out.shape == (0,)


def test_bad_input() -> None:
    pop = _population([2, 2])
    rng = np.random.default_rng(0)
    users = np.array([0, 1])
    with pytest.raises(DataFormatError, match="true_scores has shape"):
        sample_targets(pop, users, np.ones(3), rng)
    with pytest.raises(DataFormatError, match="NaN"):
        sample_targets(pop, users, np.array([1.0, np.nan, 1.0, 1.0]), rng)
    with pytest.raises(ConfigError, match="noise_var"):
        sample_targets(pop, users, np.ones(4), rng, noise_var=-1.0)
    with pytest.raises(DataFormatError, match="outside"):
        sample_targets(pop, np.array([2]), np.ones(4), rng)
