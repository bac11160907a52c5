"""The ``fedrank`` command line: one sub-module per system, ``main`` and ``demo`` here."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fedrank.cli._common import (
    EXIT_CODES,
    FedrankGroup,
    name_options_in_errors,
    progress_bar,
    write_json,
)
from fedrank.cli.client import client
from fedrank.cli.devices import devices
from fedrank.cli.fedps import fedps
from fedrank.cli.foltr import foltr
from fedrank.cli.frecency import frecency
from fedrank.cli.privacy import privacy
from fedrank.cli.service import serve, store


@click.group(cls=FedrankGroup, epilog=EXIT_CODES)
@click.version_option(package_name="fedrank")
def main() -> None:
    """fedrank: privacy-preserving federated learning to rank."""


main.add_command(frecency)
main.add_command(foltr)
main.add_command(serve)
main.add_command(store)
main.add_command(client)
main.add_command(devices)
main.add_command(fedps)
main.add_command(privacy)


@main.command("demo", short_help="The frecency study through the real service.")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Random seed (the same seed gives the same results).",
)
@click.option(
    "--users",
    type=int,
    default=600,
    show_default=True,
    help="Simulated users enrolled in the study.",
)
@click.option(
    "--iterations",
    type=int,
    default=20,
    show_default=True,
    help="Optimization iterations (server model updates).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("results/demo"),
    show_default=True,
    help="Directory the results are written to.",
)
def demo(seed: int, users: int, iterations: int, out_dir: Path) -> None:
    """The federated frecency study through the real service: a fedrank server on loopback,
    simulated users as HTTP clients; writes report.md, results.json and plots."""
    from fedrank.experiments.frecency.service_demo import (
        ServiceDemoConfig,
        run_service_demo,
        write_service_report,
    )

    config = ServiceDemoConfig(users=users, iterations=iterations, seed=seed)
    with progress_bar() as bar:
        task = bar.add_task("server iterations", total=iterations + 2)
        report = run_service_demo(
            config, out_dir, progress=lambda done, total: bar.update(task, completed=done)
        )
    loss = report["loss_per_iteration"]["treatment"]
    click.echo(f"{report['requests']:,} HTTP requests in {report['seconds']:.1f} s")
    click.echo("treatment loss per iteration: " + " ".join(f"{v:.3f}" for v in loss if v))
    for branch, e in report["eval"].items():
        click.echo(
            f"  {branch:17s} chars typed {e['chars_typed_mean']:.3f}  "
            f"rank {e['selected_rank_mean']:.3f}  ({e['users']} users)"
        )
    for t in report["tests"]:
        if t["metric"] == "chars_typed" and t["a"] == "treatment":
            click.echo(f"  {t['a']} vs {t['b']}: p = {t['pvalue']:.3g} (MWU on per-user means)")
    command = f"fedrank demo --seed {seed} --users {users} --iterations {iterations}"
    written = write_service_report(report, out_dir, command)
    write_json(report, out_dir / "results.json")
    click.echo(f"wrote {', '.join(str(p) for p in written)} and {out_dir / 'results.json'}")


name_options_in_errors(main)


if __name__ == "__main__":
    sys.exit(main())
