"""Search intent: noisy true frecency, wanted page drawn proportionally (paper Sec. 6.1)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.data.synthetic_history import generate_population, population_from_titles
from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.intent import sample_intents, sample_targets


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


# --- sample_intents: the paper's selection rule applied to what the URL bar matches ---------


def test_first_letter_wants_the_best_page_of_the_cue_letter() -> None:
    # One user; letters: a-pages and b-pages. Whatever the cue, the wanted page is the best
    # page (by true score) with a word of that first letter.
    pop = population_from_titles([["apple", "avocado bread", "banana", "berry"]])
    scores = np.array([50.0, 10.0, 40.0, 5.0])
    rng = np.random.default_rng(3)
    users = np.zeros(2000, dtype=np.int64)
    targets, first_slot = sample_intents(pop, users, scores, rng, noise_var=0.0)
    # Cue "a" (apple, avocado) -> apple; cue "b" (bread, banana, berry) -> banana.
    assert set(np.unique(targets)) == {0, 2}
    words = pop.vocabulary.words
    typed_first = [words[pop.title_words[t, s]] for t, s in zip(targets, first_slot, strict=True)]
    assert {w[0] for w in typed_first} <= {"a", "b"}
    assert all(w in ("apple", "banana") for w in typed_first)
    # Cue letters come from cue pages drawn proportionally to the scores (105 total):
    # "a" from apple (50) and avocado's first word (10 * 1/2); "b" otherwise.
    share_a = np.mean(targets == 0)
    assert abs(share_a - 55 / 105) < 0.04


def test_topic_wants_the_best_page_with_the_cue_word_and_types_it_first() -> None:
    pop = population_from_titles([["rust docs", "rust book", "python docs"]])
    scores = np.array([10.0, 30.0, 20.0])
    targets, first_slot = sample_intents(
        pop, np.zeros(3000, dtype=np.int64), scores, np.random.default_rng(4), 0.0, "topic"
    )
    words = pop.vocabulary.words
    for t, s in zip(targets, first_slot, strict=True):
        assert words[pop.title_words[t, s]] in ("rust", "docs", "book", "python")
    # "docs" -> python docs (20 > 10); "rust" or "book" -> rust book; "python" -> python docs.
    assert set(np.unique(targets)) == {1, 2}
    assert (targets != 0).all()


def test_proportional_is_sample_targets_with_first_word_first() -> None:
    pop = population_from_titles([["a b", "c d"], ["e"]])
    scores = np.array([1.0, 2.0, 3.0])
    users = np.array([0, 1, 0, 0])
    t1, slot = sample_intents(pop, users, scores, np.random.default_rng(5), model="proportional")
    t2 = sample_targets(pop, users, scores, np.random.default_rng(5))
    assert np.array_equal(t1, t2) and (slot == 0).all()


@pytest.mark.parametrize("model", ["first-letter", "topic"])
def test_intents_are_own_pages_reproducible_and_typed_word_qualifies(model: str) -> None:
    pop = generate_population(40, np.random.default_rng(0))
    scores = np.random.default_rng(1).gamma(2.0, 100.0, size=pop.n_pages)
    users = np.random.default_rng(2).integers(0, 40, size=500)
    a = sample_intents(pop, users, scores, np.random.default_rng(9), model=model)
    b = sample_intents(pop, users, scores, np.random.default_rng(9), model=model)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    targets, first_slot = a
    assert (pop.page_user[targets] == users).all()
    n_words = (pop.title_words[targets] >= 0).sum(axis=1)
    assert ((first_slot >= 0) & (first_slot < n_words)).all()


def test_unknown_intent_model_is_refused() -> None:
    pop = population_from_titles([["a"]])
    with pytest.raises(ConfigError, match="intent model"):
        sample_intents(pop, np.array([0]), np.ones(1), np.random.default_rng(0), model="psychic")
