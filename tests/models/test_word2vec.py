"""Skip-gram word2vec: topic structure is learned, runs are deterministic for a seed, the
pairs and the noise table are what the definitions say."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fedrank.models.word2vec import skipgram_pairs, train_word2vec, unigram_table

TOPIC_A = np.arange(2, 22)
TOPIC_B = np.arange(22, 42)
VOCAB = 45  # ids 42..44 never occur


def _two_topic_corpus(rng: np.random.Generator, n_docs: int = 3000) -> np.ndarray:
    """Padded documents of 2-6 words, each drawn from one of two disjoint vocabularies."""
    docs = np.zeros((n_docs, 8), dtype=np.int32)
    for i in range(n_docs):
        words = TOPIC_A if i % 2 else TOPIC_B
        length = rng.integers(2, 7)
        docs[i, :length] = rng.choice(words, size=length)
    return docs


def _cosines(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit @ unit.T


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return _two_topic_corpus(np.random.default_rng(7))


def test_words_of_a_topic_end_up_closer(corpus: np.ndarray) -> None:
    # A 40-word corpus: every word is "frequent", so no subsampling, and small batches.
    vectors = train_word2vec(
        corpus, VOCAB, dim=16, rng=np.random.default_rng(0), subsample=0, batch_size=256
    )
    assert vectors.shape == (VOCAB, 16) and vectors.dtype == np.float32
    assert (vectors[0] == 0).all()
    cos = _cosines(vectors[2:42])
    n = len(TOPIC_A)
    within = np.concatenate(
        [cos[:n, :n][np.triu_indices(n, 1)], cos[n:, n:][np.triu_indices(n, 1)]]
    )
    across = cos[:n, n:].ravel()
    assert within.mean() > across.mean() + 0.5
    # every word's nearest neighbour is in its own topic
    np.fill_diagonal(cos, -np.inf)
    nearest = cos.argmax(axis=1)
    assert ((nearest < n) == (np.arange(2 * n) < n)).all()


def test_deterministic_for_a_seed(corpus: np.ndarray) -> None:
    small = corpus[:500]
    a = train_word2vec(small, VOCAB, dim=8, rng=np.random.default_rng(3), epochs=1)
    b = train_word2vec(small, VOCAB, dim=8, rng=np.random.default_rng(3), epochs=1)
    c = train_word2vec(small, VOCAB, dim=8, rng=np.random.default_rng(4), epochs=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_padded_matrix_and_sequence_list_are_the_same_corpus(corpus: np.ndarray) -> None:
    small = corpus[:300]
    as_list = [row[row != 0].tolist() for row in small]
    a = train_word2vec(small, VOCAB, dim=8, rng=np.random.default_rng(5), epochs=1)
    b = train_word2vec(as_list, VOCAB, dim=8, rng=np.random.default_rng(5), epochs=1)
    np.testing.assert_array_equal(a, b)


def test_unseen_words_get_the_median_norm(corpus: np.ndarray) -> None:
    vectors = train_word2vec(corpus[:500], VOCAB, dim=8, rng=np.random.default_rng(1), epochs=1)
    norms = np.linalg.norm(vectors, axis=1)
    np.testing.assert_allclose(norms[42:], np.median(norms[2:42]), rtol=1e-5)
    assert norms[0] == 0


def test_window_one_pairs_are_the_adjacent_words_both_ways() -> None:
    tokens = np.array([5, 6, 7, 8, 9, 10], dtype=np.int64)
    owner = np.array([0, 0, 0, 1, 1, 2], dtype=np.int64)
    centre, context = skipgram_pairs(tokens, owner, 1, np.random.default_rng(0))
    got = Counter(zip(centre.tolist(), context.tolist(), strict=True))
    want = Counter([(5, 6), (6, 5), (6, 7), (7, 6), (8, 9), (9, 8)])
    assert got == want


def test_pairs_stay_in_their_sequence_and_window() -> None:
    rng = np.random.default_rng(2)
    owner = np.sort(rng.integers(0, 30, size=200))
    tokens = np.arange(200, dtype=np.int64)  # token id = position
    centre, context = skipgram_pairs(tokens, owner, 3, rng)
    assert (owner[centre] == owner[context]).all()
    distance = np.abs(centre - context)
    assert (distance >= 1).all() and (distance <= 3).all()
    # distance-1 neighbours are always pairs (every dynamic window is >= 1)
    adjacent = np.nonzero(owner[1:] == owner[:-1])[0]
    pairs = set(zip(centre.tolist(), context.tolist(), strict=True))
    assert all((i, i + 1) in pairs and (i + 1, i) in pairs for i in adjacent.tolist())


def test_unigram_table_follows_counts_to_the_075() -> None:
    counts = np.array([0, 0, 1, 10, 100, 1000], dtype=np.float64)
    table = unigram_table(counts, size=1 << 16)
    share = np.bincount(table, minlength=6) / table.size
    want = counts**0.75 / (counts**0.75).sum()
    np.testing.assert_allclose(share, want, atol=2.0 / table.size)


def test_bad_inputs_are_rejected() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"word ids must lie in \[0, 5\)"):
        train_word2vec(np.array([[1, 7]]), 5, dim=4, rng=rng)
    with pytest.raises(ValueError, match="no .*token"):
        train_word2vec(np.zeros((3, 4), dtype=np.int32), 5, dim=4, rng=rng)
    with pytest.raises(ValueError, match="window"):
        train_word2vec(np.array([[1, 2]]), 5, dim=4, rng=rng, window=0)
