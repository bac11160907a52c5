"""Frecency of the stored pages under a weight vector (Mozilla paper, Sec. 6.2): what the
world's URL bars, branches and losses read, in one place (:class:`PageScores`).

Two scores of a page:

* *fresh* frecency under a vector -- the published model (treatment), Firefox's defaults
  (control-no-decay), the users' hidden preference, the shown rows of every branch;
* *stored* frecency of the control branch -- computed with the default weights as of the
  newest visit or bookmark, then multiplied by the decay rate once a day -- with the
  origin frecency (the same without the decay).

How they are computed stays in here:

* scores kept between calls (:class:`~fedrank.simulation.frecency.score_cache.
  PageScoreCache`) for every fixed vector (the hidden preference, the defaults), for the
  stored frecency, and for a model scored twice in a row (the final model, in the
  evaluation phase): only pages whose history changed or whose ages crossed a limit are
  scored again;
* classic frecency (float64) in compiled code (:mod:`~fedrank.simulation.frecency.kernels.
  classic`) from every stored row's bonus slot, kept in step with the store; other scorers
  (modern frecency, float32 classic) in numpy, on the histories in groups of similar row
  counts (:meth:`PageScores.histories_by_width`). Both give the bits of scoring the
  pages' histories directly (tests/simulation/test_classic_kernels.py,
  tests/experiments/frecency/test_frecency_study.py);
* a new model's many pages scored in two halves on two threads
  (:meth:`~fedrank.simulation.frecency.pipeline.Pipeline.in_halves`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from fedrank.models.frecency.classic import (
    BOOKMARK_SLOT,
    ClassicFrecency,
    decay_tables,
    effective_cutoffs,
)
from fedrank.models.frecency.history import PageHistories
from fedrank.models.frecency.scorer import ClassicScorer, PageScorer
from fedrank.models.frecency.weights import (
    BUCKET_WEIGHT_SLICE,
    CLASSIC_INDEX,
    CUTOFF_SLICE,
    VISIT_BONUS_SLICE,
)
from fedrank.simulation.frecency.history_store import VisitStore
from fedrank.simulation.frecency.pipeline import Pipeline
from fedrank.simulation.frecency.score_cache import PageScoreCache

if TYPE_CHECKING:
    from fedrank.simulation.frecency.kernels.classic import ClassicPages, ClassicWeights

__all__ = ["PageScores", "classic_weights"]

#: Row-count groups of :meth:`PageScores.histories_by_width`.
_WIDTHS: tuple[int, ...] = (1, 2, 4, 10)
#: The compiled stored frecency decays integer scores up to this one, over up to
#: ``2 ** _LIFT_LEVELS - 1`` days, by table lookups (others day by day).
_LIFT_TOP, _LIFT_LEVELS = (1 << 16) - 1, 8
#: The compiled scorers' ``into`` when the values go nowhere else.
_NOWHERE = np.zeros((0, 0))
_FIRST_WEIGHT = CLASSIC_INDEX["firstBucketWeight"]
_UNVISITED_BOOKMARK = CLASSIC_INDEX["unvisitedBookmarkBonus"]
_UNVISITED_TYPED = CLASSIC_INDEX["unvisitedTypedBonus"]

#: One group's scores: ``(values, (row_limits, bookmark_limits), times or None)`` of the
#: pages at an index, read at one width (what :meth:`PageScoreCache.put` keeps).
_Scored = tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None]


def _classic() -> ModuleType:
    """:mod:`fedrank.simulation.frecency.kernels.classic`, imported on first use (numba)."""
    from fedrank.simulation.frecency.kernels import classic

    return classic


def _width_groups(width: int) -> np.ndarray:
    """uint8 lookup table over row counts ``0..width``: the group of :data:`_WIDTHS` of a
    page with that many rows (the first width it fits; ``len(_WIDTHS)`` for none)."""
    rows = np.arange(width + 1)
    return np.searchsorted(np.asarray(_WIDTHS), rows, side="left").astype(np.uint8)


class PageScores:
    """Fresh and stored frecency of the pages of ``store`` (module docstring).

    Args:
        store: the users' history (read, never changed here).
        scorer: the frecency model.
        fixed: vectors whose scores are always kept (the users' hidden preference; the
            scorer's defaults always are).
        decay_rate: Firefox's daily frecency decay of the stored frecency.
        pipeline: whether a new model's many pages are scored in two halves on two
            threads.
    """

    def __init__(
        self,
        store: VisitStore,
        scorer: PageScorer,
        *,
        fixed: Iterable[np.ndarray] = (),
        decay_rate: float,
        pipeline: Pipeline,
    ) -> None:
        self.store = store
        self.scorer = scorer
        self.decay_rate = decay_rate
        self.pipeline = pipeline
        keys = [np.asarray(p, dtype=np.float64).tobytes() for p in (*fixed, scorer.defaults())]
        self._fixed: dict[bytes, PageScoreCache | None] = dict.fromkeys(keys)
        self._stored_cache = PageScoreCache(store, 2)
        # one slot for the last model scored twice in a row
        self._model_slot: tuple[bytes, PageScoreCache] | None = None
        self._last_params = b""
        # classic frecency: every stored row's bonus slot and the sampled rows, per page,
        # kept in step with the store (sync)
        classic = isinstance(scorer, ClassicScorer)
        self._version = -1
        self._slots = np.zeros(store.time.shape, np.uint8, order="F") if classic else None
        self._n_sampled = np.zeros(store.n_pages, dtype=np.int8) if classic else None
        # classic frecency in float64 is scored in compiled code
        self._compiled = isinstance(scorer, ClassicScorer) and not scorer.frecency.float32
        self._width_group = _width_groups(store.width)
        self._decay_lift: np.ndarray | None = None  # the stored frecency's decay tables

    # ------------------------------------------------------------------ fresh frecency

    def fresh(
        self, params: np.ndarray, index: np.ndarray, now: float, into: np.ndarray | None = None
    ) -> np.ndarray:
        """Fresh frecency of the pages at ``index`` under one vector at time ``now`` (kept
        between calls for the fixed vectors and a model used twice in a row); also written
        at those pages of both rows of ``into`` (``(2, N)``: a URL-bar state's stored and
        origin frecency) when given."""
        params = np.asarray(params, dtype=np.float64)
        cache = self._cache_of(params)
        if cache is None:
            return self.fresh_once(params, index, now, into)
        if self._compiled:
            return self._kept_fresh(cache, params, index, now, _NOWHERE if into is None else into)
        values = self._cached(cache, index, now, self._fresh_scorer(params, now))[0]
        if into is not None:
            into[0, index] = into[1, index] = values
        return values

    def fresh_once(
        self, params: np.ndarray, index: np.ndarray, now: float, into: np.ndarray | None = None
    ) -> np.ndarray:
        """Fresh frecency of the pages at ``index`` (any order, repeats allowed) under a
        vector scored once, nothing kept: compiled for classic frecency (a large index in
        two halves on two threads), else by groups of :meth:`histories_by_width`; also
        written into ``into`` as :meth:`fresh` does."""
        if self._compiled:
            classic = _classic()
            pages, weights = self.classic_pages(), self._weights(params)
            out = _NOWHERE if into is None else into

            def score(part: np.ndarray) -> np.ndarray:
                return classic.fresh_frecency(part, float(now), pages, weights, out)

            return self.pipeline.in_halves(score, np.asarray(index, dtype=np.int64))
        self.sync()
        values = np.zeros(index.size)
        for pos, width in self._groups(index):
            values[pos] = self._score_group(params, index[pos], width, now, limits=False)[0]
        if into is not None:
            into[0, index] = into[1, index] = values
        return values

    def fresh_in_runs(
        self,
        params: np.ndarray,
        pages: np.ndarray,
        start: np.ndarray,
        runs: np.ndarray,
        now: float,
    ) -> np.ndarray:
        """``(N,)``: the kept fresh frecency of the fixed vector ``params``, made current at
        ``pages[start[r]:start[r + 1]]`` for every ``r`` of ``runs`` (e.g. the listed pages
        of the searching users; other pages hold what was kept)."""
        self.sync()
        cache = self.kept(params)
        todo = cache.stale_in_runs(pages, start, runs, now)
        if self._compiled:
            self._kept_fresh(cache, params, todo, now)
        else:
            self._refresh(cache, todo, now, self._fresh_scorer(params, now))
        return cache.values[0]

    def kept(self, params: np.ndarray) -> PageScoreCache:
        """The kept scores of ``params``, a vector fixed from now on (made here when new:
        threads that score under different vectors then share no cache that grows)."""
        key = np.asarray(params, dtype=np.float64).tobytes()
        cache = self._fixed.get(key)
        if cache is None:  # (setdefault would allocate a cache every call)
            cache = self._fixed[key] = PageScoreCache(self.store)
        return cache

    def _cache_of(self, params: np.ndarray) -> PageScoreCache | None:
        """The kept scores of ``params``: one cache per fixed vector, and one slot for a
        model scored twice in a row (the final model, in the evaluation phase); ``None``
        for a model seen once (each optimization iteration's)."""
        key = params.tobytes()
        if key in self._fixed:
            return self.kept(params)
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

    def _kept_fresh(
        self,
        cache: PageScoreCache,
        params: np.ndarray,
        index: np.ndarray,
        now: float,
        into: np.ndarray = _NOWHERE,
    ) -> np.ndarray:
        """``cache``'s fresh classic frecency of the pages at ``index`` under ``params``,
        the stale ones scored again first, in one compiled pass
        (:func:`~fedrank.simulation.frecency.kernels.classic.kept_fresh`: the values and
        validity :meth:`_cached` gives), also written into ``into`` (:meth:`fresh`)."""
        pages = self.classic_pages()
        values, until = cache.synced()
        return _classic().kept_fresh(
            np.asarray(index, dtype=np.int64), values, until, float(now), pages,
            self._weights(params), into,
        )  # fmt: skip

    def _fresh_scorer(self, params: np.ndarray, now: float) -> Callable[[np.ndarray, int], _Scored]:
        """:meth:`_score_group` under ``params`` at ``now``, for :meth:`_cached`."""
        return lambda at, width: self._score_group(params, at, width, now)

    # ------------------------------------------------------------------ stored frecency

    def stored(self, index: np.ndarray, now: float, into: np.ndarray | None = None) -> np.ndarray:
        """``(2, m)``: the control branch's stored and origin frecency of the pages at
        ``index`` at time ``now`` (kept between calls); also written at those pages of
        ``into``'s two rows (``(2, N)``) when given."""
        if self._compiled and self.scorer.frecency.rounding:  # type: ignore[attr-defined]
            return self._kept_stored(index, now, _NOWHERE if into is None else into)

        def score(at: np.ndarray, width: int) -> _Scored:
            if self._slots is None:
                pages = self.store.histories(now, at, width)
                values = np.stack(self.scorer.stored(pages, now, self.decay_rate))
                return values, self.scorer.stored_age_limits(pages), None
            # classic frecency: the kept bonus slots, and the ages as histories() has them
            store = self.store
            times, age, real = self._row_ages(at, width, now)
            visit_mask = store.visit_type[at, :width] != 0
            visit_mask &= real
            bookmarked = store.bookmarked[at]
            bookmark_age = np.where(
                bookmarked, np.trunc(now - np.nan_to_num(store.bookmark_time[at])), 0.0
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

        values = self._cached(self._stored_cache, index, now, score)
        if into is not None:
            into[:, index] = values
        return values

    def _kept_stored(self, index: np.ndarray, now: float, into: np.ndarray) -> np.ndarray:
        """:meth:`stored` of classic frecency with Firefox's rounding in one compiled pass
        (:func:`~fedrank.simulation.frecency.kernels.classic.kept_stored`)."""
        pages = self.classic_pages()
        values, until = self._stored_cache.synced()
        rate = float(np.float32(self.decay_rate))  # the float pref, as daily_decay binds it
        if self._decay_lift is None:
            self._decay_lift = np.stack(decay_tables(rate, _LIFT_TOP, _LIFT_LEVELS))
        return _classic().kept_stored(
            np.asarray(index, dtype=np.int64), values, until, float(now), pages,
            classic_weights(self.scorer.defaults(), rounding=True), rate, self._decay_lift,
            into,
        )  # fmt: skip

    # ------------------------------------------------------------------ the numpy path

    def histories_by_width(
        self, index: np.ndarray, now: float
    ) -> list[tuple[np.ndarray, PageHistories]]:
        """The histories at ``now`` of the pages at ``index`` in groups of similar row
        counts, as the numpy path scores them: ``(positions in index, histories)`` per
        group."""
        return [
            (pos, self.store.histories(now, index[pos], width))
            for pos, width in self._groups(index)
        ]

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

    def _score_group(
        self, params: np.ndarray, index: np.ndarray, width: int, now: float, *, limits: bool = True
    ) -> _Scored:
        """Fresh frecency of the pages at ``index`` (one group of :meth:`_groups`) under
        one parameter vector, how long the values stay valid (``fresh_age_limits``; empty
        unless ``limits``), and the rows' times when read here. Classic frecency reads the
        kept bonus slots and the rows' ages only; other scorers read the histories."""
        none = (np.zeros((0, 0)), np.zeros(0))
        if self._slots is None:
            pages = self.store.histories(now, index, width)
            values = self.scorer.fresh(params, pages, now)
            return values, self.scorer.fresh_age_limits(params, pages) if limits else none, None
        store = self.store
        times, age, _ = self._row_ages(index, width, now)
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

    def _row_ages(
        self, index: np.ndarray, width: int, now: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(times, ages, real)`` of the first ``width`` stored rows of the pages at
        ``index``: the ages in whole days as :meth:`VisitStore.histories` computes them
        (0 where there is no row), and which rows are real."""
        times = self.store.time[index, :width]
        age = now - times
        np.trunc(age, out=age)
        real = ~np.isnan(age)
        age[~real] = 0.0
        return times, age, real

    def _cached(
        self,
        cache: PageScoreCache,
        index: np.ndarray,
        now: float,
        score: Callable[[np.ndarray, int], _Scored],
    ) -> np.ndarray:
        """``cache``'s values of the pages at ``index``, after :meth:`_refresh` has scored
        those whose values may have changed."""
        self.sync()
        self._refresh(cache, index[cache.stale(index, now)], now, score)
        return cache.values[:, index]

    def _refresh(
        self,
        cache: PageScoreCache,
        todo: np.ndarray,
        now: float,
        score: Callable[[np.ndarray, int], _Scored],
    ) -> None:
        """Put into ``cache`` the values of the pages at ``todo``, as ``score`` gives them
        (pages of one group of :meth:`_groups` -> ``(values, (row_limits,
        bookmark_limits), times or None)``)."""
        for pos, width in self._groups(todo):
            at = todo[pos]
            values, limits, times = score(at, width)
            cache.put(at, values, *limits, now, reads_day=self.scorer.reads_day, times=times)

    # ------------------------------------------------------------------ the compiled path

    def sync(self) -> None:
        """Bring the classic bonus slots of the stored rows up to the store's changes
        (compiled: :func:`~fedrank.simulation.frecency.kernels.classic.row_slots`); call it
        before threads score at once."""
        store = self.store
        if self._version == store.version:
            return
        if self._slots is not None:
            assert self._n_sampled is not None
            changed = store.changed_since(self._version)
            at = np.arange(store.n_pages) if changed is None else changed
            if at.size:
                _classic().row_slots(
                    np.asarray(at, dtype=np.int64), store.rows(), store.visit_count,
                    self._slots, self._n_sampled,
                )  # fmt: skip
        self._version = store.version

    def classic_pages(self) -> ClassicPages:
        """What the compiled classic scorers read of every page, brought up to the store's
        changes (:class:`~fedrank.simulation.frecency.kernels.classic.ClassicPages`)."""
        self.sync()
        store = self.store
        assert self._slots is not None and self._n_sampled is not None, "classic frecency only"
        return _classic().ClassicPages(
            store.n_rows(), store.time, self._slots, store.bookmarked, store.visit_count,
            self._n_sampled, store.typed, store.visit_type, store.bookmark_time,
        )  # fmt: skip

    def _weights(self, params: np.ndarray) -> ClassicWeights:
        """:func:`classic_weights` of ``params`` with the scorer's rounding."""
        assert isinstance(self.scorer, ClassicScorer)
        return classic_weights(params, rounding=self.scorer.frecency.rounding)


def classic_weights(params: np.ndarray, *, rounding: bool) -> ClassicWeights:
    """What the compiled classic scorers read of one weight vector
    (:class:`~fedrank.simulation.frecency.kernels.classic.ClassicWeights`): the effective
    cutoffs, the bucket weights, the visit bonuses with the padding slot's 0, the bookmark
    bonus, ``firstBucketWeight``, ``unvisitedBookmarkBonus``, ``unvisitedTypedBonus``, and
    Firefox's ``rounding`` (or the unrounded variant)."""
    bonus = params[VISIT_BONUS_SLICE]
    return _classic().ClassicWeights(
        effective_cutoffs(params[CUTOFF_SLICE]),
        params[BUCKET_WEIGHT_SLICE].copy(),
        np.append(bonus, 0.0),
        float(bonus[BOOKMARK_SLOT]),
        float(params[_FIRST_WEIGHT]),
        float(params[_UNVISITED_BOOKMARK]),
        float(params[_UNVISITED_TYPED]),
        bool(rounding),
    )
