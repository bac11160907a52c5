"""How a frecency simulation shares the machine's cores: its helper threads, the work it
splits in two halves, the overlap of a study's iterations and numpy's BLAS threads, in one
object (:class:`Pipeline`) that the world (:class:`~fedrank.simulation.frecency.world.
FrecencyWorld`), its history store and the study
(:func:`~fedrank.experiments.frecency.study.run_study`) take as a parameter.

Where the simulator runs two threads, each thread works on its own data (another cache,
another half of the pages or of the searches, a copy of the random generator), so the
results are those of one thread, bit for bit, whatever the knobs say: the knobs change the
speed only (docs/frecency.md, Speed). The threads pay on two cores because numpy and the
compiled passes (numba, ``nogil``) release the interpreter lock while they work.

The places that use it:

* the world: the URL bar's word index built on a helper thread while the visits are
  stored; the URL bars' state computed while the searches' targets are drawn, the race's
  random draws while the hidden preference's scores are made current; a large batch of
  searches run in two halves (:meth:`Pipeline.search`);
* the scores (:class:`~fedrank.simulation.frecency.scoring.PageScores`): a new model's
  pages scored in two halves (:meth:`Pipeline.in_halves`);
* the history store: a large batch of visits merged in two halves of the pages;
* the study: the server half of an iteration (the clients' messages, the server's step)
  overlapping the next iteration's draws, the evaluation's statistics module imported
  meanwhile, and both phases on :attr:`Pipeline.blas_threads` BLAS threads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from numbers import Integral
from typing import Any, TypeVar

import numpy as np
from threadpoolctl import threadpool_limits

from fedrank.core.validation import Accepts, Interval, Validated
from fedrank.data.browsing import Pages
from fedrank.simulation.frecency.urlbar import (
    SearchBatch,
    TypingModel,
    UrlbarConfig,
    UrlbarState,
    prefix_index,
    selected_positions,
    simulate_searches,
)

__all__ = ["Pipeline"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Pipeline(Validated):
    """The simulator's use of the cores (module docstring); the results never depend on it.

    Attributes:
        threads: run helper threads at all; ``False`` runs everything in the caller's
            thread, one step after the other (no halves, no overlap).
        halves_from: URL-bar batches of this many searches or more run in two halves on
            two threads (:meth:`search`).
        fresh_halves_from: a model seen once scores this many pages or more in two halves
            on two threads (:meth:`in_halves`: a new model's pages in a URL-bar state,
            about 2 million at 10,000 users).
        overlap_server_half: a study's server half of an iteration runs on a second thread
            while the next iteration's searches are drawn.
        blas_threads: numpy's BLAS threads while a study's phases run (the study's own
            threads fill the cores; OpenBLAS's spinning second thread only takes time
            from them); ``None`` leaves the caller's setting.
    """

    threads: bool = True
    halves_from: int = 2048
    fresh_halves_from: int = 100_000
    overlap_server_half: bool = True
    blas_threads: int | None = 1

    ACCEPTS = {
        "threads": bool,
        "halves_from": Interval(Integral, 1, None),
        "fresh_halves_from": Interval(Integral, 1, None),
        "overlap_server_half": bool,
        "blas_threads": Accepts(Interval(Integral, 1, None), None, note="None: the caller's"),
    }

    def helper(self, name: str) -> Executor:
        """An executor for work beside the caller's thread: one helper thread named
        ``name`` (leaving its ``with`` block waits for the work), or without
        :attr:`threads` one that runs every task at once in the caller's thread."""
        if self.threads:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return _InLine()

    def blas(self) -> AbstractContextManager[Any]:
        """A ``with`` block in which numpy's products run on :attr:`blas_threads` BLAS
        threads (threadpoolctl; the caller's setting comes back after it)."""
        if self.blas_threads is None:
            return nullcontext()
        return threadpool_limits(limits=self.blas_threads, user_api="blas")

    def in_halves(self, score: Callable[[np.ndarray], np.ndarray], index: np.ndarray) -> np.ndarray:
        """``score(index)`` for a function that scores every entry on its own (any order,
        repeats allowed): from :attr:`fresh_halves_from` entries on, the two halves on two
        threads, concatenated (an entry in both halves is written twice, with one value)."""
        if not self.threads or index.size < self.fresh_halves_from:
            return score(index)
        half = index.size // 2
        with self.helper("fedrank-fresh") as pool:
            second = pool.submit(score, index[half:])
            first = score(index[:half])
            return np.concatenate([first, second.result()])

    def search(
        self,
        pages: Pages,
        state: UrlbarState,
        users: np.ndarray,
        targets: np.ndarray,
        typed: np.ndarray,
        rng: np.random.Generator,
        *,
        typing: TypingModel | None = None,
        config: UrlbarConfig | None = None,
        only: np.ndarray | None = None,
    ) -> SearchBatch:
        """:func:`~fedrank.simulation.frecency.urlbar.simulate_searches`; from
        :attr:`halves_from` searches run (those ``only`` selects, if given) on, the first
        and the second half on two threads, the same batch bit for bit: each half gets the
        attention draws it gets in the whole batch (the second from a copy of ``rng``),
        and ``rng`` ends where the whole batch leaves it -- one uniform per search for
        every character up to the longest search's, as many as the half holding that
        search consumed (with ``only``, elsewhere, as ``simulate_searches`` leaves it)."""
        n = np.asarray(users).size
        picked = np.arange(n) if only is None else selected_positions(only, n)
        if not self.threads or picked.size < self.halves_from:
            return simulate_searches(
                pages, state, users, targets, typed, rng, typing=typing, config=config,
                only=only,
            )  # fmt: skip
        prefix_index(pages)  # built once, before the threads read it
        halves = []
        for part in (picked[: picked.size // 2], picked[picked.size // 2 :]):
            mask = np.zeros(n, dtype=bool)
            mask[part] = True
            halves.append(mask)
        other = copy.deepcopy(rng)

        def run(generator: np.random.Generator, half: np.ndarray) -> SearchBatch:
            return simulate_searches(
                pages, state, users, targets, typed, generator, typing=typing, config=config,
                only=half,
            )  # fmt: skip

        with self.helper("fedrank-urlbar") as pool:
            future = pool.submit(run, other, halves[1])
            first = run(rng, halves[0])
            second = future.result()
        if second.chars_typed.max(initial=0) > first.chars_typed.max(initial=0):
            rng.bit_generator.state = other.bit_generator.state
        return SearchBatch.concatenate([first, second])


class _InLine(Executor):
    """An executor that runs every task at once in the caller's thread (a
    :class:`Pipeline` without threads): the task's result or error waits in its future."""

    def submit(  # type: ignore[override]
        self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any
    ) -> Future[_T]:
        future: Future[_T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:  # (raised again by future.result(), as a thread's is)
            future.set_exception(error)
        return future
