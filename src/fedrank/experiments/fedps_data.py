"""The FedPS experimental data: AOL users, candidates, features and word2vec vectors
(FedPS Sec. 4.1 and 4.3).

:func:`prepare_aol` runs the whole pipeline once per (log, user count, seed):

1. :func:`fedrank.data.aol.load_aol` reads the log (all users, or ``users`` of them drawn
   with the seed); :func:`fedrank.data.aol.split_by_time` cuts background (first five
   weeks) / train / valid / test (6:1:1 in time order) and drops users with an empty part;
2. :func:`fedrank.data.aol.build_corpus` makes the URL-word documents, the vocabulary and the
   per-user logs;
3. :class:`fedrank.retrieval.candidates.BM25Candidates` picks every query's candidates
   (clicked documents + 5 BM25 negatives for train/valid, 50 for test, random fill when BM25
   matches fewer) and :func:`fedrank.retrieval.candidates.build_users` builds one
   :class:`~fedrank.retrieval.candidates.UserData` per user, click-history features
   included;
4. :func:`fedrank.models.word2vec.train_word2vec` learns 100-dimensional vectors on the
   document texts ("we train a 100-dim word2vec model on the document set to initialize the
   global and personal word embeddings", Sec. 4.3).

The result, :class:`FedPSData`, is what the simulation hands out: each ``UserData`` goes to
exactly one :class:`~fedrank.simulation.fedps_client.FedPSClient`, the word vectors and
document texts (public: the search engine's own index) to every party.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fedrank.data.aol import AolCorpus, build_corpus, load_aol, split_by_time
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.word2vec import train_word2vec
from fedrank.retrieval.candidates import BM25Candidates, CandidateGenerator, UserData, build_users

#: The shared AOL sample, relative to the data directory.
AOL_SAMPLE = Path("AOL") / "aol_top1000_users_clicks.tsv.gz"


def default_log_path() -> Path:
    """``$FEDRANK_DATA_DIR/AOL/...`` or ``<repo>/../shared/data/AOL/...``: the 1,000-user
    AOL sample of the shared data folder."""
    override = os.environ.get("FEDRANK_DATA_DIR")
    root = Path(override) if override else Path(__file__).resolve().parents[3].parent / "shared"
    return (root if override else root / "data") / AOL_SAMPLE


@dataclass(frozen=True, eq=False)
class FedPSData:
    """Everything a FedPS experiment needs.

    Attributes:
        corpus: the log, its split, the vocabulary and the document pool.
        users: one :class:`UserData` per kept user (the clients' private data).
        word_vectors: ``(V, dim)`` float32 word2vec vectors (row 0 zero).
        doc_tokens: ``(D, Ld)`` int64 word ids of every document (0 = padding).
        timings: seconds spent in each preparation stage.
    """

    corpus: AolCorpus
    users: list[UserData]
    word_vectors: np.ndarray
    doc_tokens: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.users) != len(self.corpus.users):
            raise DataFormatError(
                f"FedPSData has {len(self.users)} users' samples but {len(self.corpus.users)} "
                f"user logs; they must be the same users in the same order"
            )

    def select(self, n: int) -> FedPSData:
        """The first ``n`` users only (same vocabulary, documents and word vectors)."""
        corpus = replace(self.corpus, users=self.corpus.users[:n])
        return replace(self, corpus=corpus, users=self.users[:n])

    @property
    def vocab_size(self) -> int:
        return len(self.corpus.vocab)

    def summary(self) -> dict[str, float | int]:
        """Counts of the prepared data (for reports)."""
        n_q = {
            s: sum(u.samples(s).n_queries for u in self.users) for s in ("train", "valid", "test")
        }
        return {
            "users": len(self.users),
            "users_dropped": self.corpus.split.report.n_dropped,
            "vocabulary": self.vocab_size,
            "documents": int(self.doc_tokens.shape[0]),
            "train_queries": n_q["train"],
            "valid_queries": n_q["valid"],
            "test_queries": n_q["test"],
        }


def prepare_aol(
    path: str | os.PathLike[str],
    *,
    users: int | None = None,
    seed: int = 0,
    dim: int = 100,
    word2vec_epochs: int = 5,
    generator: CandidateGenerator | None = None,
    negatives: Mapping[str, int] | None = None,
) -> FedPSData:
    """Load and prepare the AOL log at ``path`` (see the module docstring).

    Args:
        path: the AOL click log (``.tsv`` or ``.tsv.gz``).
        users: draw this many users (with ``seed``); ``None`` keeps every user.
        seed: seeds the user draw, the candidates' random fill and word2vec.
        dim: word-vector dimension (FedPS: 100).
        word2vec_epochs: passes of word2vec over the document texts.
        generator: the first-stage candidate generator; default BM25 over the URL words of
            the document pool (pass another to use e.g. document titles).
        negatives: non-clicked candidates per query of each split; default
            :data:`fedrank.retrieval.candidates.DEFAULT_NEGATIVES` (train 5, valid 50,
            test 50).
    """
    if users is not None and users < 2:
        raise ConfigError(f"users must be >= 2 (or None for all), got {users}")
    if not Path(path).is_file():
        raise DataFormatError(
            f"AOL log {path} does not exist; pass --log with the path of "
            f"aol_top1000_users_clicks.tsv.gz (in the shared data folder's AOL/ directory)"
        )
    seeds = np.random.SeedSequence(seed).spawn(3)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    log = load_aol(path, users=users, rng=np.random.default_rng(seeds[0]) if users else None)
    split = split_by_time(log)
    if split.report.n_kept < 2:
        raise DataFormatError(
            f"only {split.report.n_kept} user(s) of {path} have background, train, valid and "
            f"test events ({split.report}); FedPS needs at least 2"
        )
    timings["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    corpus = build_corpus(split)
    timings["corpus"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if generator is None:
        generator = BM25Candidates.from_pool(corpus.pool, rng=np.random.default_rng(seeds[1]))
    user_data = build_users(corpus.users, corpus.pool, corpus.vocab, generator, negatives=negatives)
    timings["samples"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    doc_tokens = corpus.pool.tokens.astype(np.int64)
    vectors = train_word2vec(
        doc_tokens,
        len(corpus.vocab),
        dim,
        rng=np.random.default_rng(seeds[2]),
        epochs=word2vec_epochs,
    )
    timings["word2vec"] = time.perf_counter() - t0
    return FedPSData(corpus, user_data, vectors, doc_tokens, timings)
