"""Synthetic browsing worlds calibrated to real users (Mozilla paper, Sec. 6.1).

The paper's simulation had no real data: "how recently websites were visited" followed "a
made-up distribution", visits per page "an exponential distribution with lambda = 7", and
"recency, type, and frequency were assumed to be independent"; with about 7.5 visits per
page, the users of such a world find any page after one typed character. This generator
instead draws a *click stream* whose shapes are calibrated to a real one, the AOL click log
of ``../shared/data/AOL`` (:func:`fedrank.data.browsing.browsing_shapes` measures both;
``docs/frecency.md`` shows them side by side):

* **how much**: every user clicks at a rate drawn from a log-normal fitted to the AOL
  users' clicks per day (median 4.2, log-sd 0.46) over ``history_days``;
* **which host**: a Pitman-Yor process over the user's hosts -- a click goes to a new host
  with probability ``(theta + d * K) / (theta + k)`` after ``k`` clicks on ``K`` hosts,
  otherwise it revisits a host in proportion to ``n_h - d``: heavy-tailed revisits (most
  hosts are clicked once, a few hosts take a third of the clicks). A revisit copies a
  recent click (one of the last ``recent_window``) with probability ``recent_share``:
  revisits come in bursts, as in the log;
* **when**: clicks come in sessions (``clicks_per_session`` on average, gaps of
  ``session_gap_minutes``), sessions at uniform times: bursty timing;
* **which page**: several pages per host: the root page (``root_share`` of the clicks), or
  one of the host's deeper pages (a Zipf choice among up to ``max_subpages``);
* **how** (transition type): TYPED with the share of AOL clicks whose query was the host's
  name (``typed_share``), BOOKMARK for some visits to bookmarked hosts, RELOAD / FRAMED_LINK
  / DOWNLOAD / EMBED at small rates, LINK otherwise. Some hosts are reached through a
  redirect (``http://host`` -> ``https://www.host/``): the visit goes to the redirect's
  source page and a 301 visit on the root comes from it (``from_visit``), as Firefox stores
  it;
* **bookmarks**: the root pages of often-visited hosts, and a few imported bookmarks never
  visited.

Everything is vectorized over users; the Pitman-Yor draw is sequential in the click index
(one vectorized step per click, for all users at once). The same generator state gives the
identical world.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from fedrank.core.group_sort import group_key_order
from fedrank.core.validation import Interval, Rule, Validated
from fedrank.data.browsing import (
    ENGLISH_LETTER_FREQUENCIES,
    BrowsingWorld,
    Pages,
    VisitStream,
    Vocabulary,
    browsing_shapes,
)
from fedrank.errors import ConfigError
from fedrank.models.frecency.history import VisitType

__all__ = ["ENGLISH_LETTER_FREQUENCIES", "BrowsingConfig", "Vocabulary", "generate_world"]

MINUTES_PER_DAY = 24.0 * 60.0


#: A finite number > 0.
_POSITIVE = Interval(Real, 0, None, closed="neither")
#: A probability.
_SHARE = Interval(Real, 0, 1)
#: An integer >= 1.
_AT_LEAST_ONE = Interval(Integral, 1, None)


@dataclass(frozen=True)
class BrowsingConfig(Validated):
    """Parameters of the synthetic world, with where each default comes from.

    Attributes:
        history_days: days of history before the study (61: the AOL world's history,
            March and April 2006).
        future_days: days of browsing drawn beyond the study's start (the study replays
            them as time passes: users keep browsing while they search).
        rate_log_mean, rate_log_sd: clicks per day per user are log-normal with these
            parameters (AOL users: log-mean 1.41, log-sd 0.46).
        new_host_theta, new_host_discount, recent_share, recent_window: the Pitman-Yor
            concentration and discount of the host process, and the share of revisits that
            copy one of the last ``recent_window`` clicks (else any earlier click): fitted
            by grid search to the AOL log's March and April 2006, the AOL world's history
            (hosts per click, share of hosts clicked once, top-10 share, revisits within a
            day; ``docs/frecency.md``).
        clicks_per_session, session_gap_minutes: mean clicks per session and mean gap
            between clicks of a session.
        extra_views: mean extra page views per click (a click opens the site; the visitor
            then reads ``Poisson(extra_views)`` more of its pages, ``view_gap_minutes``
            apart): the AOL log records only the clicks, Firefox every page view.
        root_share: share of clicks that land on the site's root page.
        max_subpages, subpage_zipf: deeper pages per host and the Zipf exponent of their
            popularity.
        typed_share: share of clicks typed (AOL: 18.9% of clicks follow a query that is
            the host's name).
        redirect_host_share, redirect_visit_share: hosts reached through a redirect, and
            the share of their root visits that go through it.
        reload_share, framed_share, download_share, embed_share: rare transition types.
        bookmark_share: probability that a host clicked at least 3 times is bookmarked
            (its root page); ``imported_bookmarks``: mean imported, never-visited bookmarks
            per user; ``bookmark_visit_share``: share of visits to a bookmarked root made
            from the bookmark (BOOKMARK).
        n_words, min_word_length, max_word_length, word_zipf_exponent, word_zipf_offset:
            the vocabulary of host names, paths and titles (random words with English
            letter frequencies, Zipf-Mandelbrot use).
        title_words_mean: mean title length in words (1 + Poisson; real titles run to
            several words); ``max_path_words``: a deeper page's URL has 1 to this many path
            words; ``site_in_title``: a root page's title starts with the site's name with
            this probability.
    """

    history_days: float = 61.0
    future_days: float = 0.0
    rate_log_mean: float = 1.41
    rate_log_sd: float = 0.46
    new_host_theta: float = 20.0
    new_host_discount: float = 0.72
    recent_share: float = 0.6
    recent_window: int = 5
    clicks_per_session: float = 2.6
    session_gap_minutes: float = 7.0
    extra_views: float = 1.0
    view_gap_minutes: float = 1.0
    root_share: float = 0.5
    max_subpages: int = 20
    subpage_zipf: float = 1.2
    typed_share: float = 0.189
    redirect_host_share: float = 0.3
    redirect_visit_share: float = 0.5
    reload_share: float = 0.03
    framed_share: float = 0.01
    download_share: float = 0.01
    embed_share: float = 0.01
    bookmark_share: float = 0.15
    imported_bookmarks: float = 2.0
    bookmark_visit_share: float = 0.3
    n_words: int = 3000
    min_word_length: int = 3
    max_word_length: int = 10
    word_zipf_exponent: float = 1.0
    word_zipf_offset: float = 10.0
    title_words_mean: float = 8.0
    max_path_words: int = 3
    site_in_title: float = 0.7

    ACCEPTS = {
        "history_days": _POSITIVE,
        "future_days": Interval(Real, 0, None),
        "rate_log_mean": Interval(Real, None, None),
        "rate_log_sd": _POSITIVE,
        "new_host_theta": _POSITIVE,
        "new_host_discount": Interval(Real, 0, 1, closed="left"),
        "recent_share": _SHARE,
        "recent_window": _AT_LEAST_ONE,
        "clicks_per_session": Interval(Real, 1, None),
        "session_gap_minutes": _POSITIVE,
        "extra_views": Interval(Real, 0, None),
        "view_gap_minutes": _POSITIVE,
        "root_share": _SHARE,
        "max_subpages": _AT_LEAST_ONE,
        "subpage_zipf": _POSITIVE,
        "typed_share": _SHARE,
        "redirect_host_share": _SHARE,
        "redirect_visit_share": _SHARE,
        "reload_share": _SHARE,
        "framed_share": _SHARE,
        "download_share": _SHARE,
        "embed_share": _SHARE,
        "bookmark_share": _SHARE,
        "imported_bookmarks": Interval(Real, 0, None),
        "bookmark_visit_share": _SHARE,
        "n_words": _AT_LEAST_ONE,
        "min_word_length": Interval(Integral, 1, 100),
        "max_word_length": Interval(Integral, 1, 100),
        "word_zipf_exponent": Interval(Real, 0, None),
        "word_zipf_offset": Interval(Real, 0, None),
        "title_words_mean": Interval(Real, 0, None),
        "max_path_words": _AT_LEAST_ONE,
        "site_in_title": _SHARE,
    }
    RULES = (
        Rule(
            lambda c: c.typed_share + _rare_share(c) <= 1,
            lambda c: (
                f"typed_share ({c.typed_share}) and the rare transition shares (reload, "
                f"framed, download, embed: {_rare_share(c):g} together) must sum to at most 1"
            ),
        ),
        Rule(
            lambda c: c.min_word_length <= c.max_word_length,
            "min_word_length must be <= max_word_length ({max_word_length}), got {min_word_length}",
        ),
        Rule(
            lambda c: c.n_words <= _word_capacity(c) // 4,
            "n_words = {n_words} is too many words of {min_word_length} to {max_word_length} "
            "letters: at most a quarter of the distinct words of those lengths",
        ),
    )


def _rare_share(config: BrowsingConfig) -> float:
    """The share of the rare transitions: reloads, framed links, downloads, embeds."""
    return config.reload_share + config.framed_share + config.download_share + config.embed_share


def _word_capacity(config: BrowsingConfig) -> int:
    """How many distinct words of ``min_word_length`` to ``max_word_length`` letters."""
    return sum(26**n for n in range(config.min_word_length, config.max_word_length + 1))


def generate_world(
    n_users: int, rng: np.random.Generator, config: BrowsingConfig | None = None
) -> BrowsingWorld:
    """Draw ``n_users`` users' browsing before the study (see the module docstring)."""
    cfg = config if config is not None else BrowsingConfig()
    if int(n_users) != n_users or n_users < 1:
        raise ConfigError(
            f"n_users must be a positive integer, got {n_users}",
            field="n_users",
            requirement=f"must be a positive integer, got {n_users}",
            value=n_users,
        )
    if not isinstance(rng, np.random.Generator):
        raise ConfigError("rng must be a numpy.random.Generator (np.random.default_rng(seed))")
    n_users = int(n_users)
    vocab = Vocabulary.random(cfg.n_words, rng, cfg.min_word_length, cfg.max_word_length)
    rate = np.exp(rng.normal(cfg.rate_log_mean, cfg.rate_log_sd, n_users))
    span = cfg.history_days + cfg.future_days
    n_clicks = np.maximum(rng.poisson(rate * span), 1)
    click_user = np.repeat(np.arange(n_users, dtype=np.int64), n_clicks)
    local_host = _pitman_yor_hosts(n_clicks, rng, cfg)
    times = _session_times(n_clicks, rng, cfg)

    # Hosts and pages: (user, local host) -> host id; (host, slot) -> page id, slot 0 the
    # root, 1.. deeper pages, -1 the redirect source (http://host).
    host_key = click_user * int(n_clicks.max() + 1) + local_host
    host_ids, click_host = np.unique(host_key, return_inverse=True)
    past_clicks = times < cfg.history_days  # the clicks (not page views), for their shapes
    # (a helper thread measures them, and later lays out the pages' words, while this one
    # goes on: neither draws from rng)
    helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrank-world")
    shapes = helper.submit(
        browsing_shapes,
        click_user[past_clicks], click_host[past_clicks], times[past_clicks], n_users=n_users,
    )  # fmt: skip
    # (here and below, arrays the size of the clicks or visits are freed once unused:
    # they set the memory peak of a large world)
    del host_key, past_clicks
    n_hosts = host_ids.size
    host_user = host_ids // int(n_clicks.max() + 1)
    host_clicks = np.bincount(click_host, minlength=n_hosts)
    n_sub = rng.integers(0, cfg.max_subpages + 1, n_hosts)
    redirect_host = rng.random(n_hosts) < cfg.redirect_host_share

    # Every click opens the site: 1 + Poisson(extra_views) page views, the first on the
    # root (root_share) or a deeper page, the next ones on deeper pages, a minute or so
    # apart. The AOL log records only the clicks; these are the visits Firefox stores.
    from fedrank.data.synthetic_kernels import page_views  # numba, on first use

    views = 1 + rng.poisson(cfg.extra_views, click_host.size)
    gap = rng.exponential(cfg.view_gap_minutes / MINUTES_PER_DAY, int(views.sum()))
    click_user, click_host, times, k = page_views(
        views, click_user, click_host, times, gap, np.nextafter(span, 0)
    )
    del gap
    slot = np.zeros(click_host.size, dtype=np.int64)
    deep = ((k > 0) | (rng.random(click_host.size) >= cfg.root_share)) & (n_sub[click_host] > 0)
    slot[deep] = 1 + _zipf_index(n_sub[click_host[deep]], cfg.subpage_zipf, rng)

    # Transition types of the clicks.
    u = rng.random(click_host.size)
    vtype = np.full(click_host.size, int(VisitType.LINK), dtype=np.int8)
    edges = np.cumsum([cfg.typed_share, cfg.reload_share, cfg.framed_share,
                       cfg.download_share, cfg.embed_share])  # fmt: skip
    kinds = (VisitType.TYPED, VisitType.RELOAD, VisitType.FRAMED_LINK,
             VisitType.DOWNLOAD, VisitType.EMBED)  # fmt: skip
    for lo, hi, kind in zip(np.r_[0.0, edges[:-1]], edges, kinds, strict=True):
        vtype[(u >= lo) & (u < hi) & (k == 0)] = int(kind)
    # A reload reloads the page of the user's last click that was not a reload; framed
    # links, downloads and embeds go to a page of their own (never a host's root).
    first_click = np.r_[True, click_user[1:] != click_user[:-1]]
    vtype[(vtype == VisitType.RELOAD) & first_click] = int(VisitType.LINK)
    reload = vtype == VisitType.RELOAD
    source = np.maximum.accumulate(np.where(reload, 0, np.arange(click_host.size)))
    click_host, slot = click_host[source], slot[source]
    odd = np.isin(vtype, (VisitType.FRAMED_LINK, VisitType.DOWNLOAD, VisitType.EMBED))
    slot[odd] = np.where(slot[odd] == 0, 1 + n_sub[click_host[odd]], slot[odd])
    del u, first_click, reload, source, odd, deep

    # Bookmarks: roots of hosts clicked >= 3 times, from their first click on.
    first_time = np.full(n_hosts, np.inf)
    np.minimum.at(first_time, click_host, times)
    # (bookmarked in the history period, when first visited)
    bookmarked_host = (host_clicks >= 3) & (rng.random(n_hosts) < cfg.bookmark_share)
    bookmarked_host &= first_time < cfg.history_days
    later_root = bookmarked_host[click_host] & (slot == 0) & (times > first_time[click_host])
    from_bookmark = later_root & (vtype == VisitType.LINK)
    from_bookmark &= rng.random(click_host.size) < cfg.bookmark_visit_share
    vtype[from_bookmark] = int(VisitType.BOOKMARK)

    # Redirects: some root visits of redirecting hosts go through the source page (slot
    # -1); a 301 visit on the root follows, with from_visit = the source visit.
    via = (slot == 0) & redirect_host[click_host] & (vtype != VisitType.RELOAD)
    via &= rng.random(click_host.size) < cfg.redirect_visit_share
    src = np.flatnonzero(via)
    v_host = np.concatenate([click_host, click_host[src]])
    v_slot = np.concatenate([np.where(via, -1, slot), np.zeros(src.size, dtype=np.int64)])
    v_time = np.concatenate([times, times[src]])  # same instant, after its source
    v_type = np.concatenate([vtype, np.full(src.size, int(VisitType.REDIRECT_PERMANENT), np.int8)])
    v_from = np.concatenate([np.full(click_host.size, -1), src])
    del click_user, click_host, times, k, slot, vtype, via, src, later_root, from_bookmark

    # Imported bookmarks: never-visited root pages of hosts of their own. Host ids are then
    # renumbered in user order, so that every user's pages are contiguous.
    n_imported = rng.poisson(cfg.imported_bookmarks, n_users)
    imp_user = np.repeat(np.arange(n_users, dtype=np.int64), n_imported)
    all_host_user = np.concatenate([host_user, imp_user])
    renumber = np.empty(all_host_user.size, dtype=np.int64)
    renumber[np.argsort(all_host_user, kind="stable")] = np.arange(all_host_user.size)
    all_host_user = np.sort(all_host_user, kind="stable")
    v_host = renumber[v_host]
    b_host = renumber[np.concatenate([np.flatnonzero(bookmarked_host),
                                      n_hosts + np.arange(imp_user.size)])]  # fmt: skip
    b_time = np.concatenate([first_time[bookmarked_host], np.zeros(imp_user.size)])

    # Pages: the distinct (host, slot) visited, plus every bookmarked root, in (user,
    # host, slot) order.
    width = cfg.max_subpages + 3
    v_key = v_host * width + (v_slot + 1)
    keys, visit_page = _page_keys(v_key, b_host * width + 1, all_host_user.size, width)
    p_host, p_slot = keys // width, keys % width - 1
    del v_key, v_slot
    p_user = all_host_user[p_host]
    user_offsets = np.concatenate([[0], np.cumsum(np.bincount(p_user, minlength=n_users))])

    # Visits in time order, from_visit re-indexed (on a second helper thread, while this
    # one draws the words); before the study start: the history, after it: the browsing
    # the study replays.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrank-world") as sorter:
        in_time = sorter.submit(_time_order, v_time, v_from)
        word_rows = helper.submit(_page_words(p_host, p_slot, all_host_user.size, vocab, rng, cfg))
        helper.shutdown(wait=False)
        order_t, from_visit = in_time.result()
    visits = VisitStream(
        page=visit_page[order_t].astype(np.int64),
        time=v_time[order_t] - cfg.history_days,
        visit_type=v_type[order_t],
        from_visit=from_visit,
    )
    del order_t, from_visit, v_from, v_time, v_type, visit_page, v_host
    words, n_url = word_rows.result()
    pages = Pages(
        user_offsets=user_offsets.astype(np.int64),
        host=p_host.astype(np.int64),
        is_root=p_slot == 0,
        words=words,
        n_url_words=n_url,
        vocabulary=vocab,
    )
    past = visits.time < 0
    history, future = visits.select(past), visits.select(~past)
    del visits, past
    return BrowsingWorld(
        name="synthetic",
        pages=pages,
        history=history,
        bookmark_page=pages.root_of_host[b_host],
        bookmark_time=b_time - cfg.history_days,
        future=future,
        future_search=np.zeros(future.n_visits, dtype=bool),
        future_typed=np.full((future.n_visits, 1), -1, dtype=np.int32),
        stats=shapes.result(),
    )


def _pitman_yor_hosts(
    n_clicks: np.ndarray, rng: np.random.Generator, cfg: BrowsingConfig
) -> np.ndarray:
    """int64 local host index (0, 1, ... per user) of every click, users concatenated: the
    Pitman-Yor draw with recent copying, one step per click index for all users still
    clicking, compiled (:func:`~fedrank.data.synthetic_kernels.pitman_yor_steps`). Step
    ``k >= 1`` draws four uniforms per user still clicking, block after block; they are
    drawn for many steps at a time (the same stream)."""
    from fedrank.data.synthetic_kernels import pitman_yor_steps  # numba, on first use

    n_clicks = n_clicks.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_clicks)])
    hosts = np.zeros(int(offsets[-1]), dtype=np.int64)  # click 0: the first host, 0
    counts = np.zeros_like(hosts)
    counts[offsets[:-1]] = 1
    n_hosts = np.ones(n_clicks.size, dtype=np.int64)
    # users still clicking at step k: n_users - #(n_clicks <= k)
    clicking = n_clicks.size - np.cumsum(np.bincount(n_clicks))
    active = np.arange(n_clicks.size, dtype=np.int64)
    step, n_active = 1, n_clicks.size
    while step < clicking.size and clicking[step] > 0:
        # draws for the steps that fit in a block (at least one step)
        need = np.cumsum(4 * clicking[step:])
        n_steps = max(1, int(np.searchsorted(need, _PITMAN_YOR_BLOCK, side="right")))
        uniforms = rng.random(int(need[n_steps - 1]))
        step, n_active = pitman_yor_steps(
            step, uniforms, n_clicks, offsets, active, n_active, cfg.new_host_theta,
            cfg.new_host_discount, cfg.recent_share, cfg.recent_window, hosts, counts, n_hosts,
        )  # fmt: skip
    return hosts


#: Uniforms :func:`_pitman_yor_hosts` draws at a time, at most (bounds the temporaries).
_PITMAN_YOR_BLOCK = 1 << 22


def _session_times(
    n_clicks: np.ndarray, rng: np.random.Generator, cfg: BrowsingConfig
) -> np.ndarray:
    """float64 click times in days in ``[0, history_days + future_days)``, sorted within
    each user:
    sessions of geometric length at uniform times, exponential gaps inside a session."""
    total = int(n_clicks.sum())
    user = np.repeat(np.arange(n_clicks.size), n_clicks)
    starts_session = rng.random(total) < 1.0 / cfg.clicks_per_session
    starts_session[np.r_[0, np.cumsum(n_clicks)[:-1]]] = True
    session = np.cumsum(starts_session) - 1
    span = cfg.history_days + cfg.future_days
    session_start = rng.random(int(session[-1]) + 1) * span
    gap = rng.exponential(cfg.session_gap_minutes / MINUTES_PER_DAY, total)
    gap[starts_session] = 0.0
    within = np.cumsum(gap) - np.repeat(
        np.cumsum(gap)[starts_session] - gap[starts_session], np.bincount(session)
    )
    t = np.minimum(session_start[session] + within, np.nextafter(span, 0))
    order = group_key_order(t, user)
    return t[order]


def _page_keys(
    visit_key: np.ndarray, more_keys: np.ndarray, n_rows: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of both arrays, ascending, and each visit's index among them:
    compiled over a table of every possible key (:func:`~fedrank.data.synthetic_kernels.
    page_keys`) while that table is no larger than the keys themselves (bytes against
    int64s), else by sorting (``np.unique``, ``np.searchsorted``): many deeper pages per
    host (``max_subpages``) would make the table the world's largest array."""
    if n_rows * width <= 8 * (visit_key.size + more_keys.size):
        from fedrank.data.synthetic_kernels import page_keys  # numba, on first use

        return page_keys(visit_key, more_keys, n_rows, width)
    keys = np.unique(np.concatenate([visit_key, more_keys]))
    return keys, np.searchsorted(keys, visit_key)


def _time_order(time: np.ndarray, from_visit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The visits' time order (stable: a redirect target after its source, at the same
    instant) and ``from_visit`` (-1 or a visit's index) re-indexed into that order."""
    order = np.argsort(time, kind="stable")
    position = np.empty(order.size, dtype=np.int64)
    position[order] = np.arange(order.size)
    source = from_visit[order]
    return order, np.where(source >= 0, position[np.maximum(source, 0)], -1)


def _zipf_index(n: np.ndarray, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """int64 index in ``[0, n_i)`` with probability proportional to ``(j + 1) ** -exponent``
    for every entry (vectorized inverse-CDF over a shared table)."""
    top = int(n.max(initial=1))
    w = (np.arange(1, top + 1, dtype=np.float64)) ** -exponent
    cdf = np.cumsum(w)
    target = rng.random(n.size) * cdf[np.maximum(n, 1) - 1]
    return np.minimum(np.searchsorted(cdf, target, side="right"), np.maximum(n, 1) - 1)


def _page_words(
    page_host: np.ndarray,
    page_slot: np.ndarray,
    n_hosts: int,
    vocab: Vocabulary,
    rng: np.random.Generator,
    cfg: BrowsingConfig,
) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """Draws the pages' words and returns what lays them out (no more draws): ``(N, W)``
    words (host name, path words, title words; int16 when the vocabulary fits, else
    int32) and the URL word count.

    A host's name is a Zipf-drawn vocabulary word (popular names recur across users); a
    deeper page has one or two path words; a title has ``1 + Poisson(title_words_mean -
    1)`` Zipf words, a root page's title often starts with the site's name. Words are
    distinct within a page."""
    n = page_host.size
    zipf = 1.0 / (np.arange(vocab.n_words) + 1.0 + cfg.word_zipf_offset) ** cfg.word_zipf_exponent
    inverse_cdf = _InverseCdf(np.cumsum(zipf / zipf.sum()))

    def draw(size: int) -> np.ndarray:
        out = np.empty(size, dtype=np.int32)
        for lo in range(0, size, _WORD_ROW_BLOCK):  # in blocks: the same stream, less memory
            u = rng.random(min(_WORD_ROW_BLOCK, size - lo))
            inverse_cdf(u, out[lo : lo + u.size])
        return out

    host_name = draw(n_hosts)
    deep = page_slot != 0
    n_path = np.where(deep, 1 + (rng.random(n) * cfg.max_path_words).astype(np.int64), 0)
    n_title = 1 + rng.poisson(max(cfg.title_words_mean - 1.0, 0.0), n)
    site = (page_slot == 0) & (rng.random(n) < cfg.site_in_title)
    path_words = draw(int(n_path.sum()))  # row after row, as the rows are laid out
    title_words = draw(int(n_title.sum()))
    narrow = np.int16 if vocab.n_words <= np.iinfo(np.int16).max else np.int32

    def rows() -> tuple[np.ndarray, np.ndarray]:
        from fedrank.data.synthetic_kernels import page_word_rows  # numba, on first use

        row = (host_name[page_host], n_path, n_title, site, path_words, title_words)
        n_url = np.empty(n, dtype=np.int64)
        # a first pass finds the width: no wider array, no copy (they set a large
        # world's memory peak)
        words = np.empty((n, page_word_rows(*row, cfg.max_path_words, None, n_url)), narrow)
        page_word_rows(*row, cfg.max_path_words, words, n_url)
        return words, n_url

    return rows


#: Uniforms :func:`_page_words` draws at a time (bounds the temporaries; the same stream).
_WORD_ROW_BLOCK = 1 << 16

#: :class:`_InverseCdf` looks uniforms up in ``2 ** _CDF_BITS`` bins: two int32 tables of
#: 256 kB that stay in the core's cache, as the tables of ``2 ** 20`` bins do not (any
#: number of bins draws the same words).
_CDF_BITS = 16


class _InverseCdf:
    """``min(searchsorted(cdf, u, "right"), n - 1)`` for uniforms ``u`` in [0, 1) (the index
    drawn by inverse transform sampling), exactly, mostly by table lookup: ``u`` falls in
    the bin ``floor(u * 2**_CDF_BITS)`` (exact: a power of two), and a bin that no ``cdf``
    value splits has one answer for every ``u`` in it; a uniform in a split bin is searched
    for among the few ``cdf`` values inside its bin only."""

    def __init__(self, cdf: np.ndarray) -> None:
        self.cdf = cdf
        bins = 1 << _CDF_BITS
        edges = np.arange(bins + 1, dtype=np.float64) / bins
        # every u in bin b has its answer in first[b]..last[b] (cdf is ascending)
        self.first = np.searchsorted(cdf, edges[:-1], "right").astype(np.int32)
        self.last = np.searchsorted(cdf, np.nextafter(edges[1:], 0.0), "right").astype(np.int32)

    def __call__(self, u: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The indices of ``u`` (int32), into ``out`` when given (compiled:
        :func:`~fedrank.data.synthetic_kernels.inverse_cdf`)."""
        from fedrank.data.synthetic_kernels import inverse_cdf  # numba, on first use

        out = np.empty(u.size, np.int32) if out is None else out
        inverse_cdf(np.asarray(u, np.float64), self.first, self.last, self.cdf, out)
        return out
