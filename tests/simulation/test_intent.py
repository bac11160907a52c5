"""Search intent: noisy true frecency, wanted page drawn proportionally (paper Sec. 6.1)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.data.browsing import Pages, Vocabulary
from fedrank.data.synthetic_history import generate_world
from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.frecency.intent import race_draws, sample_targets, typed_words


def pages_from_words(users: list[list[list[str]]]) -> Pages:
    """Pages of users from their words (the first word of a page: its host's name; a host
    per distinct first word of a user; the first page of a host is its root)."""
    vocab_words = sorted({w for user in users for page in user for w in page})
    index = {w: i for i, w in enumerate(vocab_words)}
    flat = [page for user in users for page in user]
    width = max(len(p) for p in flat)
    words = np.full((len(flat), width), -1, dtype=np.int32)
    host, is_root, seen = [], [], {}
    for i, page in enumerate(flat):
        words[i, : len(page)] = [index[w] for w in page]
    owner = [u for u, user in enumerate(users) for _ in user]
    for u, page in zip(owner, flat, strict=True):
        key = (u, page[0])
        is_root.append(key not in seen)
        seen.setdefault(key, len(seen))
        host.append(seen[key])
    return Pages(
        user_offsets=np.concatenate([[0], np.cumsum([len(u) for u in users])]),
        host=np.array(host, dtype=np.int64),
        is_root=np.array(is_root),
        words=words,
        n_url_words=np.ones(len(flat), dtype=np.int64),
        vocabulary=Vocabulary.from_words(vocab_words),
    )


def _population(pages_per_user: list[int]) -> Pages:
    return pages_from_words(
        [[[f"site{u}x{j}", "title"] for j in range(n)] for u, n in enumerate(pages_per_user)]
    )


def test_frequencies_proportional_to_scores_chi_square() -> None:
    pop = _population([4, 2, 5])
    scores = np.array([100.0, 200.0, 300.0, 400.0, 10.0, 30.0, 1.0, 2.0, 3.0, 4.0, 0.0])
    rng = np.random.default_rng(2024)
    for user in range(3):
        pages = np.arange(pop.user_offsets[user], pop.user_offsets[user + 1])
        users = np.full(60_000, user)
        targets = sample_targets(pop, users, scores, rng, noise_var=0.0)
        assert (pop.owner[targets] == user).all()
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
    pop = generate_world(300, np.random.default_rng(0)).pages
    scores = np.random.default_rng(1).exponential(100.0, pop.n_pages)
    rng_users = np.random.default_rng(9)
    users = rng_users.integers(0, 300, size=5000)
    a = sample_targets(pop, users, scores, np.random.default_rng(4))
    b = sample_targets(pop, users, scores, np.random.default_rng(4))
    assert np.array_equal(a, b)
    assert a.dtype == np.int64 and a.shape == (5000,)
    assert (pop.owner[a] == users).all()
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
    with pytest.raises(DataFormatError, match="user ids"):
        sample_targets(pop, np.array([2]), np.ones(4), rng)
    with pytest.raises(DataFormatError, match="no page that can be wanted"):
        sample_targets(pop, users, np.ones(4), rng, eligible=np.array([True, True, False, False]))


def test_eligible_pages_only() -> None:
    pop = _population([4])
    eligible = np.array([False, True, False, True])
    targets = sample_targets(
        pop, np.zeros(2000, dtype=np.int64), np.ones(4), np.random.default_rng(7),
        eligible=eligible,
    )  # fmt: skip
    assert set(np.unique(targets).tolist()) == {1, 3}


def test_typed_words_site_name_first_then_the_page_in_order() -> None:
    pop = pages_from_words([[["ebay", "motors", "cheap", "cars"], ["ebay"]]])
    v = pop.vocabulary.words
    rng = np.random.default_rng(0)
    typed = typed_words(pop, np.zeros(4000, dtype=np.int64), rng, host_share=0.7, max_words=3)
    first = np.array([v[w] for w in typed[:, 0]])
    # the site's name with probability 0.7 + 0.3 * 0 (another word is drawn otherwise)
    assert np.mean(first == "ebay") == pytest.approx(0.7, abs=0.03)
    for row in typed[:50]:
        words = [v[w] for w in row]
        if words[0] == "ebay":
            assert words == ["ebay", "motors", "cheap"]
        else:
            rest = [w for w in ["ebay", "motors", "cheap", "cars"] if w != words[0]]
            assert words == [words[0], *rest[:2]]
    # a one-word page is typed as its name, padded
    one = typed_words(pop, np.array([1, 1]), rng, host_share=0.0, max_words=3)
    assert [[v[w] for w in row if w >= 0] for row in one] == [["ebay"], ["ebay"]]
    assert (one[:, 1:] == -1).all()
    with pytest.raises(ConfigError):
        typed_words(pop, np.array([0]), rng, host_share=1.5)


def test_kept_candidates_give_the_draws_of_the_eligible_mask() -> None:
    """A caller's kept candidates (the eligible pages ascending, each user's start among
    them) give the same targets and leave the generator where ``eligible`` does."""
    pop = _population([5, 3, 6])
    eligible = np.array([1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1], dtype=bool)
    kept = np.flatnonzero(eligible)
    candidates = (kept, np.searchsorted(kept, pop.user_offsets))
    users = np.random.default_rng(1).integers(0, 3, size=300)
    scores = np.random.default_rng(2).exponential(20.0, size=pop.n_pages)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    by_mask = sample_targets(pop, users, scores, a, eligible=eligible)
    by_kept = sample_targets(pop, users, scores, b, candidates=candidates)
    np.testing.assert_array_equal(by_mask, by_kept)
    assert a.random() == b.random()


def test_bad_candidates_are_refused_before_the_compiled_race_reads_them() -> None:
    """The compiled race checks no bounds: offsets that would read outside the kept pages
    are refused before it, pages of another user (outside the scores) or NaN scores by it
    before it reads them, each with what is wrong."""
    pop = _population([2, 2])
    users, scores, rng = np.array([0, 1]), np.ones(4), np.random.default_rng(0)
    cases = [
        ((np.array([0, 1, 2, 3]), np.array([0, 2])), "integer offsets"),  # U offsets
        ((np.array([0.0, 1.0, 2.0, 3.0]), np.array([0, 2, 4])), "integer"),
        ((np.array([0, 1, 2, 3]), np.array([0, 2, 9])), "non-decreasing within 0..4"),
        ((np.array([0, 1, 2, 3]), np.array([0, 3, 2])), "non-decreasing"),
        ((np.array([0, 1, 2, 99]), np.array([0, 2, 4])), "not the searching user's"),
        ((np.array([0, 2, 1, 3]), np.array([0, 2, 4])), "not the searching user's"),
    ]
    for candidates, message in cases:
        with pytest.raises(DataFormatError, match=message):
            sample_targets(pop, users, scores, rng, candidates=candidates)
    with pytest.raises(DataFormatError, match="NaN"):
        sample_targets(
            pop, users, np.array([1.0, 1.0, np.nan, 1.0]), rng,
            candidates=(np.array([0, 1, 2, 3]), np.array([0, 2, 4])),
        )  # fmt: skip


@pytest.mark.parametrize("noise_var", [30.0, 0.0])
def test_draws_made_ahead_give_the_same_targets(noise_var: float) -> None:
    """The race's draws made ahead with ``race_draws`` (as the world makes them on a
    helper thread) give the targets and generator state of drawing inside
    ``sample_targets``, users whose every utility is <= 0 included; draws of another size
    are refused."""
    pop = _population([5, 3, 6])
    users = np.random.default_rng(1).integers(0, 3, size=300)
    scores = np.random.default_rng(2).exponential(20.0, size=pop.n_pages)
    scores[5:8] = -50.0  # user 1: every utility <= 0 (uniform, from the generator)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    inside = sample_targets(pop, users, scores, a, noise_var)
    n = int(np.diff(pop.user_offsets)[users].sum())
    ahead = sample_targets(pop, users, scores, b, noise_var, draws=race_draws(b, n, noise_var))
    np.testing.assert_array_equal(inside, ahead)
    assert (users == 1).any() and a.random() == b.random()
    with pytest.raises(DataFormatError, match="draws must be race_draws"):
        sample_targets(pop, users, scores, b, noise_var, draws=race_draws(b, n - 1, noise_var))
    with pytest.raises(ConfigError, match="noise_var"):
        race_draws(b, n, -1.0)
