"""The LETOR file formats and their strict parsing into :class:`LetorSplit` arrays.

LETOR 4.0 MQ2007/MQ2008, LETOR 3.0 OHSUMED and MSLR-WEB10K/30K are in the svmlight ranking
format

    label qid:Q idx:value idx:value ... # optional comment

(:func:`read_svmlight`); LightGBM's lambdarank example has no ``qid`` and gives its queries
by a ``.query`` file of group sizes (:func:`read_lightgbm`). Parsing is strict: every
malformed line raises :class:`~fedrank.errors.DataFormatError` starting with
``"{file}:{line}: "``; nothing is skipped silently except blank and comment-only lines.
The features of a whole file are converted at once with numpy; only error messages are
produced line by line. Parsed files go through the cache of
:mod:`fedrank.data.letor.cache`.
"""

from __future__ import annotations

import codecs
import numbers
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fedrank.data.letor.cache import DEFAULT, CacheDir, ParseCache
from fedrank.data.letor.split import LetorSplit
from fedrank.errors import ConfigError, DataFormatError

__all__ = [
    "MAX_FEATURE_ID",
    "read_lightgbm",
    "read_lightgbm_cached",
    "read_svmlight",
    "read_svmlight_cached",
]

#: Largest feature id accepted when ``n_features`` is not given. Features are stored
#: densely, so a larger id is almost certainly a corrupt token, not a real feature.
MAX_FEATURE_ID = 1 << 20

_SPACE, _COLON = ord(" "), ord(":")


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
    cache: ParseCache, key: str, source: Path, name: str, parse: Callable[[], dict[str, np.ndarray]]
) -> LetorSplit:
    arrays = cache.load(key, source)
    if arrays is None:
        arrays = parse()
        cache.store(key, arrays)
    return LetorSplit(**arrays, name=name)


def read_svmlight_cached(
    path: Path, n_features: int | None, name: str, cache: ParseCache
) -> LetorSplit:
    """:func:`read_svmlight` with checked arguments through ``cache``, which one public call
    shares over every file it reads (:func:`fedrank.data.letor.folds.load_fold`)."""
    data = _read_bytes(path, "a LETOR svmlight file: label qid:Q idx:value ...")
    key = cache.key(path, "svmlight", n_features, data)
    return _cached(cache, key, path, name, lambda: _parse_svmlight(path, data, n_features))


def read_lightgbm_cached(
    path: Path, query_path: Path, n_features: int | None, name: str, cache: ParseCache
) -> LetorSplit:
    """:func:`read_lightgbm` with checked arguments through ``cache`` (as
    :func:`read_svmlight_cached`)."""
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
        cache_dir: where parsed files are cached (default
            :func:`~fedrank.data.letor.cache.default_cache_dir`; ``None`` disables the cache).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: a line is malformed (message starts ``"{path}:{line}: "``), a
            query's rows are not contiguous, or the file has no data rows.
        ConfigError: ``n_features`` is not a positive int.
    """
    path = Path(path)
    return read_svmlight_cached(
        path, _check_n_features(n_features), name or path.name, ParseCache(cache_dir)
    )


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
    return read_lightgbm_cached(
        path, query, _check_n_features(n_features), name or path.name, ParseCache(cache_dir)
    )
