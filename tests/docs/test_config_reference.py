"""docs/reference/config.md is what :mod:`fedrank.server.config_reference` writes from the
configuration code now (so it cannot go stale), and it covers every key of every section
the loader accepts, each with a meaning."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from fedrank.server.config import _SECTIONS
from fedrank.server.config_reference import attribute_meanings, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "config.md"


def test_committed_page_is_what_the_generator_writes() -> None:
    assert PAGE.read_text() == render(), (
        "docs/reference/config.md is stale: run python -m fedrank.server.config_reference"
    )


def test_every_key_of_every_section_has_a_row_with_a_meaning() -> None:
    text = PAGE.read_text()
    for name, cls in _SECTIONS.items():
        section = text.split(f"## `[{name}]`", 1)[1].split("\n## ", 1)[0]
        meanings = attribute_meanings(cls)
        for f in fields(cls):
            assert f"| `{f.name}` |" in section, (name, f.name)
            assert meanings.get(f.name), (name, f.name)


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "config.md"
    stale.write_text(render() + "an edit by hand\n")
    command = [sys.executable, "-m", "fedrank.server.config_reference", "--check"]
    result = subprocess.run([*command, "--output", str(stale)], capture_output=True, text=True)
    assert result.returncode == 1 and "is stale" in result.stdout
    fresh = tmp_path / "fresh.md"
    written = subprocess.run([*command[:-1], "--output", str(fresh)], capture_output=True)
    assert written.returncode == 0
    result = subprocess.run([*command, "--output", str(fresh)], capture_output=True, text=True)
    assert result.returncode == 0 and "up to date" in result.stdout
