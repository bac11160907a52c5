"""Reading LETOR-style learning-to-rank datasets into dense numpy arrays, with a disk cache.

The federated online learning-to-rank experiments (FOLtR-ES and its successors) train and
evaluate on the LETOR benchmarks: LETOR 4.0 MQ2007/MQ2008 (Qin & Liu 2013, "Introducing
LETOR 4.0 Datasets", arXiv:1306.2597), LETOR 3.0 OHSUMED (Qin, Liu, Xu & Li 2010, "LETOR: A
benchmark collection for research on learning to rank for information retrieval", Inf.
Retr. 13(4)) and MSLR-WEB10K/30K, all in the svmlight ranking format

    label qid:Q idx:value idx:value ... # optional comment

plus LightGBM's lambdarank example, whose rows have no ``qid`` and whose queries are given by
a ``.query`` file of group sizes. This module turns one file into a :class:`LetorSplit`
(float32 features with each query's documents on contiguous rows, int8 grades, query
offsets) and a dataset directory into its five cross-validation folds
(:func:`load_fold`, :func:`load_folds`), whatever layout the dataset was distributed in
(:func:`dataset_layout`).

Parsing is strict: every malformed line raises :class:`~fedrank.errors.DataFormatError`
starting with ``"{file}:{line}: "``; nothing is skipped silently except blank and
comment-only lines. The features of a whole file are converted at once with numpy; only
error messages are produced line by line. Parsed files are cached as ``.npz`` files keyed
by a hash of the file's bytes, so loading a dataset a second time takes milliseconds.
"""

from __future__ import annotations

import codecs
import dataclasses
import enum
import hashlib
import numbers
import operator
import os
import re
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

__all__ = [
    "DEFAULT",
    "FORMAT_VERSION",
    "LAYOUTS",
    "LetorCacheWarning",
    "LetorFold",
    "LetorSplit",
    "dataset_layout",
    "default_cache_dir",
    "load_fold",
    "load_folds",
    "read_lightgbm",
    "read_svmlight",
]

#: Version of the parsed-array format stored in the cache; part of every cache key, so
#: bumping it invalidates all cached files.
FORMAT_VERSION = 1

#: Dataset layouts :func:`dataset_layout` recognises, in the order they are tried.
LAYOUTS: tuple[str, ...] = ("parts", "folds", "ohsumed", "lightgbm")

#: Largest feature id accepted when ``n_features`` is not given. Features are stored
#: densely, so a larger id is almost certainly a corrupt token, not a real feature.
MAX_FEATURE_ID = 1 << 20

N_FOLDS = 5
_SPLITS = ("train", "vali", "test")
_SPACE, _COLON = ord(" "), ord(":")


class _DefaultCache(enum.Enum):
    DEFAULT = "default"


#: Sentinel for ``cache_dir``: use :func:`default_cache_dir`.
DEFAULT = _DefaultCache.DEFAULT

CacheDir: TypeAlias = "str | os.PathLike[str] | _DefaultCache | None"


class LetorCacheWarning(UserWarning):
    """The parsed-file cache could not be used (corrupt entry, unwritable directory)."""


# ----------------------------------------------------------------------------------------
# Data containers
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LetorSplit:
    """One split of a LETOR-style dataset: queries whose documents occupy contiguous rows.

    Attributes:
        features: ``(n_docs, n_features)`` float32, C-contiguous; feature id ``j`` (1-based
            in the files) is column ``j - 1``; absent features are 0.
        labels: ``(n_docs,)`` int8 relevance grades (>= 0).
        query_offsets: ``(n_queries + 1,)`` int64; query ``q`` owns rows
            ``[query_offsets[q], query_offsets[q + 1])``. Starts at 0, ends at ``n_docs``
            and is strictly increasing (no empty query).
        query_ids: ``(n_queries,)`` unicode array of the files' qid values (for LightGBM
            files, ``"0"``, ``"1"``, ... in file order).
        name: a human-readable name, e.g. ``"MQ2008 Fold1 train"``.

    Raises:
        DataFormatError: an array has the wrong shape or dtype, a grade is negative, or the
            offsets are not as described.
    """

    features: np.ndarray
    labels: np.ndarray
    query_offsets: np.ndarray
    query_ids: np.ndarray
    name: str

    def __post_init__(self) -> None:
        def bad(what: str) -> DataFormatError:
            return DataFormatError(f"LetorSplit {self.name!r}: {what}")

        if not isinstance(self.name, str):
            raise DataFormatError(f"LetorSplit name must be a str, got {type(self.name).__name__}")
        for field in ("features", "labels", "query_offsets", "query_ids"):
            if not isinstance(getattr(self, field), np.ndarray):
                raise bad(f"{field} must be a numpy array, got {type(getattr(self, field))}")
        x, y, off, qid = self.features, self.labels, self.query_offsets, self.query_ids
        if x.ndim != 2 or x.dtype != np.float32 or not x.flags.c_contiguous:
            raise bad(
                f"features must be a 2-D C-contiguous float32 array, got {x.ndim}-D {x.dtype} "
                f"(C-contiguous: {x.flags.c_contiguous}); convert it with "
                "np.ascontiguousarray(features, dtype=np.float32)"
            )
        n_docs = x.shape[0]
        if y.shape != (n_docs,) or y.dtype != np.int8:
            raise bad(
                f"labels must be an int8 array of shape ({n_docs},) (one grade per row of "
                f"features), got {y.dtype} with shape {y.shape}"
            )
        if n_docs and int(y.min()) < 0:
            raise bad(f"labels must be >= 0 (relevance grades), found {int(y.min())}")
        if off.ndim != 1 or off.dtype != np.int64 or off.size == 0:
            raise bad(
                f"query_offsets must be a non-empty 1-D int64 array, got {off.dtype} with "
                f"shape {off.shape}"
            )
        if off[0] != 0 or off[-1] != n_docs:
            raise bad(
                f"query_offsets must start at 0 and end at n_docs={n_docs}, got "
                f"{int(off[0])}..{int(off[-1])}"
            )
        if off.size > 1 and not np.all(np.diff(off) > 0):
            q = int(np.flatnonzero(np.diff(off) <= 0)[0])
            raise bad(
                f"query_offsets must be strictly increasing (no empty query), but query {q} "
                f"spans [{int(off[q])}, {int(off[q + 1])})"
            )
        if qid.shape != (off.size - 1,) or qid.dtype.kind != "U":
            raise bad(
                f"query_ids must be a unicode (str) array of shape ({off.size - 1},), got "
                f"{qid.dtype} with shape {qid.shape}; convert it with np.asarray(ids, dtype=str)"
            )

    @property
    def n_queries(self) -> int:
        return int(self.query_offsets.size - 1)

    @property
    def n_docs(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def query_sizes(self) -> np.ndarray:
        """Number of documents of every query, ``(n_queries,)`` int64."""
        return np.diff(self.query_offsets)

    @property
    def query_of_doc(self) -> np.ndarray:
        """Query index of every document, ``(n_docs,)`` int64."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.query_sizes)

    def query(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """Views of the features ``(n_q, n_features)`` and labels ``(n_q,)`` of query ``q``
        (``0 <= q < n_queries``)."""
        q = operator.index(q)
        if not 0 <= q < self.n_queries:
            raise IndexError(
                f"query index {q} is out of range: {self.name!r} has {self.n_queries} queries "
                f"(0..{self.n_queries - 1})"
            )
        lo, hi = int(self.query_offsets[q]), int(self.query_offsets[q + 1])
        return self.features[lo:hi], self.labels[lo:hi]

    def subset(self, queries: np.ndarray | Sequence[int], name: str | None = None) -> LetorSplit:
        """A new split holding the given queries (indices ``0..n_queries-1``), in the given
        order, each with its rows contiguous; repeats are allowed. ``name`` defaults to
        ``"{self.name} subset"``."""
        idx = np.asarray(queries)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise ConfigError(
                f"subset of {self.name!r} needs a 1-D array of integer query indices, got "
                f"{idx.dtype} with shape {idx.shape} (for a boolean mask use np.flatnonzero)"
            )
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_queries):
            raise ConfigError(
                f"subset of {self.name!r}: query indices must lie in 0..{self.n_queries - 1}, "
                f"got {int(idx.min())}..{int(idx.max())}"
            )
        sizes = self.query_sizes[idx]
        offsets = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        rows = np.repeat(self.query_offsets[idx] - offsets[:-1], sizes) + np.arange(offsets[-1])
        return LetorSplit(
            features=np.ascontiguousarray(self.features[rows]),
            labels=self.labels[rows],
            query_offsets=offsets,
            query_ids=self.query_ids[idx],
            name=f"{self.name} subset" if name is None else name,
        )

    @classmethod
    def concat(cls, splits: Sequence[LetorSplit], name: str) -> LetorSplit:
        """The queries of all ``splits``, in order (all must have the same ``n_features``)."""
        if not splits:
            raise ConfigError(f"cannot build {name!r} from no splits; pass at least one")
        widths = [s.n_features for s in splits]
        if len(set(widths)) > 1:
            raise ConfigError(
                f"cannot concatenate splits with different n_features into {name!r}: "
                + ", ".join(f"{s.name!r} has {s.n_features}" for s in splits)
                + "; read them with the same n_features (load_fold does this for a dataset)"
            )
        starts = np.cumsum([0] + [s.n_docs for s in splits[:-1]])
        offsets = np.concatenate(
            [np.zeros(1, dtype=np.int64)]
            + [s.query_offsets[1:] + start for s, start in zip(splits, starts, strict=True)]
        )
        return cls(
            features=np.ascontiguousarray(np.concatenate([s.features for s in splits])),
            labels=np.concatenate([s.labels for s in splits]),
            query_offsets=offsets.astype(np.int64),
            query_ids=np.concatenate([s.query_ids for s in splits]),
            name=name,
        )


@dataclass(frozen=True)
class LetorFold:
    """One cross-validation fold. ``vali`` is ``None`` when the dataset has no validation
    split (the LightGBM example). Splits of different folds may share arrays."""

    train: LetorSplit
    vali: LetorSplit | None
    test: LetorSplit
    name: str


# ----------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------


class _BadLine(Exception):
    """A problem with one line; the caller adds ``file:line:``."""


def _show(token: bytes) -> str:
    return repr(token.decode("utf-8", "replace"))


def _parse_label(token: bytes) -> int:
    """A relevance grade written as ``2`` or ``2.0``."""
    try:
        value = int(token)
    except ValueError:
        try:
            as_float = float(token)
        except ValueError:
            as_float = float("nan")
        if not (np.isfinite(as_float) and as_float.is_integer()):
            raise _BadLine(
                f"label {_show(token)} is not a non-negative integer (relevance grades are "
                "written 0, 1, 2, ... or 0.0, 1.0, ...)"
            ) from None
        value = int(as_float)
    if not 0 <= value <= 127:
        raise _BadLine(
            f"label {_show(token)} is not a relevance grade in 0..127 (grades are non-negative "
            "integers)"
        )
    return value


def _check_feature_tokens(
    tokens: Sequence[bytes], limit: int, n_features: int | None, has_qid: bool
) -> None:
    """Raise :class:`_BadLine` for the first bad ``idx:value`` token of one line."""
    seen: set[int] = set()
    for token in tokens:
        if token.startswith(b"qid:"):
            if has_qid:
                raise _BadLine(
                    f"token {_show(token)} is a qid in a feature position; the qid must be "
                    "the second token of the line (label qid:Q idx:value ...)"
                )
            raise _BadLine(
                f"token {_show(token)} is a qid, but LightGBM-style rows have no qid (their "
                "queries come from the .query file); read svmlight ranking files with "
                "read_svmlight"
            )
        parts = token.split(b":")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise _BadLine(f"token {_show(token)} is not idx:value (expected e.g. '7:0.25')")
        id_text, value_text = parts
        if (id_text[:1] == b"-" and id_text[1:].isdigit()) or id_text.strip(b"0") == b"":
            raise _BadLine(
                f"feature id {id_text.decode()} in token {_show(token)} is not positive; "
                "feature ids start at 1"
            )
        if not id_text.isdigit():
            raise _BadLine(
                f"feature id {_show(id_text)} in token {_show(token)} is not an integer "
                "(feature ids are written as decimal digits, starting at 1)"
            )
        fid = int(id_text) if len(id_text) < 19 else limit + 1
        if fid > limit:
            if n_features is None:
                raise _BadLine(
                    f"feature id {id_text.decode()} in token {_show(token)} is larger than "
                    f"{MAX_FEATURE_ID}, the largest id read without n_features; check the "
                    "token, or pass n_features explicitly if the id is real"
                )
            raise _BadLine(
                f"feature id {fid} in token {_show(token)} exceeds n_features={n_features}; "
                "pass a larger n_features, or None to use the largest id in the file"
            )
        if fid in seen:
            raise _BadLine(
                f"feature id {fid} appears twice on the line (token {_show(token)}); each "
                "feature may appear once per row"
            )
        seen.add(fid)
        try:
            value = float(value_text)
        except ValueError:
            raise _BadLine(
                f"value {_show(value_text)} in token {_show(token)} is not a number"
            ) from None
        with np.errstate(over="ignore"):
            finite = bool(np.isfinite(np.float32(value)))
        if not finite:
            raise _BadLine(
                f"value {_show(value_text)} in token {_show(token)} is not finite (or is "
                "outside the float32 range); replace it with a finite number"
            )


def _fast_features(
    tokens: list[bytes], row_of_token: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """Feature ids (int64) and values (float32) of all ``idx:value`` tokens at once, or
    ``None`` if any token is bad (the caller then finds it line by line)."""
    joined = b" ".join(tokens)
    raw = np.frombuffer(joined, dtype=np.uint8)
    sep = np.flatnonzero((raw == _SPACE) | (raw == _COLON))
    # Every token holds exactly one colon with text on both sides: separators alternate
    # colon, space, colon, ..., colon and no two are adjacent.
    if (
        sep.size != 2 * len(tokens) - 1
        or not np.all(raw[sep[0::2]] == _COLON)
        or not np.all(raw[sep[1::2]] == _SPACE)
        or sep[0] == 0
        or sep[-1] == raw.size - 1
        or np.any(np.diff(sep) == 1)
    ):
        return None
    pieces = joined.replace(b":", b" ").split(b" ")
    id_text = np.array(pieces[0::2])
    if id_text.dtype.itemsize > 18 or not np.all(np.char.isdigit(id_text)):
        return None
    ids = id_text.astype(np.int64)
    if ids.min() < 1 or ids.max() > limit:
        return None
    try:
        values = np.array(pieces[1::2]).astype(np.float64)
    except (ValueError, OverflowError):
        return None
    with np.errstate(over="ignore"):
        values32 = values.astype(np.float32)
    if not np.all(np.isfinite(values32)):
        return None
    key = row_of_token * (int(ids.max()) + 1) + ids
    if np.any(np.diff(key) <= 0) and np.any(np.diff(np.sort(key)) == 0):
        return None
    return ids, values32


def _parse_rows(
    path: Path, data: bytes, *, has_qid: bool, n_features: int | None
) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
    """Features, labels, first row of every query and qids (the last two empty without
    qid) of a svmlight file's bytes."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    first = 2 if has_qid else 1
    limit = MAX_FEATURE_ID if n_features is None else n_features
    tokens: list[bytes] = []
    counts: list[int] = []
    line_numbers: list[int] = []
    labels: list[int] = []
    label_memo: dict[bytes, int] = {}
    starts: list[int] = []
    qids: list[str] = []
    first_line: dict[bytes, int] = {}
    previous: bytes | None = None

    def check_lines(upto: int) -> None:
        """Raise for the first bad feature token on the first ``upto`` data lines."""
        end = 0
        for i in range(upto):
            begin, end = end, end + counts[i]
            try:
                _check_feature_tokens(tokens[begin:end], limit, n_features, has_qid)
            except _BadLine as bad:
                raise DataFormatError(f"{path}:{line_numbers[i]}: {bad}") from None

    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        cut = raw.find(b"#")
        toks = (raw if cut < 0 else raw[:cut]).split()
        if not toks:
            continue
        try:
            label = label_memo.get(toks[0])
            if label is None:
                label = label_memo[toks[0]] = _parse_label(toks[0])
            if has_qid:
                if len(toks) < 2 or not toks[1].startswith(b"qid:"):
                    second = _show(toks[1]) if len(toks) > 1 else "nothing"
                    raise _BadLine(
                        f"missing qid: the second token is {second}, expected 'qid:<id>' "
                        "(rows are 'label qid:Q idx:value ...'; for LightGBM files whose "
                        "queries are in a .query file use read_lightgbm)"
                    )
                qid = toks[1][4:]
                if qid != previous:
                    if not qid:
                        raise _BadLine("empty qid in token 'qid:'; write qid:<id>")
                    if qid in first_line:
                        raise _BadLine(
                            f"qid {_show(qid)} reappears after other queries (it first "
                            f"appeared on line {first_line[qid]}); a query's rows must be "
                            "contiguous. Were two files concatenated wrongly? Keep each "
                            "query's rows together (e.g. a stable sort by qid)"
                        )
                    try:
                        qids.append(qid.decode("utf-8"))
                    except UnicodeDecodeError:
                        raise _BadLine(f"qid {_show(qid)} is not valid UTF-8") from None
                    first_line[qid] = lineno
                    starts.append(len(labels))
                    previous = qid
        except _BadLine as bad:
            check_lines(len(labels))
            raise DataFormatError(f"{path}:{lineno}: {bad}") from None
        labels.append(label)
        line_numbers.append(lineno)
        tokens.extend(toks[first:])
        counts.append(len(toks) - first)

    n_rows = len(labels)
    if n_rows == 0:
        raise DataFormatError(
            f"{path}: no data rows (the file is empty or holds only blank and comment lines); "
            "check that the path points to a LETOR data file"
        )
    row_of_token = np.repeat(np.arange(n_rows, dtype=np.int64), counts)
    if tokens:
        parsed = _fast_features(tokens, row_of_token, limit)
        if parsed is None:
            check_lines(n_rows)
            raise RuntimeError(
                f"{path}: internal error: a feature check failed on no line; please report"
            )
        ids, values = parsed
        width = int(ids.max()) if n_features is None else n_features
    else:
        ids, values = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        width = 0 if n_features is None else n_features
    features = np.zeros((n_rows, width), dtype=np.float32)
    features[row_of_token, ids - 1] = values
    return features, np.array(labels, dtype=np.int8), starts, qids


def _arrays(
    features: np.ndarray, labels: np.ndarray, starts: Sequence[int], qids: np.ndarray
) -> dict[str, np.ndarray]:
    offsets = np.append(np.asarray(starts, dtype=np.int64), np.int64(labels.size))
    return {
        "features": features,
        "labels": labels,
        "query_offsets": offsets,
        "query_ids": np.asarray(qids, dtype=np.str_),
    }


def _parse_svmlight(path: Path, data: bytes, n_features: int | None) -> dict[str, np.ndarray]:
    """The arrays of a :class:`LetorSplit` from a svmlight ranking file's bytes."""
    features, labels, starts, qids = _parse_rows(path, data, has_qid=True, n_features=n_features)
    return _arrays(features, labels, starts, np.asarray(qids, dtype=np.str_))


def _parse_query_sizes(query_path: Path, data: bytes) -> np.ndarray:
    """Group sizes of a LightGBM ``.query`` file (one positive integer per line)."""
    sizes: list[int] = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        token = raw.strip()
        if not token:
            continue
        if not token.isdigit() or int(token) < 1:
            raise DataFormatError(
                f"{query_path}:{lineno}: {_show(token)} is not a positive integer; every "
                "line of a LightGBM .query file holds the number of consecutive rows of one "
                "query"
            )
        sizes.append(int(token))
    return np.array(sizes, dtype=np.int64)


def _parse_lightgbm(
    path: Path, data: bytes, query_path: Path, query_data: bytes, n_features: int | None
) -> dict[str, np.ndarray]:
    """The arrays of a :class:`LetorSplit` from a LightGBM file and its ``.query`` file."""
    features, labels, _, _ = _parse_rows(path, data, has_qid=False, n_features=n_features)
    sizes = _parse_query_sizes(query_path, query_data)
    total = int(sizes.sum())
    if total != labels.size:
        raise DataFormatError(
            f"{query_path} gives {sizes.size} queries with {total} rows in all, but {path} has "
            f"{labels.size} rows; the .query file must list, in order, the number of rows of "
            f"every query of {path.name} (check that the two files belong together)"
        )
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    qids = np.arange(sizes.size).astype(np.str_)
    return _arrays(features, labels, starts, qids)


# ----------------------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------------------


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


class _Cache:
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


def _read_bytes(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path} (expected {what})")
    return path.read_bytes()


def _check_n_features(n_features: int | None) -> int | None:
    if n_features is None:
        return None
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral):
        raise ConfigError(f"n_features must be a positive int or None, got {n_features!r}")
    if n_features < 1:
        raise ConfigError(
            f"n_features must be >= 1 (or None for the largest id in the file), got {n_features}"
        )
    return int(n_features)


def _cached(
    cache: _Cache, key: str, source: Path, name: str, parse: Callable[[], dict[str, np.ndarray]]
) -> LetorSplit:
    arrays = cache.load(key, source)
    if arrays is None:
        arrays = parse()
        cache.store(key, arrays)
    return LetorSplit(**arrays, name=name)


def _read_svmlight(path: Path, n_features: int | None, name: str, cache: _Cache) -> LetorSplit:
    data = _read_bytes(path, "a LETOR svmlight file: label qid:Q idx:value ...")
    key = cache.key(path, "svmlight", n_features, data)
    return _cached(cache, key, path, name, lambda: _parse_svmlight(path, data, n_features))


def _read_lightgbm(
    path: Path, query_path: Path, n_features: int | None, name: str, cache: _Cache
) -> LetorSplit:
    data = _read_bytes(path, "a LightGBM ranking file: label idx:value ...")
    query_data = _read_bytes(
        query_path, f"the LightGBM group file of {path.name}: one query size per line"
    )
    key = cache.key(path, "lightgbm", n_features, data, query_data)
    return _cached(
        cache,
        key,
        path,
        name,
        lambda: _parse_lightgbm(path, data, query_path, query_data, n_features),
    )


def read_svmlight(
    path: str | os.PathLike[str],
    n_features: int | None = None,
    *,
    name: str | None = None,
    cache_dir: CacheDir = DEFAULT,
) -> LetorSplit:
    """Read a svmlight ranking file (``label qid:Q idx:value ... # comment`` per line).

    Args:
        path: the file (LF or CRLF line endings; blank and comment-only lines are skipped).
        n_features: width of the feature matrix; ``None`` means the largest feature id in
            the file. An id above it is an error.
        name: the split's name (default: the file name).
        cache_dir: where parsed files are cached (default :func:`default_cache_dir`;
            ``None`` disables the cache).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: a line is malformed (message starts ``"{path}:{line}: "``), a
            query's rows are not contiguous, or the file has no data rows.
        ConfigError: ``n_features`` is not a positive int.
    """
    path = Path(path)
    return _read_svmlight(path, _check_n_features(n_features), name or path.name, _Cache(cache_dir))


def read_lightgbm(
    path: str | os.PathLike[str],
    query_path: str | os.PathLike[str] | None = None,
    n_features: int | None = None,
    *,
    name: str | None = None,
    cache_dir: CacheDir = DEFAULT,
) -> LetorSplit:
    """Read a LightGBM ranking file (``label idx:value ...``, no qid) and its group file.

    Args:
        path: the data file.
        query_path: the group file, one positive row count per line, queries in file order
            (default: ``path`` + ``".query"``). Query ids are ``"0"``, ``"1"``, ...
        n_features, name, cache_dir: as for :func:`read_svmlight`.

    Raises:
        FileNotFoundError: a file does not exist.
        DataFormatError: a line is malformed (including a row with a qid), or the group
            sizes do not add up to the number of rows.
        ConfigError: ``n_features`` is not a positive int.
    """
    path = Path(path)
    query = Path(f"{path}.query") if query_path is None else Path(query_path)
    return _read_lightgbm(
        path, query, _check_n_features(n_features), name or path.name, _Cache(cache_dir)
    )


# ----------------------------------------------------------------------------------------
# Dataset directories and folds
# ----------------------------------------------------------------------------------------

_LAYOUT_DESCRIPTIONS = {
    "parts": "S1.txt..S5.txt (LETOR 4.0 parts, e.g. MQ2008)",
    "folds": "Fold1..Fold5 sub-directories with train.txt, vali.txt, test.txt (e.g. MSLR-WEB10K)",
    "ohsumed": "Fold1_test.txt..Fold5_test.txt (LETOR 3.0 OHSUMED fold test sets)",
    "lightgbm": "rank.train, rank.train.query, rank.test, rank.test.query (LightGBM lambdarank "
    "example)",
}


def _required_files(directory: Path, layout: str) -> list[Path]:
    if layout == "parts":
        return [directory / f"S{j}.txt" for j in range(1, N_FOLDS + 1)]
    if layout == "folds":
        return [
            directory / f"Fold{k}" / f"{split}.txt"
            for k in range(1, N_FOLDS + 1)
            for split in _SPLITS
        ]
    if layout == "ohsumed":
        return [directory / f"Fold{k}_test.txt" for k in range(1, N_FOLDS + 1)]
    return [directory / name for name in ("rank.train", "rank.train.query", "rank.test")] + [
        directory / "rank.test.query"
    ]


def _check_directory(directory: str | os.PathLike[str]) -> Path:
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(
            f"no such directory: {path} (expected a LETOR dataset directory holding "
            f"{_LAYOUT_DESCRIPTIONS['parts']} or another layout dataset_layout knows)"
        )
    return path


def dataset_layout(directory: str | os.PathLike[str]) -> str:
    """Which layout a dataset directory has, trying :data:`LAYOUTS` in order:

    * ``"parts"``: ``S1.txt``..``S5.txt`` (LETOR 4.0 MQ2007/MQ2008);
    * ``"folds"``: ``Fold1``..``Fold5`` each with ``train.txt``, ``vali.txt``, ``test.txt``;
    * ``"ohsumed"``: ``Fold1_test.txt``..``Fold5_test.txt`` (LETOR 3.0 OHSUMED test sets);
    * ``"lightgbm"``: ``rank.train``/``rank.test`` with their ``.query`` files.

    Raises:
        FileNotFoundError: ``directory`` does not exist.
        DataFormatError: no layout matches (the message lists what each layout needs and
            which files of a partly present layout are missing).
    """
    path = _check_directory(directory)
    partial: list[str] = []
    for layout in LAYOUTS:
        files = _required_files(path, layout)
        missing = [f for f in files if not f.is_file()]
        if not missing:
            vali = path / "rank.vali"
            if (
                layout == "lightgbm"
                and vali.is_file()
                and not vali.with_suffix(".vali.query").is_file()
            ):
                raise DataFormatError(
                    f"{path}: rank.vali has no group file rank.vali.query; add it (one "
                    "query size per line) or remove rank.vali"
                )
            return layout
        if len(missing) < len(files):
            shown = ", ".join(str(f.relative_to(path)) for f in missing[:6])
            partial.append(f"{layout} layout lacks {shown}")
    expected = "; or ".join(_LAYOUT_DESCRIPTIONS[layout] for layout in LAYOUTS)
    found = ("; ".join(partial) + ".") if partial else "None of these files is there."
    raise DataFormatError(f"{path}: not a LETOR dataset directory. Expected {expected}. {found}")


def _sources(directory: Path, layout: str) -> list[tuple[str, Path, Path | None]]:
    """``(source name, data file, .query file or None)`` of every file of a dataset."""
    if layout == "parts":
        return [(f"S{j}", directory / f"S{j}.txt", None) for j in range(1, N_FOLDS + 1)]
    if layout == "ohsumed":
        # The fold test sets partition the data: part S_j is Fold{(j % 5) + 1}_test.txt.
        return [
            (f"S{j}", directory / f"Fold{j % N_FOLDS + 1}_test.txt", None)
            for j in range(1, N_FOLDS + 1)
        ]
    if layout == "folds":
        return [
            (f"Fold{k} {split}", directory / f"Fold{k}" / f"{split}.txt", None)
            for k in range(1, N_FOLDS + 1)
            for split in _SPLITS
        ]
    names = ("train", "vali", "test") if (directory / "rank.vali").is_file() else ("train", "test")
    return [(name, directory / f"rank.{name}", directory / f"rank.{name}.query") for name in names]


def _n_folds(layout: str) -> int:
    return 1 if layout == "lightgbm" else N_FOLDS


def _check_fold(fold: int, layout: str, directory: Path) -> int:
    if isinstance(fold, bool) or not isinstance(fold, numbers.Integral):
        raise ConfigError(f"fold must be an int (1-based), got {fold!r}")
    if layout == "lightgbm" and fold != 1:
        raise ConfigError(
            f"{directory} is a LightGBM-style dataset with a single train/test split; it has "
            f"only fold 1, not fold {fold}"
        )
    if not 1 <= fold <= N_FOLDS:
        raise ConfigError(
            f"fold {fold} is out of range: LETOR datasets have folds 1..{N_FOLDS} (1-based)"
        )
    return int(fold)


def _widen(split: LetorSplit, width: int, name: str) -> LetorSplit:
    """``split`` renamed, with zero feature columns appended up to ``width``."""
    if split.n_features == width:
        return dataclasses.replace(split, name=name)
    features = np.zeros((split.n_docs, width), dtype=np.float32)
    features[:, : split.n_features] = split.features
    return dataclasses.replace(split, features=features, name=name)


def _load_dataset(
    directory: Path, layout: str, needed: set[str], cache: _Cache
) -> tuple[dict[str, LetorSplit], int]:
    """The ``needed`` source files of a dataset, and the largest feature id over all its
    files (each file is parsed once; unneeded ones are dropped right away)."""
    loaded: dict[str, LetorSplit] = {}
    width = 0
    for source, path, query_path in _sources(directory, layout):
        if query_path is None:
            split = _read_svmlight(path, None, source, cache)
        else:
            split = _read_lightgbm(path, query_path, None, source, cache)
        width = max(width, split.n_features)
        if source in needed:
            loaded[source] = split
    return loaded, width


def _assemble(
    directory: Path, layout: str, fold: int, parts: dict[str, LetorSplit], width: int
) -> LetorFold:
    prefix = f"{directory.name} Fold{fold}"

    def part(source: str, split: str) -> LetorSplit:
        return _widen(parts[source], width, f"{prefix} {split}")

    if layout == "lightgbm":
        vali = part("vali", "vali") if "vali" in parts else None
        return LetorFold(part("train", "train"), vali, part("test", "test"), prefix)
    if layout == "folds":
        return LetorFold(*(part(f"Fold{fold} {split}", split) for split in _SPLITS), name=prefix)
    order = [f"S{(fold - 1 + i) % N_FOLDS + 1}" for i in range(N_FOLDS)]
    train = LetorSplit.concat(
        [_widen(parts[s], width, s) for s in order[:3]], name=f"{prefix} train"
    )
    return LetorFold(train, part(order[3], "vali"), part(order[4], "test"), prefix)


def _needed(directory: Path, layout: str, folds: Sequence[int]) -> set[str]:
    if layout == "folds":
        return {f"Fold{k} {split}" for k in folds for split in _SPLITS}
    return {source for source, _, _ in _sources(directory, layout)}


def load_fold(
    directory: str | os.PathLike[str], fold: int, *, cache_dir: CacheDir = DEFAULT
) -> LetorFold:
    """Fold ``fold`` (1-based) of the dataset in ``directory`` (see :func:`dataset_layout`).

    For ``"parts"`` (and ``"ohsumed"``, whose part ``S_j`` is ``Fold{(j % 5) + 1}_test.txt``),
    FoldK trains on ``S_K, S_K+1, S_K+2`` (indices mod 5, concatenated in that order),
    validates on ``S_K+3`` and tests on ``S_K+4``, as the LETOR 4.0 readme specifies. For
    ``"folds"`` the fold's own files are used; ``"lightgbm"`` has fold 1 only (``vali`` is
    ``None`` unless ``rank.vali`` exists). Every split of every fold has the same width: the
    largest feature id over all the dataset's files. Names are ``"{dir} Fold{K}"`` and
    ``"{dir} Fold{K} train"`` etc.

    Raises:
        FileNotFoundError, DataFormatError: as for :func:`dataset_layout` and
            :func:`read_svmlight`.
        ConfigError: ``fold`` is not in 1..5 (1 for LightGBM-style datasets).
    """
    path = _check_directory(directory)
    path = Path(os.path.abspath(path))
    layout = dataset_layout(path)
    fold = _check_fold(fold, layout, path)
    parts, width = _load_dataset(path, layout, _needed(path, layout, [fold]), _Cache(cache_dir))
    return _assemble(path, layout, fold, parts, width)


def load_folds(
    directory: str | os.PathLike[str], *, cache_dir: CacheDir = DEFAULT
) -> list[LetorFold]:
    """Every fold of the dataset in ``directory`` (five, or one for LightGBM-style data),
    each as :func:`load_fold` returns it; every file is parsed once."""
    path = Path(os.path.abspath(_check_directory(directory)))
    layout = dataset_layout(path)
    folds = list(range(1, _n_folds(layout) + 1))
    parts, width = _load_dataset(path, layout, _needed(path, layout, folds), _Cache(cache_dir))
    return [_assemble(path, layout, k, parts, width) for k in folds]
