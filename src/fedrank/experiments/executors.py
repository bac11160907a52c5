"""Where the runs of a reproduction grid execute: local worker processes, or a Dask cluster.

A grid (``fedrank fedps reproduce``) is a set of independent, fully seeded runs, so it fans
out whole runs: each run gives the same result wherever it executes. :func:`job_executor`
yields a :class:`concurrent.futures.Executor`:

* by default a pool of ``processes`` local worker processes (``spawn``, so every worker
  starts clean);
* with ``dask_workers = N``, a ``dask.distributed.LocalCluster`` of ``N`` single-threaded
  worker processes on this machine;
* with ``dask_scheduler = "tcp://HOST:PORT"``, the workers of an existing Dask cluster
  (``dask scheduler`` on one machine, ``dask worker tcp://HOST:PORT`` on each of the
  others). Every worker needs fedrank installed at the same version and the input data
  at the same path; results travel back to the driver, which writes them (docs/fedps.md,
  "Running on a Dask cluster").

:func:`dask_client` gives the ``distributed.Client`` itself, for runs that spread one
run's clients over the workers (:mod:`fedrank.experiments.fedps.clients`).

**OpenMP waits passively in the workers** (``OMP_WAIT_POLICY=PASSIVE`` unless the
environment sets it). LightGBM's OpenMP threads spin while they wait for work by default;
two worker processes that train LightGBM at once on a small machine then spin against each
other and each run takes several times as long. A single run is a little faster with
spinning threads, so the main process keeps OpenMP's default.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.federation.round import Round
from fedrank.strategies.base import Strategy

if TYPE_CHECKING:
    from distributed import Client

T = TypeVar("T")


def check_executor_options(
    processes: int, dask_workers: int | None, dask_scheduler: str | None
) -> None:
    """Refuse contradictory or out-of-range options with a message that says which."""
    if processes < 1:
        raise ConfigError(f"jobs must be >= 1, got {processes}")
    if dask_workers is not None and dask_scheduler is not None:
        raise ConfigError(
            "give either --dask-workers (a local Dask cluster) or --dask-scheduler (an "
            "existing one), not both"
        )
    if dask_workers is not None and not 1 <= dask_workers <= 256:
        raise ConfigError(
            f"dask_workers must be in 1..256, got {dask_workers}",
            field="dask_workers",
            requirement=f"must be in 1..256, got {dask_workers}",
            value=dask_workers,
        )
    if dask_scheduler is not None and not dask_scheduler.startswith(("tcp://", "tls://")):
        raise ConfigError(
            f"dask_scheduler is a scheduler address such as tcp://10.0.0.5:8786, got "
            f"{dask_scheduler!r}"
        )


#: What :func:`job_executor`'s workers set before any task runs (module docstring).
WORKER_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}


def set_worker_environment() -> None:
    """A pool worker's initializer: :data:`WORKER_ENVIRONMENT`, where not set already
    (before a task imports LightGBM, whose OpenMP runtime reads it once); the test workers
    call it too."""
    for key, value in WORKER_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


@contextlib.contextmanager
def job_executor(
    processes: int = 1, dask_workers: int | None = None, dask_scheduler: str | None = None
) -> Iterator[Executor]:
    """An executor for independent runs (see the module docstring); shut down on exit."""
    check_executor_options(processes, dask_workers, dask_scheduler)
    if dask_workers is None and dask_scheduler is None:
        with ProcessPoolExecutor(
            max_workers=processes,
            mp_context=get_context("spawn"),
            initializer=set_worker_environment,
        ) as pool:
            yield pool
        return
    with dask_client(dask_workers, dask_scheduler) as client:
        yield client.get_executor(pure=False)


@contextlib.contextmanager
def dask_client(
    dask_workers: int | None, dask_scheduler: str | None, preload: Sequence[str] = ()
) -> Iterator[Client]:
    """A ``distributed.Client`` of a new local cluster of ``dask_workers`` single-threaded
    worker processes, or of the existing cluster at ``dask_scheduler``; closed on exit
    (with the local cluster).

    ``preload``: modules a new local cluster's workers import as they start (Dask's worker
    preload), so that a run which starts the cluster first has the workers import them
    while it prepares its data, instead of when the first task arrives. Where the platform
    has it, such workers are forked from one ``forkserver`` process that imported the
    modules once (each spawned worker imported torch and fedrank itself: ~2.7 CPU-s per
    worker, on a machine whose cores the run needs). The workers of an existing cluster
    are started by whoever runs it (``dask worker --preload``)."""
    check_executor_options(1, dask_workers, dask_scheduler)
    if dask_workers is None and dask_scheduler is None:
        raise ConfigError("give dask_workers (a local Dask cluster) or dask_scheduler")
    import dask.config
    from dask.distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if dask_scheduler is not None:
            try:
                client = Client(dask_scheduler, timeout="30s", set_as_default=False)
            except OSError as exc:
                raise ConfigError(
                    f"no Dask scheduler answers at {dask_scheduler}: {exc}; start one with "
                    "`dask scheduler` and its workers with `dask worker <address>`"
                ) from exc
        else:
            # Dask sets MALLOC_TRIM_THRESHOLD_ in its workers by default; any value turns off
            # glibc's dynamic mmap threshold, and torch's many mid-sized tensors then cost
            # far more CPU in the FedPS clients. None unsets it. OpenMP waits passively, as
            # in a process pool (module docstring). And the workers do not sample their own
            # stacks (Dask's statistical profiler, shown only on a dashboard, which a local
            # cluster here does not have).
            if preload and "forkserver" in get_all_start_methods():
                _preload_forkserver(preload)
                stack.enter_context(
                    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
                )
            stack.enter_context(
                dask.config.set(
                    {
                        "distributed.worker.profile.enabled": False,
                        "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                        **{
                            f"distributed.nanny.pre-spawn-environ.{key}": os.environ.get(key, value)
                            for key, value in WORKER_ENVIRONMENT.items()
                        },
                    }
                )
            )
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=dask_workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    preload=list(preload),
                )
            )
            client = Client(cluster, set_as_default=False)
        # closed by callback, not as a context manager: a client entered in one thread
        # cannot be exited in another (the CLI starts the cluster in a helper thread)
        stack.callback(client.close)
        yield client


def _preload_forkserver(preload: Sequence[str]) -> None:
    """Have multiprocessing's fork server import ``preload`` (and Dask) before it forks the
    workers. Dask sets the fork server's preload itself the first time it starts a worker
    by ``forkserver`` (its own packages only) unless its module flag says that it was set;
    this sets both. Once the fork server of this process runs, a new preload has no effect
    (workers then import ``preload`` themselves, through Dask's worker preload: slower,
    the same result)."""
    import distributed.utils

    get_context("forkserver").set_forkserver_preload(["distributed", *preload])
    distributed.utils._forkserver_preload_set = True


def side_process() -> ProcessPoolExecutor:
    """One process for a driver's own long work beside a local cluster's (a thread would
    share the driver's GIL with its main thread), started like the cluster's workers: by
    the fork server where the platform has one (:func:`dask_client`), else spawned."""
    method = "forkserver" if "forkserver" in get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(1, mp_context=get_context(method))


def blocks(work: np.ndarray, n_blocks: int) -> list[range]:
    """Contiguous blocks of client indices with nearly equal total ``work`` (one entry per
    client), at most one block per client."""
    work = np.asarray(work, dtype=np.float64)
    n = min(n_blocks, work.size)
    if n == 0:
        return []
    cum = np.cumsum(work)
    targets = cum[-1] * np.arange(1, n) / n
    at = np.searchsorted(cum, targets, side="left")  # the client where a target falls
    before = np.where(at > 0, cum[np.maximum(at - 1, 0)], 0.0)
    cut = np.where(cum[at] - targets > targets - before, at, at + 1)  # the nearer edge
    edges = np.maximum.accumulate(np.r_[0, cut, work.size])
    return [range(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


#: How long a run waits for the cluster to list a worker before it gives up.
WORKER_WAIT_SECONDS = 60.0


def cluster_workers(client: Client, timeout: float = WORKER_WAIT_SECONDS) -> list[str]:
    """The addresses of the workers of ``client``'s cluster, sorted, once it lists at least
    one: a cluster whose workers are still starting, or re-registering after a missed
    heartbeat on a loaded machine, is waited for up to ``timeout`` seconds, then refused."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError as err:
        raise ConfigError(
            f"the Dask cluster has no workers (waited {timeout:g} s); start at least one"
        ) from err
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:  # (gone again between the two calls)
        raise ConfigError("the Dask cluster has no workers; start at least one")
    return workers


class DaskBlocks:
    """One task per block of a run's clients, each pinned to its own worker of a Dask
    cluster, on objects scattered to every worker once (the client code, the query bank);
    the blocks' results come back in block order. The runners that spread one run's
    clients use it: FOLtR-ES and FPDGD (:mod:`fedrank.experiments.foltr.clients`), the
    frecency study (:mod:`fedrank.experiments.frecency.clients`)."""

    def __init__(self, client: Client, *shared: object) -> None:
        self.workers = cluster_workers(client)
        self.client = client
        self.shared = client.scatter(list(shared), broadcast=True, hash=False)

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    def run(self, fn: Callable[..., T], theta: np.ndarray, parts: Sequence[object]) -> list[T]:
        """``fn(*shared, theta, part)`` for every block ``part`` (at most one per worker),
        results in the order of ``parts``."""
        if len(parts) > len(self.workers):
            raise ConfigError(f"{len(parts)} blocks for {len(self.workers)} workers")
        futures = [
            self.client.submit(
                fn,
                *self.shared,
                theta,
                part,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for part, worker in zip(parts, self.workers, strict=False)
        ]
        return self.client.gather(futures)


def _fold(strategy: Strategy, empty: Any, batch: MessageBatch) -> Any:
    return strategy.accumulate(empty, batch)


def fold_on_cluster(client: Client, round_: Round, blocks: Sequence[MessageBatch]) -> None:
    """Fold one round's messages on a Dask cluster: each worker folds one block into the
    round's empty aggregate (:meth:`Round.empty <fedrank.federation.round.Round.empty>`,
    which carries an adaptive norm bound) by the strategy's rule, the driver merges the
    states pairwise (a tree, ``aggregator.merge``) and merges the result into the round --
    the mergeable-aggregator contract makes it equal to folding every message in one
    process, up to float summation order. The strategy travels to the workers once per
    call."""
    if not blocks:
        return
    strategy, empty = round_.strategy, round_.empty()
    shared = client.scatter(strategy, broadcast=True, hash=False)
    states = client.gather(
        client.map(_fold, [shared] * len(blocks), [empty] * len(blocks), list(blocks), pure=False)
    )
    merge = strategy.aggregator.merge
    while len(states) > 1:
        pairs = [merge(a, b) for a, b in zip(states[::2], states[1::2], strict=False)]
        states = pairs + ([states[-1]] if len(states) % 2 else [])
    round_.merge(states[0])
