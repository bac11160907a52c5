"""The simulated world of the frecency study (Mozilla paper, Sections 6.1-6.3).

A :class:`FrecencyWorld` holds the users -- a :class:`~fedrank.data.browsing.BrowsingWorld`
(the calibrated synthetic one, or the real AOL log), the history Firefox keeps for them
(:class:`~fedrank.simulation.frecency.history_store.VisitStore`, adaptive history), their
study branch -- and a clock. It turns a model's weights into URL-bar searches (what each
user typed, saw and chose), records what the searches change (the selected page gets a
TYPED visit: Firefox marks a page picked in the URL bar as typed; adaptive history learns
the input), lets time pass, and hands the treatment users' searches to their clients
(:mod:`~fedrank.simulation.frecency.messages`). Everything is vectorized over users and
searches. The pages' frecency comes from :class:`~fedrank.simulation.frecency.scoring.
PageScores`, what each branch's URL bar reads from :class:`~fedrank.simulation.frecency.
branches.BranchStates`, the pages in the history from :class:`~fedrank.simulation.frecency.
listing.ListedPages`; how the steps share two cores (the URL bars' state computed while the
targets are drawn, a large batch of searches in two halves), with the results of one
thread bit for bit, from the world's :class:`~fedrank.simulation.frecency.pipeline.
Pipeline`.

The frecency model is Firefox's *classic* frecency (22 weights, the one the paper tuned) or
today's *modern* frecency (5 parameters, Firefox 128+); a
:class:`~fedrank.models.frecency.scorer.PageScorer` hides the difference.

Branches (Sec. 6.2, and the study add-on): ``treatment`` recomputes every page's frecency
with the current model whenever a model arrives; ``control`` keeps Firefox's stored
frecency -- computed with the default weights when a page is visited or bookmarked, then
multiplied by 0.975 once a day; ``control-no-decay`` recomputes with the default weights
like treatment (no decay). The loss of a search is computed as the add-on did, on the
*fresh* frecency of the shown rows under the branch's weights.

What a search is for:

* synthetic world: the paper's mock selection -- the user's hidden preference is frecency
  under ``hidden`` weights plus noise (:func:`fedrank.simulation.frecency.intent.
  sample_targets`), and the user types the site's name or another word of the page;
* AOL world: the log's own revisits in the study period, typed as the user queried
  (:mod:`fedrank.data.aol_browsing`); the other clicks of the period add plain visits as
  the clock passes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from fedrank.core.arrays import unique_values
from fedrank.data.browsing import BrowsingWorld, VisitStream
from fedrank.errors import ConfigError, DataFormatError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.history import PageHistories, VisitType
from fedrank.models.frecency.scorer import PageScorer, page_scorer
from fedrank.simulation.frecency.branches import TREATMENT, BranchStates, assign_branches
from fedrank.simulation.frecency.history_store import VisitStore
from fedrank.simulation.frecency.input_history import InputHistory
from fedrank.simulation.frecency.intent import race_draws, sample_targets, typed_words
from fedrank.simulation.frecency.listing import ListedPages
from fedrank.simulation.frecency.messages import ClientReports, ClientSearches
from fedrank.simulation.frecency.pipeline import Pipeline
from fedrank.simulation.frecency.scoring import PageScores
from fedrank.simulation.frecency.urlbar import (
    SearchBatch,
    TypingModel,
    UrlbarConfig,
    UrlbarState,
    prefix_index,
    selected_positions,
)

__all__ = ["FrecencyWorld", "Searches"]


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
        typing: how users type and read
            (:class:`~fedrank.simulation.frecency.urlbar.TypingModel`).
        urlbar: the URL bar's layout.
        host_share: how often a synthetic user types the site's name first.
        model: ``"classic"`` (default) or ``"modern"``, or a :class:`PageScorer` class.
        pipeline: how the world's steps use the cores (``None``: the default
            :class:`~fedrank.simulation.frecency.pipeline.Pipeline`); the results are the
            same.
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
        pipeline: Pipeline | None = None,
    ) -> None:
        if browsing.n_users < 3:
            raise ConfigError(
                f"the study needs at least 3 users (one per branch), got {browsing.n_users}",
                field="n_users",
                requirement=f"must be >= 3 (one per branch), got {browsing.n_users}",
                value=browsing.n_users,
            )
        scorer_class = page_scorer(model) if isinstance(model, str) else model
        self.scorer: PageScorer = scorer_class()
        self.pipeline = pipeline or Pipeline()
        self.pages = browsing.pages
        # the URL bar's word index is built on a helper thread while the visits are stored
        # (search waits for it)
        helper = self.pipeline.helper("fedrank-index")
        self._indexed = helper.submit(prefix_index, self.pages)
        helper.shutdown(wait=False)
        self.store = VisitStore.from_world(browsing, pipeline=self.pipeline)
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
        self.scores = PageScores(
            self.store, self.scorer, fixed=() if self.hidden is None else (self.hidden,),
            decay_rate=decay_rate, pipeline=self.pipeline,
        )  # fmt: skip
        self.listing = ListedPages(self.store, self.pages)
        self.states = BranchStates(self.scores, self.listing, self.inputs)

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

    def histories(self, index: np.ndarray | None = None) -> PageHistories:
        """The histories of the pages at ``index`` (all by default) at the current time."""
        return self.store.histories(self.now, index)

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
        self.states.hold(None)  # (an older state ahead is not used again: free it)
        users = np.asarray(users)
        if users.ndim != 1 or (users.size and users.dtype.kind not in "iu"):
            raise DataFormatError(
                f"users must be a 1-D integer array, got {users.dtype} {users.shape}"
            )
        users = users.astype(np.int64)
        if users.size and (users.min() < 0 or users.max() >= self.n_users):
            raise DataFormatError(f"user ids must be in 0..{self.n_users - 1}")
        searching = unique_values(users)
        # what both threads read is brought up to date here, once, and the hidden
        # preference's kept scores exist before them
        self.scores.kept(self.hidden)
        self.scores.sync()
        self.listing.listed()
        if state_for is None:
            return self._draw(users, searching, rng)
        later: Callable[[], np.ndarray] | None
        if callable(state_for):
            later = state_for
        else:
            vector = self._state_vector(state_for)  # (checked before drawing)
            later = None if vector is None else vector.copy
        if later is None or self.hidden.tobytes() == self.scorer.defaults().tobytes():
            # one cache for both threads: the state is left to state()
            searches = self._draw(users, searching, rng)
            if later is not None:
                self._state_vector(later())  # (what it raises is raised here)
            return searches
        self.scores.kept(self.scorer.defaults())  # its cache exists before the thread
        known: Callable[[], np.ndarray] = later

        def vector() -> np.ndarray | None:
            """The state's vector once known, checked (``None``: no state ahead)."""
            return self._state_vector(known())

        with self.pipeline.helper("fedrank-state") as pool:
            ahead = pool.submit(self.states.ahead, vector, searching, self.branch, self.now)
            searches = self._draw(users, searching, rng)
            self.states.hold(ahead.result())
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

    def _draw(self, users: np.ndarray, searching: np.ndarray, rng: np.random.Generator) -> Searches:
        """:meth:`draw_searches`' draws: the hidden preference's kept scores made current
        at the ``searching`` users' listable pages, then targets and typed words."""
        assert self.hidden is not None  # (draw_searches checked)
        listed, start = self.listing.listed()
        n_entries = int((start[users + 1] - start[users]).sum())
        # the race's draws on a helper thread (numpy fills them without the interpreter
        # lock) while the hidden preference's stale scores are made current
        with self.pipeline.helper("fedrank-draws") as pool:
            drawn = pool.submit(race_draws, rng, n_entries, self.noise_var)
            true_scores = self.scores.fresh_in_runs(self.hidden, listed, start, searching, self.now)
            draws = drawn.result()
        targets = sample_targets(
            self.pages, users, true_scores, rng, self.noise_var,
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
        return self.states.state(theta, users, self.branch, self.now)

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
        gives them (:func:`~fedrank.simulation.frecency.urlbar.simulate_searches`). A large
        batch runs in two halves on two threads, with the same batch and ``rng`` left
        where one thread leaves it (:meth:`~fedrank.simulation.frecency.pipeline.
        Pipeline.search`)."""
        self._indexed.result()  # (raises what the build raised)
        users = searches.users
        if only is not None:
            users = users[selected_positions(only, users.size)]
        state = self.state(theta, users)
        return self.pipeline.search(
            self.pages, state, searches.users, searches.targets, searches.typed, rng,
            typing=self.typing, config=self.urlbar, only=only,
        )  # fmt: skip

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
        self.states.hold(None)  # (a state ahead is for its time only: free it)
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
            out[rows] = self.scores.fresh_once(p, flat[rows], self.now)
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
        messages (:class:`~fedrank.simulation.frecency.messages.ClientSearches`)."""
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
        in ``batch`` (:meth:`~fedrank.simulation.frecency.messages.ClientSearches.reports`)."""
        return self.client_searches(batch, branch).reports(theta, estimator)


def _plain_visits(future: VisitStream, rows: np.ndarray) -> VisitStream:
    return VisitStream(
        page=future.page[rows],
        time=future.time[rows],
        visit_type=future.visit_type[rows],
        from_visit=np.full(rows.size, -1, dtype=np.int64),
    )
