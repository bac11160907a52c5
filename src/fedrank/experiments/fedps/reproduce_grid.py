"""The grid of runs of ``fedrank fedps reproduce`` (:mod:`fedrank.experiments.fedps.reproduce`):
what to reproduce and at which scale (:class:`ReproduceConfig`), and every run the requested
tables need as one :class:`Job` under its run name, from the central model's learning-rate
tuning (:func:`tuning_jobs`, :func:`choose_learning_rate`) to the rows of Tables 3-5 and the
hierarchy (:func:`planned_jobs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral
from pathlib import Path
from typing import Any

from fedrank.core.validation import Accepts, Delegated, Interval, Rule, Validated
from fedrank.errors import ConfigError
from fedrank.experiments.executors import check_executor_options
from fedrank.experiments.fedps.settings import RULE_MODES, FedPSSettings

K_VALUES: tuple[int, ...] = (5, 10, 20, 30, 100)
E_VALUES: tuple[int, ...] = (1, 2, 3)
HIERARCHY_RATIOS: tuple[float, ...] = (0.1, 0.3)
TABLES: tuple[str, ...] = ("3", "hierarchy", "4", "5", "6", "fig4")
#: Trained modes of Table 3 besides central, in report order.
TRAINED_ROWS: tuple[str, ...] = ("gbdt", "knrm", "groupuser", "coverquery", "flat", "proxy")
#: Modes trained centrally at the learning rate tuned for the central model.
TUNED_LR_MODES: tuple[str, ...] = ("knrm", "groupuser", "coverquery")
#: Variants of the central model (the tuned rate): the compact model and the encoded model
#: without text dropout (each without one of the default model's features), and upload
#: case 3's model (global word embeddings frozen at word2vec, Sec. 3.3.2).
ABLATION_ROWS: dict[str, dict[str, Any]] = {
    "central_compact": {"model": "compact", "text_dropout": 0.0},
    "central_no_dropout": {"text_dropout": 0.0},
    "central_frozen": {"upload": "frozen"},
}
#: Rows run on every training seed; the others (secondary baselines and eta_s = 3) run on
#: the first seed only, to bound the reproduction's compute.
ALL_SEED_ROWS: tuple[str, ...] = ("central", "central_frozen", "gbdt", "flat", "proxy")


@dataclass(frozen=True)
class ReproduceConfig(Validated):
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
            (a K = 100 job on all users is the longest of the reproduction).
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
    (:func:`~fedrank.experiments.fedps.reproduce.run_jobs`); a run left from other settings
    stops the reproduction with an error naming it, so tables never mix runs of different
    settings.
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

    ACCEPTS = {
        "log": Path,
        "out_dir": Path,
        "users": Accepts(Interval(Integral, 1, None), None),
        "rounds": Interval(Integral, 1, None),
        "sweep_rounds": Interval(Integral, 1, None),
        "sweep_users": Accepts(Interval(Integral, 1, None), None),
        "continuous_users": Accepts(Interval(Integral, 1, None), None),
        "data_seed": Interval(Integral, 0, None),
        "seeds": tuple,
        "hierarchy_seeds": Interval(Integral, 1, None),
        "hierarchy_late": tuple,
        "learning_rates": tuple,
        "tables": tuple,
        "jobs": Interval(Integral, 1, None),
        "dask_workers": Accepts(Interval(Integral, 1, 256), None),
        "dask_scheduler": Accepts(str, None),
        "finished_only": bool,
        "warmup_rounds": Accepts(Interval(Integral, 0, None), None),
    }
    RULES = (
        Rule(
            lambda c: set(c.tables) <= set(TABLES),
            lambda c: f"unknown tables {sorted(set(c.tables) - set(TABLES))}; choose from {TABLES}",
        ),
        Delegated(lambda c: check_executor_options(c.jobs, c.dask_workers, c.dask_scheduler)),
        Rule(
            lambda c: bool(c.seeds) and len(set(c.seeds)) == len(c.seeds),
            "seeds must be distinct and not empty, got {seeds}",
        ),
        Rule(
            lambda c: c.hierarchy_seeds <= len(c.seeds),
            lambda c: (
                f"hierarchy_seeds must be in 1..{len(c.seeds)} (the number of seeds), "
                f"got {c.hierarchy_seeds}"
            ),
        ),
        Rule(
            lambda c: bool(c.hierarchy_late) and all(0.0 <= r < 1.0 for r in c.hierarchy_late),
            "hierarchy_late must be shares of late responses in [0, 1), got {hierarchy_late}",
        ),
        Rule(
            lambda c: bool(c.learning_rates),
            "give at least one learning rate to tune the central model over",
        ),
    )


@dataclass(frozen=True)
class Job:
    """One run: its settings and the users it runs on (``None``: ``config.users``)."""

    settings: FedPSSettings
    users: int | None


def lr_name(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def seeded_name(name: str, seed: int) -> str:
    return f"{name}_s{seed}"


def sweep_name(k: int, e: int) -> str:
    """Run name of a Table 4-5 configuration (K = 10, E = 1 is shared by both tables)."""
    return f"sweep_K{k}_E{e}"


def row_seeds(config: ReproduceConfig, mode: str) -> tuple[int, ...]:
    """The training seeds a Table 3 row runs on (:data:`ALL_SEED_ROWS`: all)."""
    return config.seeds if mode in ALL_SEED_ROWS else config.seeds[:1]


def central_name(lr: float, seed: int) -> str:
    return seeded_name(f"central_lr{lr_name(lr)}", seed)


def base_settings(config: ReproduceConfig) -> FedPSSettings:
    """The settings every job starts from: central, ``config.rounds``, its warm-up."""
    return FedPSSettings(mode="central", rounds=config.rounds, warmup_rounds=config.warmup_rounds)


def tuning_jobs(config: ReproduceConfig) -> dict[str, Job]:
    """The central model at every learning rate, first training seed (Table 3, first
    phase: the rate is chosen on validation MAP; the other seeds then run at that rate)."""
    base = base_settings(config)
    return {
        central_name(lr, config.seeds[0]): Job(
            replace(base, learning_rate=lr, seed=config.seeds[0]), config.users
        )
        for lr in config.learning_rates
    }


def planned_jobs(config: ReproduceConfig, tuned_lr: float | None) -> dict[str, Job]:
    """The configurations the requested tables need besides the tuning runs, by run name
    (``tuned_lr``: the central model's chosen learning rate, for Table 3)."""
    base = base_settings(config)
    jobs: dict[str, Job] = {}
    if "3" in config.tables:
        assert tuned_lr is not None
        for mode in RULE_MODES:
            jobs[mode] = Job(replace(base, mode=mode), config.users)
        for s in config.seeds[1:]:
            jobs[central_name(tuned_lr, s)] = Job(
                replace(base, learning_rate=tuned_lr, seed=s), config.users
            )
        for mode in ("flat", "proxy", "gbdt", *TUNED_LR_MODES):
            lr = tuned_lr if mode in TUNED_LR_MODES else base.learning_rate
            for s in row_seeds(config, mode):
                settings = replace(base, mode=mode, seed=s, learning_rate=lr)
                jobs[seeded_name(mode, s)] = Job(settings, config.users)
        for name, changes in ABLATION_ROWS.items():
            for s in row_seeds(config, name):
                settings = replace(base, learning_rate=tuned_lr, seed=s, **changes)
                jobs[seeded_name(name, s)] = Job(settings, config.users)
        for s in row_seeds(config, "flat_eta3"):
            eta3 = replace(base, mode="flat", seed=s, server_learning_rate=3.0)
            jobs[seeded_name("flat_eta3", s)] = Job(eta3, config.users)
    if "hierarchy" in config.tables:
        for ratio in config.hierarchy_late:
            for mode in ("flat", "proxy"):
                for s in config.seeds[: config.hierarchy_seeds]:
                    settings = replace(
                        base, mode=mode, seed=s, clients_per_step=100, straggler_ratio=ratio
                    )
                    jobs[seeded_name(f"K100_{mode}_late{round(ratio * 100)}", s)] = Job(
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
            jobs[sweep_name(k, 1)] = Job(replace(sweep, clients_per_step=k), config.sweep_users)
    if "5" in config.tables:
        for e in E_VALUES:
            jobs[sweep_name(10, e)] = Job(replace(sweep, local_epochs=e), config.sweep_users)
    return jobs


def best_valid(result: dict[str, Any]) -> float:
    return max(p["valid_MAP"] for p in result["curve"])


def choose_learning_rate(config: ReproduceConfig, results: dict[str, dict[str, Any]]) -> float:
    """The central learning rate with the best validation MAP (first training seed)."""
    missing = [
        central_name(lr, config.seeds[0])
        for lr in config.learning_rates
        if central_name(lr, config.seeds[0]) not in results
    ]
    if missing:
        raise ConfigError(
            f"the learning-rate tuning runs {missing} are not finished; Table 3 needs them "
            "(run without --finished-only)"
        )
    valid = {
        lr: best_valid(results[central_name(lr, config.seeds[0])]) for lr in config.learning_rates
    }
    return max(valid, key=lambda lr: valid[lr])


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
    parts.append(f"--lrs {','.join(lr_name(lr) for lr in config.learning_rates)}")
    if config.warmup_rounds is not None:
        parts.append(f"--warmup-rounds {config.warmup_rounds}")
    if config.finished_only:
        parts.append("--finished-only")
    return " ".join(parts)
