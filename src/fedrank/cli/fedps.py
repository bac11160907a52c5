"""``fedrank fedps``: FedPS on the AOL log (run one mode, or reproduce the paper's tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fedrank.cli._common import progress_bar, write_json

_LOG_HELP = "AOL click log (.tsv or .tsv.gz); default: the shared 1,000-user sample"


def _log_path(log: Path | None) -> Path:
    from fedrank.experiments.fedps_data import default_log_path

    return log if log is not None else default_log_path()


class _Bar:
    """A progress callback ``(stage, done, total)`` drawing one bar per stage."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.tasks: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)


@click.group()
def fedps() -> None:
    """FedPS: federated personalized search on the AOL log (Yao et al., FedPS)."""


@fedps.command("run")
@click.option(
    "--mode",
    type=click.Choice(
        ["original", "knrm", "pclick", "central", "flat", "proxy", "coverquery", "groupuser"]
    ),
    required=True,
    help="original (BM25), knrm, pclick, central (PEPS trained on the server), flat "
    "(FedPSFlat), proxy (FedPSProxy), coverquery or groupuser (privacy baselines)",
)
@click.option("--log", type=click.Path(path_type=Path, dir_okay=False), help=_LOG_HELP)
@click.option("--users", type=int, default=None, help="draw this many users (default: all)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--rounds", type=int, default=None, help="R (epochs for central modes)")
@click.option("-k", "--clients-per-step", type=int, default=None, help="K")
@click.option("--local-epochs", type=int, default=None, help="E")
@click.option("--batch-size", type=int, default=None, help="B")
@click.option("--lr", "learning_rate", type=float, default=None, help="eta (Adam)")
@click.option("--server-lr", "server_learning_rate", type=float, default=None, help="eta_s")
@click.option("--stragglers", "straggler_ratio", type=float, default=None, help="e.g. 0.1")
@click.option("--upload", type=click.Choice(["all", "frequent", "frozen"]), default=None)
@click.option("--cover-queries", type=int, default=None, help="m cover queries per query")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False))
def run(
    mode: str,
    log: Path | None,
    users: int | None,
    seed: int,
    json_path: Path | None,
    **overrides: Any,
) -> None:
    """Train and evaluate one FedPS mode; print MAP, MRR, P@1 and the KL divergence."""
    from fedrank.experiments.fedps import FedPSSettings, run_fedps
    from fedrank.experiments.fedps_data import prepare_aol

    given = {k: v for k, v in overrides.items() if v is not None}
    settings = FedPSSettings(mode=mode, seed=seed, **given)
    path = _log_path(log)
    with progress_bar() as bar:
        task = bar.add_task("prepare AOL data", total=1)
        data = prepare_aol(path, users=users, seed=seed)
        bar.update(task, completed=1)
        result = run_fedps(data, settings, progress=_Bar(bar))
    out = result.to_json()
    click.echo(
        f"{mode}: MAP {out['MAP']:.4f}  MRR {out['MRR']:.4f}  P@1 {out['P@1']:.4f}  "
        f"KL {out['kl_divergence']:.4f}  (best round {out['best_round']}/{out['rounds']}, "
        f"{out['steps']} steps, {out['wall_seconds']:.0f} s, {out['data']['users']} users)"
    )
    if json_path is not None:
        write_json(out, json_path)
        click.echo(f"wrote {json_path}")


@fedps.command("reproduce")
@click.option("--log", type=click.Path(path_type=Path, dir_okay=False), help=_LOG_HELP)
@click.option("--users", type=int, default=None, help="draw this many users (default: all)")
@click.option("--rounds", type=int, default=4, show_default=True, help="R of every run")
@click.option(
    "--sweep-rounds", type=int, default=6, show_default=True, help="R of the K and E sweeps"
)
@click.option(
    "--continuous-users",
    type=int,
    default=300,
    show_default=True,
    help="users of the Figure 4 simulation (0: all)",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--tables",
    default="3,4,5,6,fig4",
    show_default=True,
    help="comma-separated subset of 3 (Tables 2-3), 4, 5, 6, fig4",
)
@click.option("--jobs", type=int, default=2, show_default=True, help="worker processes")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("results/fedps"),
    show_default=True,
)
def reproduce(
    log: Path | None,
    users: int | None,
    rounds: int,
    sweep_rounds: int,
    continuous_users: int,
    seed: int,
    tables: str,
    jobs: int,
    out_dir: Path,
) -> None:
    """Tables 2-6 and Figure 4 of the FedPS paper: writes tables.md, results.json,
    figure4.png and one JSON per run (finished runs are reused when rerun)."""
    from fedrank.experiments.fedps_reproduce import ReproduceConfig
    from fedrank.experiments.fedps_reproduce import reproduce as run_reproduce

    config = ReproduceConfig(
        log=_log_path(log),
        out_dir=out_dir,
        users=users,
        rounds=rounds,
        sweep_rounds=sweep_rounds,
        continuous_users=continuous_users or None,
        seed=seed,
        tables=tuple(t.strip() for t in tables.split(",") if t.strip()),
        jobs=jobs,
    )
    with progress_bar() as bar:
        text = run_reproduce(config, progress=_Bar(bar))
    click.echo(text)
    click.echo(f"wrote {out_dir / 'tables.md'}")
