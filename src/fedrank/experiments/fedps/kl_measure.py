"""The per-user term counts of the KL measure of FedPS (Sec. 4.1): what each user's real
profile holds and what the server can attribute to the user under each method
(:mod:`fedrank.privacy.kl_settings` turns them into the KL divergences).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

from fedrank.data.aol import BACKGROUND, TRAIN, UserLog
from fedrank.experiments.fedps.data import FedPSData
from fedrank.privacy import kl_settings
from fedrank.privacy import profile_kl as kl
from fedrank.retrieval.candidates import UserData


def _word_counts(
    queries: Sequence[np.ndarray], texts: Sequence[np.ndarray], vocab_size: int
) -> sparse.csr_matrix:
    """``(N, V)`` counts of the words of each user's ``queries[u]`` and ``texts[u]``."""
    n = len(queries)
    owner_q = np.repeat(np.arange(n), [q.shape[0] for q in queries])
    owner_t = np.repeat(np.arange(n), [t.shape[0] for t in texts])
    return (
        kl.term_counts(np.concatenate(queries), vocab_size, owner=owner_q, n_owners=n)
        + kl.term_counts(np.concatenate(texts), vocab_size, owner=owner_t, n_owners=n)
    ).tocsr()


def _profile_matrix(users: Sequence[UserData], attr: str, vocab_size: int) -> sparse.csr_matrix:
    ids = [getattr(u, attr) for u in users]
    row = np.concatenate([np.full(len(c), i) for i, c in enumerate(ids)])
    col = np.concatenate([c[:, 0] for c in ids])
    val = np.concatenate([c[:, 1] for c in ids]).astype(np.float64)
    return sparse.csr_matrix((val, (row, col)), shape=(len(users), vocab_size))


def _cover_counts(
    data: FedPSData, logs: Sequence[UserLog], covers: Sequence[np.ndarray]
) -> sparse.csr_matrix:
    """``(N, V)`` counts of the covers of each user's background and training queries."""
    seen = [c[np.isin(log.split, (BACKGROUND, TRAIN))] for log, c in zip(logs, covers, strict=True)]
    owner = np.repeat(np.arange(len(seen)), [c.shape[0] for c in seen])
    width = max(c.shape[2] for c in seen)
    padded = np.concatenate([np.pad(c, ((0, 0), (0, 0), (0, width - c.shape[2]))) for c in seen])
    return kl.term_counts(padded, data.vocab_size, owner=owner, n_owners=len(seen))


def profile_counts(
    data: FedPSData,
    received: np.ndarray | None = None,
    covers: Sequence[np.ndarray] | None = None,
) -> kl_settings.ProfileCounts:
    """The per-user term counts of the KL measure (Sec. 4.1): real queries and clicks, cover
    queries, and the words of each client's training samples, with and without the
    non-clicked candidates (the global-embedding rows its update changes)."""
    users, v, docs = data.users, data.vocab_size, data.doc_tokens
    train_queries = [u.train.query for u in users]
    positives = [docs[u.train.candidates[u.train.mask & (u.train.labels > 0)]] for u in users]
    everything = [docs[u.train.candidates[u.train.mask]] for u in users]
    return kl_settings.ProfileCounts(
        queries=_profile_matrix(users, "query_term_counts", v),
        clicks=_profile_matrix(users, "click_term_counts", v),
        covers=None if covers is None else _cover_counts(data, data.corpus.users, covers),
        train_all=_word_counts(train_queries, everything, v),
        train_positive=_word_counts(train_queries, positives, v),
        received=np.ones(len(users), dtype=bool) if received is None else received,
    )
