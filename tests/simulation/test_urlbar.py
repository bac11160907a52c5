"""URL bar simulation: typing, binary word-prefix matching, ranking, selection (paper Sec. 4,
6.2), against hand-worked cases and a slow per-search reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrank.data.synthetic_history import (
    HistoryConfig,
    Population,
    generate_population,
    population_from_titles,
)
from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.intent import sample_targets
from fedrank.simulation.urlbar import SearchBatch, simulate_searches


def _search(pop: Population, user: int, target: int, scores, **kw) -> SearchBatch:
    return simulate_searches(
        pop, np.array([user]), np.array([target]), np.asarray(scores, dtype=float), **kw
    )


def reference_search(
    pop: Population,
    user: int,
    target: int,
    scores: np.ndarray,
    k: int,
    depth: int,
    first_slot: int = 0,
) -> tuple[int, int, list[int], bool, int]:
    """Slow, string-based URL bar: type the title (word ``first_slot`` first), re-match and
    re-rank after each key."""
    words = pop.title(target).split(" ")
    title = " ".join([words[first_slot]] + words[:first_slot] + words[first_slot + 1 :])
    pages = [int(p) for p in pop.pages_of(user)]
    titles = {p: pop.title(p).split(" ") for p in pages}
    ranked: list[int] = []
    rank = -1
    for c in range(1, len(title) + 1):
        tokens = title[:c].split()
        matched = [p for p in pages if all(any(w.startswith(t) for w in titles[p]) for t in tokens)]
        ranked = sorted(matched, key=lambda p: (-scores[p], p))
        rank = ranked.index(target)
        if rank < depth:
            return c, rank, ranked[:k], True, len(ranked)
    return len(title), rank, ranked[:k], False, len(ranked)


def _check_against_reference(
    pop: Population, users, targets, scores, k: int, depth: int | None, first_slot=None
) -> SearchBatch:
    batch = simulate_searches(
        pop, users, targets, scores, k=k, attention_depth=depth, first_slot=first_slot
    )
    for s in range(users.size):
        chars, rank, shown, found, n_matched = reference_search(
            pop,
            int(users[s]),
            int(targets[s]),
            scores,
            k,
            depth or k,
            0 if first_slot is None else int(first_slot[s]),
        )
        assert batch.chars_typed[s] == chars, s
        assert batch.selected_rank[s] == rank, s
        assert batch.found[s] == found, s
        assert batch.n_shown[s] == min(k, n_matched), s
        assert list(batch.shown[s, : batch.n_shown[s]]) == shown, s
        assert (batch.shown[s, batch.n_shown[s] :] == -1).all(), s
    return batch


def test_top_scored_target_needs_one_character() -> None:
    pop = population_from_titles([["apple pie", "banana", "avocado toast"]])
    batch = _search(pop, 0, 0, [3.0, 2.0, 1.0])
    assert batch.chars_typed[0] == 1 and batch.selected_rank[0] == 0 and batch.found[0]
    # "a" matches "apple pie" and "avocado toast" (words starting with a), not "banana"
    assert list(batch.shown[0]) == [0, 2] + [-1] * 8
    assert batch.n_shown[0] == 2


def test_competitor_sharing_the_first_word() -> None:
    pop = population_from_titles([["rust docs", "rust book"]])
    scores = [1.0, 5.0]  # the competitor outranks the target
    # Scanning only the first suggestion: "rust book" stays first until "rust d".
    batch = _search(pop, 0, 0, scores, attention_depth=1)
    assert batch.chars_typed[0] == len("rust d")
    assert batch.selected_rank[0] == 0
    assert list(batch.shown[0, :2]) == [0, -1]
    # Scanning two suggestions: selected right away, at rank 1.
    batch = _search(pop, 0, 0, scores, attention_depth=2)
    assert batch.chars_typed[0] == 1 and batch.selected_rank[0] == 1
    assert list(batch.shown[0, :3]) == [1, 0, -1]


def test_ties_go_to_the_lower_page_id() -> None:
    pop = population_from_titles([["cat", "car"]])
    first = _search(pop, 0, 0, [5.0, 5.0], attention_depth=1)
    assert first.chars_typed[0] == 1 and first.selected_rank[0] == 0
    second = _search(pop, 0, 1, [5.0, 5.0], attention_depth=1)
    assert second.chars_typed[0] == 3 and second.selected_rank[0] == 0  # "car" drops "cat"


def test_tokens_match_any_word_and_whole_words_match_longer_words() -> None:
    pop = population_from_titles([["new york times", "york new", "car", "cart shop"]])
    scores = [1.0, 9.0, 1.0, 9.0]
    batch = _search(pop, 0, 0, scores, attention_depth=1)
    assert batch.chars_typed[0] == len("new york t")
    # "car" is a prefix of "cart": the better "cart shop" always matches too.
    batch = _search(pop, 0, 2, scores, attention_depth=1)
    assert not batch.found[0]
    assert batch.chars_typed[0] == 3 and batch.selected_rank[0] == 1
    assert list(batch.shown[0, :3]) == [3, 2, -1]


def test_only_the_users_own_pages_compete() -> None:
    pop = population_from_titles([["alpha", "beta"], ["alpha beta", "alpine"]])
    scores = [1.0, 1.0, 100.0, 100.0]
    batch = simulate_searches(
        pop, np.array([0, 1, 0]), np.array([0, 3, 1]), np.array(scores), k=3, attention_depth=1
    )
    assert list(batch.chars_typed) == [1, 4, 1]  # "alpi" drops "alpha beta" for user 1
    assert list(batch.shown[0]) == [0, -1, -1]
    assert list(batch.shown[1]) == [3, -1, -1]
    assert list(batch.n_shown) == [1, 1, 1]


def test_shown_list_is_sorted_and_holds_the_target() -> None:
    pop = generate_population(400, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    scores = np.round(pop.pages.visit_count * rng.uniform(10, 100, pop.n_pages), -1)
    users = rng.integers(0, pop.n_users, size=3000)
    targets = sample_targets(pop, users, scores, rng)
    batch = simulate_searches(pop, users, targets, scores, k=10)
    assert batch.found.mean() > 0.99
    f = batch.found
    assert (batch.shown[f, batch.selected_rank[f]] == targets[f]).all()
    assert (batch.selected_rank[f] < 10).all() and (batch.chars_typed >= 1).all()
    valid = batch.shown >= 0
    assert (valid.sum(axis=1) == batch.n_shown).all()
    shown_scores = np.where(valid, scores[np.where(valid, batch.shown, 0)], -1.0)
    assert (np.diff(shown_scores, axis=1)[valid[:, 1:]] <= 0).all()
    assert (pop.page_user[batch.shown[valid]] == np.repeat(users, batch.n_shown)).all()


@pytest.mark.parametrize(("k", "depth"), [(10, None), (5, 2), (3, 1), (1, 1)])
def test_matches_reference_on_a_random_population(k: int, depth: int | None) -> None:
    # A small vocabulary of short words makes shared prefixes and long typing common.
    cfg = HistoryConfig(
        mean_extra_pages=80, n_words=60, min_word_length=2, max_word_length=5, word_zipf_offset=2.0
    )
    pop = generate_population(60, np.random.default_rng(k * 10 + (depth or 0)), cfg)
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 8, size=pop.n_pages).astype(float)  # many ties
    users = rng.integers(0, pop.n_users, size=300)
    # uniform targets: low-scored targets make the user type longer
    targets = pop.user_offsets[users] + rng.integers(0, pop.pages_per_user[users])
    batch = _check_against_reference(pop, users, targets, scores, k, depth)
    assert batch.chars_typed.max() > 3  # the test exercises multi-character searches


def test_matches_reference_on_the_default_population() -> None:
    pop = generate_population(100, np.random.default_rng(21))
    rng = np.random.default_rng(22)
    scores = rng.normal(size=pop.n_pages)
    users = rng.integers(0, pop.n_users, size=200)
    targets = np.array([rng.choice(pop.pages_of(u)) for u in users])
    _check_against_reference(pop, users, targets, scores, 10, 3)


def test_deterministic() -> None:
    pop = generate_population(200, np.random.default_rng(0))
    scores = np.random.default_rng(1).normal(size=pop.n_pages)
    users = np.random.default_rng(2).integers(0, 200, size=1000)
    targets = sample_targets(pop, users, scores + 3, np.random.default_rng(3))
    a = simulate_searches(pop, users, targets, scores, attention_depth=2)
    b = simulate_searches(pop, users, targets, scores, attention_depth=2)
    for name in ("chars_typed", "selected_rank", "shown", "n_shown", "found"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


_SMALL = HistoryConfig(
    mean_extra_pages=15, n_words=40, min_word_length=2, max_word_length=4, word_zipf_offset=1.0
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    boost=st.floats(0.01, 50.0),
    depth=st.integers(1, 4),
)
def test_raising_the_target_score_never_lengthens_typing(
    seed: int, boost: float, depth: int
) -> None:
    rng = np.random.default_rng(seed)
    pop = generate_population(30, rng, _SMALL)
    scores = rng.integers(0, 6, size=pop.n_pages).astype(float)
    users = np.arange(pop.n_users)  # one search per user: only its own target changes
    targets = sample_targets(pop, users, scores + 1.0, rng)
    before = simulate_searches(pop, users, targets, scores, k=4, attention_depth=depth)
    raised = scores.copy()
    raised[targets] += boost
    after = simulate_searches(pop, users, targets, raised, k=4, attention_depth=depth)
    assert (after.chars_typed <= before.chars_typed).all()
    assert (after.found >= before.found).all()
    assert (after.selected_rank[after.found] < depth).all()


def test_empty_batch() -> None:
    pop = population_from_titles([["a"]])
    batch = simulate_searches(pop, np.zeros(0, np.int64), np.zeros(0, np.int64), np.ones(1))
    assert len(batch) == 0 and batch.shown.shape == (0, 10)


def test_bad_input() -> None:
    pop = population_from_titles([["a", "b"], ["c"]])
    scores = np.ones(3)
    users, targets = np.array([0]), np.array([0])
    with pytest.raises(DataFormatError, match="belongs to user 1"):
        simulate_searches(pop, users, np.array([2]), scores)
    with pytest.raises(DataFormatError, match="shaped like users"):
        simulate_searches(pop, users, np.array([0, 1]), scores)
    with pytest.raises(DataFormatError, match="model_scores has shape"):
        simulate_searches(pop, users, targets, np.ones(2))
    with pytest.raises(DataFormatError, match="NaN"):
        simulate_searches(pop, users, targets, np.array([np.nan, 1.0, 1.0]))
    with pytest.raises(ConfigError, match="attention_depth"):
        simulate_searches(pop, users, targets, scores, k=3, attention_depth=4)
    with pytest.raises(ConfigError, match="k "):
        simulate_searches(pop, users, targets, scores, k=0)
    with pytest.raises(DataFormatError, match="outside"):
        simulate_searches(pop, np.array([5]), targets, scores)


def test_first_slot_types_that_word_first() -> None:
    # Target "alpha zeta": typed from "zeta", one key ("z") separates it from "alpha beta".
    pop = population_from_titles([["alpha beta", "alpha zeta"]])
    scores = np.array([10.0, 1.0])
    in_order = _search(pop, 0, 1, scores, attention_depth=1)
    assert in_order.chars_typed[0] == len("alpha z")
    zeta_first = simulate_searches(
        pop, np.array([0]), np.array([1]), scores, attention_depth=1, first_slot=np.array([1])
    )
    assert zeta_first.chars_typed[0] == 1
    assert zeta_first.selected_rank[0] == 0


def test_first_slot_matches_reference_on_a_random_population() -> None:
    rng = np.random.default_rng(11)
    pop = generate_population(12, rng, HistoryConfig(mean_extra_pages=25, n_words=60))
    users = rng.integers(0, 12, size=150)
    targets = np.array([rng.choice(pop.pages_of(u)) for u in users])
    n_words = (pop.title_words[targets] >= 0).sum(axis=1)
    first_slot = (rng.random(users.size) * n_words).astype(np.int64)
    scores = rng.normal(100.0, 40.0, size=pop.n_pages).round()
    _check_against_reference(pop, users, targets, scores, 10, 3, first_slot)


def test_first_slot_past_the_title_is_refused() -> None:
    pop = population_from_titles([["alpha beta"]])
    with pytest.raises(DataFormatError, match="first_slot"):
        simulate_searches(pop, np.array([0]), np.array([0]), np.zeros(1), first_slot=np.array([2]))
