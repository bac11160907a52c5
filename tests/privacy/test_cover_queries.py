"""LDA cover queries (FedPS Sec. 3.2, after Ahmad et al. [4, 49]) on synthetic corpora with
known topics."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy.cover_queries import CoverQueryGenerator, entropy

WIDTH = 6  # padded document length


def corpus(
    rng: np.random.Generator, n_topics: int, words: int, n_docs: int, shared: int = 0
) -> tuple[np.ndarray, np.ndarray, int]:
    """Documents of 3-6 words, each from one topic with its own block of ``words`` ids;
    with ``shared`` > 0, 30% of the tokens come from a block of words all topics share
    (so entropies vary). Some out-of-vocabulary tokens; 10 ids never used (V includes
    them). Returns (doc_tokens, doc_topic, V)."""
    v = 2 + n_topics * words + shared + 10
    own = 2 + np.arange(n_topics)[:, None] * words + np.arange(words)[None, :]
    topic = rng.integers(0, n_topics, n_docs)
    toks = own[topic[:, None], rng.integers(0, words, (n_docs, WIDTH))]
    if shared:
        common = rng.random(toks.shape) < 0.3
        toks[common] = 2 + n_topics * words + rng.integers(0, shared, int(common.sum()))
    toks[rng.random(toks.shape) < 0.02] = 1
    toks[np.arange(WIDTH)[None, :] >= rng.integers(3, WIDTH + 1, n_docs)[:, None]] = 0
    return toks.astype(np.int32), topic, v


@pytest.fixture(scope="module")
def separated() -> tuple[CoverQueryGenerator, np.ndarray, int]:
    docs, _, v = corpus(np.random.default_rng(0), 5, 40, 1200)
    gen = CoverQueryGenerator(5, learning_method="batch", max_iter=15)
    return gen.fit(docs, v, np.random.default_rng(1)), docs, v


@pytest.fixture(scope="module")
def overlapping() -> tuple[CoverQueryGenerator, np.ndarray, int]:
    docs, _, v = corpus(np.random.default_rng(2), 6, 30, 2000, shared=30)
    gen = CoverQueryGenerator(6, learning_method="online", max_iter=10, batch_size=256)
    return gen.fit(docs, v, np.random.default_rng(3)), docs, v


def queries_from(docs: np.ndarray, rows: slice, length: int = 4) -> np.ndarray:
    return np.ascontiguousarray(docs[rows, :length])


def test_model_knows_only_real_words_of_the_documents(separated) -> None:
    gen, docs, v = separated
    present = np.unique(docs[docs >= 2])
    np.testing.assert_array_equal(gen.word_ids_, present)
    assert gen.topic_word_.shape == (5, present.size)
    np.testing.assert_allclose(gen.topic_word_.sum(axis=1), 1.0)
    # the separated topics are recovered: each topic's word mass lies in one block
    block = (gen.word_ids_ - 2) // 40
    mass = np.stack([gen.topic_word_[:, block == b].sum(axis=1) for b in range(5)], axis=1)
    assert np.all(mass.max(axis=1) > 0.95)


def test_covers_are_real_words_at_the_query_positions(separated) -> None:
    gen, docs, _ = separated
    queries = queries_from(docs, slice(900, 1100))
    queries[::7, 1] = 0  # padding inside a query: the cover keeps the layout
    queries[::11, 0] = 1  # an out-of-vocabulary word still counts for the length
    covers = gen.generate(queries, 3, np.random.default_rng(4))
    assert covers.shape == (200, 3, 4) and covers.dtype == queries.dtype
    real = np.broadcast_to((queries != 0)[:, None, :], covers.shape)
    np.testing.assert_array_equal(covers != 0, real)
    assert np.all(np.isin(covers[real], gen.word_ids_))


def test_covers_come_from_other_topics_than_the_query(separated) -> None:
    gen, docs, _ = separated
    queries = queries_from(docs, slice(600, 1000))
    sample = gen.sample(queries, 3, np.random.default_rng(5))
    theta = gen.topic_distribution(queries)
    np.testing.assert_array_equal(sample.query_topic, theta.argmax(axis=1))
    np.testing.assert_allclose(sample.query_entropy, entropy(theta))
    # m distinct cover topics, none the query's dominant topic
    assert np.all(sample.topics != sample.query_topic[:, None])
    assert np.all(np.sort(sample.topics, axis=1)[:, 1:] != np.sort(sample.topics, axis=1)[:, :-1])
    # clearly separated topics: each cover is dominated by its own topic, not the query's
    cover_theta = gen.topic_distribution(sample.queries.reshape(-1, 4)).reshape(400, 3, 5)
    cover_topic = cover_theta.argmax(axis=2)
    assert np.all(cover_topic != sample.query_topic[:, None])
    assert np.mean(cover_topic == sample.topics) > 0.99
    np.testing.assert_allclose(sample.entropy, entropy(cover_theta), atol=1e-12)


def test_cover_topics_are_uniform_over_the_other_topics(separated) -> None:
    gen, docs, _ = separated
    queries = np.repeat(queries_from(docs, slice(0, 1)), 5000, axis=0)
    sample = gen.sample(queries, 1, np.random.default_rng(6))
    own = sample.query_topic[0]
    counts = np.bincount(sample.topics[:, 0], minlength=5)
    assert counts[own] == 0
    assert stats.chisquare(np.delete(counts, own)).pvalue > 1e-4


def test_cover_words_follow_the_topic_word_distribution(overlapping) -> None:
    gen, docs, _ = overlapping
    one = copy.copy(gen)
    one.n_candidates = 1  # no selection: the words are plain draws from phi_k
    queries = np.repeat(np.array([[docs[docs >= 2][0], 0]], dtype=np.int32), 30_000, axis=0)
    sample = one.sample(queries, 1, np.random.default_rng(7))
    topic = np.bincount(sample.topics[:, 0]).argmax()
    words = sample.queries[sample.topics[:, 0] == topic, 0, 0]
    col = np.searchsorted(gen.word_ids_, words)
    phi = gen.topic_word_[topic]
    top = np.argsort(phi)[::-1][:15]
    observed = np.append(np.bincount(col, minlength=phi.size)[top], 0)
    observed[-1] = words.size - observed[:-1].sum()
    expected = np.append(phi[top], 1.0 - phi[top].sum()) * words.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_selected_covers_have_closer_entropy_than_random_same_topic_samples(overlapping) -> None:
    gen, docs, _ = overlapping
    queries = queries_from(docs, slice(1500, 1900))
    sample = gen.sample(queries, 2, np.random.default_rng(8))
    chosen_gap = np.abs(sample.entropy - sample.query_entropy[:, None])
    # random queries of the same lengths drawn from the same cover topics
    rng = np.random.default_rng(9)
    mask = queries != 0
    random_covers = np.zeros_like(sample.queries)
    for q in range(queries.shape[0]):
        for j in range(2):
            phi = gen.topic_word_[sample.topics[q, j]]
            drawn = rng.choice(gen.word_ids_, size=int(mask[q].sum()), p=phi)
            random_covers[q, j, mask[q]] = drawn
    random_entropy = entropy(gen.topic_distribution(random_covers.reshape(-1, 4))).reshape(-1, 2)
    random_gap = np.abs(random_entropy - sample.query_entropy[:, None])
    assert chosen_gap.mean() < 0.6 * random_gap.mean()
    # the query entropies really vary on this corpus (the test is not vacuous)
    assert np.ptp(sample.query_entropy) > 0.5


def test_topic_distribution_is_a_bag_of_known_words(overlapping) -> None:
    gen, docs, v = overlapping
    queries = queries_from(docs, slice(0, 50))
    theta = gen.topic_distribution(queries)
    assert theta.shape == (50, 6)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    np.testing.assert_allclose(gen.topic_distribution(queries[:, ::-1].copy()), theta)
    # unknown words (OOV, ids absent from the documents) are ignored
    unknown = np.array([[1, v - 1, 0, 0]], dtype=np.int32)
    np.testing.assert_allclose(gen.topic_distribution(unknown), 1.0 / 6)
    assert gen.entropy(gen.topic_distribution(unknown))[0] == pytest.approx(np.log(6))
    padded_known = np.concatenate([queries[:1], np.full((1, 3), v - 1, dtype=np.int32)], axis=1)
    np.testing.assert_allclose(gen.topic_distribution(padded_known), theta[:1])
    h = gen.entropy(theta)
    assert np.all((h >= 0) & (h <= np.log(6) + 1e-12))


def test_generation_is_deterministic_for_a_seed(overlapping) -> None:
    gen, docs, _ = overlapping
    queries = queries_from(docs, slice(100, 160))
    a = gen.generate(queries, 2, np.random.default_rng(10))
    b = gen.generate(queries, 2, np.random.default_rng(10))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, gen.generate(queries, 2, np.random.default_rng(11)))
    docs2 = docs[:400]
    refit = [
        CoverQueryGenerator(4, max_iter=2, batch_size=128).fit(docs2, 400, rng).topic_word_
        for rng in (np.random.default_rng(12), np.random.default_rng(12))
    ]
    np.testing.assert_array_equal(refit[0], refit[1])


def test_zero_covers_and_empty_queries(separated) -> None:
    gen, docs, _ = separated
    queries = queries_from(docs, slice(0, 8))
    none = gen.generate(queries, 0, np.random.default_rng(0))
    assert none.shape == (8, 0, 4)
    empty = np.zeros((3, 4), dtype=np.int32)
    np.testing.assert_array_equal(gen.generate(empty, 2, np.random.default_rng(0)), 0)
    assert gen.generate(np.zeros((0, 4), dtype=np.int32), 2, np.random.default_rng(0)).shape == (
        0,
        2,
        4,
    )


def test_bad_input_is_refused(separated) -> None:
    gen, docs, v = separated
    queries = queries_from(docs, slice(0, 8))
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match=r"m \(cover queries per query\) must be an integer >= 0"):
        gen.generate(queries, -1, rng)
    with pytest.raises(ConfigError, match="at least m \\+ 1 topics"):
        gen.generate(queries, 5, rng)
    with pytest.raises(ConfigError, match="integer >= 0"):
        gen.generate(queries, 1.0, rng)  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match="integer array"):
        gen.generate(queries.astype(np.float32), 1, rng)
    with pytest.raises(DataFormatError, match="integer array"):
        gen.generate(queries.tolist(), 1, rng)  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match=r"ids\[None, :\]"):
        gen.generate(queries[0], 1, rng)
    with pytest.raises(DataFormatError, match=rf"lie in \[0, {v}\)"):
        gen.generate(queries + v, 1, rng)
    for bad in (ConfigError, DataFormatError):
        assert issubclass(bad, ValueError)
    with pytest.raises(ConfigError, match="not fitted"):
        CoverQueryGenerator(5).generate(queries, 1, rng)
    with pytest.raises(ConfigError, match="n_topics"):
        CoverQueryGenerator(1)
    with pytest.raises(ConfigError, match="learning_method"):
        CoverQueryGenerator(5, learning_method="gibbs")  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match="distinct real words"):
        CoverQueryGenerator(5).fit(np.ones((4, 3), dtype=np.int32), 10, rng)
