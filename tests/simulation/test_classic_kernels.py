"""The compiled classic scorer of the simulator
(``fedrank.simulation.frecency.kernels.classic``) gives numpy's points and frecency bit for
bit, for the non-integer models the study publishes every iteration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.data.synthetic_history import generate_world
from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.models.frecency.classic import ClassicFrecency
from fedrank.models.frecency.weights import CUTOFF_SLICE, classic_defaults
from fedrank.simulation.frecency.kernels.classic import page_frecency, page_points100
from fedrank.simulation.frecency.scoring import classic_weights
from fedrank.simulation.frecency.world import FrecencyWorld

#: The kernels' ``into`` when the values go nowhere else.
NOWHERE = np.zeros((0, 0))


@pytest.fixture(scope="module")
def world() -> FrecencyWorld:
    return FrecencyWorld(
        generate_world(150, np.random.default_rng(4)), hidden_weights("shifted", "classic"),
        np.random.default_rng(5),
    )  # fmt: skip


def _models() -> list[np.ndarray]:
    rng = np.random.default_rng(6)
    models = [classic_defaults() * rng.uniform(0.5, 1.5, 22) + rng.normal(0, 0.3, 22)
              for _ in range(4)]  # fmt: skip
    unordered = models[0].copy()
    unordered[CUTOFF_SLICE] = [20.5, 3.2, 50.0, 40.7]  # Firefox's if/elif chain
    negative = models[1] * np.where(rng.random(22) < 0.3, -1.0, 1.0)
    return [*models, unordered, negative]


@pytest.mark.parametrize("later", [0.0, 0.4, 3.7, 95.25])
def test_points_and_frecency_equal_numpy_to_the_bit(world: FrecencyWorld, later: float) -> None:
    """Every page's compiled points (``page_points100``) and fresh frecency (the world's
    compiled scorer, into a state's two rows too) equal numpy's for non-integer, negative
    and unordered weights, rounded and not."""
    world.now = later  # ages in whole days: a fraction of a day moves some across a cutoff
    index = np.flatnonzero(world.listing.listable())
    assert world.store.bookmarked[index].any() and (world.store.n_rows()[index] > 4).any()
    assert (world.store.bookmarked[index] & (world.store.visit_count[index] == 0)).any()
    histories = world.histories(index)  # ten columns, as the losses read them
    store = world.store
    pages = world.scores.classic_pages()
    rows = pages.n_rows
    sample = index[:: max(1, index.size // 300)]  # (one Python call per page)
    for theta in _models():
        w = classic_weights(theta, rounding=True)
        points = np.array([
            page_points100(
                i, rows[i], pages.time, pages.slot, pages.bookmarked, world.now, 0.0,
                w.cutoffs, w.bucket_weights, w.slot_weights, w.bookmark_weight,
            ) if rows[i] else 0.0
            for i in sample
        ])  # fmt: skip
        expected = world.scorer.frecency.points100(theta[None, :], world.histories(sample))[0]
        nonzero = expected != 0.0  # (a zero's sign may differ: any zero scores -1)
        assert nonzero.mean() > 0.9
        np.testing.assert_array_equal(points[nonzero], expected[nonzero])
        np.testing.assert_array_equal(points[~nonzero], 0.0)
        for rounding in (True, False):  # Firefox's integers, and the unrounded variant
            world.scorer.frecency = ClassicFrecency(rounding=rounding)
            try:
                fresh = world.scorer.fresh(theta, histories, world.now)
                into = np.full((2, store.n_pages), 7.5)
                scored = world.scores.fresh_once(theta, index, world.now, into)
                np.testing.assert_array_equal(scored, fresh)
                np.testing.assert_array_equal(into[:, index], [fresh, fresh])
                others = np.setdiff1d(np.arange(store.n_pages), index)
                assert (into[:, others] == 7.5).all()
            finally:
                world.scorer.frecency = ClassicFrecency()


@pytest.mark.parametrize("model", ["classic", "modern"])
def test_shown_rows_are_scored_under_their_branch_vector(model: str) -> None:
    """Every shown row is scored under its user's branch vector (treatment: the model,
    control branches: the defaults), as scoring its ten-column history would: what the
    branch losses and the control branches' figures read."""
    world = FrecencyWorld(
        generate_world(80, np.random.default_rng(11)), hidden_weights("shifted", model),
        np.random.default_rng(12), model=model,
    )  # fmt: skip
    rng = np.random.default_rng(13)
    defaults = world.scorer.defaults()
    theta = defaults * np.linspace(0.6, 1.4, defaults.size)
    batch = world.search(world.draw_searches(np.repeat(np.arange(80), 3), rng), theta, rng)
    shown = world.shown_frecency(batch, theta)
    valid = batch.shown >= 0
    treat = np.repeat(world.branch[batch.user] == 0, batch.shown.shape[1]).reshape(shown.shape)
    assert (valid & treat).any() and (valid & ~treat).any()
    histories = world.histories(batch.shown[valid])
    under_model = world.scorer.fresh(theta, histories, world.now)
    under_defaults = world.scorer.fresh(defaults, histories, world.now)
    assert (under_model != under_defaults).mean() > 0.3  # the check can tell them apart
    np.testing.assert_array_equal(shown[valid], np.where(treat[valid], under_model, under_defaults))


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rounding=st.booleans())
def test_rounding_equals_from_points(seed: int, rounding: bool) -> None:
    """The compiled rounding gives ``ClassicFrecency.from_points``' bits for every kind of
    page (sampled or not, zero points, unvisited bookmarks, typed or not) and any weights
    (negative, non-integer), pages gathered in any order with repeats."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    points = np.where(rng.random(n) < 0.2, 0.0, rng.normal(0, 5e3, n))
    visit_count = rng.choice([0, 0, 1, 2, 7, 30], n).astype(np.int32)
    n_sampled = np.minimum(rng.integers(0, 11, n), visit_count).astype(np.int8)
    bookmarked, typed = rng.random(n) < 0.5, rng.random(n) < 0.5
    theta = classic_defaults() * rng.uniform(-0.5, 2.0, classic_defaults().size)
    index = rng.integers(0, n, int(rng.integers(1, 2 * n)))
    frecency = ClassicFrecency(rounding=rounding)
    expected = frecency.from_points(
        theta[None, :], points[index][None, :], visit_count[index], n_sampled[index],
        bookmarked[index], typed[index],
    )[0]  # fmt: skip
    w = classic_weights(theta, rounding=rounding)
    got = [
        page_frecency(
            points[i], i, visit_count, n_sampled, bookmarked, typed, w.first_weight,
            w.unvisited_bookmark, w.unvisited_typed, rounding,
        )
        for i in index
    ]  # fmt: skip
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("lift_size", [1 << 16, 1024])
def test_kept_scores_equal_numpy_from_an_empty_cache(world: FrecencyWorld, lift_size: int) -> None:
    """The compiled kept scores (``kept_fresh`` under the hidden preference and a
    non-integer model, ``kept_stored``: the control branch's decayed and undecayed
    frecency) equal scoring the ten-column histories in numpy, read from an empty cache
    and again once kept, at times that move ages across cutoffs and day ends; the stored
    decay takes both of its ways (table lookups for integers below the table's size, day
    by day above)."""
    from fedrank.models.frecency.classic import decay_tables
    from fedrank.simulation.frecency.kernels.classic import kept_fresh, kept_stored
    from fedrank.simulation.frecency.score_cache import PageScoreCache

    index = np.flatnonzero(world.listing.listable())
    rate = float(np.float32(world.decay_rate))  # the float pref, as the world's scores use it
    lift = np.stack(decay_tables(rate, lift_size - 1, 8))[:, :lift_size]
    defaults = classic_weights(world.scorer.defaults(), rounding=True)
    pages = world.scores.classic_pages()
    model = _models()[0]
    for later in (0.0, 0.6, 4.2, 33.9):
        world.now = later
        histories = world.histories(index)
        stored, undecayed = world.scorer.stored(histories, world.now, world.decay_rate)
        assert (undecayed[stored > 0] >= 1024).any() and (lift[0] > 0).any()
        cache = PageScoreCache(world.store, 2)
        for _ in range(2):  # scored, then read back as kept
            got = kept_stored(index, *cache.synced(), later, pages, defaults, rate, lift, NOWHERE)
            np.testing.assert_array_equal(got, [stored, undecayed])
        for params in (world.hidden, model):
            expected = world.scorer.fresh(params, histories, world.now)
            cache = PageScoreCache(world.store)
            weights = classic_weights(params, rounding=True)
            for _ in range(2):
                got = kept_fresh(index, *cache.synced(), later, pages, weights, NOWHERE)
                np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_row_slots_equal_numpy(seed: int) -> None:
    """The compiled bonus slots and sampled-row counts of the pages at any subset equal
    ``ClassicFrecency.row_slots`` and the rows with a type, for every visit type (unknown
    and negative ones included), origin and redirect target, uncounted pages included;
    pages outside the subset are left alone."""
    from fedrank.simulation.frecency.kernels.classic import row_slots
    from fedrank.simulation.frecency.kernels.store import VisitRows

    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(1, 60)), int(rng.integers(1, 11))
    kinds = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -3, 127], dtype=np.int8)
    visit_type = np.asfortranarray(rng.choice(kinds, (n, width)))
    origin_type = np.asfortranarray(rng.choice(kinds, (n, width)))
    target = np.asfortranarray(rng.choice(np.array([0, 0, 5, 6, 1], np.int8), (n, width)))
    visit_count = rng.integers(-1, 4, n).astype(np.int32)
    at = rng.permutation(n)[: int(rng.integers(0, n + 1))]
    slots = np.full((n, width), 99, dtype=np.uint8, order="F")
    n_sampled = np.full(n, -7, dtype=np.int8)
    time = np.zeros((n, width), order="F")  # (not read)
    row_slots(at, VisitRows(time, visit_type, origin_type, target), visit_count, slots, n_sampled)
    expected = ClassicFrecency.row_slots(visit_type, origin_type, target, visit_count)
    np.testing.assert_array_equal(slots[at], expected[at])
    np.testing.assert_array_equal(n_sampled[at], (visit_type[at] != 0).sum(axis=1))
    untouched = np.setdiff1d(np.arange(n), at)
    assert (slots[untouched] == 99).all() and (n_sampled[untouched] == -7).all()
