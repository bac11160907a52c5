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
from fedrank.cli.report import report
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
main.add_command(report)


@main.command("demo")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option(
    "--users", type=int, default=600, show_default=True, help="Simulated users (HTTP clients)."
)
@click.option("--iterations", type=int, default=20, show_default=True, help="Training iterations.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("results/demo"),
    show_default=True,
    help="Directory for results.json, report.html, report.md and the plots.",
)
def demo(seed: int, users: int, iterations: int, out_dir: Path) -> None:
    """The frecency study through the real service.

    A fedrank server on loopback, simulated users as HTTP clients; after training, every
    treatment user's searches run under the trained and the control weights (a paired
    comparison); writes results.json, report.html, report.md and plots."""
    import time

    from fedrank.experiments.frecency.service_demo import (
        ServiceDemoConfig,
        run_service_demo,
        write_service_report,
    )
    from fedrank.report import write_report

    began = time.perf_counter()
    config = ServiceDemoConfig(users=users, iterations=iterations, seed=seed)
    with progress_bar() as bar:
        task = bar.add_task("iterations", total=iterations)
        report = run_service_demo(
            config,
            out_dir,
            progress=lambda done, total: bar.update(task, completed=done),
            say=bar.console.print,
        )
    click.echo(f"{report['requests']:,} HTTP requests in {report['seconds']:.1f} s")
    paired = report["paired"]
    if paired["diff_ci95"] is not None:
        low, high = paired["diff_ci95"]
        click.echo(
            f"characters typed per search, {paired['n_users']} treatment users, the same "
            f"searches: trained {paired['trained_mean']:.3f} vs control weights "
            f"{paired['control_mean']:.3f} (the baseline: no training); difference "
            f"{paired['diff']:+.3f}, 95% CI [{low:+.3f}, {high:+.3f}], "
            f"paired t p = {paired['t_pvalue']:.2g}, Wilcoxon p = {paired['wilcoxon_pvalue']:.2g}"
        )
    for t in report["tests"]:
        if t["metric"] == "chars_typed" and t["a"] == "treatment" and t["b"] == "control":
            click.echo(
                f"between branches (independent users, as the paper): treatment vs control "
                f"p = {t['pvalue']:.2g} (MWU on per-user means)"
            )
    command = f"fedrank demo --seed {seed} --users {users} --iterations {iterations}"
    report["command"] = command
    written = write_service_report(report, out_dir, command)
    report["wall_seconds"] = time.perf_counter() - began
    write_json(report, out_dir / "results.json")
    html = write_report(out_dir / "results.json", out_dir / "report.html")
    click.echo(
        f"wrote {', '.join(str(p) for p in [html, *written])} and {out_dir / 'results.json'}"
    )
    click.echo(f"wall time {report['wall_seconds']:.1f} s")


name_options_in_errors(main)


if __name__ == "__main__":
    sys.exit(main())
