"""Helpers of the report tests: ``fedrank report`` on a run's JSON, the page checked to be
self-contained."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.clirun import ok


def report_page(run_json: Path, tmp_path: Path, kind: str) -> str:
    """``fedrank report`` on ``run_json``; the page, checked to be self-contained."""
    out = tmp_path / "report.html"
    result = ok(["report", str(run_json), "--out", str(out)])
    assert f"({kind} report)" in result.output
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    # nothing loaded from elsewhere: no script, stylesheet or image fetched by URL
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", html)
    assert "<script" not in html and "<link" not in html
    return html
