"""fedrank.experiments.executors: a reproduction grid's runs on local processes or on a real
Dask cluster give the same files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.executors import check_executor_options, cluster_workers, job_executor
from fedrank.experiments.fedps.reproduce import run_jobs
from fedrank.experiments.fedps.reproduce_grid import Job, ReproduceConfig
from fedrank.experiments.fedps.settings import FedPSSettings
from tests.untimed import untimed


@pytest.mark.parametrize(
    ("jobs", "workers", "scheduler", "reason"),
    [
        (0, None, None, "jobs must be >= 1"),
        (1, 2, "tcp://127.0.0.1:8786", "not both"),
        (1, 0, None, "dask_workers must be in 1..256"),
        (1, 10_000, None, "dask_workers must be in 1..256"),
        (1, None, "127.0.0.1:8786", "scheduler address such as tcp://"),
    ],
)
def test_bad_executor_options_say_what_is_wrong(
    jobs: int, workers: int | None, scheduler: str | None, reason: str
) -> None:
    with pytest.raises(ConfigError, match=reason):
        check_executor_options(jobs, workers, scheduler)
    with pytest.raises(ConfigError, match=reason):
        ReproduceConfig(
            log=Path("log.tsv"), out_dir=Path("out"), jobs=jobs, dask_workers=workers,
            dask_scheduler=scheduler,
        )  # fmt: skip


@pytest.mark.parametrize("executor", [{"processes": 1}, {"dask_workers": 1}], ids=str)
def test_workers_wait_passively_in_openmp(
    executor: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pool and Dask workers start with OMP_WAIT_POLICY=PASSIVE (spinning LightGBM threads
    of concurrent workers slowed GBDT runs 6x), unless the environment chose a policy."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with job_executor(**executor) as pool:
        assert pool.submit(os.getenv, "OMP_WAIT_POLICY").result() == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    with job_executor(**executor) as pool:
        assert pool.submit(os.getenv, "OMP_WAIT_POLICY").result() == "ACTIVE"


def test_a_local_dask_cluster_runs_functions_on_its_workers() -> None:
    with job_executor(dask_workers=2) as pool:
        values = sorted(pool.map(np.linalg.matrix_rank, [np.eye(k) for k in range(1, 6)]))
    assert values == [1, 2, 3, 4, 5]


def _grid(out: Path, log: Path, **executor: object) -> dict[str, dict[str, object]]:
    config = ReproduceConfig(log=log, out_dir=out, users=8, **executor)  # type: ignore[arg-type]
    jobs = {"proxy_s1": Job(FedPSSettings(mode="proxy", rounds=1, seed=1), 8)}
    return run_jobs(config, jobs)


def test_a_grid_on_dask_workers_equals_the_grid_on_local_processes(
    aol_log: Path, tmp_path: Path
) -> None:
    """The same jobs through a process pool and through a 2-worker Dask cluster write the
    same results (every run is seeded; a worker returns its result, the driver writes it)."""
    local = _grid(tmp_path / "local", aol_log, jobs=1)
    dask = _grid(tmp_path / "dask", aol_log, dask_workers=2)
    for name in ("proxy_s1",):  # one trained run (FedPSProxy: no cover queries to fit)
        a, b = untimed(local[name]), untimed(dask[name])
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), name
        with (
            np.load(tmp_path / "local" / "runs" / f"{name}.npz") as x,
            np.load(tmp_path / "dask" / "runs" / f"{name}.npz") as y,
        ):
            for key in ("per_query", "event_ids", "users"):
                np.testing.assert_array_equal(x[key], y[key])
    assert local["proxy_s1"]["MAP"] > 0.3 and local["proxy_s1"]["steps"] > 0  # a real run


def test_a_cluster_without_workers_is_waited_for_then_refused() -> None:
    """A run on a cluster that lists no worker waits for one, then says what is wrong; a
    worker that joins meanwhile is used."""
    from dask.distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        with pytest.raises(ConfigError, match=r"no workers \(waited 0.5 s\); start at least one"):
            cluster_workers(client, timeout=0.5)
        cluster.scale(1)
        assert len(cluster_workers(client, timeout=60.0)) == 1
