"""Where a federated FedPS run's clients live (fedrank.experiments.fedps.clients): in one
process or in blocks on a real 2-worker Dask cluster, the run gives the same result bit for
bit; a client's update does not depend on which clients trained before it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from threadpoolctl import threadpool_info

from fedrank.cli import main
from fedrank.cli.fedps import WORKER_PRELOAD
from fedrank.errors import ConfigError
from fedrank.estimators.local_sgd import LocalTraining
from fedrank.experiments.executors import blocks, dask_client
from fedrank.experiments.fedps import data as fedps_data
from fedrank.experiments.fedps.clients import DaskClients, LocalClients, evaluation_work
from fedrank.experiments.fedps.covers import start_covers
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.run import FedPSResult, run_fedps, run_seeds
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.experiments.fedps.training import model_arguments
from tests.untimed import untimed

SETTINGS = FedPSSettings(
    mode="flat", rounds=2, clients_per_step=4, clients_per_proxy_step=2, n_topics=5,
    clients_per_proxy=4, proxies_per_group=2, seed=1, evals_per_round=2, warmup_rounds=1,
)  # fmt: skip


@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(1, 8))
def test_blocks_cover_every_client_once_in_order(work: list[int], n_blocks: int) -> None:
    parts = blocks(np.array(work), n_blocks)
    assert [i for b in parts for i in b] == list(range(len(work)))
    assert 1 <= len(parts) <= n_blocks and all(len(b) > 0 for b in parts)


def test_blocks_balance_the_work() -> None:
    assert blocks(np.ones(10), 2) == [range(0, 5), range(5, 10)]
    assert blocks(np.array([5, 1, 1, 1, 1, 1]), 2) == [range(0, 1), range(1, 6)]
    assert blocks(np.array([1, 1, 1, 100]), 3) == [range(0, 3), range(3, 4)]


def _local(data: FedPSData, first: int, n: int) -> LocalClients:
    kwargs = model_arguments(data, True, 5, SETTINGS)
    return LocalClients(
        data.users[first : first + n], data.doc_tokens, data.word_vectors, LocalTraining(),
        kwargs, client_seed=100, first=first,
    )  # fmt: skip


def test_an_update_does_not_depend_on_the_clients_before_it(small: FedPSData) -> None:
    """Text dropout and minibatch order are the client's own: client 2's first update is
    the same after clients 0 and 1 trained in the same process as alone in a block of
    its own (what lets the clients run anywhere)."""
    together, alone = _local(small, 0, 4), _local(small, 2, 1)
    params = together.model.get_flat_parameters()
    after_others = together.local_updates(params, [0, 1, 2], 0)[2]
    (by_itself,) = alone.local_updates(params, [2], 0)
    assert np.array_equal(after_others.update, by_itself.update)
    assert after_others.n == by_itself.n
    with pytest.raises(ConfigError, match="client 0 is not in this block"):
        alone.local_updates(params, [0], 0)


def _comparable(result: FedPSResult) -> str:
    """The result's JSON without wall-clock times (as text: NaN equals NaN)."""
    return json.dumps(untimed(result.to_json()), sort_keys=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with dask_client(2, None, preload=WORKER_PRELOAD) as client:
        yield client


def _preloaded(dask_worker: Any) -> list[str]:
    return [p.name for p in dask_worker.preloads]


def _profiling(dask_worker: Any) -> bool:
    return "profile" in dask_worker.periodic_callbacks


def _parent_command(dask_worker: Any) -> str:
    return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().replace("\0", " ")


def test_the_workers_import_the_clients_code_as_they_start(cluster: Any) -> None:
    """What `fedrank fedps run --dask-workers` asks of its cluster: each worker imports the
    clients' module as it starts (while the driver prepares the data), not with its first
    task; and no worker samples its own stacks (Dask's profiler: CPU on a 2-core run)."""
    assert list(cluster.run(_preloaded).values()) == [list(WORKER_PRELOAD)] * 2
    assert list(cluster.run(_profiling).values()) == [False] * 2


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")
def test_the_workers_are_forked_from_one_process_that_imported_their_code(cluster: Any) -> None:
    """Each spawned worker imported torch and fedrank itself (~2.7 CPU-s each, on the cores
    the run needs); a fork server imports them once and forks the workers."""
    parents = list(cluster.run(_parent_command).values())
    assert len(parents) == 2 and all("multiprocessing.forkserver" in p for p in parents)
    # what the fork server imported before forking them: the clients' code (not only Dask's
    # own packages, which Dask would set without dask_client's preload)
    preloaded = forkserver._forkserver._preload_modules  # type: ignore[attr-defined]
    assert set(WORKER_PRELOAD) <= set(preloaded)


def test_blocks_are_balanced_by_what_each_evaluation_scores(small: FedPSData, cluster: Any) -> None:
    """Blocks split the users by their validation and test candidates (every block takes
    part in every evaluation), not by their training queries; a run on the cluster uses
    them."""
    cluster.wait_for_workers(2, timeout=120)
    kwargs = model_arguments(small, True, 5, SETTINGS)
    spread = DaskClients(
        cluster, small.users, small.doc_tokens, small.word_vectors, LocalTraining(), kwargs, 100
    )
    work = evaluation_work(small.users)
    assert spread._blocks == blocks(work, 2)
    cells = [
        u.samples("valid").n_candidates.sum() + u.samples("test").n_candidates.sum()
        for u in small.users
    ]
    assert work.tolist() == cells
    halves = [work[b.start : b.stop].sum() for b in blocks(work, 2)]
    assert max(halves) - min(halves) <= work.max()


@pytest.mark.parametrize("mode", ["flat", "proxy"])
def test_a_dask_run_equals_the_run_in_one_process(
    small: FedPSData, cluster: Any, mode: str
) -> None:
    settings = replace(SETTINGS, mode=mode)
    alone = run_fedps(small, settings)
    # the run spreads its clients over the workers the scheduler knows when it starts; on a
    # loaded machine a worker can miss a heartbeat and re-register (seen once: 0 workers
    # listed right after a run), so wait for both before the run, and check then
    cluster.wait_for_workers(2, timeout=120)
    assert len(cluster.scheduler_info()["workers"]) == 2
    spread = run_fedps(small, settings, dask=cluster)
    assert alone.per_query is not None and spread.per_query is not None
    assert np.array_equal(alone.per_query, spread.per_query)
    assert _comparable(alone) == _comparable(spread)


def test_the_command_on_dask_equals_the_command_in_one_process(
    aol_log: Path, tmp_path: Path
) -> None:
    """`fedrank fedps run --dask-workers 2` as a user runs it (the cluster starts before the
    heavy imports, its workers are forked from a fork server, the cover queries are
    computed in a process beside the driver): the result is the one-process command's."""
    args = ["fedps", "run", "--mode", "flat", "--log", str(aol_log), "--users", "8",
            "--rounds", "1", "--seed", "2", "--warmup-rounds", "1"]  # fmt: skip
    outputs = []
    for extra in ([], ["--dask-workers", "2"]):
        out = tmp_path / f"run{len(extra)}.json"
        result = CliRunner().invoke(main, [*args, *extra, "--json", str(out)])
        assert result.exit_code == 0, result.output
        outputs.append(json.dumps(untimed(json.loads(out.read_text())), sort_keys=True))
    assert outputs[0] == outputs[1]


def test_the_corpus_is_handed_over_before_the_lists_and_word2vec(
    aol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prepare_aol(on_corpus=...)` (where a Dask run starts its cover queries): called once,
    with the corpus the data end with, before the slow rest of the preparation."""
    seen: list[Any] = []
    word2vec_saw: list[int] = []
    train = fedps_data.train_word2vec

    def word2vec(*args: Any, **kwargs: Any) -> np.ndarray:
        word2vec_saw.append(len(seen))
        return train(*args, **kwargs)

    monkeypatch.setattr(fedps_data, "train_word2vec", word2vec)
    data = fedps_data.prepare_aol(aol_log, users=6, seed=0, dim=8, word2vec_epochs=1,
                                  on_corpus=seen.append)  # fmt: skip
    assert len(seen) == 1 and seen[0] is data.corpus
    assert word2vec_saw == [1]


def test_cover_queries_started_early_give_the_same_runs(small: FedPSData, cluster: Any) -> None:
    """The CLI starts the first seed's cover queries beside the driver as soon as the corpus
    is built (`start_covers`); later seeds start their own: over two seeds the runs equal
    the one-process runs."""
    seeds = [1, 2]
    alone = run_seeds(small, SETTINGS, seeds)
    cluster.wait_for_workers(2, timeout=120)
    with contextlib.ExitStack() as stack:
        started = start_covers(small.corpus, replace(SETTINGS, seed=seeds[0]), stack)
        spread = run_seeds(small, SETTINGS, seeds, dask=cluster, covers=started)
    assert [_comparable(r) for r in spread.results] == [_comparable(r) for r in alone.results]


@pytest.mark.parametrize("mode, on_dask", [("proxy", True), ("flat", False)])
def test_started_cover_queries_are_only_for_a_flat_run_on_dask(
    small: FedPSData, cluster: Any, mode: str, on_dask: bool
) -> None:
    pending: Future[list[np.ndarray]] = Future()
    with pytest.raises(ConfigError, match="for a FedPSFlat run on Dask"):
        run_fedps(small, replace(SETTINGS, mode=mode), dask=cluster if on_dask else None,
                  covers=pending)  # fmt: skip


def test_the_driver_beside_a_local_cluster_prepares_with_one_blas_thread(
    aol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside local workers, the driver's BLAS threads would spin against them (they
    doubled the CPU of preparing the data); alone, the command keeps them."""
    threads: list[int] = []
    prepare = fedps_data.prepare_aol

    def recording(*args: Any, **kwargs: Any) -> FedPSData:
        threads.append(max(i["num_threads"] for i in threadpool_info()))
        return prepare(*args, **kwargs)

    monkeypatch.setattr(fedps_data, "prepare_aol", recording)
    args = ["fedps", "run", "--mode", "proxy", "--log", str(aol_log), "--users", "6",
            "--rounds", "1", "--seed", "2", "--warmup-rounds", "1"]  # fmt: skip
    for extra in ([], ["--dask-workers", "1"]):
        result = CliRunner().invoke(main, [*args, *extra])
        assert result.exit_code == 0, result.output
    assert threads[1] == 1
    assert threads[0] == max(i["num_threads"] for i in threadpool_info())


def test_dask_options_are_refused_where_no_clients_train(aol_log: Path) -> None:
    result = CliRunner().invoke(
        main, ["fedps", "run", "--mode", "central", "--log", str(aol_log), "--dask-workers", "2"]
    )
    assert result.exit_code == 2
    assert "federated run (flat, proxy)" in result.output
