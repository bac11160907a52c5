"""``fedrank fedps``: FedPS on the AOL log (run one mode, or reproduce the paper's tables)."""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from threadpoolctl import threadpool_limits

from fedrank.cli._attack import attack_from_options, attack_options, echo_attack
from fedrank.cli._common import dask_options, progress_bar, write_json
from fedrank.systems import fedavg

if TYPE_CHECKING:
    import numpy as np

    from fedrank.data.aol import AolCorpus

#: What the workers of a flat or proxy run on Dask import as they start: the clients' code,
#: and the module torch imports when a client builds its first optimizer.
WORKER_PRELOAD = ("fedrank.experiments.fedps.clients", "torch._dynamo")

_LOG_HELP = "AOL click log (.tsv or .tsv.gz); default: the shared 1,000-user sample"


def _log_path(log: Path | None) -> Path:
    from fedrank.experiments.fedps.data import default_log_path

    return log if log is not None else default_log_path()


class _Bar:
    """A progress callback ``(stage, done, total)`` drawing one bar per stage."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.tasks: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.close()
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)

    def close(self) -> None:
        """Stop the bars of stages left unfinished (a round cut short by early stopping on
        validation): their clocks stop and they say so, none is left counting."""
        shown = {task.id: task for task in self.bar.tasks}
        for stage, task_id in self.tasks.items():
            task = shown.get(task_id)
            if task is not None and not task.finished and task.description == stage:
                self.bar.update(task_id, description=f"{stage} (stopped early)")
                self.bar.stop_task(task_id)


def _users(data: dict[str, Any]) -> str:
    """The users a run trained on, and those the time split dropped and why."""
    dropped = int(data.get("users_dropped", 0))
    if not dropped:
        return f"{data['users']} users"
    return (
        f"{data['users']} users ({dropped} of the {data['users'] + dropped} drawn dropped: no "
        f"events in one of the background, train, valid or test periods)"
    )


@click.group(short_help="FedPS: federated personalized search (AOL log).")
def fedps() -> None:
    """FedPS: federated personalized search on the AOL log (Yao et al., FedPS)."""


def _seed_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"--seeds must be comma-separated integers, got {text!r}"
        ) from None
    if not seeds:
        raise click.BadParameter("--seeds needs at least one seed, e.g. --seeds 1,2,3")
    return seeds


@fedps.command("run", short_help="Train and evaluate one FedPS mode.")
@click.option(
    "--mode",
    type=click.Choice(
        [
            "original",
            "ascending",
            "popularity",
            "user_prior",
            "pclick",
            "rule",
            "gbdt",
            "knrm",
            "central",
            "flat",
            "proxy",
            "coverquery",
            "groupuser",
        ]  # fmt: skip
    ),
    required=True,
    help="a rule (original = BM25 order, ascending, popularity, user_prior, pclick, rule), "
    "gbdt (LightGBM on the hand features), knrm, central (PEPS trained on the server), flat "
    "(FedPSFlat), proxy (FedPSProxy), coverquery or groupuser (privacy baselines)",
)
@click.option("--log", type=click.Path(path_type=Path, dir_okay=False), help=_LOG_HELP)
@click.option("--users", type=int, default=None, help="draw this many users (default: all)")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="data seed (user draw, lists, word2vec)"
)
@click.option(
    "--seeds",
    default=None,
    help="training seeds, comma-separated (e.g. 1,2,3); default: the data seed",
)
@click.option("--rounds", type=int, default=None, help="R, most rounds (epochs for central)")
@click.option("--evals-per-round", type=int, default=None, help="validation evaluations per round")
@click.option("--patience", type=int, default=None, help="evaluations without gain before stop")
@click.option("-k", "--clients-per-step", type=int, default=None, help="K")
@click.option("--per-proxy", "clients_per_proxy_step", type=int, default=None,
              help="clients sampled per proxy in a FedPSProxy step (paper: 10)")  # fmt: skip
@click.option("--clients-per-proxy", type=int, default=None, help="clients under one proxy")
@click.option("--proxies-per-group", type=int, default=None, help="proxies per group server")
@click.option("--local-epochs", type=int, default=None, help="E")
@click.option("--batch-size", type=int, default=None, help="B")
@click.option("--lr", "learning_rate", type=float, default=None, help="eta (Adam)")
@click.option("--server-lr", "server_learning_rate", type=float, default=None,
              help="eta_s (Algorithm 1: 1)")  # fmt: skip
@click.option("--stragglers", "straggler_ratio", type=float, default=None,
              help="share of responses later than T_max (default 0.1)")  # fmt: skip
@click.option("--t-max", type=float, default=None, help="T_max in seconds (default: calibrated)")
@click.option("--upload", type=click.Choice(["all", "frequent", "frozen"]), default=None,
              help="upload case (Sec. 3.3.2): all rows, only frequent words' rows (flat, "
              "proxy), or frozen global embeddings (also for models trained on the "
              "server)")  # fmt: skip
@click.option("--sampling", type=click.Choice(["shuffle", "poisson"]), default=None,
              help="FedPSFlat's clients per step: shuffle (the paper: every client once a "
              "round) or poisson (each client in each step with probability K/N; with "
              "--dp-epsilon it needs --dp-denominator and gives amplification by "
              "subsampling)")  # fmt: skip
@click.option("--client-metrics", is_flag=True, default=None,
              help="clients also send their training loss")  # fmt: skip
@click.option("--cover-queries", type=int, default=None, help="m cover queries per query")
@click.option("--model", type=click.Choice(["encoded", "compact"]), default=None,
              help="the personalized model: encoded click features (default) or the first, "
              "compact model (a tanh MLP on the raw features)")  # fmt: skip
@click.option(
    "--text-dropout",
    type=float,
    default=None,
    help="probability of dropping a query's text scores in training (default 0.3)",
)
@click.option(
    "--warmup-rounds",
    type=int,
    default=None,
    help="rounds (central: epochs) of training the click-feature tower alone before the "
    "full model, early-stopped on validation (default 8; 0: none; DP runs skip it)",
)
@click.option("--dp-epsilon", type=float, default=None,
              help="central DP: each user's budget over the training (flat, proxy; "
              "docs/privacy.md)")  # fmt: skip
@click.option("--dp-delta", type=float, default=None, help="its delta (default 1e-6)")
@click.option("--dp-clip", type=float, default=None,
              help="the L2 bound of every update (required with --dp-epsilon)")  # fmt: skip
@click.option("--dp-mode", type=click.Choice(["central", "distributed"]), default=None,
              help="central: the server adds Gaussian noise; distributed: each client adds "
              "a share of Skellam noise on secure aggregation's integer grid and the server "
              "sees only each step's noisy sum (docs/privacy.md)")  # fmt: skip
@click.option("--dp-threshold", type=float, default=None,
              help="distributed DP: secure aggregation's threshold as a share of K (default "
              "0.5); a step with fewer contributors is aborted")  # fmt: skip
@click.option("--dp-denominator", type=float, default=None,
              help="divide each step's noised sum by this fixed number (e.g. K) instead of "
              "the step's count, so that the model hides who took part")  # fmt: skip
@attack_options(fedavg.SYSTEM.attacks, "the users (a fixed set; flat and proxy modes)")
@dask_options("the clients of a flat or proxy run", "; same result as one process")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the results as JSON to this file.",
)
def run(
    mode: str,
    log: Path | None,
    users: int | None,
    seed: int,
    seeds: str | None,
    dask_workers: int | None,
    dask_scheduler: str | None,
    json_path: Path | None,
    malicious: float,
    attack: str | None,
    attack_factor: float | None,
    **overrides: Any,
) -> None:
    """Train and evaluate one FedPS mode over one or more training seeds; print MAP, MRR,
    P@1 (mean and spread over seeds) and the KL divergence (with --malicious and --attack,
    while a share of the users poisons its updates)."""
    from fedrank.experiments.executors import dask_client
    from fedrank.experiments.fedps.settings import FEDERATED_MODES, FedPSSettings

    training_seeds = _seed_list(seeds) or [seed]
    given = {k: v for k, v in overrides.items() if v is not None}
    settings = FedPSSettings(mode=mode, seed=training_seeds[0], **given)
    poison = attack_from_options(fedavg.SYSTEM, malicious, attack, attack_factor)
    if poison is not None and mode not in FEDERATED_MODES:
        raise click.UsageError(
            f"--attack poisons the clients' updates of a federated run (flat, proxy); mode "
            f"{mode} has none"
        )
    path = _log_path(log)
    on_dask = dask_workers is not None or dask_scheduler is not None
    if on_dask and mode not in FEDERATED_MODES:
        raise click.UsageError(
            f"--dask-workers/--dask-scheduler spread the clients of a federated run (flat, "
            f"proxy); mode {mode} runs in one process (use `fedrank fedps reproduce "
            f"--dask-workers` to spread whole runs)"
        )
    with contextlib.ExitStack() as stack, progress_bar() as bar:
        dask = None
        if on_dask:
            # the cluster starts before the run's heavy imports and the data preparation,
            # and its workers import the clients' code meanwhile (both use one core)
            starting = stack.enter_context(ThreadPoolExecutor(1)).submit(
                stack.enter_context,
                dask_client(dask_workers, dask_scheduler, preload=WORKER_PRELOAD),
            )
        if dask_workers is not None:
            # the driver shares this machine's cores with the local workers: its BLAS
            # threads (word2vec) would spin against them (13 CPU-s instead of 7 to prepare
            # the 100-user data, benchmarks/bench_dask.py)
            stack.enter_context(threadpool_limits(limits=1))
        # the settings above are checked with light modules only (fedps.settings): a bad
        # command line fails at once and starts no cluster
        from fedrank.experiments.fedps.covers import start_covers
        from fedrank.experiments.fedps.data import prepare_aol
        from fedrank.experiments.fedps.run import run_seeds

        covers: list[Future[list[np.ndarray]]] = []

        def start(corpus: AolCorpus) -> None:
            covers.append(start_covers(corpus, settings, stack))

        task = bar.add_task("prepare AOL data", total=1)
        data = prepare_aol(
            path,
            users=users,
            seed=seed,
            # FedPSFlat's cover queries need only the corpus: on Dask they start beside
            # the driver at once, in parallel with the rest of the preparation
            on_corpus=start if on_dask and mode == "flat" else None,
        )
        bar.update(task, completed=1)
        if on_dask:
            dask = starting.result()
        stages = _Bar(bar)
        results = run_seeds(
            data,
            settings,
            training_seeds,
            progress=stages,
            dask=dask,
            attack=poison,
            covers=covers[0] if covers else None,
        )
        stages.close()
    summary = results.summary()
    first = results.results[0].to_json()
    spread = (
        ""
        if len(training_seeds) == 1
        else " (mean over seeds; sd "
        + ", ".join(f"{m} {summary[f'{m}_sd']:.4f}" for m in ("MAP", "MRR", "P@1"))
        + ")"
    )
    click.echo(
        f"{mode}: MAP {summary['MAP_mean']:.4f}  MRR {summary['MRR_mean']:.4f}  "
        f"P@1 {summary['P@1_mean']:.4f}  KL {summary['kl_divergence']:.4f}{spread}  "
        f"({len(training_seeds)} seed(s), best round {summary['best_round_per_seed']}, "
        f"{_users(first['data'])}, {first['data']['test_queries']} test queries)"
    )
    echo_attack(first.get("attack", {}))
    if settings.dp_epsilon:
        privacy = first["privacy"]
        rate = privacy["sampling_rate"]
        over = (
            f"{privacy['rounds']} rounds"
            if rate == 1.0
            else f"{privacy['rounds']} steps, each user in each with probability {rate:.3g}"
        )
        click.echo(
            f"{settings.dp_mode} DP: epsilon {privacy['epsilon']:.4g} per user at delta "
            f"{privacy['delta']:g} over {over} (noise multiplier "
            f"{privacy['noise_multiplier']:.4g}, clip {privacy['clip']:g})"
        )
    if json_path is not None:
        write_json(
            {
                "mode": mode,
                "data_seed": seed,
                **summary,
                "runs": [r.to_json() for r in results.results],
            },
            json_path,
        )
        click.echo(f"wrote {json_path}")


@fedps.command("lists", short_help="Write a split's candidate lists as Parquet.")
@click.option("--log", type=click.Path(path_type=Path, dir_okay=False), help=_LOG_HELP)
@click.option("--users", type=int, default=None, help="draw this many users (default: all)")
@click.option("--seed", type=int, default=0, show_default=True, help="data seed")
@click.option(
    "--split",
    type=click.Choice(["train", "valid", "test"]),
    default="test",
    show_default=True,
    help="Which split's lists to write.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Directory the results are written to.",
)
def lists(log: Path | None, users: int | None, seed: int, split: str, out: Path) -> None:
    """Write the candidate lists of one split as Parquet (one row per query and candidate:
    user_id, query_id, doc_id, label, bm25, bm25_rank, user_prior_clicks,
    global_prior_clicks) and print how relevant and irrelevant candidates compare."""
    from fedrank.experiments.fedps.data import prepare_aol
    from fedrank.experiments.fedps.lists import list_diagnostics, write_lists

    data = prepare_aol(_log_path(log), users=users, seed=seed, word2vec_epochs=1)
    table = write_lists(data, split, out)
    d = list_diagnostics(data, split)
    click.echo(
        f"{split}: {d['queries']:,} queries ({d['listed_share']:.1%} of the clicked ones: "
        f"{d['click_not_retrieved']:,} clicks not retrieved, {d['no_negative']:,} without a "
        f"non-clicked document), {table.num_rows:,} rows"
    )
    for key in ("no_match_engine", "no_match_model", "popular", "user_clicked", "bm25_rank"):
        click.echo(
            f"  {key:16s} relevant {d[key]['relevant']:.3f}  irrelevant {d[key]['irrelevant']:.3f}"
        )
    click.echo(f"wrote {out}")


@fedps.command("reproduce", short_help="The FedPS paper's tables and figure.")
@click.option("--log", type=click.Path(path_type=Path, dir_okay=False), help=_LOG_HELP)
@click.option("--users", type=int, default=None, help="draw this many users (default: all)")
@click.option("--rounds", type=int, default=4, show_default=True, help="most rounds of every run")
@click.option(
    "--sweep-rounds", type=int, default=6, show_default=True, help="most rounds of the K, E sweeps"
)
@click.option(
    "--sweep-users", type=int, default=300, show_default=True, help="users of the sweeps (0: all)"
)
@click.option(
    "--continuous-users",
    type=int,
    default=300,
    show_default=True,
    help="users of the Figure 4 simulation (0: all)",
)
@click.option("--seed", type=int, default=0, show_default=True, help="data seed")
@click.option("--seeds", default="1,2,3", show_default=True, help="training seeds")
@click.option(
    "--hierarchy-seeds",
    type=int,
    default=1,
    show_default=True,
    help="how many of the training seeds the K = 100 hierarchy runs use (~35 min each)",
)
@click.option(
    "--hierarchy-late",
    default="10,30",
    show_default=True,
    help="percent of late responses the K = 100 hierarchy runs use, comma-separated",
)
@click.option(
    "--lrs", default="3e-4,1e-3,3e-3", show_default=True, help="central learning rates to tune"
)
@click.option(
    "--tables",
    default="3,hierarchy,4,5,6,fig4",
    show_default=True,
    help="comma-separated subset of 3 (Tables 2-3), hierarchy, 4, 5, 6, fig4",
)
@click.option("--jobs", type=int, default=2, show_default=True, help="local worker processes")
@dask_options(
    "the jobs", " instead of --jobs; every worker needs fedrank and the log at the same path"
)
@click.option(
    "--finished-only",
    is_flag=True,
    help="run nothing: write the tables from the runs finished so far (e.g. while a long "
    "reproduction runs); rows and tables whose runs are missing are named as not finished",
)
@click.option(
    "--warmup-rounds",
    type=int,
    default=None,
    help="the click-feature warm-up of every trained job (default 8; 0: none)",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("results/fedps"),
    show_default=True,
    help="Directory the results are written to.",
)
def reproduce(
    log: Path | None,
    users: int | None,
    rounds: int,
    sweep_rounds: int,
    sweep_users: int,
    continuous_users: int,
    seed: int,
    seeds: str,
    hierarchy_seeds: int,
    hierarchy_late: str,
    lrs: str,
    tables: str,
    jobs: int,
    dask_workers: int | None,
    dask_scheduler: str | None,
    finished_only: bool,
    warmup_rounds: int | None,
    out_dir: Path,
) -> None:
    """Tables 2-6, the hierarchy comparison and Figure 4 of the FedPS paper: writes
    tables.md, results.json, figure4.png and one JSON per run (finished runs are reused when
    rerun)."""
    from fedrank.experiments.fedps.reproduce import reproduce as run_reproduce
    from fedrank.experiments.fedps.reproduce_grid import ReproduceConfig

    try:
        rates = tuple(float(x) for x in lrs.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"--lrs must be comma-separated numbers, got {lrs!r}") from None
    try:
        late = tuple(int(x) / 100 for x in hierarchy_late.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(
            f"--hierarchy-late must be comma-separated whole percents (e.g. 10,30), got "
            f"{hierarchy_late!r}"
        ) from None
    config = ReproduceConfig(
        log=_log_path(log),
        out_dir=out_dir,
        users=users,
        rounds=rounds,
        sweep_rounds=sweep_rounds,
        sweep_users=sweep_users or None,
        continuous_users=continuous_users or None,
        data_seed=seed,
        seeds=tuple(_seed_list(seeds) or ()),
        hierarchy_seeds=hierarchy_seeds,
        hierarchy_late=late,
        learning_rates=rates,
        tables=tuple(t.strip() for t in tables.split(",") if t.strip()),
        jobs=jobs,
        dask_workers=dask_workers,
        dask_scheduler=dask_scheduler,
        finished_only=finished_only,
        warmup_rounds=warmup_rounds,
    )
    with progress_bar() as bar:
        text = run_reproduce(config, progress=_Bar(bar))
    click.echo(text)
    click.echo(f"wrote {out_dir / 'tables.md'}")
