"""The FedPS candidate lists as a table anyone can check, and the checks themselves
(FedPS Sec. 4.1).

:func:`lists_table` writes one row per (query, candidate) of one split, the lists every
mode ranks (``fedrank fedps lists --split test --out lists.parquet``):

=====================  ================================================================
``user_id``            the user's AnonID
``query_id``           the query event (its index in the loaded log; equal across modes)
``doc_id``             the document (index into the log's URL table)
``label``              1 = clicked, 0 = not clicked
``bm25``               the search engine's BM25 score
``bm25_rank``          1-based rank in the engine's retrieved list (a training list is a
                       random sub-list, so its ranks can skip)
``user_prior_clicks``  the same user's clicks on the document strictly earlier, any query
``global_prior_clicks`` all users' clicks on the document in the background period
=====================  ================================================================

:func:`list_diagnostics` compares relevant and irrelevant candidates on everything a rule
could exploit without learning: how often they match no query word (in the engine's text
and in the model's vocabulary), their popularity, the user's earlier clicks, and their BM25
rank; plus how many clicked queries got a list.

:func:`refinding_queries` marks the queries whose clicked document the user had clicked
before (re-finding) against those whose clicked document is new to the user: the click
history decides the first kind, and only the second leaves room for what the text and the
personal word embeddings know.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fedrank.errors import ConfigError
from fedrank.experiments.fedps.data import FedPSData
from fedrank.retrieval.candidates import FEATURE_NAMES, SAMPLE_SPLITS

__all__ = [
    "LIST_COLUMNS",
    "list_diagnostics",
    "lists_table",
    "refinding_queries",
    "write_lists",
]

LIST_COLUMNS: tuple[str, ...] = (
    "user_id",
    "query_id",
    "doc_id",
    "label",
    "bm25",
    "bm25_rank",
    "user_prior_clicks",
    "global_prior_clicks",
)

_USER_CLICKS = FEATURE_NAMES.index("log_doc_clicks")
_GLOBAL_CLICKS = FEATURE_NAMES.index("log_global_clicks")


def _split(split: str) -> str:
    if split not in SAMPLE_SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SAMPLE_SPLITS)}, got {split!r}")
    return split


def _count(log_feature: np.ndarray) -> np.ndarray:
    return np.rint(np.expm1(log_feature)).astype(np.int64)


def lists_table(data: FedPSData, split: str) -> pa.Table:
    """One row per (query, candidate) of ``split`` (columns: :data:`LIST_COLUMNS`), users
    in order, each query's candidates in the engine's order."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in LIST_COLUMNS}
    for user in data.users:
        s = user.samples(_split(split))
        rows, cols = np.nonzero(s.mask)
        parts["user_id"].append(np.full(rows.size, user.user_id, dtype=np.int64))
        parts["query_id"].append(s.event_ids[rows])
        parts["doc_id"].append(s.candidates[rows, cols].astype(np.int64))
        parts["label"].append(s.labels[rows, cols].astype(np.int8))
        parts["bm25"].append(s.bm25[rows, cols])
        parts["bm25_rank"].append(s.ranks[rows, cols])
        parts["user_prior_clicks"].append(_count(s.features[rows, cols, _USER_CLICKS]))
        parts["global_prior_clicks"].append(_count(s.features[rows, cols, _GLOBAL_CLICKS]))
    return pa.table({c: np.concatenate(v) for c, v in parts.items()})


def write_lists(data: FedPSData, split: str, path: str | Path) -> pa.Table:
    """:func:`lists_table` written to ``path`` as Parquet; returns the table."""
    table = lists_table(data, split)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table


def _side(values: np.ndarray, relevant: np.ndarray) -> dict[str, float]:
    return {
        "relevant": float(values[relevant].mean()) if relevant.any() else float("nan"),
        "irrelevant": float(values[~relevant].mean()) if (~relevant).any() else float("nan"),
    }


def list_diagnostics(data: FedPSData, split: str) -> dict[str, Any]:
    """Relevant vs irrelevant candidates of ``split`` (see the module docstring): shares of
    ``no_match_engine`` (BM25 = 0), ``no_match_model`` (no query word in the document's
    model text), ``popular`` (background clicks > 0), ``user_clicked`` (the user clicked it
    before), mean ``log_popularity`` and mean ``bm25_rank``; list counts and the share of
    clicked queries that got a list."""
    docs = data.doc_tokens
    no_engine, no_model, popular, log_pop, clicked, rank, relevant = [], [], [], [], [], [], []
    for user in data.users:
        s = user.samples(_split(split))
        rows, cols = np.nonzero(s.mask)
        text = docs[s.candidates[rows, cols]]
        query = s.query[rows]
        shares = (query[:, :, None] == text[:, None, :]) & (query[:, :, None] > 0)
        no_engine.append(s.bm25[rows, cols] == 0)
        no_model.append(~shares.any(axis=(1, 2)))
        pop = s.features[rows, cols, _GLOBAL_CLICKS]
        popular.append(pop > 0)
        log_pop.append(pop)
        clicked.append(s.features[rows, cols, _USER_CLICKS] > 0)
        rank.append(s.ranks[rows, cols])
        relevant.append(s.labels[rows, cols] > 0)
    rel = np.concatenate(relevant)
    report = data.lists.report[split]
    n_queries = sum(u.samples(split).n_queries for u in data.users)
    return {
        "split": split,
        "queries": n_queries,
        "candidates": int(rel.size),
        "relevant": int(rel.sum()),
        "clicked_queries": report["clicked"],
        "listed_share": report["listed"] / report["clicked"] if report["clicked"] else 0.0,
        "click_not_retrieved": report["click_not_retrieved"],
        "no_negative": report["no_negative"],
        "no_match_engine": _side(np.concatenate(no_engine), rel),
        "no_match_model": _side(np.concatenate(no_model), rel),
        "popular": _side(np.concatenate(popular), rel),
        "log_popularity": _side(np.concatenate(log_pop), rel),
        "user_clicked": _side(np.concatenate(clicked), rel),
        "bm25_rank": _side(np.concatenate(rank).astype(np.float64), rel),
    }


def refinding_queries(data: FedPSData, split: str) -> tuple[np.ndarray, np.ndarray]:
    """``(event_ids, refinding)`` of every query of ``split`` that has a relevant
    candidate: ``refinding`` is True when the user clicked one of the query's clicked
    documents strictly earlier (any query; ``user_prior_clicks > 0`` in
    :func:`lists_table`)."""
    events, refinding = [np.zeros(0, np.int64)], [np.zeros(0, bool)]
    for user in data.users:
        s = user.samples(_split(split))
        relevant = (s.labels > 0) & s.mask
        has_relevant = relevant.any(axis=1)
        seen = (relevant & (s.features[..., _USER_CLICKS] > 0)).any(axis=1)
        events.append(s.event_ids[has_relevant])
        refinding.append(seen[has_relevant])
    return np.concatenate(events), np.concatenate(refinding)
