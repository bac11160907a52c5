"""The code fingerprint recorded in result files (``fedrank.core.provenance``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedrank
from fedrank.core.provenance import code_version, source_fingerprint


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_fingerprint_follows_the_source_and_nothing_else(tmp_path: Path) -> None:
    files = {"a.py": "x = 1\n", "sub/b.py": "y = 2\n"}
    base = source_fingerprint(_tree(tmp_path / "one", files))
    assert re.fullmatch(r"[0-9a-f]{12}", base)
    assert source_fingerprint(_tree(tmp_path / "same", files)) == base
    # data, notes and bytecode do not count
    extra = _tree(tmp_path / "extra", {**files, "notes.txt": "hi", "sub/__pycache__/b.py": "z"})
    assert source_fingerprint(extra) == base
    # one changed byte, a renamed file, an added file: another version
    changed = {"a.py": "x = 2\n", "sub/b.py": "y = 2\n"}
    renamed = {"a.py": "x = 1\n", "sub/c.py": "y = 2\n"}
    added = {**files, "c.py": ""}
    for i, variant in enumerate((changed, renamed, added)):
        assert source_fingerprint(_tree(tmp_path / f"v{i}", variant)) != base


def test_code_version_is_the_fingerprint_of_the_imported_package(tmp_path: Path) -> None:
    assert code_version() == source_fingerprint(Path(fedrank.__file__).parent)
    with pytest.raises(FileNotFoundError, match="no source folder"):
        source_fingerprint(tmp_path / "missing")
