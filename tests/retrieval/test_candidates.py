"""fedrank.retrieval.candidates: candidates, labels and click-history features (FedPS Sec. 4.1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.data.aol import (
    BACKGROUND,
    OOV_ID,
    TEST,
    TRAIN,
    VALID,
    AolCorpus,
    DocumentPool,
    UserLog,
    Vocabulary,
    assign_sessions,
    build_corpus,
    load_aol,
    split_by_time,
)
from fedrank.errors import ConfigError, DataFormatError
from fedrank.retrieval.bm25 import RaggedLike, as_ragged
from fedrank.retrieval.candidates import (
    DEFAULT_NEGATIVES,
    FEATURE_NAMES,
    BM25Candidates,
    CandidateGenerator,
    UserData,
    build_samples,
    build_users,
)

T0 = np.datetime64("2006-03-01T00:00:00", "s")


class ByIdCandidates:
    """A stand-in first stage: the clicked documents plus the ``n`` smallest other ids;
    score = -id, so the original ranking is id order."""

    def __init__(self, n_docs: int) -> None:
        self.n_docs = n_docs

    def candidates(self, queries: np.ndarray, clicked: RaggedLike, n: int) -> np.ndarray:
        cl = as_ragged(clicked, queries.shape[0])
        rows = []
        for i in range(cl.n_rows):
            c = cl.values[cl.ptr[i] : cl.ptr[i + 1]]
            rest = [d for d in range(self.n_docs) if d not in c][:n]
            rows.append([*c.tolist(), *rest])
        width = max((len(r) for r in rows), default=n)
        return np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int32).reshape(
            -1, width
        )

    def score(self, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
        return -docs.astype(np.float64)


def make_user_log(events: list[tuple[int, int, int, list[int]]]) -> UserLog:
    """``events``: (seconds after T0, split code, query key, clicked docs)."""
    time = T0 + np.array([e[0] for e in events], dtype=np.int64).astype("timedelta64[s]")
    query_words = {0: [2, 3, 0], 1: [4, 0, 0]}
    sizes = [len(e[3]) for e in events]
    return UserLog(
        user_id=42,
        time=time,
        session=assign_sessions(np.zeros(len(events), dtype=np.int32), time),
        split=np.array([e[1] for e in events], dtype=np.int8),
        query_key=np.array([e[2] for e in events], dtype=np.int64),
        queries=np.array([query_words[e[2]] for e in events], dtype=np.int32),
        click_ptr=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        click_docs=np.array([d for e in events for d in e[3]], dtype=np.int32),
    )


# (time, split, query key, clicks). e2 and e3 share a time: neither is "earlier".
EVENTS = [
    (0, BACKGROUND, 0, [0]),  # e0, session 0
    (100, BACKGROUND, 0, [0, 1]),  # e1
    (10_000, TRAIN, 0, [0]),  # e2, session 1
    (10_000, TRAIN, 1, [2]),  # e3
    (10_100, TRAIN, 0, [1]),  # e4
    (20_000, TRAIN, 1, []),  # e5, no click: skipped as a sample, still history
    (30_000, VALID, 1, [0]),  # e6
    (40_000, TEST, 0, [5]),  # e7, session 4
    (40_500, TEST, 0, [5]),  # e8, same session
]
TOKENS = np.array(
    [[10, 2, 0], [11, 2, 0], [12, 2, 0], [13, 0, 0], [14, 0, 0], [OOV_ID, 15, 0]], dtype=np.int32
)
POOL = DocumentPool(
    urls=np.array([f"http://d{i}.com/" for i in range(6)]),
    tokens=TOKENS,
    lengths=(TOKENS != 0).sum(axis=1).astype(np.int32),
)

# (event, doc) -> (pclick, doc clicks, clicked earlier in session, earlier issues of query)
EXPECTED = {
    "train": {
        (2, 0): (2, 2, 0, 2),
        (2, 1): (1, 1, 0, 2),
        (2, 2): (0, 0, 0, 2),
        (3, 0): (0, 2, 0, 0),  # e2's click on d0 is at the same time: not counted
        (3, 1): (0, 1, 0, 0),
        (3, 2): (0, 0, 0, 0),
        (4, 0): (3, 3, 1, 3),
        (4, 1): (1, 1, 0, 3),
        (4, 2): (0, 1, 1, 3),
    },
    "test": {
        (7, 0): (3, 4, 0, 4),
        (7, 1): (2, 2, 0, 4),
        (7, 5): (0, 0, 0, 4),  # e8 clicks d5 later: the future is not used
        (8, 0): (3, 4, 0, 5),
        (8, 1): (2, 2, 0, 5),
        (8, 5): (1, 1, 1, 5),
    },
}
CLICKED = {2: {0}, 3: {2}, 4: {1}, 6: {0}, 7: {5}, 8: {5}}


@pytest.mark.parametrize("split", ["train", "test"])
def test_features_on_a_hand_built_log(split: str) -> None:
    user = make_user_log(EVENTS)
    assert user.session.tolist() == [0, 0, 1, 1, 1, 2, 3, 4, 4]
    samples = build_samples(user, POOL, ByIdCandidates(6), split, n=2)
    assert samples.split == split and samples.features.shape[2] == len(FEATURE_NAMES)
    assert samples.n_without_click == (1 if split == "train" else 0)
    got = {}
    for i, e in enumerate(samples.events):
        assert samples.candidates[i].tolist() == sorted(samples.candidates[i].tolist())
        for j, d in enumerate(samples.candidates[i]):
            f = samples.features[i, j]
            counts = np.rint(np.expm1(f[[0, 1, 4]])).astype(int)
            got[(int(e), int(d))] = (counts[0], counts[1], int(f[2]), counts[2])
            assert samples.labels[i, j] == (d in CLICKED[int(e)])
            assert f[3] == samples.bm25[i, j] == -d
    assert got == EXPECTED[split]
    assert np.all(samples.mask)


def test_valid_split_and_queries() -> None:
    user = make_user_log(EVENTS)
    samples = build_samples(user, POOL, ByIdCandidates(6), "valid", n=3)
    assert samples.events.tolist() == [6]
    assert samples.query.tolist() == [[4, 0, 0]]
    assert samples.candidates.tolist() == [[0, 1, 2, 3]]
    assert samples.labels.tolist() == [[1, 0, 0, 0]]
    # e6 (query 1, session 3): d0 was clicked 3 times before (e0, e1, e2), never for query 1.
    assert np.rint(np.expm1(samples.features[0, 0, [0, 1]])).tolist() == [0, 3]
    with pytest.raises(ConfigError, match="split must be one of"):
        build_samples(user, POOL, ByIdCandidates(6), "background")


def test_bm25_candidates_on_a_small_pool_are_masked() -> None:
    user = make_user_log(EVENTS)
    gen = BM25Candidates.from_pool(POOL, rng=np.random.default_rng(0))
    assert isinstance(gen, CandidateGenerator)
    samples = build_samples(user, POOL, gen, "test")  # 50 negatives asked, 5 documents left
    assert samples.candidates.shape == (2, 51)
    assert samples.n_candidates.tolist() == [6, 6]
    assert np.array_equal(samples.mask, samples.candidates >= 0)
    assert np.all(samples.labels[~samples.mask] == 0) and np.all(samples.bm25[~samples.mask] == 0)
    assert sorted(samples.candidates[0, :6].tolist()) == [0, 1, 2, 3, 4, 5]
    # Without random fill only documents sharing a query word are negatives: query 0 is
    # words 2 and 3, which only d0, d1, d2 contain.
    plain = build_samples(user, POOL, BM25Candidates.from_pool(POOL), "test")
    assert sorted(plain.candidates[0][plain.mask[0]].tolist()) == [0, 1, 2, 5]
    assert np.all(plain.bm25[0][plain.mask[0]][:3] > 0)


def test_a_split_without_events_gives_empty_samples() -> None:
    user = make_user_log([e for e in EVENTS if e[1] != VALID])
    gen = BM25Candidates.from_pool(POOL, rng=np.random.default_rng(1))
    samples = build_samples(user, POOL, gen, "valid", n=5)
    assert samples.n_queries == 0
    assert samples.candidates.shape == (0, 5) and samples.features.shape == (0, 5, 5)


def test_user_data_vocabulary_and_term_counts() -> None:
    user = make_user_log(EVENTS)
    (data,) = build_users([user], POOL, _vocab_stub(), ByIdCandidates(6), negatives={"test": 2})
    assert isinstance(data, UserData) and data.user_id == 42
    assert data.test.candidates.shape[1] == 3 and data.train.n_queries == 3
    # Background + train: queries e0 e1 e2 e4 (words 2, 3) and e3 e5 (word 4); clicks on
    # d0 x3, d1 x2, d2 x1. The test click on d5 (words OOV, 15) is not included.
    assert data.query_term_counts.tolist() == [[2, 4], [3, 4], [4, 2]]
    assert data.click_term_counts.tolist() == [[2, 6], [10, 3], [11, 2], [12, 1]]
    assert data.term_counts.tolist() == [[2, 10], [3, 4], [4, 2], [10, 3], [11, 2], [12, 1]]
    assert data.vocab_ids.tolist() == [2, 3, 4, 10, 11, 12] and data.vocab_ids.dtype == np.int32
    with pytest.raises(ConfigError, match="unknown splits"):
        build_users([user], POOL, _vocab_stub(), ByIdCandidates(6), negatives={"dev": 1})


def _vocab_stub() -> Vocabulary:
    return Vocabulary.build([[f"w{i}" for i in range(20)]], min_count=1)


# ---------------------------------------------------------------------------- real log


@pytest.fixture(scope="module")
def corpus30(data_dir: Path) -> AolCorpus:
    path = data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the AOL click log is needed")
    return build_corpus(split_by_time(load_aol(path, users=30)))


@pytest.fixture(scope="module")
def users30(corpus30: AolCorpus) -> list[UserData]:
    gen = BM25Candidates.from_pool(corpus30.pool, rng=np.random.default_rng(0))
    return build_users(corpus30.split, corpus30.pool, corpus30.vocab, gen)


def test_real_samples_labels_and_candidate_counts(
    corpus30: AolCorpus, users30: list[UserData]
) -> None:
    assert len(users30) == len(corpus30.users)
    for log, data in zip(corpus30.users, users30, strict=True):
        assert data.user_id == log.user_id
        for split, code in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
            s = data.samples(split)
            assert np.array_equal(s.events, np.flatnonzero(log.split == code))
            assert np.array_equal(s.query, log.queries[s.events])
            n_clicked = log.clicks_per_event[s.events]
            assert np.array_equal(s.n_candidates, n_clicked + DEFAULT_NEGATIVES[split])
            assert np.array_equal(s.labels.sum(axis=1), n_clicked)
            for i, e in enumerate(s.events):
                clicked = log.click_docs[log.click_ptr[e] : log.click_ptr[e + 1]]
                cand = s.candidates[i][s.mask[i]]
                assert np.unique(cand).size == cand.size
                assert set(cand[s.labels[i][s.mask[i]] == 1]) == set(clicked)
            # Original ranking: BM25 non-increasing along each row.
            assert np.all(np.diff(np.where(s.mask, s.bm25, -1.0), axis=1) <= 0)
            assert np.all(np.isfinite(s.features)) and np.all(s.features >= 0)
            assert np.array_equal(s.features[..., 3], s.bm25)
            assert np.all(s.features[~s.mask] == 0)


def test_real_features_match_a_brute_force_history(
    corpus30: AolCorpus, users30: list[UserData]
) -> None:
    for log, data in list(zip(corpus30.users, users30, strict=True))[:4]:
        t = log.time.astype(np.int64)
        ev_of_click = log.click_event
        for split in ("train", "test"):
            s = data.samples(split)
            for i, e in enumerate(s.events[:40]):
                earlier = t[ev_of_click] < t[e]
                for j in np.flatnonzero(s.mask[i]):
                    d = s.candidates[i, j]
                    on_d = earlier & (log.click_docs == d)
                    pclick = np.sum(on_d & (log.query_key[ev_of_click] == log.query_key[e]))
                    session = np.any(on_d & (log.session[ev_of_click] == log.session[e]))
                    f = s.features[i, j]
                    assert round(float(np.expm1(f[0]))) == pclick
                    assert round(float(np.expm1(f[1]))) == on_d.sum()
                    assert f[2] == session
                issues = np.sum((t < t[e]) & (log.query_key == log.query_key[e]))
                assert round(float(np.expm1(s.features[i, 0, 4]))) == issues


def test_real_samples_are_deterministic_and_vocab_is_from_history(
    corpus30: AolCorpus, users30: list[UserData]
) -> None:
    gen = BM25Candidates.from_pool(corpus30.pool, rng=np.random.default_rng(0))
    again = build_users(list(corpus30.users[:5]), corpus30.pool, corpus30.vocab, gen)
    for a, b in zip(again, users30[:5], strict=True):
        for split in ("train", "valid", "test"):
            sa, sb = a.samples(split), b.samples(split)
            for name in ("candidates", "labels", "features", "bm25", "query"):
                assert np.array_equal(getattr(sa, name), getattr(sb, name)), name
        assert np.array_equal(a.vocab_ids, b.vocab_ids)
    log, data = corpus30.users[0], users30[0]
    seen = np.isin(log.split, (BACKGROUND, TRAIN))
    words = set(log.queries[seen].ravel()) | set(
        corpus30.pool.tokens[log.click_docs[np.repeat(seen, log.clicks_per_event)]].ravel()
    )
    assert set(data.vocab_ids.tolist()) == words - {0, OOV_ID}
    assert data.term_counts[:, 1].sum() == (
        data.query_term_counts[:, 1].sum() + data.click_term_counts[:, 1].sum()
    )


def test_without_fill_candidates_are_matched_documents(corpus30: AolCorpus) -> None:
    gen = BM25Candidates.from_pool(corpus30.pool)
    (data,) = build_users(list(corpus30.users[:1]), corpus30.pool, corpus30.vocab, gen)
    s = data.test
    negatives = s.mask & (s.labels == 0)
    assert np.all(s.bm25[negatives] > 0)
    n_clicked = s.labels.sum(axis=1)
    assert np.all(s.n_candidates <= n_clicked + 50)


def test_pool_must_match_the_log(corpus30: AolCorpus) -> None:
    small = DocumentPool(
        corpus30.pool.urls[:10], corpus30.pool.tokens[:10], corpus30.pool.lengths[:10]
    )
    gen = BM25Candidates.from_pool(small)
    with pytest.raises(DataFormatError, match="does not match the log"):
        build_users(corpus30.split, small, corpus30.vocab, gen)
    with pytest.raises(ConfigError, match="Generator"):
        BM25Candidates(gen.index, rng=np.random.RandomState(0))  # type: ignore[arg-type]
