"""The docs site builds with ``mkdocs build --strict`` (mkdocs-material, the API reference
by mkdocstrings from the docstrings): a broken link, a missing anchor, a page missing from
the navigation or a docstring mkdocstrings cannot read fails the build, and so this test.
A copy of the site with one broken link must fail, so the strictness itself is tested."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_site_builds_strictly(tmp_path: Path) -> None:
    result = _build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    for page in ("index.html", "getting-started/index.html", "reference/config/index.html",
                 "reference/api/client/index.html", "results/index.html"):  # fmt: skip
        assert (site / page).is_file(), page
    # The API reference is rendered from the docstrings, not left as a directive.
    client = (site / "reference/api/client/index.html").read_text()
    assert "::: fedrank" not in client and "offline queue" in client


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [a page that is not there](no-such-page.md).\n")
    result = _build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr
