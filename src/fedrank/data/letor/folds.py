"""The directory layouts of the LETOR datasets and their five cross-validation folds.

A dataset directory holds its files in one of the layouts :func:`dataset_layout` recognises
(:data:`LAYOUTS`): LETOR 4.0's five parts, MSLR's fold sub-directories, LETOR 3.0 OHSUMED's
fold test sets or LightGBM's lambdarank example. :func:`load_fold` and :func:`load_folds`
turn it into :class:`~fedrank.data.letor.split.LetorFold` objects as the LETOR 4.0 readme
assigns parts to folds, every file parsed once through one
:class:`~fedrank.data.letor.cache.ParseCache`.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedrank.data.letor.cache import DEFAULT, CacheDir, ParseCache
from fedrank.data.letor.formats import read_lightgbm_cached, read_svmlight_cached
from fedrank.data.letor.split import LetorFold, LetorSplit
from fedrank.errors import ConfigError, DataFormatError

__all__ = ["LAYOUTS", "N_FOLDS", "dataset_layout", "load_fold", "load_folds"]

#: Dataset layouts :func:`dataset_layout` recognises, in the order they are tried.
LAYOUTS: tuple[str, ...] = ("parts", "folds", "ohsumed", "lightgbm")

N_FOLDS = 5
_SPLITS = ("train", "vali", "test")

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
    directory: Path, layout: str, needed: set[str], cache: ParseCache
) -> tuple[dict[str, LetorSplit], int]:
    """The ``needed`` source files of a dataset, and the largest feature id over all its
    files (each file is parsed once; unneeded ones are dropped right away)."""
    loaded: dict[str, LetorSplit] = {}
    width = 0
    for source, path, query_path in _sources(directory, layout):
        if query_path is None:
            split = read_svmlight_cached(path, None, source, cache)
        else:
            split = read_lightgbm_cached(path, query_path, None, source, cache)
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
            :func:`~fedrank.data.letor.formats.read_svmlight`.
        ConfigError: ``fold`` is not in 1..5 (1 for LightGBM-style datasets).
    """
    path = _check_directory(directory)
    path = Path(os.path.abspath(path))
    layout = dataset_layout(path)
    fold = _check_fold(fold, layout, path)
    parts, width = _load_dataset(path, layout, _needed(path, layout, [fold]), ParseCache(cache_dir))
    return _assemble(path, layout, fold, parts, width)


def load_folds(
    directory: str | os.PathLike[str], *, cache_dir: CacheDir = DEFAULT
) -> list[LetorFold]:
    """Every fold of the dataset in ``directory`` (five, or one for LightGBM-style data),
    each as :func:`load_fold` returns it; every file is parsed once."""
    path = Path(os.path.abspath(_check_directory(directory)))
    layout = dataset_layout(path)
    folds = list(range(1, _n_folds(layout) + 1))
    parts, width = _load_dataset(path, layout, _needed(path, layout, folds), ParseCache(cache_dir))
    return [_assemble(path, layout, k, parts, width) for k in folds]
