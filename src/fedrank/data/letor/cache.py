"""The disk cache of parsed LETOR files.

Parsed files are cached as ``.npz`` files keyed by a hash of the file's bytes (and, for a
LightGBM file, of its ``.query`` file), the parse options and :data:`FORMAT_VERSION`, so a
dataset is parsed once. An unusable cache (a corrupt entry, an unwritable directory) warns
with :class:`LetorCacheWarning` and falls back to parsing; it never fails a read.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import TypeAlias

import numpy as np

from fedrank.data.letor.split import LetorSplit

__all__ = [
    "DEFAULT",
    "FORMAT_VERSION",
    "CacheDir",
    "LetorCacheWarning",
    "ParseCache",
    "default_cache_dir",
]

#: Version of the parsed-array format stored in the cache; part of every cache key, so
#: bumping it invalidates all cached files.
FORMAT_VERSION = 1


class _DefaultCache(enum.Enum):
    DEFAULT = "default"


#: Sentinel for ``cache_dir``: use :func:`default_cache_dir`.
DEFAULT = _DefaultCache.DEFAULT

CacheDir: TypeAlias = "str | os.PathLike[str] | _DefaultCache | None"


class LetorCacheWarning(UserWarning):
    """The parsed-file cache could not be used (corrupt entry, unwritable directory)."""


def default_cache_dir() -> Path | None:
    """``$FEDRANK_CACHE_DIR`` if set (an empty value disables caching), else
    ``~/.cache/fedrank/letor``; ``None`` if there is no home directory."""
    override = os.environ.get("FEDRANK_CACHE_DIR")
    if override is not None:
        return Path(override).expanduser() if override else None
    try:
        return Path.home() / ".cache" / "fedrank" / "letor"
    except RuntimeError:
        return None


_ARRAY_NAMES = ("features", "labels", "query_offsets", "query_ids")


class ParseCache:
    """The cache of one public call: warns at most once if its directory is unusable."""

    def __init__(self, cache_dir: CacheDir) -> None:
        if cache_dir is DEFAULT:
            self.directory = default_cache_dir()
        elif cache_dir is None:
            self.directory = None
        else:
            self.directory = Path(cache_dir)

    @staticmethod
    def key(path: Path, kind: str, n_features: int | None, *contents: bytes) -> str:
        digest = hashlib.blake2b(contents[0], digest_size=16)
        for more in contents[1:]:
            digest.update(hashlib.blake2b(more, digest_size=16).digest())
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.name)[:60]
        width = "auto" if n_features is None else str(n_features)
        return f"{stem}.{kind}.v{FORMAT_VERSION}.nf-{width}.{digest.hexdigest()}"

    def load(self, key: str, source: Path) -> dict[str, np.ndarray] | None:
        if self.directory is None:
            return None
        entry = self.directory / f"{key}.npz"
        if not entry.exists():
            return None
        try:
            with np.load(entry, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in _ARRAY_NAMES}
                stored_key = str(npz["key"])
            if stored_key != key:
                raise ValueError(f"it holds {stored_key!r}")
            LetorSplit(**arrays, name=key)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            warnings.warn(
                f"cache entry {entry} is corrupt or unreadable ({err}); re-parsing {source} "
                "and overwriting it",
                LetorCacheWarning,
                stacklevel=5,
            )
            return None
        return arrays

    def store(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        if self.directory is None:
            return
        tmp: str | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, key=np.array(key), **arrays)
            os.replace(tmp, self.directory / f"{key}.npz")
            tmp = None
        except OSError as err:
            warnings.warn(
                f"cannot write the LETOR cache in {self.directory} ({err}); files are parsed "
                "without caching. Set FEDRANK_CACHE_DIR to a writable directory, or pass "
                "cache_dir=None to silence this",
                LetorCacheWarning,
                stacklevel=5,
            )
            self.directory = None
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
