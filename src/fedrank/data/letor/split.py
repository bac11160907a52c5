"""One split of a LETOR-style dataset and one cross-validation fold, as dense numpy arrays.

A :class:`LetorSplit` holds float32 features with each query's documents on contiguous
rows, int8 relevance grades and the query offsets; a :class:`LetorFold` its train,
validation and test splits. The readers of :mod:`fedrank.data.letor.formats` and the folds
of :mod:`fedrank.data.letor.folds` build them; the FOLtR-ES experiments and the baselines
consume them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

__all__ = ["LetorFold", "LetorSplit"]


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
