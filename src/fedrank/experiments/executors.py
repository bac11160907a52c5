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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context

from fedrank.errors import ConfigError


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
        raise ConfigError(f"dask_workers must be in 1..256, got {dask_workers}")
    if dask_scheduler is not None and not dask_scheduler.startswith(("tcp://", "tls://")):
        raise ConfigError(
            f"dask_scheduler is a scheduler address such as tcp://10.0.0.5:8786, got "
            f"{dask_scheduler!r}"
        )


@contextlib.contextmanager
def job_executor(
    processes: int = 1, dask_workers: int | None = None, dask_scheduler: str | None = None
) -> Iterator[Executor]:
    """An executor for independent runs (see the module docstring); shut down on exit."""
    check_executor_options(processes, dask_workers, dask_scheduler)
    if dask_workers is None and dask_scheduler is None:
        with ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn")) as pool:
            yield pool
        return
    from dask.distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if dask_scheduler is not None:
            try:
                client = stack.enter_context(Client(dask_scheduler, timeout="30s"))
            except OSError as exc:
                raise ConfigError(
                    f"no Dask scheduler answers at {dask_scheduler}: {exc}; start one with "
                    "`dask scheduler` and its workers with `dask worker <address>`"
                ) from exc
        else:
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=dask_workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                )
            )
            client = stack.enter_context(Client(cluster))
        executor = client.get_executor(pure=False)
        yield executor
