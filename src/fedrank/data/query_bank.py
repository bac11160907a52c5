"""Queries of a LETOR split in padded, size-bucketed blocks, for vectorized simulation.

An OLTR simulator ranks, for thousands of interactions at once, the documents of the query
each interaction issued. Query sizes are skewed (MQ2008: median 8-14 documents, maximum
121), so one array padded to the largest query would be mostly padding, while one flat
array of all documents needs a gather of the full feature rows per interaction and segment
reductions. A :class:`QueryBank` keeps each query's documents in a block padded to its
*bucket's* width (widths grow geometrically by ``growth``, so padding stays below that
factor). An interaction then gathers one ``(width, n_features)`` block, and per-interaction
work is plain row-wise numpy on ``(I_b, width)`` arrays: scores, argmax, sorting.

Padding rows have zero features and label ``-1``; scores of padding must be masked with
:attr:`QueryBucket.valid` (``-inf``) before ranking.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from fedrank.data.letor.split import LetorSplit
from fedrank.errors import ConfigError


@dataclass(frozen=True)
class QueryBucket:
    """Queries whose sizes fit the same padded width.

    Attributes:
        queries: ``(Q_b,)`` query indices (into the split) held by this bucket.
        features: ``(Q_b, width, n_features)`` float32, zero-padded.
        labels: ``(Q_b, width)`` int8 grades, ``-1`` in padding.
        sizes: ``(Q_b,)`` documents per query.
    """

    queries: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray

    @property
    def width(self) -> int:
        return int(self.labels.shape[1])

    @property
    def valid(self) -> np.ndarray:
        """``(Q_b, width)`` bool: which slots hold a document."""
        return self.labels >= 0


@dataclass(frozen=True)
class InteractionGroup:
    """The interactions of one bucket: ``interactions`` (indices into the caller's
    interaction arrays) issued the queries at ``slots`` of ``bucket``."""

    bucket: QueryBucket
    interactions: np.ndarray
    slots: np.ndarray

    def features(self) -> np.ndarray:
        """``(I_b, width, n_features)``: the documents of each interaction's query."""
        return self.bucket.features[self.slots]

    def labels(self) -> np.ndarray:
        """``(I_b, width)``: their grades (``-1`` in padding)."""
        return self.bucket.labels[self.slots]


class QueryBank:
    """A split's queries in size buckets (see the module docstring).

    Args:
        split: the queries and their documents.
        min_width: width of the first bucket (8).
        growth: ratio between successive bucket widths (1.5).
    """

    def __init__(self, split: LetorSplit, min_width: int = 8, growth: float = 1.5) -> None:
        if min_width < 1 or not growth > 1.0:
            raise ConfigError(f"need min_width >= 1 and growth > 1, got {min_width}, {growth}")
        self.split = split
        sizes = split.query_sizes
        widths = [int(min_width)]
        while widths[-1] < int(sizes.max(initial=1)):
            widths.append(max(widths[-1] + 1, int(np.ceil(widths[-1] * growth))))
        bucket_of_query = np.searchsorted(np.asarray(widths), sizes, side="left")
        slot_of_query = np.zeros(split.n_queries, dtype=np.int64)
        buckets: list[QueryBucket] = []
        index_of_bucket = np.full(len(widths), -1, dtype=np.int64)
        offsets = split.query_offsets
        for b, width in enumerate(widths):
            queries = np.flatnonzero(bucket_of_query == b)
            if queries.size == 0:
                continue
            q_sizes = sizes[queries]
            slot_of_query[queries] = np.arange(queries.size)
            # Row r of the split lands in (local query, position) of this bucket.
            local = np.repeat(np.arange(queries.size), q_sizes)
            pos = np.arange(local.size) - np.repeat(np.cumsum(q_sizes) - q_sizes, q_sizes)
            rows = np.repeat(offsets[queries], q_sizes) + pos
            features = np.zeros((queries.size, width, split.n_features), dtype=np.float32)
            labels = np.full((queries.size, width), -1, dtype=np.int8)
            features[local, pos] = split.features[rows]
            labels[local, pos] = split.labels[rows]
            index_of_bucket[b] = len(buckets)
            buckets.append(QueryBucket(queries, features, labels, q_sizes.astype(np.int64)))
        self.buckets: tuple[QueryBucket, ...] = tuple(buckets)
        self.bucket_of_query = index_of_bucket[bucket_of_query]
        self.slot_of_query = slot_of_query

    @property
    def n_queries(self) -> int:
        return self.split.n_queries

    @property
    def n_features(self) -> int:
        return self.split.n_features

    def group(self, queries: np.ndarray) -> Iterator[InteractionGroup]:
        """Split interactions (one query index each) by bucket; every interaction appears
        in exactly one group, in increasing index order within it."""
        q = np.asarray(queries, dtype=np.int64)
        if q.size and (q.min() < 0 or q.max() >= self.n_queries):
            raise ConfigError(f"query indices must lie in [0, {self.n_queries}), got {q.min()}..")
        bucket = self.bucket_of_query[q]
        for b, bk in enumerate(self.buckets):
            idx = np.flatnonzero(bucket == b)
            if idx.size:
                yield InteractionGroup(bk, idx, self.slot_of_query[q[idx]])

    def all_queries(self) -> Iterator[InteractionGroup]:
        """Every query once (for evaluation): ``interactions`` are the query indices."""
        yield from self.group(np.arange(self.n_queries))
