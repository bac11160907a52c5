"""``FrecencyWorld.search``: a subset of a batch's searches (the evaluation's oracle pass
over the treatment users) gives the results the whole batch gives them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fedrank.data.synthetic_history import generate_world
from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.simulation.frecency.branches import TREATMENT
from fedrank.simulation.frecency.pipeline import Pipeline
from fedrank.simulation.frecency.urlbar import simulate_searches
from fedrank.simulation.frecency.world import FrecencyWorld


@pytest.mark.parametrize("halves", [False, True])
@pytest.mark.parametrize("model", ["classic", "modern"])
def test_searching_a_subset_gives_the_whole_batch_results(model: str, halves: bool) -> None:
    """The subset on one thread, or in two halves on two threads (the oracle pass of a
    large evaluation)."""
    world = FrecencyWorld(
        generate_world(90, np.random.default_rng(21)), hidden_weights("shifted", model),
        np.random.default_rng(22), model=model,
        pipeline=Pipeline(halves_from=1) if halves else Pipeline(threads=False),
    )  # fmt: skip
    rng = np.random.default_rng(23)
    searches = world.draw_searches(np.repeat(np.arange(90), 2), rng)
    whole = world.search(searches, world.hidden, np.random.default_rng(24))
    treated = world.branch[searches.users] == TREATMENT
    assert 0 < treated.sum() < treated.size
    part = world.search(searches, world.hidden, np.random.default_rng(24), only=treated)
    assert part.found.any()
    for name in ("user", "target", "chars_typed", "selected_rank", "shown", "found",
                 "autofilled", "first_chars"):  # fmt: skip
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name)[treated], name)


def _twins(
    model: str, pipelines: tuple[Pipeline, Pipeline] = (Pipeline(), Pipeline())
) -> tuple[FrecencyWorld, FrecencyWorld]:
    """Two worlds built alike (but for how they use the cores): one computes states ahead,
    the other does not."""
    return tuple(  # type: ignore[return-value]
        FrecencyWorld(
            generate_world(70, np.random.default_rng(31)),
            hidden_weights("shifted", model),
            np.random.default_rng(32),
            model=model,
            pipeline=pipeline,
        )  # fmt: skip
        for pipeline in pipelines
    )


def _assert_same_state(a, b) -> None:
    for name in ("stored", "origin", "listable", "host_bookmarked", "host_known"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), name)


@pytest.mark.parametrize("model", ["classic", "modern"])
def test_a_state_computed_ahead_is_the_state(model: str) -> None:
    """Three iterations of draw (state ahead, on a second thread) then search give the
    twin's searches, states and batches; a state ahead is used only for its vector, users,
    branches, history and time: anything else is computed again."""
    ahead, plain = _twins(model)
    rng_a, rng_p = np.random.default_rng(33), np.random.default_rng(33)
    defaults = ahead.scorer.defaults()
    users = np.repeat(np.arange(70), 2)
    for k in range(3):
        theta = defaults * (1.0 + 0.1 * (k + 1))
        s_a = ahead.draw_searches(users, rng_a, state_for=theta)
        s_p = plain.draw_searches(users, rng_p)
        np.testing.assert_array_equal(s_a.targets, s_p.targets)
        np.testing.assert_array_equal(s_a.typed, s_p.typed)
        assert ahead.states.holding  # computed ahead
        _assert_same_state(ahead.state(theta, s_a.users), plain.state(theta, s_p.users))
        b_a, b_p = ahead.search(s_a, theta, rng_a), plain.search(s_p, theta, rng_p)
        np.testing.assert_array_equal(b_a.chars_typed, b_p.chars_typed)
        np.testing.assert_array_equal(b_a.shown, b_p.shown)
        for world, batch in ((ahead, b_a), (plain, b_p)):
            world.record(batch)
            world.advance(0.7)
    # computed ahead, then the vector, the history, the time or the branches change
    theta = defaults * 1.5
    changes = {
        "vector": lambda w, s: None,
        "history": lambda w, s: w.due_searches(0.5),  # the users' next visits
        "time": lambda w, s: w.advance(0.3),
        "branches": lambda w, s: w.branch.__setitem__(slice(None), (w.branch + 1) % 3),
    }
    for name, change in changes.items():
        searches = ahead.draw_searches(users, rng_a, state_for=theta)
        plain.draw_searches(users, rng_p)
        for world in (ahead, plain):
            change(world, searches)
        asked = defaults * 2.0 if name == "vector" else theta
        _assert_same_state(ahead.state(asked, users), plain.state(asked, users))


def test_no_state_ahead_when_the_hidden_preference_shares_its_cache() -> None:
    """The hidden preference as the vector (or the defaults) would have both threads in one
    cache: then nothing is computed ahead, and a vector of the wrong size is refused."""
    world = _twins("classic")[0]
    users = np.arange(70)
    world.draw_searches(users, np.random.default_rng(0), state_for=world.hidden)
    assert not world.states.holding
    with pytest.raises(ConfigError, match="state_for must be one vector of 22"):
        world.draw_searches(users, np.random.default_rng(0), state_for=np.ones(3))
    # the defaults as the vector (the study's first iteration) use their own cache
    world.draw_searches(users, np.random.default_rng(0), state_for=world.scorer.defaults())
    assert world.states.holding
    # the hidden preference as the defaults: the control-no-decay branch's state would
    # score into the draws' cache, whatever the vector
    world.hidden = world.scorer.defaults()
    world.draw_searches(users, np.random.default_rng(0), state_for=world.scorer.defaults() * 2)
    assert not world.states.holding


def test_state_ahead_for_a_vector_known_later() -> None:
    """``state_for`` may return the vector once known (a server step running meanwhile):
    the state ahead is its state; an error it raises is raised by draw_searches."""
    ahead, plain = _twins("classic")
    users = np.repeat(np.arange(70), 3)
    theta = ahead.scorer.defaults() * 1.3
    s_a = ahead.draw_searches(users, np.random.default_rng(5), state_for=lambda: theta)
    s_p = plain.draw_searches(users, np.random.default_rng(5))
    np.testing.assert_array_equal(s_a.targets, s_p.targets)
    assert ahead.states.holding
    _assert_same_state(ahead.state(theta, s_a.users), plain.state(theta, s_p.users))

    def failing() -> np.ndarray:
        raise RuntimeError("the server step failed")

    with pytest.raises(RuntimeError, match="the server step failed"):
        ahead.draw_searches(users, np.random.default_rng(5), state_for=failing)


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_in_two_halves_on_two_threads_is_the_whole_batch(seed: int) -> None:
    """Searched in two halves on two threads (any batch size here), a batch gives the
    one-thread batch field by field, and the generator ends where the one-thread pass
    leaves it (whichever half holds the longest search); searches by user or in any order."""
    world = _twins("classic", (Pipeline(halves_from=1), Pipeline()))[0]
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 70, int(rng.integers(2, 200)))
    users = np.sort(users) if seed % 2 else users  # the AOL world's searches are unsorted
    searches = world.draw_searches(users, rng)
    theta = world.scorer.defaults() * 1.2
    one = np.random.default_rng(seed + 100)
    whole = simulate_searches(
        world.pages, world.state(theta, users), searches.users, searches.targets,
        searches.typed, one, typing=world.typing, config=world.urlbar,
    )  # fmt: skip
    two = np.random.default_rng(seed + 100)
    halves = world.search(searches, theta, two)
    for name in ("user", "target", "chars_typed", "selected_rank", "shown", "n_shown", "found",
                 "autofilled", "first_word", "first_chars"):  # fmt: skip
        np.testing.assert_array_equal(getattr(halves, name), getattr(whole, name), name)
    assert two.bit_generator.state == one.bit_generator.state
    assert one.random() == two.random()


def test_a_new_models_pages_scored_in_two_halves_are_scored_as_in_one_pass() -> None:
    """A model seen once scores its pages in two halves on two threads from the
    pipeline's ``fresh_halves_from`` pages on (the URL-bar state of a large study): the
    state and the shown rows' frecency (pages repeated) equal one pass's, bit for bit."""
    one, two = _twins("classic", (Pipeline(threads=False), Pipeline(fresh_halves_from=1)))
    users = np.arange(70)
    theta = one.scorer.defaults() * 1.3 + 0.7
    searches = one.draw_searches(np.repeat(users, 3), np.random.default_rng(41))
    two.draw_searches(np.repeat(users, 3), np.random.default_rng(41))
    whole_state = one.state(theta, users)
    batch = one.search(searches, theta, np.random.default_rng(42))
    whole_shown = one.shown_frecency(batch, theta)
    _assert_same_state(two.state(theta, users), whole_state)
    assert np.any(whole_state.stored > 0)
    np.testing.assert_array_equal(two.shown_frecency(batch, theta), whole_shown)


def test_url_bars_of_one_world_run_at_once_on_several_threads() -> None:
    """The word index's scratch arrays are per call: eight passes over one world on four
    threads at once give the one-thread batch every time."""
    world = _twins("classic")[0]
    rng = np.random.default_rng(40)
    searches = world.draw_searches(np.repeat(np.arange(70), 40), rng)
    state = world.state(world.scorer.defaults(), searches.users)

    def run(_: int) -> np.ndarray:
        batch = simulate_searches(
            world.pages, state, searches.users, searches.targets, searches.typed,
            np.random.default_rng(41), typing=world.typing, config=world.urlbar,
        )  # fmt: skip
        return np.column_stack([batch.chars_typed, batch.selected_rank, batch.shown])

    expected = run(0)
    with ThreadPoolExecutor(max_workers=4) as pool:
        for got in pool.map(run, range(8)):
            np.testing.assert_array_equal(got, expected)


def test_listed_pages_follow_the_history() -> None:
    """The listable pages, kept up to date as visits arrive (new pages join them), are
    the visited or bookmarked ones, with each user's first among them."""
    from fedrank.data.synthetic_history import BrowsingConfig

    browsing = generate_world(70, np.random.default_rng(31), BrowsingConfig(future_days=12.0))
    world = FrecencyWorld(browsing, hidden_weights("shifted"), np.random.default_rng(32))
    rng = np.random.default_rng(50)
    grew = False
    for _ in range(6):
        before = world.listing.listed()[0].size
        world.due_searches(2.0)  # the users' next visits, new pages among them
        searches = world.draw_searches(np.arange(70), rng)
        world.record(world.search(searches, world.scorer.defaults(), rng))
        world.advance(2.0)
        listed, start = world.listing.listed()
        store = world.store
        expected = np.flatnonzero((store.visit_count > 0) | store.bookmarked)
        np.testing.assert_array_equal(listed, expected)
        np.testing.assert_array_equal(start, np.searchsorted(expected, world.pages.user_offsets))
        grew |= listed.size > before
    assert grew


def test_bad_searchers_and_decay_rates_are_refused() -> None:
    """Searching users outside the world (the compiled passes check no bounds) and a decay
    rate outside (0, 1] are refused with what is wrong, before anything is drawn."""
    browsing = generate_world(6, np.random.default_rng(1))
    world = FrecencyWorld(browsing, hidden_weights("shifted", "classic"), np.random.default_rng(2))
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    for users, message in (([0, 6], "user ids must be in 0..5"), ([-1], "user ids"),
                           ([[0, 1]], "1-D integer"), ([0.5], "1-D integer")):  # fmt: skip
        with pytest.raises(DataFormatError, match=message):
            world.draw_searches(np.array(users), rng)
    assert rng.bit_generator.state == state
    for rate in (0.0, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="decay_rate must be in"):
            FrecencyWorld(browsing, None, np.random.default_rng(2), decay_rate=rate)
