"""How the frecency simulation uses the cores (``fedrank.simulation.frecency.pipeline``):
the knobs are checked, work split in halves gives one pass's result, and without threads
every task runs in the caller's thread, its error raised where a thread's would be."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from fedrank.errors import ConfigError
from fedrank.simulation.frecency.pipeline import Pipeline


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"halves_from": 0}, r"halves_from must be >= 1 \(an integer\), got 0"),
        ({"fresh_halves_from": -5}, r"fresh_halves_from must be >= 1 \(an integer\), got -5"),
        ({"blas_threads": 0}, r"blas_threads \(None: the caller's\) must be >= 1 .* or None"),
        ({"threads": 1}, "threads must be True or False, got 1"),
    ],
)
def test_bad_knobs_are_refused(knobs: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Pipeline(**knobs)


@pytest.mark.parametrize("pipeline", [Pipeline(fresh_halves_from=1), Pipeline(threads=False)])
def test_halves_give_one_pass(pipeline: Pipeline) -> None:
    """Entries scored on their own, any order and repeats: the halves' concatenation is the
    one pass; the second half runs on a helper thread only with threads."""
    index = np.array([5, 1, 5, 3, 0, 2, 2])
    threads: set[str] = set()

    def score(part: np.ndarray) -> np.ndarray:
        threads.add(threading.current_thread().name)
        return part * 10.0

    np.testing.assert_array_equal(pipeline.in_halves(score, index), index * 10.0)
    assert len(threads) == (2 if pipeline.threads else 1)


def test_without_threads_tasks_run_at_once_and_keep_their_errors() -> None:
    ran: list[str] = []
    with Pipeline(threads=False).helper("unused") as pool:
        done = pool.submit(lambda: ran.append(threading.current_thread().name) or 7)
        assert ran == [threading.current_thread().name]  # already ran, here
        failed = pool.submit(lambda: 1 / 0)
    assert done.result() == 7
    with pytest.raises(ZeroDivisionError):
        failed.result()


def test_blas_threads_inside_and_the_callers_after() -> None:
    def blas() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    with threadpool_limits(limits=2, user_api="blas"):
        with Pipeline(blas_threads=1).blas():
            assert blas() == {1}
        assert blas() == {2}
        with Pipeline(blas_threads=None).blas():
            assert blas() == {2}
