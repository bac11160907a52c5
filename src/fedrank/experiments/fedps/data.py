"""The FedPS experimental data: AOL users, candidate lists, features and word2vec vectors
(FedPS Sec. 4.1 and 4.3).

:func:`prepare_aol` loads the log (all users, or ``users`` of them drawn with the seed) and
cuts background (first five weeks) / train / valid / test (6:1:1 in time order), dropping
users with an empty part (:func:`fedrank.data.aol.split_by_time`); :func:`prepare_split`
then builds everything else from that split, fitting only on the past (background and
training events, and the documents clicked in them):

1. :func:`fedrank.data.aol.build_corpus`: the past segmenter, the document texts (URL words
   plus background click-through words), the past vocabulary, the encoded documents and the
   per-user logs;
2. :class:`fedrank.retrieval.search_engine.SearchEngine`: BM25 over every document clicked
   in the log, with past statistics;
3. :func:`fedrank.retrieval.candidates.build_lists`: the engine's top 50 for every query
   event, kept when the click is retrieved (training lists: the clicked documents and 5
   retrieved others, drawn with the seed), and
   :func:`fedrank.retrieval.candidates.build_users`: one
   :class:`~fedrank.retrieval.candidates.UserData` per user, click-history features included;
4. :func:`fedrank.models.word2vec.train_word2vec`: 100-dimensional vectors on the past
   documents' texts ("we train a 100-dim word2vec model on the document set to initialize
   the global and personal word embeddings", Sec. 4.3).

The result, :class:`FedPSData`, is what the simulation hands out: each ``UserData`` goes to
exactly one :class:`~fedrank.estimators.local_sgd.FedPSClient`, the word vectors and
document texts (public: the search engine's own index) to every party.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fedrank.data.aol import AolCorpus, TimeSplit, build_corpus, load_aol, split_by_time
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.word2vec import train_word2vec
from fedrank.retrieval.candidates import (
    DEFAULT_DEPTH,
    DEFAULT_TRAIN_NEGATIVES,
    SAMPLE_SPLITS,
    CandidateLists,
    UserData,
    build_lists,
    build_users,
)
from fedrank.retrieval.search_engine import SearchEngine

#: The shared AOL sample, relative to the data directory.
AOL_SAMPLE = Path("AOL") / "aol_top1000_users_clicks.tsv.gz"


def default_log_path() -> Path:
    """``$FEDRANK_DATA_DIR/AOL/...`` or ``<repo>/../shared/data/AOL/...``: the 1,000-user
    AOL sample of the shared data folder."""
    override = os.environ.get("FEDRANK_DATA_DIR")
    root = Path(override) if override else Path(__file__).resolve().parents[4].parent / "shared"
    return (root if override else root / "data") / AOL_SAMPLE


@dataclass(frozen=True, eq=False)
class FedPSData:
    """Everything a FedPS experiment needs.

    Attributes:
        corpus: the log, its split, the vocabulary and the document pool.
        lists: every query event's candidate list (shared by every mode).
        users: one :class:`UserData` per kept user (the clients' private data).
        word_vectors: ``(V, dim)`` float32 word2vec vectors (row 0 zero).
        doc_tokens: ``(D, Ld)`` int64 word ids of every document (0 = padding).
        timings: seconds spent in each preparation stage.
    """

    corpus: AolCorpus
    lists: CandidateLists
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
        """The first ``n`` users only (same vocabulary, documents, lists and word vectors)."""
        corpus = replace(self.corpus, users=self.corpus.users[:n])
        return replace(self, corpus=corpus, users=self.users[:n])

    @property
    def vocab_size(self) -> int:
        return len(self.corpus.vocab)

    def summary(self) -> dict[str, float | int]:
        """Counts of the prepared data (for reports)."""
        n_q = {s: sum(u.samples(s).n_queries for u in self.users) for s in SAMPLE_SPLITS}
        return {
            "users": len(self.users),
            "users_dropped": self.corpus.split.report.n_dropped,
            "vocabulary": self.vocab_size,
            "documents": int(self.corpus.indexed.sum()),
            "past_documents": int(self.corpus.past_docs.sum()),
            "train_queries": n_q["train"],
            "valid_queries": n_q["valid"],
            "test_queries": n_q["test"],
            **{
                f"{split}_{key}": value
                for split, counts in self.lists.report.items()
                for key, value in counts.items()
                if key != "listed"
            },
        }


def prepare_aol(
    path: str | os.PathLike[str],
    *,
    users: int | None = None,
    seed: int = 0,
    dim: int = 100,
    word2vec_epochs: int = 5,
    depth: int = DEFAULT_DEPTH,
    train_negatives: int = DEFAULT_TRAIN_NEGATIVES,
    on_corpus: Callable[[AolCorpus], None] | None = None,
) -> FedPSData:
    """Load and prepare the AOL log at ``path`` (see the module docstring).

    Args:
        path: the AOL click log (``.tsv`` or ``.tsv.gz``).
        users: draw this many users (with ``seed``); ``None`` keeps every user.
        seed: the data seed: the user draw, the training lists' negatives and word2vec.
        dim: word-vector dimension (FedPS: 100).
        word2vec_epochs: passes of word2vec over the document texts.
        depth: documents the search engine retrieves per query.
        train_negatives: non-clicked candidates of a training list.
        on_corpus: called with the corpus as soon as it is built, before the lists and
            word2vec (a Dask run starts the cover queries, which need only the corpus).
    """
    if users is not None and users < 2:
        raise ConfigError(
            f"users must be >= 2 (or None for all), got {users}",
            field="users",
            requirement=f"must be >= 2 (leave it out for every user), got {users}",
            value=users,
        )
    if not Path(path).is_file():
        raise DataFormatError(
            f"AOL log {path} does not exist; pass --log with the path of "
            f"aol_top1000_users_clicks.tsv.gz (in the shared data folder's AOL/ directory)"
        )
    t0 = time.perf_counter()
    draw = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    log = load_aol(path, users=users, rng=draw if users else None)
    split = split_by_time(log)
    if split.report.n_kept < 2:
        raise DataFormatError(
            f"only {split.report.n_kept} user(s) of {path} have background, train, valid and "
            f"test events ({split.report}); FedPS needs at least 2"
        )
    loaded = time.perf_counter() - t0
    data = prepare_split(
        split,
        seed=seed,
        dim=dim,
        word2vec_epochs=word2vec_epochs,
        depth=depth,
        train_negatives=train_negatives,
        on_corpus=on_corpus,
    )
    data.timings["load"] = loaded
    return data


def prepare_split(
    split: TimeSplit,
    *,
    seed: int = 0,
    dim: int = 100,
    word2vec_epochs: int = 5,
    depth: int = DEFAULT_DEPTH,
    train_negatives: int = DEFAULT_TRAIN_NEGATIVES,
    on_corpus: Callable[[AolCorpus], None] | None = None,
) -> FedPSData:
    """Everything of :class:`FedPSData` from a split, fitted only on its past (background
    and training events; see the module docstring). Also used for every stage of the
    continuous simulation (:mod:`fedrank.experiments.fedps.continuous`), whose splits end
    at the stage's test week."""
    lists_seed, w2v_seed = np.random.SeedSequence(seed).spawn(3)[1:]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus = build_corpus(split)
    timings["corpus"] = time.perf_counter() - t0
    if on_corpus is not None:
        on_corpus(corpus)
    t0 = time.perf_counter()
    engine = SearchEngine(corpus.texts, corpus.indexed, corpus.past_docs)
    lists = build_lists(
        split,
        engine,
        np.random.default_rng(lists_seed),
        depth=depth,
        train_negatives=train_negatives,
    )
    user_data = build_users(corpus.users, corpus.pool, corpus.vocab, lists)
    timings["samples"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    doc_tokens = corpus.pool.tokens.astype(np.int64)
    vectors = train_word2vec(
        doc_tokens[corpus.past_docs],
        len(corpus.vocab),
        dim,
        rng=np.random.default_rng(w2v_seed),
        epochs=word2vec_epochs,
    )
    timings["word2vec"] = time.perf_counter() - t0
    return FedPSData(corpus, lists, user_data, vectors, doc_tokens, timings)
