"""The ``fedrank`` command line: one sub-module per system, ``main`` and ``demo`` here."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fedrank.cli._common import FedrankGroup, write_json
from fedrank.cli.client import client
from fedrank.cli.foltr import foltr
from fedrank.cli.frecency import _run_study, _summarize, frecency
from fedrank.cli.service import serve


@click.group(cls=FedrankGroup)
@click.version_option(package_name="fedrank")
def main() -> None:
    """fedrank: privacy-preserving federated learning to rank."""


main.add_command(frecency)
main.add_command(foltr)
main.add_command(serve)
main.add_command(client)


@main.command("demo")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("results/demo"),
    show_default=True,
)
def demo(seed: int, out_dir: Path) -> None:
    """Run the federated frecency study with defaults; write a report, plots and JSON."""
    from fedrank.experiments.frecency_study import FrecencyStudyConfig
    from fedrank.experiments.plots import plot_study
    from fedrank.experiments.report import write_report

    config = FrecencyStudyConfig(seed=seed)
    result = _run_study(config)
    _summarize(result)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = plot_study(result, out_dir)
    write_json(result.to_json(), out_dir / "results.json")
    report = write_report(result, out_dir / "report.md", f"fedrank demo --seed {seed}", plots)
    click.echo(f"wrote {report}, {out_dir / 'results.json'} and {len(plots)} plots")


if __name__ == "__main__":
    sys.exit(main())
