"""The simulated world of the frecency study (Mozilla paper, Sections 6.1-6.3).

A :class:`FrecencyWorld` holds the users -- a :class:`~fedrank.data.browsing.BrowsingWorld`
(the calibrated synthetic one, or the real AOL log), the history Firefox keeps for them
(:class:`~fedrank.simulation.history_store.VisitStore`, adaptive history), their study
branch -- and a clock. It turns a model's weights into URL-bar searches (what each user
typed, saw and chose), records what the searches change (the selected page gets a TYPED
visit: Firefox marks a page picked in the URL bar as typed; adaptive history learns the
input), lets time pass, and turns the treatment users' searches into finite-difference
messages. Everything is vectorized over users and searches; on two cores two threads
share the heaviest steps (the URL bars' state is computed while the targets are drawn, a
large batch of searches runs in two halves), each thread on its own data, so the results
are those of one thread, bit for bit.

The frecency model is Firefox's *classic* frecency (22 weights, the one the paper tuned) or
today's *modern* frecency (5 parameters, Firefox 128+); a
:class:`~fedrank.models.frecency.scorer.PageScorer` hides the
difference.

Branches (Sec. 6.2, and the study add-on): ``treatment`` recomputes every page's frecency
with the current model whenever a model arrives; ``control`` keeps Firefox's stored
frecency -- computed with the default weights when a page is visited or bookmarked, then
multiplied by 0.975 once a day; ``control-no-decay`` recomputes with the default weights
like treatment (no decay). The loss of a search is computed as the add-on did, on the
*fresh* frecency of the shown rows under the branch's weights.

What a search is for:

* synthetic world: the paper's mock selection -- the user's hidden preference is frecency
  under ``hidden`` weights plus noise (:func:`fedrank.simulation.intent.sample_targets`),
  and the user types the site's name or another word of the page;
* AOL world: the log's own revisits in the study period, typed as the user queried
  (:mod:`fedrank.data.aol_browsing`); the other clicks of the period add plain visits as
  the clock passes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from fedrank.core.arrays import unique_values
from fedrank.data.browsing import BrowsingWorld, VisitStream
from fedrank.errors import ConfigError, DataFormatError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.classic import (
    BOOKMARK_SLOT,
    CLASSIC_SLOT_TABLE,
    N_BONUS_SLOTS,
    REDIRECT_SOURCE_SLOT,
    ClassicFrecency,
    decay_tables,
    effective_cutoffs,
)
from fedrank.models.frecency.history import PageHistories, VisitType
from fedrank.models.frecency.scorer import ClassicScorer, PageScorer, page_scorer
from fedrank.models.frecency.weights import (
    BUCKET_WEIGHT_SLICE,
    CLASSIC_INDEX,
    CUTOFF_SLICE,
    VISIT_BONUS_SLICE,
)
from fedrank.simulation.history_store import VisitStore
from fedrank.simulation.input_history import InputHistory
from fedrank.simulation.intent import race_draws, sample_targets, typed_words
from fedrank.simulation.score_cache import FLOAT32_MAX, VALIDITY_MARGIN, PageScoreCache
from fedrank.simulation.urlbar import (
    SearchBatch,
    TypingModel,
    UrlbarConfig,
    UrlbarState,
    prefix_index,
    selected_positions,
    simulate_searches,
    simulate_searches_in_halves,
)

BRANCHES: tuple[str, ...] = ("treatment", "control", "control-no-decay")
#: Batches of this many searches or more run in two halves on two threads
#: (:meth:`FrecencyWorld.search`).
TWO_THREADS_FROM = 2048
_FIRST_WEIGHT = CLASSIC_INDEX["firstBucketWeight"]
_UNVISITED_BOOKMARK = CLASSIC_INDEX["unvisitedBookmarkBonus"]
_UNVISITED_TYPED = CLASSIC_INDEX["unvisitedTypedBonus"]
#: What a URL-bar state depends on (:meth:`FrecencyWorld._state_key`).
_StateKey = tuple[bytes, bytes, bytes, int, float]
#: Pages of one row-count group: their positions in an index, and their histories.
_Group = tuple[np.ndarray, PageHistories]
#: Row-count groups of :meth:`FrecencyWorld._groups`.
_WIDTHS: tuple[int, ...] = (1, 2, 4, 10)
#: The compiled stored frecency decays integer scores up to this one, over up to
#: ``2 ** _LIFT_LEVELS - 1`` days, by table lookups (others day by day).
_LIFT_TOP, _LIFT_LEVELS = (1 << 16) - 1, 8
#: The compiled scorers' ``into`` when the values go nowhere else.
_NOWHERE = np.zeros((0, 0))

#: :meth:`FrecencyWorld._compiled_fresh` scores this many pages or more in two halves on two
#: threads (a new model's pages in a URL-bar state: about 2 million at 10,000 users).
_FRESH_HALVES_FROM = 100_000


def _classic_weights(
    params: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float, float, float]:
    """What the compiled classic scorers read of one weight vector, in their order: the
    effective cutoffs, the bucket weights, the visit bonuses with the padding slot's 0,
    the bookmark bonus, ``firstBucketWeight``, ``unvisitedBookmarkBonus`` and
    ``unvisitedTypedBonus``."""
    bonus = params[VISIT_BONUS_SLICE]
    return (
        effective_cutoffs(params[CUTOFF_SLICE]),
        params[BUCKET_WEIGHT_SLICE].copy(),
        np.append(bonus, 0.0),
        float(bonus[BOOKMARK_SLOT]),
        float(params[_FIRST_WEIGHT]),
        float(params[_UNVISITED_BOOKMARK]),
        float(params[_UNVISITED_TYPED]),
    )


def _width_groups(width: int) -> np.ndarray:
    """uint8 lookup table over row counts ``0..width``: the group of :data:`_WIDTHS` of a
    page with that many rows (the first width it fits; ``len(_WIDTHS)`` for none)."""
    rows = np.arange(width + 1)
    return np.searchsorted(np.asarray(_WIDTHS), rows, side="left").astype(np.uint8)


TREATMENT, CONTROL, CONTROL_NO_DECAY = range(3)


def assign_branches(
    n_users: int, shares: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """Branch index of every user: an exact split by ``shares`` (paper: 60/20/20), in random
    order."""
    if len(shares) != 3 or min(shares) < 0 or not np.isclose(sum(shares), 1.0):
        raise ConfigError(
            f"branch shares must be three non-negative numbers summing to 1, got {shares}"
        )
    counts = np.floor(np.asarray(shares) * n_users).astype(np.int64)
    counts[0] += n_users - counts.sum()
    return rng.permutation(np.repeat(np.arange(3), counts))


@dataclass(frozen=True)
class ClientReports:
    """The messages of the clients that searched in one iteration (vectorized form)."""

    users: np.ndarray  # (C,) user ids
    updates: np.ndarray  # (C, d) mean gradient per client
    n: np.ndarray  # (C,) searches behind each update
    loss: np.ndarray  # (C,) mean loss per client

    @classmethod
    def concat(cls, parts: list[ClientReports]) -> ClientReports:
        """Reports of consecutive client blocks as one (client order kept)."""
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _REPORT_FIELDS))


_REPORT_FIELDS: tuple[str, ...] = ("users", "updates", "n", "loss")


@dataclass(frozen=True)
class ClientSearches:
    """One iteration's searches as their clients hold them: the client half's whole input
    (Sec. 5.4). For every search, the histories of the ``k`` pages it showed (``-1`` padded
    rows invalid) and the rank the user selected; the scorer, loss scale and margin the
    clients compute the SVM loss with. A client's message depends on its own searches only,
    so any block of clients reports what it reports among all (:meth:`block`).

    Attributes:
        users: ``(C,)`` the clients' user ids, ascending.
        client: ``(S,)`` each search's client (an index into ``users``).
        selected: ``(S,)`` the selected rank of each search.
        valid: bool ``(S, k)``: which shown rows are pages.
        pages: the shown pages' histories, ``S * k`` rows, search-major.
        now: the clients' clock (days).
    """

    users: np.ndarray
    client: np.ndarray
    selected: np.ndarray
    valid: np.ndarray
    pages: PageHistories
    now: float
    scorer: PageScorer
    score_scale: str
    delta: float

    @property
    def n_clients(self) -> int:
        return int(self.users.size)

    def work(self) -> np.ndarray:
        """``(C,)`` searches per client (to balance blocks)."""
        return np.bincount(self.client, minlength=self.n_clients)

    def block(self, lo: int, hi: int) -> ClientSearches:
        """Clients ``lo .. hi - 1`` and their searches, in the same order."""
        rows = np.flatnonzero((self.client >= lo) & (self.client < hi))
        k = self.valid.shape[1]
        return replace(
            self,
            users=self.users[lo:hi],
            client=self.client[rows] - lo,
            selected=self.selected[rows],
            valid=self.valid[rows],
            pages=self.pages.take(rows[:, None] * k + np.arange(k)),
        )

    def reports(self, theta: np.ndarray, estimator: FiniteDifferenceEstimator) -> ClientReports:
        """Every client's message: the mean finite-difference gradient of the SVM loss over
        its own searches, with their number as its weight ``n_i``, and its mean loss."""
        n_searches, k = self.valid.shape

        def objective(rows: np.ndarray) -> np.ndarray:
            scores = scaled_scores(self.scorer.fresh(rows, self.pages, self.now), self.score_scale)
            return pointwise_svm_loss(
                scores.reshape(rows.shape[0], n_searches, k), self.selected, self.valid, self.delta
            )

        updates, n, loss = estimator.estimate_clients(theta, objective, self.client, self.n_clients)
        return ClientReports(users=self.users, updates=updates, n=n, loss=loss)


@dataclass(frozen=True)
class Searches:
    """Searches to run: who, for which page, typing which words (``-1`` padded)."""

    users: np.ndarray
    targets: np.ndarray
    typed: np.ndarray

    @property
    def n(self) -> int:
        return int(self.users.size)


class FrecencyWorld:
    """Users, their history and branches, the URL bar and the clock (module docstring).

    Args:
        browsing: the users' pages and history. The history visits move into the store
            (:attr:`store`): :attr:`browsing` keeps everything else, with an empty
            ``history`` (a large world would otherwise hold its history twice).
        hidden: the hidden weights of the users' true preference (synthetic worlds; ``None``
            for worlds whose searches are real, AOL).
        rng: randomness of the branch assignment.
        shares: treatment / control / control-no-decay shares.
        noise_var: variance of the Gaussian noise on the users' preference (paper: 30).
        decay_rate: Firefox's daily frecency decay for the classic control branch (0.975).
        delta: the SVM margin ``Delta`` (on ``score_scale``); ``None``: the model's default.
        score_scale: ``"log"`` or ``"raw"``; ``None``: the model's default.
        typing: how users type and read (:class:`~fedrank.simulation.urlbar.TypingModel`).
        urlbar: the URL bar's layout.
        host_share: how often a synthetic user types the site's name first.
        model: ``"classic"`` (default) or ``"modern"``, or a :class:`PageScorer` class.
    """

    def __init__(
        self,
        browsing: BrowsingWorld,
        hidden: np.ndarray | None,
        rng: np.random.Generator,
        *,
        shares: tuple[float, float, float] = (0.6, 0.2, 0.2),
        noise_var: float = 30.0,
        decay_rate: float = 0.975,
        delta: float | None = None,
        score_scale: str | None = None,
        typing: TypingModel | None = None,
        urlbar: UrlbarConfig | None = None,
        host_share: float = 0.7,
        model: str | type[PageScorer] = "classic",
    ) -> None:
        if browsing.n_users < 3:
            raise ConfigError(
                f"the study needs at least 3 users (one per branch), got {browsing.n_users}"
            )
        scorer_class = page_scorer(model) if isinstance(model, str) else model
        self.scorer_class = scorer_class
        self.scorer: PageScorer = scorer_class()
        self.pages = browsing.pages
        # the URL bar's word index is built on a helper thread while the visits are stored
        # (search waits for it)
        helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrank-index")
        self._indexed = helper.submit(prefix_index, self.pages)
        helper.shutdown(wait=False)
        self.store = VisitStore.from_world(browsing)
        none = np.zeros(browsing.history.n_visits, dtype=bool)
        self.browsing = replace(browsing, history=browsing.history.select(none))
        self.inputs = InputHistory(self.pages.vocabulary.n_words)
        self.branch = assign_branches(browsing.n_users, shares, rng)
        self.noise_var = noise_var
        if not (np.isfinite(decay_rate) and 0.0 < decay_rate <= 1.0):
            raise ConfigError(f"decay_rate must be in (0, 1], got {decay_rate}")
        self.decay_rate = decay_rate
        self.score_scale = scorer_class.default_score_scale if score_scale is None else score_scale
        scaled_scores(np.zeros(1), self.score_scale)  # validates the name
        self.delta = scorer_class.default_delta(self.score_scale) if delta is None else delta
        self.typing = typing or TypingModel()
        self.urlbar = urlbar or UrlbarConfig()
        self.host_share = host_share
        self.hidden = None if hidden is None else np.asarray(hidden, dtype=np.float64)
        self.now = 0.0
        self._future_next = 0  # the next replayed visit (AOL)
        # scores kept between searches (PageScoreCache): per fixed vector (the hidden
        # preference, the defaults), the control branch's stored frecency, and one slot
        # for the last model scored twice in a row
        self._caches: dict[bytes, PageScoreCache] = {}
        self._stored_cache = PageScoreCache(self.store, 2)
        self._model_slot: tuple[bytes, PageScoreCache] | None = None
        self._last_params = b""
        # kept per page in step with the store (_sync_kept): the listable pages, the hosts
        # holding a bookmark, and for classic frecency every stored row's bonus slot
        n = self.pages.n_pages
        self._kept_version = -1
        self._listable = np.zeros(n, dtype=bool)
        self._listed: tuple[np.ndarray, np.ndarray] | None = None
        # a state computed ahead by draw_searches: (its _state_key, the state)
        self._ahead: tuple[_StateKey, UrlbarState] | None = None
        self._host_bookmarked = np.zeros(int(self.pages.host.max(initial=-1)) + 1, dtype=bool)
        self._host_known = np.zeros_like(self._host_bookmarked)
        classic = isinstance(self.scorer, ClassicScorer)
        self._slots = np.zeros(self.store.time.shape, np.uint8, order="F") if classic else None
        self._n_sampled = np.zeros(n, dtype=np.int8) if classic else None
        # fresh classic frecency of a model seen once is scored in compiled code (float64)
        self._compiled = classic and not self.scorer.frecency.float32
        self._width_group = _width_groups(self.store.width)
        self._decay_lift: np.ndarray | None = None  # the stored frecency's decay tables

    # ------------------------------------------------------------------ basic facts

    @property
    def n_users(self) -> int:
        return int(self.branch.size)

    def set_branches(self, branches: np.ndarray) -> None:
        """Put user ``u`` in branch ``branches[u]`` (0 treatment, 1 control, 2
        control-no-decay), e.g. as a real server assigned them."""
        b = np.asarray(branches)
        if (
            b.shape != self.branch.shape
            or b.dtype.kind not in "iu"
            or not np.isin(b, (0, 1, 2)).all()
        ):
            raise ConfigError(
                f"branches must be {self.n_users} integers in 0..2 (one per user), got shape "
                f"{b.shape} and dtype {b.dtype}"
            )
        self.branch = b.astype(np.int64)

    @property
    def page_branch(self) -> np.ndarray:
        return self.branch[self.pages.owner]

    def users_of(self, branch: int) -> np.ndarray:
        return np.flatnonzero(self.branch == branch)

    def histories(self, index: np.ndarray | None = None) -> PageHistories:
        """The histories of the pages at ``index`` (all by default) at the current time."""
        return self.store.histories(self.now, index)

    def _groups(self, index: np.ndarray) -> list[tuple[np.ndarray, int]]:
        """The pages at ``index`` in groups of similar row counts, each as narrow as its
        rows (most pages have one or two visits: scoring ten columns for every page would
        mostly score padding): ``(positions in index, width)`` per group of
        :data:`_WIDTHS`, positions ascending."""
        group = self._width_group[self.store.n_rows()[index]]
        order = np.argsort(group, kind="stable")
        counts = np.bincount(group, minlength=len(_WIDTHS) + 1)
        out = []
        lo = 0
        for g, width in enumerate(_WIDTHS):
            hi = lo + int(counts[g])
            if hi > lo:
                out.append((order[lo:hi], width))
            lo = hi
        return out

    def _by_width(self, index: np.ndarray) -> list[_Group]:
        """The histories of the pages at ``index`` in the groups of :meth:`_groups`:
        ``(positions in index, histories)`` per group."""
        return [
            (pos, self.store.histories(self.now, index[pos], width))
            for pos, width in self._groups(index)
        ]

    def _score_group(
        self, params: np.ndarray, index: np.ndarray, width: int, *, limits: bool = True
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None]:
        """Fresh frecency of the pages at ``index`` (one group of :meth:`_groups`) under
        one parameter vector, how long the values stay valid (``fresh_age_limits``; empty
        unless ``limits``), and the rows' times when read here. Classic frecency reads the
        kept bonus slots and the rows' ages only; other scorers read the histories."""
        none = (np.zeros((0, 0)), np.zeros(0))
        if self._slots is None:
            pages = self.store.histories(self.now, index, width)
            values = self.scorer.fresh(params, pages, self.now)
            return values, self.scorer.fresh_age_limits(params, pages) if limits else none, None
        store = self.store
        times, age, _ = self._row_ages(index, width)
        bookmarked = store.bookmarked[index]
        scorer = self.scorer
        assert isinstance(scorer, ClassicScorer) and self._n_sampled is not None
        values = scorer.frecency.score_slots(
            params,
            ClassicFrecency.slotted(age, self._slots[index, :width], bookmarked),
            store.visit_count[index],
            self._n_sampled[index],
            bookmarked,
            store.typed[index],
        )
        if not limits:
            return values, none, times
        return values, (scorer.age_limits(params, age), np.full(index.size, np.inf)), times

    def _row_ages(self, index: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(times, ages, real)`` of the first ``width`` stored rows of the pages at
        ``index``: the ages in whole days as :meth:`VisitStore.histories` computes them
        (0 where there is no row), and which rows are real."""
        times = self.store.time[index, :width]
        age = self.now - times
        np.trunc(age, out=age)
        real = ~np.isnan(age)
        age[~real] = 0.0
        return times, age, real

    def _fresh(
        self, params: np.ndarray, index: np.ndarray, into: np.ndarray | None = None
    ) -> np.ndarray:
        """Fresh frecency of the pages at ``index`` under one parameter vector (kept
        between calls for the hidden preference, the defaults and a model used twice in a
        row: :class:`~fedrank.simulation.score_cache.PageScoreCache`); also written at
        those pages of both rows of ``into`` (``(2, N)``: a URL-bar state's stored and
        origin frecency) when given."""
        params = np.asarray(params, dtype=np.float64)
        cache = self._params_cache(params)
        if self._compiled:
            into = _NOWHERE if into is None else into
            if cache is None:
                return self._compiled_fresh(params, index, into)
            return self._kept_fresh(cache, params, index, into)
        if cache is None:
            values = self._fresh_once(params, index)
        else:
            values = self._cached(cache, index, self._fresh_scorer(params))[0]
        if into is not None:
            into[0, index] = into[1, index] = values
        return values

    def _kept_fresh(
        self,
        cache: PageScoreCache,
        params: np.ndarray,
        index: np.ndarray,
        into: np.ndarray = _NOWHERE,
    ) -> np.ndarray:
        """``cache``'s fresh classic frecency of the pages at ``index`` under ``params``,
        the stale ones scored again first, in one compiled pass
        (:func:`~fedrank.simulation.classic_kernels.kept_fresh`: the values and validity
        :meth:`_cached` gives), also written into ``into`` (:meth:`_fresh`)."""
        from fedrank.simulation.classic_kernels import kept_fresh

        rows = self._page_rows()
        values, until = cache.synced()
        weights = _classic_weights(params)
        return kept_fresh(
            np.asarray(index, dtype=np.int64), until, values, float(self.now), *rows,
            np.append(np.floor(weights[0]), np.inf), *weights, self.scorer.frecency.rounding,
            VALIDITY_MARGIN, FLOAT32_MAX, into,
        )  # fmt: skip

    def _page_rows(self) -> tuple[np.ndarray, ...]:
        """What the compiled classic scorers read of every page, in their order, brought
        up to the store's changes: its sampled rows and their times, the rows' bonus
        slots, bookmarked, visit count, sampled count and typed."""
        self._sync_kept()
        store = self.store
        assert self._slots is not None and self._n_sampled is not None
        return (
            store.n_rows(), store.time, self._slots, store.bookmarked, store.visit_count,
            self._n_sampled, store.typed,
        )  # fmt: skip

    def _fresh_once(self, params: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Fresh frecency of the pages at ``index`` (any order, repeats allowed) under a
        vector scored once, nothing kept: compiled for classic frecency, else by groups of
        :meth:`_groups`."""
        if self._compiled:
            return self._compiled_fresh(params, index)
        self._sync_kept()
        out = np.zeros(index.size)
        for pos, width in self._groups(index):
            out[pos] = self._score_group(params, index[pos], width, limits=False)[0]
        return out

    def _compiled_fresh(
        self, params: np.ndarray, index: np.ndarray, into: np.ndarray = _NOWHERE
    ) -> np.ndarray:
        """Fresh classic frecency of the pages at ``index`` (any order, repeats allowed):
        their points from the kept bonus slots and Firefox's rounding, in compiled code,
        the same bits as :meth:`_score_group`
        (:func:`~fedrank.simulation.classic_kernels.fresh_frecency`), also written into
        ``into`` (:meth:`_fresh`)."""
        from fedrank.simulation.classic_kernels import fresh_frecency

        index = np.asarray(index, dtype=np.int64)
        args = (
            float(self.now), *self._page_rows(), *_classic_weights(params),
            self.scorer.frecency.rounding, into,
        )  # fmt: skip
        if index.size < _FRESH_HALVES_FROM:
            return fresh_frecency(index, *args)
        # two halves on two threads: each page is scored on its own, so the bits are those
        # of one pass (a page in both halves is written twice, with one value)
        half = index.size // 2
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrank-fresh") as pool:
            second = pool.submit(fresh_frecency, index[half:], *args)
            first = fresh_frecency(index[:half], *args)
            return np.concatenate([first, second.result()])

    def _fresh_scorer(
        self, params: np.ndarray
    ) -> Callable[
        [np.ndarray, int], tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None]
    ]:
        """:meth:`_score_group` under ``params``, for :meth:`_cached`."""
        return lambda at, width: self._score_group(params, at, width)

    def _stored(self, index: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """``(2, m)``: the control branch's stored and origin frecency of the pages at
        ``index`` (kept between calls); also written at those pages of ``into``'s two rows
        (``(2, N)``) when given."""
        if self._compiled and self.scorer.frecency.rounding:
            return self._kept_stored(index, _NOWHERE if into is None else into)

        def score(
            at: np.ndarray, width: int
        ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None]:
            if self._slots is None:
                pages = self.store.histories(self.now, at, width)
                values = np.stack(self.scorer.stored(pages, self.now, self.decay_rate))
                return values, self.scorer.stored_age_limits(pages), None
            # classic frecency: the kept bonus slots, and the ages as histories() has them
            store = self.store
            times, age, real = self._row_ages(at, width)
            visit_mask = store.visit_type[at, :width] != 0
            visit_mask &= real
            bookmarked = store.bookmarked[at]
            bookmark_age = np.where(
                bookmarked, np.trunc(self.now - np.nan_to_num(store.bookmark_time[at])), 0.0
            )
            scorer = self.scorer
            assert isinstance(scorer, ClassicScorer) and self._n_sampled is not None
            values = np.stack(
                scorer.frecency.stored_slots(
                    scorer.defaults(), age, visit_mask, self._slots[at, :width],
                    store.visit_count[at], self._n_sampled[at], bookmarked, store.typed[at],
                    bookmark_age, None, self.decay_rate,
                )
            )  # fmt: skip
            return values, (age, bookmark_age), times

        values = self._cached(self._stored_cache, index, score)
        if into is not None:
            into[:, index] = values
        return values

    def _kept_stored(self, index: np.ndarray, into: np.ndarray = _NOWHERE) -> np.ndarray:
        """:meth:`_stored` of classic frecency with Firefox's rounding in one compiled pass
        (:func:`~fedrank.simulation.classic_kernels.kept_stored`)."""
        from fedrank.simulation.classic_kernels import kept_stored

        rows = self._page_rows()
        values, until = self._stored_cache.synced()
        rate = float(np.float32(self.decay_rate))  # the float pref, as daily_decay binds it
        if self._decay_lift is None:
            self._decay_lift = np.stack(decay_tables(rate, _LIFT_TOP, _LIFT_LEVELS))
        return kept_stored(
            np.asarray(index, dtype=np.int64), until, values, float(self.now), *rows,
            self.store.visit_type, self.store.bookmark_time,
            *_classic_weights(self.scorer.defaults()), rate, self._decay_lift,
            VALIDITY_MARGIN, FLOAT32_MAX, into,
        )  # fmt: skip

    def _params_cache(self, params: np.ndarray) -> PageScoreCache | None:
        """The kept scores of ``params``: one cache per fixed vector (the hidden preference,
        the defaults), and one slot for a model scored twice in a row (the final model, in
        the evaluation phase); ``None`` for a model seen once (each optimization
        iteration's)."""
        key = params.tobytes()
        fixed = [p.tobytes() for p in (self.hidden, self.scorer.defaults()) if p is not None]
        if key in fixed:
            if key not in self._caches:  # (setdefault would allocate a cache every call)
                self._caches[key] = PageScoreCache(self.store)
            return self._caches[key]
        if self._model_slot is not None and self._model_slot[0] == key:
            return self._model_slot[1]
        if key != self._last_params:
            self._last_params = key
            return None
        if self._model_slot is None:
            self._model_slot = (key, PageScoreCache(self.store))
        else:  # the previous model's values go; its arrays are reused
            self._model_slot[1].clear()
            self._model_slot = (key, self._model_slot[1])
        return self._model_slot[1]

    def _cached(
        self,
        cache: PageScoreCache,
        index: np.ndarray,
        score: Callable[
            [np.ndarray, int],
            tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None],
        ],
    ) -> np.ndarray:
        """``cache``'s values of the pages at ``index``, after :meth:`_refresh` has scored
        those whose values may have changed."""
        self._sync_kept()
        self._refresh(cache, index[cache.stale(index, self.now)], score)
        return cache.values[:, index]

    def _refresh(
        self,
        cache: PageScoreCache,
        todo: np.ndarray,
        score: Callable[
            [np.ndarray, int],
            tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None],
        ],
    ) -> None:
        """Put into ``cache`` the values of the pages at ``todo``, as ``score`` gives them
        (pages of one group of :meth:`_groups` -> ``(values, (row_limits,
        bookmark_limits), times or None)``)."""
        for pos, width in self._groups(todo):
            at = todo[pos]
            values, limits, times = score(at, width)
            cache.put(at, values, *limits, self.now, reads_day=self.scorer.reads_day, times=times)

    def _sync_kept(self) -> None:
        """Bring what the world keeps per page up to the store's changes: the listable
        pages, the hosts holding a bookmark, the classic bonus slots of the stored rows."""
        store = self.store
        if self._kept_version == store.version:
            return
        changed = store.changed_since(self._kept_version)
        if changed is None:
            changed = np.arange(store.n_pages)
        listable = (store.visit_count[changed] > 0) | store.bookmarked[changed]
        was = self._listable[changed]
        became = changed[listable & ~was]  # ascending, as changed is
        if (was & ~listable).any():  # (pages only become listable: never here)
            self._listed = None
        elif self._listed is not None and became.size:  # they join the listed pages
            listed, start = self._listed
            self._listed = (
                np.insert(listed, np.searchsorted(listed, became), became),
                start + np.searchsorted(became, self.pages.user_offsets),
            )
        self._listable[changed] = listable
        # (pages only become listable and bookmarked: hosts only become known)
        self._host_bookmarked[self.pages.host[changed[store.bookmarked[changed]]]] = True
        self._host_known[self.pages.host[changed[listable]]] = True
        if self._slots is not None and changed.size:
            self._sync_slots(changed)
        self._kept_version = store.version

    def _sync_slots(self, at: np.ndarray) -> None:
        """:meth:`_sync_kept` for the classic bonus slots of the pages ``at`` (compiled:
        :func:`~fedrank.simulation.classic_kernels.row_slots`)."""
        from fedrank.simulation.classic_kernels import row_slots

        assert self._slots is not None and self._n_sampled is not None
        store = self.store
        row_slots(
            np.asarray(at, dtype=np.int64), store.visit_type, store.origin_type,
            store.redirect_target, store.visit_count, CLASSIC_SLOT_TABLE,
            REDIRECT_SOURCE_SLOT, N_BONUS_SLOTS, self._slots, self._n_sampled,
        )  # fmt: skip

    def listable(self) -> np.ndarray:
        """Pages the URL bar may show (visited or bookmarked); read-only, kept in step
        with the store."""
        self._sync_kept()
        view = self._listable.view()
        view.flags.writeable = False
        return view

    def _listed_pages(self) -> tuple[np.ndarray, np.ndarray]:
        """The listable pages (ascending) and, per user, where theirs start in them (size
        ``U + 1``)."""
        self._sync_kept()
        if self._listed is None:
            listed = np.flatnonzero(self._listable)
            self._listed = (listed, np.searchsorted(listed, self.pages.user_offsets))
        return self._listed

    # ------------------------------------------------------------------ what users search

    def draw_searches(
        self,
        users: np.ndarray,
        rng: np.random.Generator,
        *,
        state_for: np.ndarray | Callable[[], np.ndarray] | None = None,
    ) -> Searches:
        """One search per entry of ``users`` for a page drawn from the hidden preference
        (synthetic worlds): targets by :func:`sample_targets` on the fresh hidden-weight
        frecency of the users' listable pages, typed words by :func:`typed_words`.

        ``state_for``: the treatment's vector of the coming search, or what returns it once
        known (e.g. the result of a server step running meanwhile); the searching users'
        :meth:`state` under it (which does not read the targets) is computed on a second
        thread while the targets are drawn, and the next :meth:`state` call for the same
        vector and users, history and time returns it. The two threads score under
        different vectors into different caches; when the hidden preference is the
        vector or the defaults (one cache), the state is left to :meth:`state`. An error
        raised by ``state_for`` is raised here."""
        if self.hidden is None:
            raise ConfigError(
                f"the {self.browsing.name} world has real searches and no hidden preference; "
                "use due_searches"
            )
        self._ahead = None  # (an older state ahead is not used again: free it)
        users = np.asarray(users)
        if users.ndim != 1 or (users.size and users.dtype.kind not in "iu"):
            raise DataFormatError(
                f"users must be a 1-D integer array, got {users.dtype} {users.shape}"
            )
        users = users.astype(np.int64)
        if users.size and (users.min() < 0 or users.max() >= self.n_users):
            raise DataFormatError(f"user ids must be in 0..{self.n_users - 1}")
        searching = unique_values(users)
        cache = self._params_cache(self.hidden)
        assert cache is not None  # a fixed vector: its scores are kept
        self._sync_kept()  # what both threads read is brought up to date here, once
        self._listed_pages()
        if state_for is None:
            return self._draw(users, searching, cache, rng)
        later: Callable[[], np.ndarray] | None
        if callable(state_for):
            later = state_for
        else:
            vector = self._state_vector(state_for)  # (checked before drawing)
            later = None if vector is None else vector.copy
        if later is None or self.hidden.tobytes() == self.scorer.defaults().tobytes():
            # one cache for both threads: the state is left to state()
            searches = self._draw(users, searching, cache, rng)
            if later is not None:
                self._state_vector(later())  # (what it raises is raised here)
            return searches
        self._params_cache(self.scorer.defaults())  # its cache exists before the thread
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrank-state") as pool:
            ahead = pool.submit(self._state_ahead, later, searching)
            searches = self._draw(users, searching, cache, rng)
            self._ahead = ahead.result()
        return searches

    def _state_vector(self, theta: np.ndarray) -> np.ndarray | None:
        """``theta`` checked as one vector of weights; ``None`` when the state under it
        would share a score cache with the draws (the hidden preference is ``theta`` or the
        defaults, which the state scores the control-no-decay branch with)."""
        assert self.hidden is not None  # (draw_searches checked)
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != self.hidden.shape:
            raise ConfigError(
                f"state_for must be one vector of {self.hidden.size} {self.scorer.model} "
                f"weights, got shape {theta.shape}"
            )
        shared = (theta.tobytes(), self.scorer.defaults().tobytes())
        return None if self.hidden.tobytes() in shared else theta

    def _state_ahead(
        self, state_for: Callable[[], np.ndarray], users: np.ndarray
    ) -> tuple[_StateKey, UrlbarState] | None:
        """:meth:`draw_searches`' second thread: the state of ``users`` under the vector
        ``state_for()`` returns, with its key (``None`` when it is the hidden preference).
        The control branches' part, which does not read the vector, comes first."""
        base = self._control_state(users)
        theta = self._state_vector(state_for())
        if theta is None:
            return None
        return self._state_key(theta, users), self._treatment_state(theta, users, base)

    def _draw(
        self,
        users: np.ndarray,
        searching: np.ndarray,
        cache: PageScoreCache,
        rng: np.random.Generator,
    ) -> Searches:
        """:meth:`draw_searches`' draws: the hidden preference's kept scores made current
        at the ``searching`` users' listable pages, then targets and typed words."""
        listed, start = self._listed_pages()
        n_entries = int((start[users + 1] - start[users]).sum())
        # the race's draws on a helper thread (numpy fills them without the interpreter
        # lock) while the hidden preference's stale scores are made current
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrank-draws") as pool:
            drawn = pool.submit(race_draws, rng, n_entries, self.noise_var)
            todo = cache.stale_in_runs(listed, start, searching, self.now)
            if self._compiled:
                self._kept_fresh(cache, self.hidden, todo)
            else:
                self._refresh(cache, todo, self._fresh_scorer(self.hidden))
            draws = drawn.result()
        targets = sample_targets(
            self.pages, users, cache.values[0], rng, self.noise_var,
            candidates=(listed, start), draws=draws,
        )  # fmt: skip
        typed = typed_words(self.pages, targets, rng, host_share=self.host_share)
        return Searches(users, targets, typed)

    def due_searches(self, days: float) -> Searches:
        """The known visits of the next ``days`` days: plain visits are added to the
        history (the users keep browsing), recorded revisits (AOL worlds) are returned as
        searches."""
        future = self.browsing.future
        end = self.now + days
        stop = int(np.searchsorted(future.time, end, side="left"))
        window = np.arange(self._future_next, stop)
        self._future_next = stop
        is_search = self.browsing.future_search[window]
        visits = window[~is_search]
        if visits.size:
            self.store.add(_plain_visits(future, visits))
        rows = window[is_search]
        pages = future.page[rows]
        typed = self.browsing.future_typed[rows].astype(np.int64)
        no_words = typed[:, 0] < 0
        typed[no_words, 0] = self.pages.host_word[pages[no_words]]
        typed[no_words, 1:] = -1
        return Searches(self.pages.owner[pages], pages, typed)

    # ------------------------------------------------------------------ the URL bar

    def state(self, theta: np.ndarray, users: np.ndarray) -> UrlbarState:
        """What the searching ``users``' URL bars read: stored and origin frecency by branch
        (pages of other users stay 0); computed ahead by :meth:`draw_searches` when asked."""
        users = unique_values(np.asarray(users, dtype=np.int64))
        theta = np.asarray(theta, dtype=np.float64)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == self._state_key(theta, users):
            return ahead[1]
        return self._state_of(theta, users)

    def _state_key(self, theta: np.ndarray, users: np.ndarray) -> _StateKey:
        """What the state of ``users`` depends on: the vector, the users and their branches,
        the history (its version) and the time."""
        return (
            theta.tobytes(),
            users.tobytes(),
            self.branch[users].tobytes(),
            self.store.version,
            self.now,
        )

    def _state_of(self, theta: np.ndarray, users: np.ndarray) -> UrlbarState:
        """:meth:`state` of distinct ascending ``users``, computed now."""
        return self._treatment_state(theta, users, self._control_state(users))

    def _control_state(self, users: np.ndarray) -> np.ndarray:
        """``(2, N)``: the stored and origin frecency of :meth:`_state_of` with the control
        branches' pages filled in (the stored frecency for control, the defaults' for
        control-no-decay), the treatment's still 0."""
        state = np.zeros((2, self.pages.n_pages))
        branch = self.branch[users]
        self._fresh(
            self.scorer.defaults(), self._listed_of(users[branch == CONTROL_NO_DECAY]), state
        )
        self._stored(self._listed_of(users[branch == CONTROL]), state)
        return state

    def _treatment_state(
        self, theta: np.ndarray, users: np.ndarray, state: np.ndarray
    ) -> UrlbarState:
        """:meth:`_state_of` from :meth:`_control_state`'s arrays: the treatment's pages
        scored under ``theta``."""
        self._fresh(theta, self._listed_of(users[self.branch[users] == TREATMENT]), state)
        return UrlbarState(
            stored=state[0],
            origin=state[1],
            listable=self.listable(),
            host_bookmarked=self._host_bookmarked.copy(),
            inputs=self.inputs,
            host_known=self._host_known | self._host_bookmarked,
        )

    def search(
        self,
        searches: Searches,
        theta: np.ndarray,
        rng: np.random.Generator,
        *,
        only: np.ndarray | None = None,
    ) -> SearchBatch:
        """Run ``searches`` in the users' URL bars (treatment ranks with ``theta``). Nothing
        is recorded: call :meth:`record` once the selections should enter the history.
        ``only``: run only these searches (bool mask), with the results the whole batch
        gives them (:func:`~fedrank.simulation.urlbar.simulate_searches`). From
        :data:`TWO_THREADS_FROM` searches (run) on, their two halves run on two threads
        (:func:`~fedrank.simulation.urlbar.simulate_searches_in_halves`: the same batch,
        and ``rng`` left where one thread leaves it)."""
        self._indexed.result()  # (raises what the build raised)
        users = searches.users
        if only is not None:
            users = users[selected_positions(only, users.size)]
        state = self.state(theta, users)
        args = (self.pages, state, searches.users, searches.targets, searches.typed, rng)
        run = simulate_searches_in_halves if users.size >= TWO_THREADS_FROM else simulate_searches
        return run(*args, typing=self.typing, config=self.urlbar, only=only)

    def record(self, batch: SearchBatch) -> None:
        """What the searches leave in the profile: a TYPED visit on every wanted page (picked
        from the URL bar, or typed out when not shown), and the adaptive-history input of
        every selection made while typing the first word (not through autofill)."""
        if batch.n_searches == 0:
            return
        self.store.add(
            VisitStream(
                page=batch.target,
                time=np.full(batch.n_searches, self.now),
                visit_type=np.full(batch.n_searches, int(VisitType.TYPED), dtype=np.int8),
                from_visit=np.full(batch.n_searches, -1, dtype=np.int64),
            )
        )
        rec = batch.adaptive_input
        self.inputs.record(batch.target[rec], batch.first_word[rec], batch.first_chars[rec])

    def advance(self, days: float) -> None:
        """Let ``days`` pass: adaptive history decays once per day boundary crossed (the
        control branch's frecency decay is computed from the visit times)."""
        if days < 0:
            raise ConfigError(f"time only moves forward, got {days} days")
        crossed = math.floor(self.now + days) - math.floor(self.now)
        self.now += days
        self._ahead = None  # (a state ahead is for its time only: free it)
        self.inputs.decay(crossed, self.decay_rate)

    # ------------------------------------------------------------------ losses, messages

    def shown_frecency(self, batch: SearchBatch, theta: np.ndarray) -> np.ndarray:
        """``(S, R)`` fresh frecency of the shown rows under each user's branch weights
        (what :meth:`branch_losses` scores)."""
        flat = np.maximum(batch.shown, 0).ravel()
        is_treat = self.branch[np.repeat(batch.user, batch.shown.shape[1])] == TREATMENT
        out = np.empty(flat.size)
        params = np.asarray(theta, dtype=np.float64)
        for rows, p in ((is_treat, params), (~is_treat, self.scorer.defaults())):
            out[rows] = self._fresh_once(p, flat[rows])
        return out.reshape(batch.shown.shape)

    def branch_losses(
        self, batch: SearchBatch, theta: np.ndarray, *, scale: str | None = None,
        delta: float | None = None, shown: np.ndarray | None = None,
    ) -> np.ndarray:  # fmt: skip
        """SVM loss of every search under its branch's weights (NaN where no history row
        was selected), on ``scale`` with margin ``delta`` (default: the world's loss; the
        paper's add-on loss is ``scale="raw", delta=0``). ``shown``: the batch's
        :meth:`shown_frecency` under ``theta`` when already computed (computed if ``None``)."""
        valid = batch.shown >= 0
        fresh = self.shown_frecency(batch, theta) if shown is None else shown
        scores = scaled_scores(fresh, scale or self.score_scale)
        selected = np.where(batch.found, batch.selected_rank, 0)
        loss = pointwise_svm_loss(
            scores, selected, valid | ~batch.found[:, None], self.delta if delta is None else delta
        )
        return np.where(batch.found, loss, np.nan)

    def client_searches(self, batch: SearchBatch, branch: int = TREATMENT) -> ClientSearches:
        """What the ``branch`` users who selected a history row in ``batch`` hold for their
        messages (:class:`ClientSearches`)."""
        keep = batch.found & (self.branch[batch.user] == branch)
        shown = batch.shown[keep]
        valid = shown >= 0
        users, client = np.unique(batch.user[keep], return_inverse=True)
        return ClientSearches(
            users=users,
            client=client,
            selected=batch.selected_rank[keep],
            valid=valid,
            pages=self.histories(np.where(valid, shown, 0).reshape(-1)),
            now=self.now,
            scorer=self.scorer,
            score_scale=self.score_scale,
            delta=self.delta,
        )

    def client_reports(
        self,
        batch: SearchBatch,
        theta: np.ndarray,
        estimator: FiniteDifferenceEstimator,
        branch: int = TREATMENT,
    ) -> ClientReports:
        """The finite-difference messages of the ``branch`` users who selected a history row
        in ``batch`` (:meth:`ClientSearches.reports`)."""
        return self.client_searches(batch, branch).reports(theta, estimator)

    # ------------------------------------------------------------------ helpers

    def _listed_of(self, users: np.ndarray) -> np.ndarray:
        """The pages of ``users`` (distinct, ascending) that are in the history (visited or
        bookmarked), ascending: pages the users will only discover later have nothing to
        score yet."""
        listed, start = self._listed_pages()
        first = start[users]
        count = start[users + 1] - first
        at = np.arange(int(count.sum()), dtype=np.int64)
        at += np.repeat(first - (np.cumsum(count) - count), count)
        return listed[at]


def _plain_visits(future: VisitStream, rows: np.ndarray) -> VisitStream:
    return VisitStream(
        page=future.page[rows],
        time=future.time[rows],
        visit_type=future.visit_type[rows],
        from_visit=np.full(rows.size, -1, dtype=np.int64),
    )
