"""``fedrank fedps reproduce``: FedPS Tables 2-6 and Figure 4 on the AOL log.

Every configuration is one *job* (a :class:`~fedrank.experiments.fedps.settings.
FedPSSettings`; :mod:`fedrank.experiments.fedps.reproduce_grid` plans them) whose result is
written to ``<out>/runs/<name>.json`` (and its per-query test metrics, query events and
users to ``<name>.npz``) as soon as it finishes; a rerun skips finished jobs, so an
interrupted reproduction resumes. Jobs run in ``jobs`` worker processes (spawned; each
prepares the data once). Then :func:`~fedrank.experiments.fedps.reproduce_tables.
write_tables` assembles ``tables.md`` and ``results.json``:

* **Lists**: how relevant and irrelevant candidates compare (no-match rates, popularity,
  the user's earlier clicks, BM25 rank) and how many clicked queries got a list
  (:func:`fedrank.experiments.fedps.lists.list_diagnostics`).
* **Tables 2-3**: every mode over the training seeds (``seeds``): MAP / MRR / P@1 as mean
  and standard deviation, the change relative to the tuned central model and a test that
  covers training randomness and user sampling
  (:func:`fedrank.experiments.stats.seed_user_test`); then every row on re-finding queries
  (the user clicked the relevant document before) and on new-document queries
  (:func:`fedrank.experiments.fedps.lists.refinding_queries`), with the central model
  against the hand-feature GBDT on each kind. The central model's learning rate is
  tuned over ``learning_rates`` on the mean validation MAP; K-NRM, GroupUser and CoverQuery
  (centrally trained too) and the central model's variants
  (:data:`~fedrank.experiments.fedps.reproduce_grid.ABLATION_ROWS`, among them upload case
  3's frozen global embeddings on every seed) use the chosen rate. The
  rules and the GBDT of :mod:`fedrank.baselines.list_rankers` are reported beside them.
  FedPSFlat with a server step size ``eta_s = 3`` is reported separately from Algorithm 1
  (``eta_s = 1``).
* **KL** (Table 2): every method under the paper's setting (the training server is not the
  search engine) and the one where they are one party, the reversals against the paper's
  Table 2, and the order under every smoothing and weighting choice
  (:mod:`fedrank.privacy.kl_settings`).
* **Hierarchy**: FedPSFlat and FedPSProxy with ``K = 100`` (ten proxies of ten clients per
  step, two group servers) at 10% and 30% late responses (``hierarchy_late``) on the first
  ``hierarchy_seeds`` training seeds.
* **Tables 4-5**: FedPSProxy with K in {5, 10, 20, 30, 100} and E in {1, 2, 3} on
  ``sweep_users`` users, ten proxies (``users / 10`` clients each) so that every K is
  ``K / 10`` proxies x 10 clients.
* **Table 6**: the communication time of one round
  (:mod:`fedrank.experiments.fedps.communication`) for the paper's 118,067 users and for
  this log's users, K in {100, 1000}, 10% and 20% late responses drawn per response; no
  training.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.core.json_io import as_json_value, write_json
from fedrank.core.provenance import code_version
from fedrank.errors import ConfigError
from fedrank.experiments.executors import job_executor
from fedrank.experiments.fedps.data import FedPSData, prepare_aol
from fedrank.experiments.fedps.lists import list_diagnostics, refinding_queries
from fedrank.experiments.fedps.reproduce_grid import (
    Job,
    ReproduceConfig,
    base_settings,
    choose_learning_rate,
    planned_jobs,
    tuning_jobs,
)
from fedrank.experiments.fedps.reproduce_tables import write_tables
from fedrank.experiments.fedps.run import run_fedps
from fedrank.experiments.fedps.settings import FedPSSettings

_DATA: dict[tuple[str, int | None, int], FedPSData] = {}


def _data(log: str, users: int | None, data_seed: int) -> FedPSData:
    key = (log, users, data_seed)
    if key not in _DATA:
        _DATA.clear()  # one data set per worker at a time
        _DATA[key] = prepare_aol(log, users=users, seed=data_seed)
    return _DATA[key]


def _run_job(
    log: str, users: int | None, data_seed: int, settings: FedPSSettings
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Worker: prepare the data (once per process and data set), run one job and return
    its result JSON and per-query arrays (the driver writes them, so a worker on another
    machine needs no shared output folder)."""
    data = _data(log, users, data_seed)
    result = run_fedps(data, settings)
    lg = data.corpus.split.log
    assert result.per_query is not None and result.event_ids is not None
    arrays = {
        "per_query": result.per_query,
        "event_ids": result.event_ids,
        "users": lg.user_ids[lg.event_user[result.event_ids]],
    }
    return result.to_json(), arrays


def _save_job(path: Path, result: tuple[dict[str, Any], dict[str, np.ndarray]]) -> None:
    """A finished job's files: ``<name>.npz``, then ``<name>.json`` (whose presence marks
    the job done, so it is written last)."""
    doc, arrays = result
    np.savez(path.with_suffix(".npz"), **arrays)
    write_json(doc, path)


def run_jobs(
    config: ReproduceConfig,
    jobs: dict[str, Job],
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run the jobs without a result file yet; return every job's result JSON."""
    runs = config.out_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    finished = {
        n: _finished_run(runs / f"{n}.json", j.settings)
        for n, j in jobs.items()
        if (runs / f"{n}.json").is_file()
    }
    if config.finished_only:
        return finished
    todo = {n: j for n, j in jobs.items() if n not in finished}
    done = len(jobs) - len(todo)
    if progress is not None:
        progress("FedPS jobs", done, len(jobs))
    if todo:
        # Jobs on the same data next to each other, so each worker prepares it rarely.
        ordered = sorted(todo.items(), key=lambda item: item[1].users or 0)
        log = str(Path(config.log).resolve())  # the path every worker reads
        with job_executor(config.jobs, config.dask_workers, config.dask_scheduler) as pool:
            futures = {
                pool.submit(_run_job, log, j.users, config.data_seed, j.settings): n
                for n, j in ordered
            }
            failed: list[tuple[str, BaseException]] = []
            for future in as_completed(futures):
                error = future.exception()
                if error is not None:  # keep saving the others; raised below
                    failed.append((futures[future], error))
                    continue
                path = runs / f"{futures[future]}.json"
                _save_job(path, future.result())
                finished[futures[future]] = json.loads(path.read_text())  # as a rerun reads it
                done += 1
                if progress is not None:
                    progress("FedPS jobs", done, len(jobs))
        if failed:
            name, error = failed[0]
            error.add_note(
                f"FedPS job {name} failed ({len(failed)} of {len(todo)} failed: "
                f"{', '.join(n for n, _ in failed)}); the finished ones are saved and reused "
                "when rerun"
            )
            raise error
    return {n: finished[n] for n in jobs}


def _finished_run(path: Path, settings: FedPSSettings, key: str = "settings") -> dict[str, Any]:
    """A finished run's result JSON, after checking that it was run with ``settings``
    (recorded under ``key``, as :meth:`~fedrank.experiments.fedps.run.FedPSResult.to_json`
    records them); raises :class:`ConfigError` naming the settings that differ otherwise."""
    doc = json.loads(path.read_text())
    differ = _settings_differ(doc.get(key, {}), settings)
    if differ:
        raise ConfigError(
            f"{path} was run with other settings than its job has now ({'; '.join(differ)}): "
            "its tables would mix settings. Pass a new --out folder, or move the stale runs "
            "away to rerun them here"
        )
    return doc


def _settings_differ(recorded: dict[str, Any], settings: FedPSSettings) -> list[str]:
    """``name: recorded -> now`` of every setting whose recorded value (JSON) is not
    ``settings``' (a setting missing from the record counts as different)."""
    now = as_json_value(asdict(settings))
    return [
        f"{k}: {recorded.get(k, 'not recorded')!r} -> {v!r}"
        for k, v in now.items()
        if k not in recorded or recorded[k] != v
    ]


def reproduce(
    config: ReproduceConfig, progress: Callable[[str, int, int], None] | None = None
) -> str:
    """Run the missing jobs and write the tables (see the module docstring)."""
    start = time.perf_counter()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results: dict[str, dict[str, Any]] = {}
    tuned_lr = None
    if "3" in config.tables:
        results.update(run_jobs(config, tuning_jobs(config), progress))
        tuned_lr = choose_learning_rate(config, results)
    results.update(run_jobs(config, planned_jobs(config, tuned_lr), progress))
    diagnostics = refinding = None
    if "3" in config.tables:
        data = prepare_aol(config.log, users=config.users, seed=config.data_seed, word2vec_epochs=1)
        diagnostics = {s: list_diagnostics(data, s) for s in ("train", "valid", "test")}
        refinding = refinding_queries(data, "test")
    fig4 = "fig4" in config.tables and (
        not config.finished_only or (config.out_dir / "continuous.json").is_file()
    )
    continuous = _continuous(config, progress) if fig4 else None
    text = write_tables(config, results, tuned_lr, diagnostics, continuous, refinding)
    if progress is not None:
        progress(f"done in {time.perf_counter() - start:.0f} s", 1, 1)
    return text


def _continuous(
    config: ReproduceConfig, progress: Callable[[str, int, int], None] | None
) -> dict[str, Any]:
    from fedrank.experiments.fedps.continuous import run_continuous

    path = config.out_dir / "continuous.json"
    base = replace(base_settings(config), seed=config.seeds[0])
    if path.is_file():
        return _finished_run(path, base, key="base_settings")
    data = prepare_aol(config.log, users=config.continuous_users, seed=config.data_seed)
    result = run_continuous(data, base=base, seed=config.data_seed, progress=progress)
    result.plot(config.out_dir / "figure4.png")
    out = result.to_json()
    out["base_settings"] = as_json_value(asdict(base))  # what its stages start from
    out["code"] = code_version()
    write_json(out, path)
    return out
