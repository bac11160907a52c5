"""``fedrank fedps reproduce``: FedPS Tables 2-6 and Figure 4 on the AOL log.

Every configuration is one *job* (a :class:`~fedrank.experiments.fedps.settings.
FedPSSettings`) whose result is written to ``<out>/runs/<name>.json`` (and its per-query
test metrics, query events and users to ``<name>.npz``) as soon as it finishes; a rerun
skips finished jobs, so an interrupted reproduction resumes. Jobs run in ``jobs`` worker
processes (spawned; each prepares the data once). Then :func:`write_tables` assembles
``tables.md`` and ``results.json``:

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
  (centrally trained too) and the central model's variants (:data:`ABLATION_ROWS`, among
  them upload case 3's frozen global embeddings on every seed) use the chosen rate. The
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
* **Figure 4**: continuous updating (:mod:`fedrank.experiments.fedps.continuous`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.aggregators.hierarchy import Topology
from fedrank.core.json_io import as_json_value, write_json
from fedrank.core.provenance import code_version
from fedrank.errors import ConfigError
from fedrank.experiments.executors import check_executor_options, job_executor
from fedrank.experiments.fedps.client_sampling import flat_schedule, proxy_schedule
from fedrank.experiments.fedps.communication import flat_round_time, proxy_round_time
from fedrank.experiments.fedps.data import FedPSData, prepare_aol
from fedrank.experiments.fedps.lists import list_diagnostics, refinding_queries
from fedrank.experiments.fedps.run import run_fedps
from fedrank.experiments.fedps.settings import RULE_MODES, FedPSSettings
from fedrank.experiments.stats import seed_user_test
from fedrank.privacy import kl_settings

K_VALUES: tuple[int, ...] = (5, 10, 20, 30, 100)
E_VALUES: tuple[int, ...] = (1, 2, 3)
DELAY_RATIOS: tuple[float, ...] = (0.1, 0.2)
HIERARCHY_RATIOS: tuple[float, ...] = (0.1, 0.3)
PAPER_USERS = 118_067
TABLES: tuple[str, ...] = ("3", "hierarchy", "4", "5", "6", "fig4")
#: Trained modes of Table 3 besides central, in report order.
TRAINED_ROWS: tuple[str, ...] = ("gbdt", "knrm", "groupuser", "coverquery", "flat", "proxy")
#: Modes trained centrally at the learning rate tuned for the central model.
TUNED_LR_MODES: tuple[str, ...] = ("knrm", "groupuser", "coverquery")
#: Variants of the central model (the tuned rate): without each change made to it since
#: the first wave (the first, compact model; the encoded model without text dropout), and
#: upload case 3's model (global word embeddings frozen at word2vec, Sec. 3.3.2).
ABLATION_ROWS: dict[str, dict[str, Any]] = {
    "central_compact": {"model": "compact", "text_dropout": 0.0},
    "central_no_dropout": {"text_dropout": 0.0},
    "central_frozen": {"upload": "frozen"},
}
#: Rows run on every training seed; the others (secondary baselines and eta_s = 3) run on
#: the first seed only, to bound the reproduction's compute.
ALL_SEED_ROWS: tuple[str, ...] = ("central", "central_frozen", "gbdt", "flat", "proxy")

#: The paper's Table 3 (AOL, MAP), for the report's side-by-side.
PAPER_MAP = {
    "original": 0.2504,
    "knrm": 0.4291,
    "central": 0.7115,
    "groupuser": 0.6917,
    "coverquery": 0.7101,
    "flat": 0.7074,
    "proxy": 0.7112,
}
LABELS = {
    "original": "BM25 order (Original rank)",
    "ascending": "ascending BM25",
    "popularity": "global popularity",
    "user_prior": "user's prior clicks",
    "pclick": "P-Click",
    "rule": "rule: clicked before > BM25 = 0 > popularity",
    "gbdt": "LightGBM, hand features (no text)",
    "knrm": "K-NRM",
    "central": "PEPS-style, central (tuned)",
    "central_compact": "... the first, compact model",
    "central_no_dropout": "... without text dropout",
    "central_frozen": "... global embeddings frozen (upload case 3)",
    "groupuser": "GroupUser",
    "coverquery": "CoverQuery",
    "flat": "FedPSFlat (Algorithm 1)",
    "proxy": "FedPSProxy (Algorithm 1)",
    "flat_eta3": "FedPSFlat, eta_s = 3",
}


@dataclass(frozen=True)
class ReproduceConfig:
    """What to reproduce, and at which scale.

    Attributes:
        log: the AOL click log.
        out_dir: where runs, tables and the figure go.
        users: draw this many users (``None``: all).
        rounds: most rounds of every trained job (epochs of central training).
        sweep_rounds: most rounds of the Table 4-5 sweeps.
        sweep_users: users of the Table 4-5 sweeps (``None``: all).
        continuous_users: users of the Figure 4 simulation (``None``: all).
        data_seed: the data seed (user draw, training lists, word2vec).
        seeds: the training seeds of every Table 3 job.
        hierarchy_seeds: how many of ``seeds`` (the first ones) the hierarchy jobs run on
            (a K = 100 job on all 986 users takes ~35 minutes on 2 cores).
        hierarchy_late: the shares of late responses the hierarchy jobs run at
            (:data:`HIERARCHY_RATIOS` by default).
        learning_rates: the central model's learning rates to tune over.
        tables: which of :data:`TABLES` to produce.
        jobs: local worker processes.
        dask_workers: run the jobs on a local Dask cluster of this many workers instead
            (:func:`fedrank.experiments.executors.job_executor`).
        dask_scheduler: run the jobs on the Dask cluster at this address instead.
        finished_only: run nothing; write the tables from the runs finished so far, rows
            and tables whose runs are missing named as not finished.
        warmup_rounds: the click-feature warm-up of every trained job
            (:attr:`FedPSSettings.warmup_rounds`; ``None``: its default, ``0``: none).

    A finished run is reused only when it was run with the settings its job has now
    (:func:`run_jobs`); a run left from other settings stops the reproduction with an error
    naming it, so tables never mix runs of different settings.
    """

    log: Path
    out_dir: Path
    users: int | None = None
    rounds: int = 4
    sweep_rounds: int = 6
    sweep_users: int | None = 300
    continuous_users: int | None = 300
    data_seed: int = 0
    seeds: tuple[int, ...] = (1, 2, 3)
    hierarchy_seeds: int = 1
    hierarchy_late: tuple[float, ...] = HIERARCHY_RATIOS
    learning_rates: tuple[float, ...] = (3e-4, 1e-3, 3e-3)
    tables: tuple[str, ...] = TABLES
    jobs: int = 2
    dask_workers: int | None = None
    dask_scheduler: str | None = None
    finished_only: bool = False
    warmup_rounds: int | None = None

    def __post_init__(self) -> None:
        unknown = set(self.tables) - set(TABLES)
        if unknown:
            raise ConfigError(f"unknown tables {sorted(unknown)}; choose from {TABLES}")
        check_executor_options(self.jobs, self.dask_workers, self.dask_scheduler)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct and not empty, got {self.seeds}")
        if not 1 <= self.hierarchy_seeds <= len(self.seeds):
            raise ConfigError(
                f"hierarchy_seeds must be in 1..{len(self.seeds)} (the number of seeds), "
                f"got {self.hierarchy_seeds}"
            )
        if not self.hierarchy_late or any(not 0.0 <= r < 1.0 for r in self.hierarchy_late):
            raise ConfigError(
                f"hierarchy_late must be shares of late responses in [0, 1), got "
                f"{self.hierarchy_late}"
            )
        if not self.learning_rates:
            raise ConfigError("give at least one learning rate to tune the central model over")


@dataclass(frozen=True)
class Job:
    """One run: its settings and the users it runs on (``None``: ``config.users``)."""

    settings: FedPSSettings
    users: int | None


def _lr_name(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def _seeded(name: str, seed: int) -> str:
    return f"{name}_s{seed}"


def _sweep_name(k: int, e: int) -> str:
    """Run name of a Table 4-5 configuration (K = 10, E = 1 is shared by both tables)."""
    return f"sweep_K{k}_E{e}"


def _row_seeds(config: ReproduceConfig, mode: str) -> tuple[int, ...]:
    """The training seeds a Table 3 row runs on (:data:`ALL_SEED_ROWS`: all)."""
    return config.seeds if mode in ALL_SEED_ROWS else config.seeds[:1]


def _central_name(lr: float, seed: int) -> str:
    return _seeded(f"central_lr{_lr_name(lr)}", seed)


def _base_settings(config: ReproduceConfig) -> FedPSSettings:
    """The settings every job starts from: central, ``config.rounds``, its warm-up."""
    return FedPSSettings(mode="central", rounds=config.rounds, warmup_rounds=config.warmup_rounds)


def tuning_jobs(config: ReproduceConfig) -> dict[str, Job]:
    """The central model at every learning rate, first training seed (Table 3, first
    phase: the rate is chosen on validation MAP; the other seeds then run at that rate)."""
    base = _base_settings(config)
    return {
        _central_name(lr, config.seeds[0]): Job(
            replace(base, learning_rate=lr, seed=config.seeds[0]), config.users
        )
        for lr in config.learning_rates
    }


def planned_jobs(config: ReproduceConfig, tuned_lr: float | None) -> dict[str, Job]:
    """The configurations the requested tables need besides the tuning runs, by run name
    (``tuned_lr``: the central model's chosen learning rate, for Table 3)."""
    base = _base_settings(config)
    jobs: dict[str, Job] = {}
    if "3" in config.tables:
        assert tuned_lr is not None
        for mode in RULE_MODES:
            jobs[mode] = Job(replace(base, mode=mode), config.users)
        for s in config.seeds[1:]:
            jobs[_central_name(tuned_lr, s)] = Job(
                replace(base, learning_rate=tuned_lr, seed=s), config.users
            )
        for mode in ("flat", "proxy", "gbdt", *TUNED_LR_MODES):
            lr = tuned_lr if mode in TUNED_LR_MODES else base.learning_rate
            for s in _row_seeds(config, mode):
                settings = replace(base, mode=mode, seed=s, learning_rate=lr)
                jobs[_seeded(mode, s)] = Job(settings, config.users)
        for name, changes in ABLATION_ROWS.items():
            for s in _row_seeds(config, name):
                settings = replace(base, learning_rate=tuned_lr, seed=s, **changes)
                jobs[_seeded(name, s)] = Job(settings, config.users)
        for s in _row_seeds(config, "flat_eta3"):
            eta3 = replace(base, mode="flat", seed=s, server_learning_rate=3.0)
            jobs[_seeded("flat_eta3", s)] = Job(eta3, config.users)
    if "hierarchy" in config.tables:
        for ratio in config.hierarchy_late:
            for mode in ("flat", "proxy"):
                for s in config.seeds[: config.hierarchy_seeds]:
                    settings = replace(
                        base, mode=mode, seed=s, clients_per_step=100, straggler_ratio=ratio
                    )
                    jobs[_seeded(f"K100_{mode}_late{round(ratio * 100)}", s)] = Job(
                        settings, config.users
                    )
    # Ten proxies whatever the number of users, so that K = 100 is 10 proxies x 10 clients.
    per_proxy = max(10, (config.sweep_users or 1000) // 10)
    sweep = replace(
        base, mode="proxy", rounds=config.sweep_rounds, clients_per_proxy=per_proxy,
        proxies_per_group=5, seed=config.seeds[0],
    )  # fmt: skip
    if "4" in config.tables:
        for k in K_VALUES:
            jobs[_sweep_name(k, 1)] = Job(replace(sweep, clients_per_step=k), config.sweep_users)
    if "5" in config.tables:
        for e in E_VALUES:
            jobs[_sweep_name(10, e)] = Job(replace(sweep, local_epochs=e), config.sweep_users)
    return jobs


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
    (recorded under ``key``, as :meth:`FedPSResult.to_json` records them); raises
    :class:`ConfigError` naming the settings that differ otherwise."""
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


def _best_valid(result: dict[str, Any]) -> float:
    return max(p["valid_MAP"] for p in result["curve"])


def choose_learning_rate(config: ReproduceConfig, results: dict[str, dict[str, Any]]) -> float:
    """The central learning rate with the best validation MAP (first training seed)."""
    missing = [
        _central_name(lr, config.seeds[0])
        for lr in config.learning_rates
        if _central_name(lr, config.seeds[0]) not in results
    ]
    if missing:
        raise ConfigError(
            f"the learning-rate tuning runs {missing} are not finished; Table 3 needs them "
            "(run without --finished-only)"
        )
    valid = {
        lr: _best_valid(results[_central_name(lr, config.seeds[0])]) for lr in config.learning_rates
    }
    return max(valid, key=lambda lr: valid[lr])


# --------------------------------------------------------------------------- tables


def communication_table(
    n_clients: int, seed: int = 0, k_values: Sequence[int] = (100, 1000)
) -> list[dict[str, Any]]:
    """Table 6: one round's communication time, flat vs proxy, per K and delay ratio (the
    paper's topology: 100 clients per proxy, 1,000 proxies per group server). Each response
    is late with probability ``ratio``, drawn per step."""
    rows = []
    for ratio in DELAY_RATIOS:
        rng = np.random.default_rng(seed)
        topology = Topology.build(n_clients, rng)
        for k in k_values:
            flat_steps = flat_schedule(n_clients, k, rng)
            flat = flat_round_time(flat_steps, [rng.random(s.size) < ratio for s in flat_steps])
            steps = proxy_schedule(topology, k, rng)
            late = [rng.random(s.size) < ratio for s in steps]
            proxy = proxy_round_time(steps, late, topology)
            rows.append({"delay_ratio": ratio, "K": k, "flat": str(flat), "proxy": str(proxy)})
    return rows


def _load(runs: Path, name: str) -> dict[str, np.ndarray]:
    with np.load(runs / f"{name}.npz") as f:
        order = np.argsort(f["event_ids"], kind="stable")
        return {k: f[k][order] for k in ("per_query", "event_ids", "users")}


def _stack(runs: Path, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(event_ids, users, (S, Q) AP)`` of seeded runs, aligned on the query events."""
    loaded = [_load(runs, n) for n in names]
    events = loaded[0]["event_ids"]
    for x in loaded[1:]:
        if not np.array_equal(x["event_ids"], events):
            raise ConfigError(f"runs {list(names)} were tested on different queries")
    return events, loaded[0]["users"], np.stack([x["per_query"][:, 0] for x in loaded])


def _p_text(p: float | None) -> str:
    if p is None or not np.isfinite(p):
        return "-"
    return "< 1e-300" if p == 0.0 else f"{p:.2g}"


def _pct(value: float, reference: float) -> str:
    return f"{100.0 * (value - reference) / reference:+.2f}%"


def _seed_stats(results: dict[str, dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in ("MAP", "MRR", "P@1"):
        values = np.array([results[n][m] for n in names])
        out[m] = float(values.mean())
        out[f"{m}_sd"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
        out[f"{m}_per_seed"] = values.tolist()
    out["best_round"] = [results[n]["best_round"] for n in names]
    out["kl"] = {
        key: float(np.mean([results[n]["kl"][key] for n in names]))
        for key in results[names[0]]["kl"]
    }
    out["wall_seconds"] = float(np.mean([results[n]["wall_seconds"] for n in names]))
    return out


def command_line(config: ReproduceConfig) -> str:
    """The ``fedrank fedps reproduce`` invocation that produces ``config``."""
    parts = ["fedrank fedps reproduce", f"--tables {','.join(config.tables)}"]
    if config.users:
        parts.append(f"--users {config.users}")
    parts.append(f"--rounds {config.rounds}")
    if "4" in config.tables or "5" in config.tables:
        parts.append(f"--sweep-rounds {config.sweep_rounds}")
        parts.append(f"--sweep-users {config.sweep_users or 0}")
    if "fig4" in config.tables:
        parts.append(f"--continuous-users {config.continuous_users or 0}")
    parts.append(f"--seed {config.data_seed} --seeds {','.join(map(str, config.seeds))}")
    if "hierarchy" in config.tables:
        parts.append(f"--hierarchy-seeds {config.hierarchy_seeds}")
        late = ",".join(f"{round(r * 100)}" for r in config.hierarchy_late)
        parts.append(f"--hierarchy-late {late}")
    parts.append(f"--lrs {','.join(_lr_name(lr) for lr in config.learning_rates)}")
    if config.warmup_rounds is not None:
        parts.append(f"--warmup-rounds {config.warmup_rounds}")
    if config.finished_only:
        parts.append("--finished-only")
    return " ".join(parts)


def _table3(
    config: ReproduceConfig, results: dict[str, dict[str, Any]], tuned_lr: float
) -> tuple[list[str], dict[str, Any]]:
    runs = config.out_dir / "runs"
    seeds = config.seeds
    rows: dict[str, list[str]] = {m: [m] for m in RULE_MODES}
    central = [_central_name(tuned_lr, s) for s in seeds]
    rows["central"] = central
    for mode in (*ABLATION_ROWS, *TRAINED_ROWS, "flat_eta3"):
        rows[mode] = [_seeded(mode, s) for s in _row_seeds(config, mode)]
    if any(n not in results for n in central):
        raise ConfigError(
            f"the central runs {[n for n in central if n not in results]} are not finished; "
            "every Table 3 test compares with them (run without --finished-only)"
        )
    _, users, ref = _stack(runs, central)
    gbdt = rows["gbdt"]
    gbdt_values = _stack(runs, gbdt)[2] if all(n in results for n in gbdt) else None
    summary: dict[str, Any] = {"tuned_learning_rate": tuned_lr, "rows": {}}
    lines = [
        "## Tables 2-3: ranking quality and privacy",
        "",
        f"Training seeds {', '.join(map(str, seeds))} for {', '.join(ALL_SEED_ROWS)}; the "
        f"other trained rows use seed {seeds[0]} only (column 'seeds'; their test then "
        "treats that one run as fixed). MAP, MRR, P@1: mean "
        "(sd over seeds) of the test metrics at the evaluation with the best validation MAP. "
        "p: two-sided test of the MAP difference to the tuned central model, covering "
        "training randomness (paired over seeds) and user sampling (clustered by user), "
        "`fedrank.experiments.stats.seed_user_test`; 95% CI of the difference. 'vs "
        "LightGBM': the same test against the LightGBM on the hand features. KL: mean "
        "KL(real profile || server's profile), nats, larger = less disclosed; 'server' = the "
        "paper's setting (training server separate from the search engine), 'engine+server' "
        "= one party.",
        "",
        "| model | seeds | MAP | MRR | P@1 | vs central | 95% CI | p | vs LightGBM [95% CI], p "
        "| KL server | KL engine+server | best round | paper MAP |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    central_stats = _seed_stats(results, central)
    paper_key = kl_settings.PAPER_SETTING.key()
    current_key = kl_settings.CURRENT_SETTING.key()
    unfinished: dict[str, list[str]] = {}
    for mode in (*RULE_MODES, "central", *ABLATION_ROWS, *TRAINED_ROWS, "flat_eta3"):
        names = rows[mode]
        if any(n not in results for n in names):  # only with finished_only
            unfinished[mode] = [n for n in names if n not in results]
            continue
        st = _seed_stats(results, names)
        test: dict[str, Any] | None = None
        _, _, values = _stack(runs, names)
        values = np.repeat(values, len(seeds), axis=0) if values.shape[0] == 1 else values
        if mode != "central":
            test = seed_user_test(values, ref, users)
        vs_gbdt = None
        if gbdt_values is not None and mode != "gbdt":
            vs_gbdt = seed_user_test(values, gbdt_values, users)
        gbdt_text = (
            "-"
            if vs_gbdt is None
            else f"{vs_gbdt['diff']:+.4f} [{vs_gbdt['ci95_low']:+.4f}, "
            f"{vs_gbdt['ci95_high']:+.4f}], {_p_text(vs_gbdt['p'])}"
        )

        def sd(m: str, st: dict[str, Any] = st, n: int = len(names)) -> str:
            return f" ({st[f'{m}_sd']:.4f})" if n > 1 else ""

        ci = "-" if test is None else f"[{test['ci95_low']:+.4f}, {test['ci95_high']:+.4f}]"
        best = [b for b in st["best_round"] if b]
        lines.append(
            f"| {LABELS[mode]} | {'-' if mode in RULE_MODES else len(names)} | "
            f"{st['MAP']:.4f}{sd('MAP')} | {st['MRR']:.4f}{sd('MRR')} | "
            f"{st['P@1']:.4f}{sd('P@1')} | "
            f"{'-' if mode == 'central' else _pct(st['MAP'], central_stats['MAP'])} | {ci} | "
            f"{_p_text(None if test is None else test['p'])} | {gbdt_text} | "
            f"{st['kl'][paper_key]:.3f} | "
            f"{st['kl'][current_key]:.3f} | "
            f"{', '.join(f'{b:g}' for b in best) if best else '-'} | "
            f"{PAPER_MAP.get(mode, '-')} |"
        )
        summary["rows"][mode] = {
            **st,
            "test_vs_central": test,
            "test_vs_gbdt": vs_gbdt,
            "runs": names,
        }
    lines.append("")
    if unfinished:
        summary["unfinished"] = unfinished
        lines += [
            "Not finished yet (runs missing): "
            + "; ".join(f"{LABELS[m]} ({', '.join(n)})" for m, n in unfinished.items())
            + ".",
            "",
        ]
    tuning = [
        f"Central learning rate (seed {seeds[0]}; the best validation MAP is used for "
        "central, K-NRM, GroupUser and CoverQuery):",
        "",
        "| learning rate | valid MAP | test MAP | best round |",
        "|---|---|---|---|",
    ]
    for lr in config.learning_rates:
        r = results[_central_name(lr, seeds[0])]
        mark = " (chosen)" if lr == tuned_lr else ""
        tuning.append(
            f"| {_lr_name(lr)}{mark} | {_best_valid(r):.4f} | {r['MAP']:.4f} | "
            f"{r['best_round']:g} |"
        )
    return lines + tuning + [""], summary


def _query_kind_lines(
    config: ReproduceConfig, table3: dict[str, Any], refinding: tuple[np.ndarray, np.ndarray]
) -> tuple[list[str], dict[str, Any]]:
    """Table 3's rows on re-finding queries (the user clicked the relevant document before)
    and on new-document queries, and the central model against the hand-feature GBDT on
    each kind (``seed_user_test``, paired over seeds)."""
    runs = config.out_dir / "runs"
    events, users, central = _stack(runs, table3["rows"]["central"]["runs"])
    order = np.argsort(refinding[0])
    known = refinding[0][order]
    at = np.minimum(np.searchsorted(known, events), max(known.size - 1, 0))
    if known.size == 0 or not np.array_equal(known[at], events):
        raise ConfigError(
            "the test queries of the runs are not those of the prepared data's test lists: "
            "the runs were made on other data; rerun them (delete the runs folder)"
        )
    seen = refinding[1][order][at]
    lines = [
        "## Table 3 by query kind: re-finding vs new documents",
        "",
        f"Re-finding: the user clicked the relevant document before ({seen.mean():.1%} of the "
        f"{seen.size:,} test queries); new: the relevant document is new to the user. MAP, "
        "mean over the row's seeds.",
        "",
        "| model | re-finding MAP | new-document MAP |",
        "|---|---|---|",
    ]
    out: dict[str, Any] = {"refinding_share": float(seen.mean()), "rows": {}}
    stacked: dict[str, np.ndarray] = {}
    for mode, row in table3["rows"].items():
        row_events, _, values = _stack(runs, row["runs"])
        if not np.array_equal(row_events, events):
            raise ConfigError(f"run {row['runs'][0]} was tested on other queries than central")
        stacked[mode] = values
        by_kind = {
            kind: float(np.nanmean(values[:, mask].mean(axis=0)))
            for kind, mask in (("refinding", seen), ("new", ~seen))
        }
        out["rows"][mode] = by_kind
        lines.append(f"| {LABELS[mode]} | {by_kind['refinding']:.4f} | {by_kind['new']:.4f} |")
    lines.append("")
    if "gbdt" in stacked and stacked["gbdt"].shape == central.shape:
        for kind, mask in (("re-finding", seen), ("new-document", ~seen)):
            test = seed_user_test(central[:, mask], stacked["gbdt"][:, mask], users[mask])
            out[f"central_vs_gbdt_{kind}"] = test
            lines.append(
                f"Central minus GBDT on {kind} queries: {test['diff']:+.4f} "
                f"[{test['ci95_low']:+.4f}, {test['ci95_high']:+.4f}], p = {_p_text(test['p'])}."
            )
        lines.append("")
    return lines, out


def _kl_lines(summary: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Table 2's methods under every KL setting: values, order, reversals vs the paper."""
    methods = ("groupuser", "coverquery", "flat", "proxy")
    if any(m not in summary["rows"] for m in methods):
        return [
            "Table 2 in detail: waits for GroupUser, CoverQuery, FedPSFlat, FedPSProxy.",
            "",
        ], {}
    grids = {m: summary["rows"][m]["kl"] for m in methods}
    rows = kl_settings.order_sensitivity(grids)
    paper = kl_settings.PAPER_TABLE2_AOL
    lines = [
        "## Table 2 in detail: the KL measure under each modelling choice",
        "",
        f"Paper (AOL): GroupUser {paper['groupuser']}, CoverQuery {paper['coverquery']}, "
        f"FedPSFlat {paper['flat']}, FedPSProxy {paper['proxy']}. Each row: a setting "
        "(observer | smoothing | weighting of revealed words | negatives' words included), "
        "the mean KL of each method (mean over seeds), the order, and the pairs whose order "
        "is the reverse of the paper's.",
        "",
        "| setting | GroupUser | CoverQuery | FedPSFlat | FedPSProxy | order | reversed vs paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        key = row["setting"]
        reversed_pairs = ", ".join(f"{a} < {b}" for a, b in row["reversals"]) or "none"
        lines.append(
            f"| {key} | "
            + " | ".join(f"{grids[m][key]:.3f}" for m in methods)
            + f" | {' > '.join(row['order'])} | {reversed_pairs} |"
        )
    return lines + [""], {"grids": grids, "order_sensitivity": rows}


def _hierarchy_lines(
    config: ReproduceConfig, results: dict[str, dict[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    runs = config.out_dir / "runs"
    lines = [
        "## Hierarchy: FedPSFlat vs FedPSProxy with K = 100",
        "",
        "Ten proxies of ten clients per step under two group servers; the share of responses "
        "later than T_max sets T_max. p: FedPSProxy minus FedPSFlat, `seed_user_test`.",
        "",
        "| late responses | FedPSFlat MAP | FedPSProxy MAP | proxy - flat | 95% CI | p | "
        "flat: updates dropped | flat: share of training queries dropped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    out: dict[str, Any] = {}
    for ratio in config.hierarchy_late:
        tag = f"late{round(ratio * 100)}"
        seeds = config.seeds[: config.hierarchy_seeds]
        flat = [_seeded(f"K100_flat_{tag}", s) for s in seeds]
        proxy = [_seeded(f"K100_proxy_{tag}", s) for s in seeds]
        _, users, a = _stack(runs, proxy)
        _, _, b = _stack(runs, flat)
        test = seed_user_test(a, b, users)
        fs, ps = _seed_stats(results, flat), _seed_stats(results, proxy)
        dropped = np.mean([results[n]["communication"]["late_share"] for n in flat])
        weight = np.mean([results[n]["communication"]["late_weight_share"] for n in flat])
        lines.append(
            f"| {ratio:.0%} | {fs['MAP']:.4f} ({fs['MAP_sd']:.4f}) | {ps['MAP']:.4f} "
            f"({ps['MAP_sd']:.4f}) | {test['diff']:+.4f} | [{test['ci95_low']:+.4f}, "
            f"{test['ci95_high']:+.4f}] | {_p_text(test['p'])} | {dropped:.1%} | {weight:.1%} |"
        )
        out[tag] = {"flat": fs, "proxy": ps, "test": test}
    return lines + [""], out


def _finished(
    lines: list[str], what: str, names: list[str], results: dict[str, dict[str, Any]]
) -> bool:
    """Whether every run of ``names`` is finished; if not (only with ``finished_only``),
    say so in ``lines``."""
    missing = [n for n in names if n not in results]
    if missing:
        lines += [f"{what}: not finished yet (runs missing: {', '.join(missing)}).", ""]
    return not missing


def write_tables(
    config: ReproduceConfig,
    results: dict[str, dict[str, Any]],
    tuned_lr: float | None,
    diagnostics: dict[str, Any] | None = None,
    continuous: dict[str, Any] | None = None,
    refinding: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """Write ``tables.md`` and ``results.json`` into ``out_dir``; return the markdown.
    ``refinding``: :func:`~fedrank.experiments.fedps.lists.refinding_queries` of the test
    split, for Table 3's breakdown by query kind."""
    lines = ["# FedPS on the AOL log", "", f"Command: `{command_line(config)}`.", ""]
    summary: dict[str, Any] = {}
    any_result = next(iter(results.values()), None)
    if any_result is not None:
        d = any_result["data"]
        lines += [
            f"Data (data seed {config.data_seed}): {d['users']} users ({d['users_dropped']} "
            f"dropped), {d['documents']:,} documents indexed ({d['past_documents']:,} clicked "
            f"in the past), {d['vocabulary']:,} words; {d['train_queries']:,} train / "
            f"{d['valid_queries']:,} valid / {d['test_queries']:,} test queries with a list.",
            "",
        ]
    versions = _code_versions({**results, **({"continuous": continuous} if continuous else {})})
    lines += _code_lines(versions)
    summary["code_versions"] = versions
    if diagnostics is not None:
        lines += _diagnostic_lines(diagnostics)
        summary["lists"] = diagnostics
    if "3" in config.tables:
        assert tuned_lr is not None
        table, summary["table3"] = _table3(config, results, tuned_lr)
        kl_lines, summary["kl"] = _kl_lines(summary["table3"])
        lines += table
        if refinding is not None:
            kinds, summary["query_kinds"] = _query_kind_lines(config, summary["table3"], refinding)
            lines += kinds
        lines += kl_lines
    planned = planned_jobs(config, tuned_lr)
    hierarchy = [n for n in planned if n.startswith("K100_")]
    if "hierarchy" in config.tables and _finished(lines, "The hierarchy", hierarchy, results):
        table, summary["hierarchy"] = _hierarchy_lines(config, results)
        lines += table
    for table_id, values, key in (("4", K_VALUES, "K"), ("5", E_VALUES, "E")):
        names = [_sweep_name(v, 1) if key == "K" else _sweep_name(10, v) for v in values]
        if table_id not in config.tables or not _finished(
            lines, f"Table {table_id}", names, results
        ):
            continue
        name = "clients per step K" if key == "K" else "local epochs E"
        lines += [
            f"## Table {table_id}: FedPSProxy, {name} ({config.sweep_users or 'all'} users, "
            f"seed {config.seeds[0]})",
            "",
            f"| {key} | best round | steps to it | wall s | MAP |",
            "|---|---|---|---|---|",
        ]
        for v in values:
            r = results[_sweep_name(v, 1) if key == "K" else _sweep_name(10, v)]
            lines.append(
                f"| {v} | {r['best_round']:g} | {r['steps_to_best']} | "
                f"{r['wall_seconds']:.0f} | {r['MAP']:.4f} |"
            )
        lines.append("")
    if "6" in config.tables:
        n_here = any_result["data"]["users"] if any_result is not None else None
        lines += [
            "## Table 6: communication time of one round",
            "",
            "T: one model exchange; d: a late response's delay (model in "
            "`fedrank.experiments.fedps.communication`). Paper (118,067 users): flat 236134T + "
            "11551d / 23557d; proxy K=100 47240T / 44878T, K=1000 6902T / 6664T.",
            "",
            "| users | delay ratio | K | FedPSFlat | FedPSProxy |",
            "|---|---|---|---|---|",
        ]
        table6 = {}
        for n in (PAPER_USERS, n_here):
            if n is None:
                continue
            rows = communication_table(n, config.data_seed)
            table6[str(n)] = rows
            lines += [
                f"| {n:,} | {row['delay_ratio']:.0%} | {row['K']} | {row['flat']} | "
                f"{row['proxy']} |"
                for row in rows
            ]
        lines.append("")
        summary["table6"] = table6
    if "fig4" in config.tables and continuous is None:
        lines += ["Figure 4: not finished yet (no continuous.json).", ""]
    if continuous is not None:
        modes = list(continuous["stages"][0]["modes"])
        lines += [
            "## Figure 4: continuous updating (weekly stages)",
            "",
            f"{config.continuous_users or 'all'} users, seed {config.seeds[0]}; every stage's "
            "data fitted on that stage's past only; MAP (improvement over the original "
            "ranking of the same stage).",
            "",
            "| stage | " + " | ".join(modes) + " |",
            "|---|" + "---|" * len(modes),
            *(
                f"| {row['stage']} | "
                + " | ".join(
                    f"{row['modes'][m]['MAP']:.4f} ({row['modes'][m]['MAP_improvement_pct']:+.1f}%)"
                    for m in modes
                )
                + " |"
                for row in continuous["stages"]
            ),
            "",
            "![Figure 4](figure4.png)",
            "",
        ]
        summary["continuous"] = continuous
    text = "\n".join(lines)
    (config.out_dir / "tables.md").write_text(text)
    write_json(
        {
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
            "summary": summary,
            "runs": results,
        },
        config.out_dir / "results.json",
    )
    return text


def _code_versions(results: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """The runs of each code version (:func:`~fedrank.core.provenance.code_version` recorded
    in a run's ``code``; ``"not recorded"`` for runs written before it was), the version
    with the most runs first."""
    versions: dict[str, list[str]] = {}
    for name, doc in results.items():
        versions.setdefault(str(doc.get("code", "not recorded")), []).append(name)
    return dict(sorted(versions.items(), key=lambda item: -len(item[1])))


def _code_lines(versions: dict[str, list[str]]) -> list[str]:
    """Which code the runs come from; when more than one version, every run of the
    minority versions is named."""
    if not versions:
        return []
    if len(versions) == 1:
        ((version, names),) = versions.items()
        return [f"Code version: `{version}` (all {len(names)} runs).", ""]
    counts = "; ".join(f"`{v}`: {len(n)} runs" for v, n in versions.items())
    named = "; ".join(f"`{v}`: {', '.join(sorted(n))}" for v, n in list(versions.items())[1:])
    return [
        f"**The runs come from {len(versions)} code versions** (the tables may mix them): "
        f"{counts}. Runs not from the first: {named}.",
        "",
    ]


def _diagnostic_lines(diagnostics: dict[str, Any]) -> list[str]:
    lines = [
        "## The candidate lists: relevant vs irrelevant candidates",
        "",
        "Share (or mean) among relevant / irrelevant candidates. no match: no query word in "
        "the engine's text (BM25 = 0) or in the model's text; popular: clicked by anyone in "
        "the background period; user clicked: the user clicked it before.",
        "",
        "| split | queries | listed / clicked | no match (engine) | no match (model) | popular "
        "| log popularity | user clicked | BM25 rank |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for split, d in diagnostics.items():
        cells = [
            f"{d[k]['relevant']:.3f} / {d[k]['irrelevant']:.3f}"
            for k in (
                "no_match_engine",
                "no_match_model",
                "popular",
                "log_popularity",
                "user_clicked",
            )
        ]
        rank = f"{d['bm25_rank']['relevant']:.1f} / {d['bm25_rank']['irrelevant']:.1f}"
        lines.append(
            f"| {split} | {d['queries']:,} | {d['listed_share']:.1%} | "
            + " | ".join(cells)
            + f" | {rank} |"
        )
    return lines + [""]


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
    base = replace(_base_settings(config), seed=config.seeds[0])
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
