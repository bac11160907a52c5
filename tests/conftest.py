"""Shared fixtures: where the real datasets live.

Tests read real data from ``../shared/data`` relative to the repository root, or from the
directory in ``FEDRANK_DATA_DIR``. Tests that need it are skipped, with the reason, only when
that directory does not exist.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The real-data directory (``FEDRANK_DATA_DIR`` or ``<repo>/../shared/data``)."""
    override = os.environ.get("FEDRANK_DATA_DIR")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real data directory {path} is absent (set FEDRANK_DATA_DIR to use another)")
    return path


@pytest.fixture(scope="session")
def firefox_dir(data_dir: Path) -> Path:
    path = data_dir / "firefox"
    if not path.is_dir():
        pytest.skip(f"{path} is absent: the Firefox places.sqlite files are needed")
    return path
