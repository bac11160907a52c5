"""``fedrank report RUN.json``: the self-contained HTML report of a run's JSON."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("run_json", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The HTML file to write  [default: report.html beside RUN_JSON]",
)
def report(run_json: Path, out: Path | None) -> None:
    """A self-contained HTML report of a run's JSON.

    The charts are inlined (no external URL). RUN_JSON is what `frecency simulate --json`,
    `foltr train --json`, `foltr reproduce` (results.json), `fedps run --json`, `fedps
    reproduce` (results.json) or `fedrank demo` (results.json) wrote; its kind is found
    from its content."""
    from fedrank.report import detect_kind, read_run, write_report

    kind = detect_kind(read_run(run_json), str(run_json))
    path = write_report(run_json, out)
    click.echo(f"wrote {path} ({kind} report)")
