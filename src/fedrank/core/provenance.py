"""Which code produced a result: a fingerprint of fedrank's source, recorded in result files
so that a table never silently combines runs of different code versions."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

__all__ = ["code_version", "source_fingerprint"]

#: Hex digits kept of the SHA-256 (48 bits: a collision between two versions of one
#: project is not a practical concern).
FINGERPRINT_DIGITS = 12


def source_fingerprint(root: Path) -> str:
    """The SHA-256 (first :data:`FINGERPRINT_DIGITS` hex digits) of every ``*.py`` file
    under ``root``: relative path and content, in path order. Other files (caches,
    compiled bytecode, data) do not count; renaming, adding or changing a source file
    does."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no source folder at {root}")
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        digest.update(len(name).to_bytes(8, "little") + name)
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:FINGERPRINT_DIGITS]


@cache
def code_version() -> str:
    """:func:`source_fingerprint` of the fedrank package this process imported (computed
    once per process)."""
    import fedrank

    return source_fingerprint(Path(fedrank.__file__).parent)
