"""The calibrated synthetic browsing world (``fedrank.data.synthetic_history``): its shapes
against the AOL log's, what it stores as Firefox would, determinism and validation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fedrank.data.browsing import BrowsingWorld, Vocabulary
from fedrank.data.synthetic_history import BrowsingConfig, generate_world
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.history import NOT_COUNTED_TYPES, VisitType
from fedrank.simulation.frecency.history_store import VisitStore
from fedrank.simulation.frecency.world import FrecencyWorld

#: The AOL log's March and April 2006 (999 users; the AOL world's history period), the
#: window the host process was fitted on: ``browsing_shapes`` of those clicks
#: (``tests/data/test_aol_browsing.py``, docs/frecency.md).
AOL_MARCH_APRIL = {
    "hosts_per_click": 162.137 / 278.596,
    "once_share": 0.793,
    "top10_share": 0.336,
    "revisit_within_day": 0.553,
    "gap_median_minutes": 11.07,
    "gap_30min_share": 0.624,
}


@pytest.fixture(scope="module")
def world() -> BrowsingWorld:
    return generate_world(600, np.random.default_rng(5), BrowsingConfig(future_days=10.0))


def test_shapes_match_the_aol_log(world: BrowsingWorld) -> None:
    s = world.stats
    assert s["users"] == 600
    got = {**s, "hosts_per_click": s["hosts_per_user"] / s["clicks_per_user"]}
    tolerance = {
        "hosts_per_click": 0.04, "once_share": 0.04, "top10_share": 0.05,
        "revisit_within_day": 0.05, "gap_median_minutes": 2.5, "gap_30min_share": 0.04,
    }  # fmt: skip
    for key, want in AOL_MARCH_APRIL.items():
        assert got[key] == pytest.approx(want, abs=tolerance[key]), key
    # ~4.6 clicks a day for 61 days: the AOL users' rate (278.6 in March-April)
    assert 240 < s["clicks_per_user"] < 320


def test_history_before_the_study_browsing_after(world: BrowsingWorld) -> None:
    assert world.history.n_visits > 0 and (world.history.time < 0).all()
    assert (world.history.time >= -61).all()
    assert world.future.n_visits > 0 and (world.future.time >= 0).all()
    assert (world.future.time < 10).all()
    assert not world.future_search.any()  # synthetic searches come from the preference


def test_several_pages_per_host_and_root_pages(world: BrowsingWorld) -> None:
    pages = world.pages
    per_host = np.bincount(np.unique(pages.host, return_inverse=True)[1])
    assert per_host.mean() > 1.5 and per_host.max() > 5
    # the host's name is the first word of every page of the host
    first = np.full(pages.host.max() + 1, -1)
    first[pages.host] = pages.words[:, 0]
    assert (first[pages.host] == pages.words[:, 0]).all()
    assert (pages.n_url_words >= 1).all()
    assert (pages.root_of_host[pages.host[pages.is_root]] >= 0).all()


def test_redirect_chains_are_stored_as_firefox_stores_them(world: BrowsingWorld) -> None:
    """A redirect visit (301) comes from a visit on the same host at the same instant, on
    the host's redirect-source page; the source's type is the visit's origin type."""
    h = world.history
    redirect = np.flatnonzero(h.visit_type == VisitType.REDIRECT_PERMANENT)
    assert redirect.size > 0
    src = h.from_visit[redirect]
    assert (src >= 0).all() and (src < redirect).all()
    pages = world.pages
    assert (pages.host[h.page[src]] == pages.host[h.page[redirect]]).all()
    assert (h.page[src] != h.page[redirect]).all()
    assert (h.time[src] == h.time[redirect]).all()
    assert pages.is_root[h.page[redirect]].all()
    origin = h.origin_type()[redirect]
    assert (origin == h.visit_type[src]).all() and (origin > 0).all()
    target = h.redirect_target()
    assert (target[src] == VisitType.REDIRECT_PERMANENT).all()


def test_store_counts_types_and_whole_day_ages(world: BrowsingWorld) -> None:
    store = VisitStore.from_world(world)
    h = world.history
    counted = ~np.isin(h.visit_type, NOT_COUNTED_TYPES)
    np.testing.assert_array_equal(
        store.visit_count, np.bincount(h.page[counted], minlength=world.pages.n_pages)
    )
    pages = store.histories(0.0)
    real = pages.visit_mask
    np.testing.assert_array_equal(pages.visit_age_days[real], np.floor(pages.visit_age_days[real]))
    assert pages.visit_age_days[real].max() <= 61
    types = set(np.unique(h.visit_type).tolist())
    assert {1, 2, 3, 5, 7, 8, 9} <= types  # link, typed, bookmark, 301, rare types
    # reloads reload the user's previous page; framed links and downloads are never roots
    rare = np.isin(h.visit_type, (VisitType.FRAMED_LINK, VisitType.DOWNLOAD))
    assert not world.pages.is_root[h.page[rare]].any()


def test_bookmarks(world: BrowsingWorld) -> None:
    pages = world.pages
    assert world.bookmark_page.size > 0
    assert pages.is_root[world.bookmark_page].all()
    # every bookmark is made during the history, on the host's first visit or, for the
    # imported ones (roots of hosts never visited), when the history starts
    assert (world.bookmark_time < 0).all() and (world.bookmark_time >= -61).all()
    visited_host = np.zeros(pages.host.max() + 1, dtype=bool)
    visited_host[pages.host[world.history.page]] = True
    visited_host[pages.host[world.future.page]] = True
    imported = ~visited_host[pages.host[world.bookmark_page]]
    assert imported.any()
    np.testing.assert_allclose(world.bookmark_time[imported], -61.0)


def test_same_seed_same_world() -> None:
    a = generate_world(80, np.random.default_rng(11))
    b = generate_world(80, np.random.default_rng(11))
    c = generate_world(80, np.random.default_rng(12))
    np.testing.assert_array_equal(a.pages.words, b.pages.words)
    np.testing.assert_array_equal(a.history.time, b.history.time)
    np.testing.assert_array_equal(a.history.visit_type, b.history.visit_type)
    assert a.stats == b.stats
    assert a.history.n_visits != c.history.n_visits or not np.array_equal(
        a.history.page, c.history.page
    )


def test_more_views_per_click_give_more_pages() -> None:
    few = generate_world(200, np.random.default_rng(3), BrowsingConfig(extra_views=0.0))
    many = generate_world(200, np.random.default_rng(3), BrowsingConfig(extra_views=3.0))
    assert many.pages.n_pages > 1.3 * few.pages.n_pages
    assert many.history.n_visits > 2 * few.history.n_visits


@pytest.mark.parametrize(
    "bad",
    [
        {"history_days": 0.0},
        {"new_host_discount": 1.0},
        {"root_share": 1.5},
        {"typed_share": 0.99, "reload_share": 0.05},
        {"clicks_per_session": 0.5},
        {"max_subpages": 0},
        {"extra_views": -1.0},
        {"n_words": 10**14},
    ],
)
def test_bad_config_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        replace(BrowsingConfig(), **bad)


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="positive integer"):
        generate_world(0, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="Generator"):
        generate_world(3, 0)  # type: ignore[arg-type]


def test_small_vocabulary_words_are_int16_and_search_as_int32_words() -> None:
    # the narrow word ids change no search: the same world with int32 ids gives the same
    # URL-bar batch (ranks, characters typed, rows shown)
    browsing = generate_world(60, np.random.default_rng(3))
    assert browsing.pages.words.dtype == np.int16
    wide = replace(
        browsing, pages=replace(browsing.pages, words=browsing.pages.words.astype(np.int32))
    )
    batches = []
    for b in (browsing, wide):
        world = FrecencyWorld(b, np.zeros(22) + 50.0, np.random.default_rng(0))
        rng = np.random.default_rng(1)
        searches = world.draw_searches(np.repeat(np.arange(60), 3), rng)
        batches.append(world.search(searches, world.scorer.defaults(), rng))
    for name in ("chars_typed", "selected_rank", "shown", "found", "autofilled"):
        np.testing.assert_array_equal(getattr(batches[0], name), getattr(batches[1], name))
    assert batches[0].found.sum() > 30


def test_words_must_be_signed_integers() -> None:
    browsing = generate_world(3, np.random.default_rng(3))
    with pytest.raises(DataFormatError, match="signed integer"):
        replace(browsing.pages, words=browsing.pages.words.astype(np.float64))


@pytest.mark.parametrize("n_words", [1, 2, 7, 3000, 200_000])
def test_inverse_cdf_table_draws_what_a_search_of_the_cdf_draws(n_words: int) -> None:
    """The word draws' lookup table gives ``min(searchsorted(cdf, u, "right"), n - 1)``
    for every uniform, including those on and just below a ``cdf`` value and bin edges
    (the world is the same, only faster)."""
    from fedrank.data.synthetic_history import _InverseCdf

    zipf = 1.0 / (np.arange(n_words) + 3.0) ** 1.1
    cdf = np.cumsum(zipf / zipf.sum())
    rng = np.random.default_rng(n_words)
    below_one = np.nextafter(1.0, 0.0)
    edges = np.array([0.0, 0.5, 0.25, 1 / 3, below_one, np.nextafter(0.5, 0.0)])
    on_cdf = np.minimum(np.r_[cdf[:50], np.nextafter(cdf[:50], 0.0)], below_one)
    u = np.r_[edges, on_cdf, rng.random(200_000)]
    np.testing.assert_array_equal(
        _InverseCdf(cdf)(u), np.minimum(np.searchsorted(cdf, u, "right"), n_words - 1)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_page_views_are_numpys_running_sums_in_time_order(seed: int) -> None:
    """The compiled page views (``page_views``) equal the numpy definition: views repeated
    from their clicks, a click's views offset by numpy's running sum of the gaps (less its
    value at the click), capped, then each user's views stably sorted by time."""
    from fedrank.core.group_sort import group_key_order
    from fedrank.data.synthetic_kernels import page_views

    rng = np.random.default_rng(seed)
    n_clicks = 3000
    user = np.sort(rng.integers(0, 40, n_clicks))
    host = rng.integers(0, 500, n_clicks)
    time = np.round(rng.random(n_clicks) * 30, 1)  # ties across clicks and views
    views = 1 + rng.poisson(1.5, n_clicks)
    gap = np.where(rng.random(int(views.sum())) < 0.2, 0.0, rng.exponential(0.5, views.sum()))
    latest = 29.0
    entry = np.repeat(np.arange(n_clicks), views)
    k = np.arange(entry.size) - np.repeat(np.cumsum(views) - views, views)
    step = gap * (k > 0)
    offset = np.cumsum(step) - np.repeat((np.cumsum(step) - step)[k == 0], views)
    t = np.minimum(time[entry] + offset, latest)
    order = group_key_order(t, user[entry])
    expected = (user[entry][order], host[entry][order], t[order], k[order])
    for got, want in zip(page_views(views, user, host, time, gap, latest), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_page_keys_are_the_distinct_keys_and_each_visits_index() -> None:
    """``page_keys`` equals ``np.unique`` of both key sets and ``np.searchsorted`` of the
    visits' keys, with rows left empty and keys in the last column."""
    from fedrank.data.synthetic_kernels import page_keys

    rng = np.random.default_rng(5)
    n_rows, width = 400, 7
    visit = rng.integers(0, n_rows // 2, 5000) * width + rng.integers(0, width, 5000)
    more = np.r_[rng.integers(n_rows // 2, n_rows, 30) * width + 1, n_rows * width - 1]
    keys, index = page_keys(visit, more, n_rows, width)
    expected = np.unique(np.concatenate([visit, more]))
    np.testing.assert_array_equal(keys, expected)
    np.testing.assert_array_equal(index, np.searchsorted(expected, visit))


def test_page_keys_of_wide_rows_are_sorted_not_tabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a table of every possible key would outgrow the keys (many deeper pages per
    host), the world's page keys come from sorting, with the same result; the compiled
    table is not built."""
    from fedrank.data import synthetic_history, synthetic_kernels

    rng = np.random.default_rng(6)
    n_rows, width = 3000, 1000
    visit = rng.integers(0, n_rows, 2000) * width + rng.integers(0, width, 2000)
    more = rng.integers(0, n_rows, 10) * width + 1
    tabled = synthetic_kernels.page_keys(visit, more, n_rows, width)

    def refused(*args: object) -> None:
        raise AssertionError("the table of every key was built")

    monkeypatch.setattr(synthetic_kernels, "page_keys", refused)
    for got, want in zip(
        synthetic_history._page_keys(visit, more, n_rows, width), tabled, strict=True
    ):
        np.testing.assert_array_equal(got, want)


def _pitman_yor_by_steps(n_clicks: np.ndarray, rng: np.random.Generator, cfg: BrowsingConfig):
    """The host draw as the module docstring states it, one numpy step per click index for
    every user still clicking (the compiled draw must give the same hosts)."""
    n_users, width = n_clicks.size, int(n_clicks.max())
    hosts = np.zeros((n_users, width), dtype=np.int64)
    counts = np.zeros((n_users, width), dtype=np.int64)
    n_hosts = np.zeros(n_users, dtype=np.int64)
    theta, d = cfg.new_host_theta, cfg.new_host_discount
    for k in range(width):
        users = np.flatnonzero(n_clicks > k)
        if k == 0:
            new, chosen = np.ones(users.size, bool), np.zeros(users.size, np.int64)
        else:
            new = rng.random(users.size) < theta / (theta + k)
            recent = rng.random(users.size) < cfg.recent_share
            span = np.where(recent, min(cfg.recent_window, k), k)
            back = (rng.random(users.size) * span).astype(np.int64)
            chosen = hosts[users, np.where(recent, k - 1 - back, back)]
            new |= rng.random(users.size) < d / np.maximum(counts[users, chosen], 1)
        chosen = np.where(new, n_hosts[users], chosen)
        n_hosts[users] += new
        hosts[users, k] = chosen
        counts[users, chosen] += 1
    return hosts[np.arange(width)[None, :] < n_clicks[:, None]]


@pytest.mark.parametrize("block", [4, 37, 1 << 22])
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_host_draw_is_the_stepwise_draw(
    block: int, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any block of uniforms gives the stepwise draw's hosts and leaves the generator where
    it leaves it (a block smaller than one step's draws still takes the whole step)."""
    from fedrank.data import synthetic_history

    monkeypatch.setattr(synthetic_history, "_PITMAN_YOR_BLOCK", block)
    cfg = BrowsingConfig(recent_window=3, new_host_discount=0.5 * seed)
    n_clicks = np.random.default_rng(seed).integers(1, 60, size=25)
    n_clicks[3] = 1
    fast, slow = np.random.default_rng(seed), np.random.default_rng(seed)
    got = synthetic_history._pitman_yor_hosts(n_clicks, fast, cfg)
    np.testing.assert_array_equal(got, _pitman_yor_by_steps(n_clicks, slow, cfg))
    assert fast.random() == slow.random()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_page_words_are_the_drawn_words_each_once(seed: int) -> None:
    """Every page's row: its host's name, its path words, its title words (the first one
    the site's name where drawn so), in that order, each word once, -1 after them; as wide
    as the longest row; the URL words (host and path) that remain counted."""
    from fedrank.data.synthetic_history import _page_words

    cfg = BrowsingConfig(n_words=40, title_words_mean=6.0)  # few words: many repeats
    vocab = Vocabulary.random(cfg.n_words, np.random.default_rng(seed), 3, 6)
    rng = np.random.default_rng(seed)
    page_host = np.sort(rng.integers(0, 50, 400))
    page_slot = rng.integers(0, 3, 400)
    replay = np.random.default_rng(seed + 10)
    words, n_url = _page_words(
        page_host, page_slot, 50, vocab, np.random.default_rng(seed + 10), cfg
    )()
    # the draws as _page_words makes them, in its order
    zipf = 1.0 / (np.arange(cfg.n_words) + 1.0 + cfg.word_zipf_offset) ** cfg.word_zipf_exponent
    cdf = np.cumsum(zipf / zipf.sum())

    def draw(size: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, replay.random(size), "right"), cfg.n_words - 1)

    host_name = draw(50)
    n = page_host.size
    n_path = np.where(page_slot != 0, 1 + (replay.random(n) * cfg.max_path_words).astype(int), 0)
    n_title = 1 + replay.poisson(cfg.title_words_mean - 1.0, n)
    site = (page_slot == 0) & (replay.random(n) < cfg.site_in_title)
    paths, titles = iter(draw(int(n_path.sum()))), iter(draw(int(n_title.sum())))
    rows, urls = [], []
    for i in range(n):
        path = [next(paths) for _ in range(n_path[i])]
        title = [next(titles) for _ in range(n_title[i])]
        if site[i]:
            title[0] = host_name[page_host[i]]
        row: list[int] = []
        for w in [host_name[page_host[i]], *path]:
            row += [] if w in row else [int(w)]
        urls.append(len(row))
        for w in title:
            row += [] if w in row else [int(w)]
        rows.append(row)
    width = max(len(r) for r in rows)
    assert words.shape == (n, width)
    np.testing.assert_array_equal(words, [r + [-1] * (width - len(r)) for r in rows])
    np.testing.assert_array_equal(n_url, urls)
