"""Synthetic histories (Mozilla paper Sec. 6.1): invariants, distributions, determinism."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedrank.data.synthetic_history import (
    HistoryConfig,
    Population,
    Vocabulary,
    generate_population,
    population_from_titles,
)
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.history import NOT_COUNTED_TYPES, NUM_SAMPLED_VISITS, VisitType


@pytest.fixture(scope="module")
def population() -> Population:
    return generate_population(2000, np.random.default_rng(7))


def test_shapes_and_offsets(population: Population) -> None:
    pop = population
    n = pop.n_pages
    assert pop.n_users == 2000
    assert pop.user_offsets.shape == (2001,)
    assert pop.user_offsets[0] == 0 and pop.user_offsets[-1] == n
    assert (np.diff(pop.user_offsets) >= 1).all()  # every user has a page
    assert pop.page_user.shape == (n,)
    assert (np.diff(pop.page_user) >= 0).all()
    for u in (0, 17, 1999):
        pages = pop.pages_of(u)
        assert (pop.page_user[pages] == u).all()
        assert pages.size == pop.pages_per_user[u]
    assert pop.pages.visit_type.shape == (n, NUM_SAMPLED_VISITS)
    assert pop.title_words.shape == (n, 4)
    assert pop.title_words.dtype == np.int32
    # ~1 + Poisson(60) pages per user
    assert 59 < pop.pages_per_user.mean() < 63


def test_visits_are_the_most_recent_newest_first(population: Population) -> None:
    pages = population.pages
    mask = pages.visit_mask
    n_sampled = pages.n_sampled
    # real visits first in each row, then padding
    assert (mask == (np.arange(NUM_SAMPLED_VISITS)[None, :] < n_sampled[:, None])).all()
    # visit_count counts what Firefox counts: every type but EMBED, DOWNLOAD, FRAMED_LINK,
    # RELOAD, sampled or not
    counted = (mask & ~np.isin(pages.visit_type, NOT_COUNTED_TYPES)).sum(axis=1)
    assert (pages.visit_count >= counted).all()
    assert (pages.visit_count[n_sampled < NUM_SAMPLED_VISITS] == counted[
        n_sampled < NUM_SAMPLED_VISITS
    ]).all()  # fmt: skip
    ages = np.where(mask, pages.visit_age_days, 1e9)
    assert (np.diff(ages, axis=1)[mask[:, 1:]] >= 0).all()  # newest first
    real = pages.visit_age_days[mask]
    assert real.min() >= 0 and real.max() <= 365
    np.testing.assert_array_equal(real, np.floor(real))  # whole days, as Firefox stores them
    assert set(np.unique(pages.visit_type[mask])) <= {int(t) for t in VisitType}
    assert not pages.visit_redirect_target[~mask].any()
    assert set(np.unique(pages.visit_redirect_target)) <= {0, 5, 6}
    # an origin type only on redirect visits, never itself a redirect
    redirect = np.isin(pages.visit_type, (5, 6))
    assert not pages.visit_origin_type[~redirect].any()
    assert (pages.visit_origin_type[redirect] > 0).all()
    assert not np.isin(pages.visit_origin_type, (5, 6)).any()
    assert (pages.visit_type[~mask] == 0).all()


def test_distributions_match_config(population: Population) -> None:
    pages = population.pages
    visited = pages.n_sampled > 0
    # 1 + floor(Exp(scale 7)) visits, of which the counted types (all but 4, 7, 8, 9: 93%)
    expected_mean = (1 + 1 / np.expm1(1 / 7)) * 0.93
    assert abs(pages.visit_count[visited].mean() - expected_mean) < 0.15
    assert abs((~visited).mean() - 0.02) < 0.005
    assert (pages.bookmarked[~visited]).all()  # unvisited pages are bookmarks
    assert abs(pages.bookmarked[visited].mean() - 0.15) < 0.01
    mask = pages.visit_mask
    types = pages.visit_type[mask]
    cfg = HistoryConfig()
    for visit_type, share in cfg.visit_type_shares:
        assert abs((types == visit_type).mean() - share) < 0.01, visit_type
    assert abs((pages.visit_redirect_target[mask] > 0).mean() - 0.03) < 0.005
    # a page with a typed sampled visit is typed; unvisited pages are not
    assert pages.typed[(pages.visit_type == VisitType.TYPED).any(axis=1)].all()
    assert not pages.typed[~visited].any()
    # most recent visits are skewed towards recent days
    newest = pages.visit_age_days[visited, 0]
    assert np.median(newest) < 10


def test_visit_ages_are_order_statistics_of_exponentials() -> None:
    """Pages with one visit: the age is Exp(mean 25); the Renyi draw is exact."""
    cfg = HistoryConfig(visit_count_scale=1e-9, unvisited_bookmark_share=0.0)
    pop = generate_population(500, np.random.default_rng(3), cfg)
    assert (pop.pages.n_sampled == 1).all()
    ages = pop.pages.visit_age_days[:, 0]  # floor(Exp(mean 25)): mean 1 / (exp(1/25) - 1)
    assert abs(ages.mean() - 1 / np.expm1(1 / 25)) < 1.0
    assert abs(np.mean(ages < 4) - (1 - np.exp(-4 / 25))) < 0.01


def test_titles(population: Population) -> None:
    words = population.title_words
    has = words >= 0
    n_words = has.sum(axis=1)
    assert n_words.min() >= 1 and n_words.max() <= 4
    # left-aligned: padding only after the words
    assert (has == (np.arange(4)[None, :] < n_words[:, None])).all()
    assert words.max() < population.vocabulary.n_words
    # distinct words within a title
    for a in range(4):
        for b in range(a):
            assert not ((words[:, a] == words[:, b]) & has[:, a]).any()
    # Zipf-like: the most common words are shared by many titles, most words are rare
    counts = np.bincount(words[has], minlength=population.vocabulary.n_words)
    assert counts[:10].sum() > 20 * counts[-10:].sum()
    title = population.title(0)
    assert title == " ".join(population.vocabulary.words[w] for w in words[0, : n_words[0]])


def test_vocabulary_random_and_lcp() -> None:
    vocab = Vocabulary.random(3000, np.random.default_rng(1))
    words = vocab.words
    assert len(words) == len(set(words)) == 3000
    assert all(3 <= len(w) <= 10 and w.isalpha() and w.islower() for w in words)
    assert (vocab.lengths == [len(w) for w in words]).all()
    assert vocab.lcp.dtype == np.int8 and vocab.lcp.shape == (3000, 3000)
    assert (np.diag(vocab.lcp) == vocab.lengths).all()
    assert (vocab.lcp == vocab.lcp.T).all()
    rng = np.random.default_rng(2)
    for a, b in rng.integers(0, 3000, size=(3000, 2)):
        assert vocab.lcp[a, b] == len(os.path.commonprefix([words[a], words[b]]))
    padded = vocab.lcp_padded
    assert padded.shape == (3001, 3001)
    assert (padded[:3000, :3000] == vocab.lcp).all()
    assert not padded[3000].any() and not padded[:, 3000].any()


def test_vocabulary_from_words() -> None:
    vocab = Vocabulary.from_words(["car", "cart", "cat", "dog"])
    assert vocab.lcp[0, 1] == 3 and vocab.lcp[0, 2] == 2 and vocab.lcp[1, 3] == 0
    assert vocab.words == ("car", "cart", "cat", "dog")
    with pytest.raises(DataFormatError, match="distinct"):
        Vocabulary.from_words(["a", "a"])
    with pytest.raises(DataFormatError, match="without spaces"):
        Vocabulary.from_words(["a b"])


def test_same_seed_same_population() -> None:
    a = generate_population(300, np.random.default_rng(11))
    b = generate_population(300, np.random.default_rng(11))
    c = generate_population(300, np.random.default_rng(12))
    for name in (
        "visit_age_days",
        "visit_type",
        "visit_origin_type",
        "visit_redirect_target",
        "bookmark_age_days",
        "visit_count",
        "bookmarked",
        "typed",
    ):
        assert np.array_equal(getattr(a.pages, name), getattr(b.pages, name)), name
    assert np.array_equal(a.user_offsets, b.user_offsets)
    assert np.array_equal(a.title_words, b.title_words)
    assert np.array_equal(a.vocabulary.chars, b.vocabulary.chars)
    assert not np.array_equal(a.pages.visit_count[:50], c.pages.visit_count[:50])


def test_pages_of_users_flattening() -> None:
    pop = generate_population(50, np.random.default_rng(5))
    users = np.array([3, 3, 0, 49, 7])
    flat = pop.pages_of_users(users)
    expected = np.concatenate([pop.pages_of(u) for u in users])
    assert np.array_equal(flat.page, expected)
    assert np.array_equal(flat.owner, np.repeat(np.arange(5), pop.pages_per_user[users]))
    assert np.array_equal(flat.count, pop.pages_per_user[users])
    assert np.array_equal(flat.start, np.cumsum(flat.count) - flat.count)
    with pytest.raises(DataFormatError, match="outside"):
        pop.pages_of_users(np.array([50]))
    with pytest.raises(DataFormatError, match="integer"):
        pop.pages_of_users(np.array([1.0]))


def test_population_from_titles() -> None:
    pop = population_from_titles([["rust docs", "rust book"], ["news"]])
    assert pop.n_users == 2 and pop.n_pages == 3
    assert pop.title(1) == "rust book" and pop.title(2) == "news"
    assert list(pop.user_offsets) == [0, 2, 3]
    assert list(pop.page_user) == [0, 0, 1]
    with pytest.raises(DataFormatError, match="at least one word"):
        population_from_titles([[""]])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"visit_count_scale": 0.0}, "visit_count_scale"),
        ({"age_mean_days": -1.0}, "age_mean_days"),
        ({"mean_extra_pages": -1.0}, "mean_extra_pages"),
        ({"bookmarked_share": 1.5}, "bookmarked_share"),
        ({"unvisited_bookmark_share": 1.0}, "unvisited_bookmark_share"),
        ({"visit_type_shares": ((VisitType.LINK, 0.5),)}, "summing to 1"),
        ({"visit_type_shares": ((VisitType.LINK, 0.5), (VisitType.LINK, 0.5))}, "twice"),
        ({"visit_type_shares": ((0, 1.0),)}, "unknown visit types"),
        ({"title_length_shares": (0.5, 0.6)}, "title_length_shares"),
        ({"min_word_length": 5, "max_word_length": 3}, "word lengths"),
        ({"n_words": 10_000, "min_word_length": 2, "max_word_length": 2}, "too many"),
        ({"word_zipf_exponent": -1.0}, "zipf"),
    ],
)
def test_config_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        HistoryConfig(**kwargs)


def test_generate_population_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="n_users"):
        generate_population(0, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="Generator"):
        generate_population(3, np.random.RandomState(0))  # type: ignore[arg-type]
