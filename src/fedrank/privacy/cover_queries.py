"""LDA cover queries: query obfuscation on the client (FedPS Sec. 3.2, after Ahmad et al.
[4, 49]).

"the client sends the issued query accompanied with several cover queries to the search
engine ... We first train an LDA (Latent Dirichlet Allocation) [10] topic model on the whole
document set to infer the topic proportion of the issued query, which represents the user's
real search intent. Then, cover queries are generated on different topics with similar
entropy on account of plausibility." (Sec. 3.2). The CoverQuery baseline (Sec. 4.2) logs the
covers on the server; FedPS only sends them with the search request: "we filter those fake
queries and only record the real query into the local log" -- keeping covers out of the
local log, and out of training, is the caller's job.

The method, compactly (:class:`CoverQueryGenerator`):

1. :meth:`~CoverQueryGenerator.fit`: an LDA model (``sklearn`` online or batch variational
   Bayes) on the document-term counts of the document collection (padding and
   out-of-vocabulary tokens dropped; only words occurring in some document form the model's
   vocabulary).
2. For every real query: its topic distribution ``theta = P(topic | query)`` (one sklearn
   ``transform`` for all queries), its *dominant topic* ``argmax theta`` and its entropy
   ``H(theta) = -sum_k theta_k ln theta_k``: low for a focused query, up to ``ln K`` for a
   vague one.
3. ``m`` distinct cover topics, drawn uniformly among the ``K - 1`` topics other than the
   dominant one ("on different topics").
4. For each cover topic, ``n_candidates`` candidate queries with as many words as the real
   query, every word drawn from the topic's word distribution ``phi_k``; the kept candidate
   is the one whose topic-distribution entropy (inferred like the real query's) is closest
   to the real query's ("with similar entropy"), preferring candidates without a repeated
   word (real queries rarely repeat one; a repeated word is a give-away).

A cover has the real query's length: its words occupy exactly the real query's non-padding
positions; everything else is padding. Cover words are real vocabulary ids (>= 2) that occur
in the documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse
from sklearn.decomposition import LatentDirichletAllocation

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy.profile_kl import FIRST_WORD_ID, PAD_ID, term_counts

__all__ = ["CoverQueryGenerator", "CoverSample", "entropy"]

# Candidate words sampled per chunk of queries (bounds the memory of ``generate``).
_WORDS_PER_CHUNK = 2_000_000


def _int_param(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _token_matrix(name: str, tokens: object, vocab_size: int) -> np.ndarray:
    arr = tokens if isinstance(tokens, np.ndarray) else None
    if arr is None or arr.dtype.kind not in "iu":
        kind = getattr(tokens, "dtype", type(tokens).__name__)
        raise DataFormatError(
            f"{name} must be a numpy integer array of token ids (int32, 0 = padding), got {kind}"
        )
    if arr.ndim != 2:
        raise DataFormatError(
            f"{name} must be a padded (rows, length) matrix of token ids, got shape "
            f"{arr.shape}; wrap a single query as ids[None, :]"
        )
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise DataFormatError(
            f"{name} ids must lie in [0, {vocab_size}) (the fitted vocabulary), got "
            f"{arr.min()}..{arr.max()}"
        )
    return arr


def entropy(theta: np.ndarray) -> np.ndarray:
    """``H = -sum_k theta_k ln theta_k`` (nats) of each row of ``theta`` (``(..., K)``)."""
    arr = np.asarray(theta, dtype=np.float64)
    if arr.ndim < 1 or arr.shape[-1] == 0:
        raise DataFormatError(f"expected distributions along the last axis, got {arr.shape}")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(arr > 0, arr * np.log(arr), 0.0)
    return -terms.sum(axis=-1)


@dataclass(frozen=True)
class CoverSample:
    """Cover queries with how they were chosen.

    Attributes:
        queries: ``(Q, m, Lq)`` cover token ids, 0-padded like the real queries.
        topics: ``(Q, m)`` the topic each cover was sampled from.
        entropy: ``(Q, m)`` entropy of each cover's inferred topic distribution.
        query_topic: ``(Q,)`` dominant topic of each real query.
        query_entropy: ``(Q,)`` entropy of each real query's topic distribution.
    """

    queries: np.ndarray
    topics: np.ndarray
    entropy: np.ndarray
    query_topic: np.ndarray
    query_entropy: np.ndarray


class CoverQueryGenerator:
    """LDA-based cover queries "on different topics with similar entropy" (Sec. 3.2, [4, 49]).

    Args:
        n_topics: number of LDA topics ``K`` (at least 2, and more than the number of covers
            per query).
        n_candidates: candidate queries sampled per cover; the one with the closest entropy
            is kept (more candidates: closer entropies, slower -- their topic distributions
            are inferred too).
        learning_method: sklearn's ``"online"`` (mini-batch variational Bayes, the right
            choice for a large collection) or ``"batch"``.
        max_iter: passes over the documents.
        batch_size: documents per online mini-batch.
        doc_topic_prior, topic_word_prior: LDA's Dirichlet priors (sklearn defaults
            ``1 / K`` when ``None``).
        n_jobs: sklearn's parallel jobs for fitting and inference (``None`` = 1).

    Usage: ``gen = CoverQueryGenerator(50).fit(doc_tokens, V, rng)`` then
    ``covers = gen.generate(query_ids, m=1, rng=rng)``. The covers are sent to the search
    engine with the real query; only the real query may enter the local log and the
    training data (Sec. 3.2) -- the caller keeps them apart.
    """

    #: Set by :meth:`fit`: the vocabulary size ``V`` of the token ids.
    vocab_size_: int
    #: Set by :meth:`fit`: ``(W,)`` the vocabulary ids the model knows (column order).
    word_ids_: np.ndarray
    #: Set by :meth:`fit`: ``(K, W)`` topic-word distributions ``phi_k`` (rows sum to 1).
    topic_word_: np.ndarray

    def __init__(
        self,
        n_topics: int = 50,
        *,
        n_candidates: int = 10,
        learning_method: Literal["online", "batch"] = "online",
        max_iter: int = 10,
        batch_size: int = 2048,
        doc_topic_prior: float | None = None,
        topic_word_prior: float | None = None,
        n_jobs: int | None = None,
    ) -> None:
        self.n_topics = _int_param("n_topics", n_topics, 2)
        self.n_candidates = _int_param("n_candidates", n_candidates, 1)
        if learning_method not in ("online", "batch"):
            raise ConfigError(
                f"learning_method must be 'online' or 'batch', got {learning_method!r}"
            )
        self.learning_method = learning_method
        self.max_iter = _int_param("max_iter", max_iter, 1)
        self.batch_size = _int_param("batch_size", batch_size, 1)
        for name, prior in (
            ("doc_topic_prior", doc_topic_prior),
            ("topic_word_prior", topic_word_prior),
        ):
            if prior is not None and not (isinstance(prior, int | float) and prior > 0):
                raise ConfigError(f"{name} must be a positive number or None, got {prior!r}")
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.n_jobs = n_jobs
        self._lda: LatentDirichletAllocation | None = None

    def __repr__(self) -> str:
        state = "fitted" if self._lda is not None else "unfitted"
        return (
            f"CoverQueryGenerator(n_topics={self.n_topics}, n_candidates={self.n_candidates}, "
            f"{state})"
        )

    # ------------------------------------------------------------------------- fitting

    def fit(
        self, doc_tokens: np.ndarray, vocab_size: int, rng: np.random.Generator
    ) -> CoverQueryGenerator:
        """Fit LDA on the documents' term counts.

        Args:
            doc_tokens: ``(n_docs, L)`` padded token ids (0 = padding, 1 = out-of-vocabulary;
                both are ignored, and documents left without a word are skipped).
            vocab_size: ``V``; ids lie in ``[0, V)``.
            rng: seeds sklearn (one integer drawn from it).

        Sets ``vocab_size_``, ``word_ids_`` (the ``W`` vocabulary ids the model knows: those
        occurring in some document), ``topic_word_`` (``(K, W)`` rows of ``phi_k``) and
        ``lda_`` (the sklearn model, columns = ``word_ids_``).
        """
        size = _int_param("vocab_size", vocab_size, FIRST_WORD_ID + 1)
        docs = _token_matrix("doc_tokens", doc_tokens, size)
        counts = term_counts(docs, size)
        word_ids = np.flatnonzero(counts.getnnz(axis=0) > 0)
        if word_ids.size < 2:
            raise DataFormatError(
                f"the documents contain {word_ids.size} distinct real words (ids >= "
                f"{FIRST_WORD_ID}); a topic model needs a vocabulary"
            )
        matrix = sparse.csr_matrix(counts[:, word_ids])
        matrix = matrix[matrix.getnnz(axis=1) > 0]
        lda = LatentDirichletAllocation(
            n_components=self.n_topics,
            doc_topic_prior=self.doc_topic_prior,
            topic_word_prior=self.topic_word_prior,
            learning_method=self.learning_method,
            max_iter=self.max_iter,
            batch_size=self.batch_size,
            total_samples=matrix.shape[0],
            evaluate_every=-1,
            n_jobs=self.n_jobs,
            random_state=int(rng.integers(2**31 - 1)),
        )
        if self.learning_method == "online":
            # fit() would end with a full E-step and a perplexity over the whole collection
            # (about a quarter of the time on short documents) that nothing here uses;
            # max_iter partial_fit passes are exactly fit()'s online updates without it.
            for _ in range(self.max_iter):
                lda.partial_fit(matrix)
        else:
            lda.fit(matrix)
        self._lda = lda
        self.vocab_size_ = size
        self.word_ids_ = word_ids
        self._column_of = np.full(size, -1, dtype=np.int64)
        self._column_of[word_ids] = np.arange(word_ids.size)
        phi = lda.components_ / lda.components_.sum(axis=1, keepdims=True)
        self.topic_word_ = phi
        cdf = np.cumsum(phi, axis=1)
        cdf[:, -1] = 1.0
        # row k shifted to [k, k + 1]: one searchsorted samples words of any topics
        self._shifted_cdf = (cdf + np.arange(self.n_topics)[:, None]).ravel()
        return self

    @property
    def lda_(self) -> LatentDirichletAllocation:
        if self._lda is None:
            raise ConfigError("the cover-query generator is not fitted: call fit() first")
        return self._lda

    # ------------------------------------------------------------------------- inference

    def _theta_of_columns(self, columns: np.ndarray) -> np.ndarray:
        """Topic distributions of bags of model columns (``(N, L)``, -1 = no word), each
        distinct bag inferred once."""
        bags = np.sort(columns, axis=1)
        unique, inverse = np.unique(bags, axis=0, return_inverse=True)
        keep = unique >= 0
        rows = np.broadcast_to(np.arange(unique.shape[0])[:, None], unique.shape)[keep]
        matrix = sparse.csr_matrix(
            (np.ones(rows.size), (rows, unique[keep])),
            shape=(unique.shape[0], self.word_ids_.size),
        )
        return self.lda_.transform(matrix)[inverse.ravel()]

    def topic_distribution(self, queries: np.ndarray) -> np.ndarray:
        """``(Q, K)`` inferred topic distribution of each query (``(Q, Lq)`` padded ids).

        Words the model does not know (out-of-vocabulary, or absent from the documents)
        are ignored; a query with no known word gets the prior's uniform distribution."""
        lda = self.lda_
        tokens = _token_matrix("queries", queries, self.vocab_size_)
        if tokens.shape[0] == 0:
            return np.zeros((0, lda.n_components))
        return self._theta_of_columns(self._column_of[tokens])

    @staticmethod
    def entropy(theta: np.ndarray) -> np.ndarray:
        """Entropy (nats) of each topic distribution (rows of ``theta``)."""
        return entropy(theta)

    # ------------------------------------------------------------------------- generation

    def generate(self, query_ids: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        """``(Q, m, Lq)`` cover queries for each real query of ``query_ids`` (``(Q, Lq)``),
        0-padded (see :meth:`sample`). Only the real query enters the local log (Sec. 3.2):
        the covers are for the search request only."""
        return self.sample(query_ids, m, rng).queries

    def sample(self, query_ids: np.ndarray, m: int, rng: np.random.Generator) -> CoverSample:
        """Cover queries and their topics/entropies (module docstring, steps 2-4).

        Args:
            query_ids: ``(Q, Lq)`` padded token ids of the real queries.
            m: covers per query, ``0 <= m < K`` (distinct topics other than the dominant).
            rng: all randomness (cover topics and candidate words).

        A query without tokens gets all-padding covers. A query without any word the model
        knows has the uniform topic distribution (entropy ``ln K``); its "dominant" topic is
        then topic 0 by convention, so its covers avoid topic 0 only. Deterministic given
        ``rng``'s state.
        """
        k = self.lda_.n_components
        tokens = _token_matrix("query_ids", query_ids, self.vocab_size_)
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 0:
            raise ConfigError(f"m (cover queries per query) must be an integer >= 0, got {m!r}")
        if m > k - 1:
            raise ConfigError(
                f"m = {m} covers on distinct topics other than the query's own need at least "
                f"m + 1 topics, the model has {k}: lower m or fit more topics"
            )
        n_q, length = tokens.shape
        theta = self.topic_distribution(tokens)
        query_topic = np.argmax(theta, axis=1) if n_q else np.zeros(0, dtype=np.int64)
        query_entropy = entropy(theta) if n_q else np.zeros(0)

        # m distinct topics per query, uniformly among the K - 1 others
        keys = rng.random((n_q, k))
        keys[np.arange(n_q), query_topic] = np.inf
        topics = np.argsort(keys, axis=1, kind="stable")[:, :m]

        covers = np.zeros((n_q, m, length), dtype=tokens.dtype)
        cover_entropy = np.zeros((n_q, m))
        if n_q == 0 or m == 0 or length == 0:
            return CoverSample(covers, topics, cover_entropy, query_topic, query_entropy)
        per_query = m * self.n_candidates * length
        step = max(1, _WORDS_PER_CHUNK // per_query)
        for start in range(0, n_q, step):
            chunk = slice(start, min(n_q, start + step))
            words, ent = self._best_candidates(
                tokens[chunk] != PAD_ID, topics[chunk], query_entropy[chunk], rng
            )
            covers[chunk] = words
            cover_entropy[chunk] = ent
        return CoverSample(covers, topics, cover_entropy, query_topic, query_entropy)

    def _best_candidates(
        self,
        mask: np.ndarray,
        topics: np.ndarray,
        target: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For queries with non-padding ``mask`` (``(n, Lq)``) and cover ``topics``
        (``(n, m)``): the candidate of each cover closest in entropy to ``target``."""
        n, length = mask.shape
        m, c, n_words = topics.shape[1], self.n_candidates, self.word_ids_.size
        shape = (n, m, c, length)
        slots = np.broadcast_to(mask[:, None, None, :], shape)
        slot_topic = np.broadcast_to(topics[:, :, None, None], shape)[slots]
        u = rng.random(slot_topic.size)
        draws = np.searchsorted(self._shifted_cdf, slot_topic + u, side="right")
        columns = np.full(shape, -1, dtype=np.int64)
        columns[slots] = np.clip(draws - slot_topic * n_words, 0, n_words - 1)

        flat = columns.reshape(-1, length)
        cand_entropy = entropy(self._theta_of_columns(flat)).reshape(n, m, c)
        gap = np.abs(cand_entropy - target[:, None, None])
        ordered = np.sort(flat, axis=1)
        repeated = np.any((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0), axis=1)
        # a candidate with a repeated word loses to any without (gap <= ln K < 1e6)
        best = np.argmin(gap + 1e6 * repeated.reshape(n, m, c), axis=2)
        chosen = np.take_along_axis(columns, best[:, :, None, None], axis=2)[:, :, 0, :]
        chosen_entropy = np.take_along_axis(cand_entropy, best[:, :, None], axis=2)[:, :, 0]
        words = np.where(chosen >= 0, self.word_ids_[np.maximum(chosen, 0)], PAD_ID)
        return words, chosen_entropy
