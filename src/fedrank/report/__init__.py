"""Self-contained HTML reports of the JSON a fedrank run writes (``fedrank report``).

:func:`write_report` reads a run's JSON, finds its kind from its content
(:mod:`fedrank.report.kinds`), draws the charts of that kind (:mod:`fedrank.report.sections`,
with :mod:`fedrank.report.figures`) and writes one HTML file with every chart inlined as
SVG (:mod:`fedrank.report.page`): no external URL, readable offline.
"""

from __future__ import annotations

from pathlib import Path

from fedrank.report.kinds import KINDS, ReportError, detect_kind, read_run
from fedrank.report.page import render_page
from fedrank.report.sections import SECTIONS

__all__ = ["KINDS", "ReportError", "build_report", "detect_kind", "read_run", "write_report"]


def build_report(data: dict, source: str) -> str:
    """The HTML report (one string) of the run JSON ``data`` read from ``source``."""
    kind = detect_kind(data, source)
    title, blocks = SECTIONS[kind](data)
    return render_page(title, kind, source, blocks)


def write_report(run_json: Path, out: Path | None = None) -> Path:
    """Write the HTML report of ``run_json`` to ``out`` (default: ``report.html`` beside
    it) and return its path.

    Raises:
        ReportError: the file is missing, not JSON, or not a run JSON fedrank knows.
    """
    run_json = Path(run_json)
    data = read_run(run_json)
    html = build_report(data, str(run_json))
    target = Path(out) if out is not None else run_json.with_name("report.html")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(html, encoding="utf-8")
    return target
