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
from fedrank.retrieval.candidates import (
    DEFAULT_DEPTH,
    DEFAULT_TRAIN_NEGATIVES,
    FEATURE_NAMES,
    CandidateLists,
    UserData,
    build_lists,
    build_samples,
    build_users,
)
from fedrank.retrieval.search_engine import SearchEngine
from tests.aolkit import FUTURE_URL, FUTURE_WORD, write_log

T0 = np.datetime64("2006-03-01T00:00:00", "s")


def make_user_log(events: list[tuple[int, int, int, list[int]]]) -> UserLog:
    """``events``: (seconds after T0, split code, query key, clicked docs)."""
    time = T0 + np.array([e[0] for e in events], dtype=np.int64).astype("timedelta64[s]")
    query_words = {0: [2, 3, 0], 1: [4, 0, 0]}
    sizes = [len(e[3]) for e in events]
    return UserLog(
        user_id=42,
        event_id=np.arange(len(events), dtype=np.int64),
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


BACKGROUND_CLICKS = np.array([2, 1, 0, 0, 0, 0], dtype=np.int64)


def hand_lists() -> CandidateLists:
    """Lists of the hand-built log: train events 2-4 rank d0 d1 d2, valid event 6 ranks
    d0..d3, test events 7-8 rank d0 d1 d5; scores fall with the position."""
    rows = {2: [0, 1, 2], 3: [0, 1, 2], 4: [0, 1, 2], 6: [0, 1, 2, 3], 7: [0, 1, 5], 8: [0, 1, 5]}
    docs = np.full((len(rows), 4), -1, dtype=np.int32)
    for i, d in enumerate(rows.values()):
        docs[i, : len(d)] = d
    valid = docs >= 0
    labels = (
        np.array([[d in CLICKED[e] for d in docs[i]] for i, e in enumerate(rows)], dtype=bool)
        & valid
    )
    return CandidateLists(
        event_ids=np.array(list(rows), dtype=np.int64),
        docs=docs,
        scores=np.where(valid, 4.0 - np.arange(4), 0.0).astype(np.float32),
        ranks=np.where(valid, np.arange(1, 5), 0).astype(np.int32),
        labels=labels,
        background_clicks=BACKGROUND_CLICKS,
        depth=4,
        train_negatives=2,
        report={},
    )


@pytest.mark.parametrize("split", ["train", "test"])
def test_features_on_a_hand_built_log(split: str) -> None:
    user = make_user_log(EVENTS)
    assert user.session.tolist() == [0, 0, 1, 1, 1, 2, 3, 4, 4]
    samples = build_samples(user, POOL, hand_lists(), split)
    assert samples.split == split and samples.features.shape[2] == len(FEATURE_NAMES)
    assert samples.n_without_click == (1 if split == "train" else 0)
    assert samples.n_unlisted == 0
    got = {}
    for i, e in enumerate(samples.events):
        assert samples.event_ids[i] == user.event_id[e]
        for j, d in enumerate(samples.candidates[i][samples.mask[i]]):
            f = samples.features[i, j]
            counts = np.rint(np.expm1(f[[0, 1, 4]])).astype(int)
            got[(int(e), int(d))] = (counts[0], counts[1], int(f[2]), counts[2])
            assert samples.labels[i, j] == (d in CLICKED[int(e)])
            assert f[3] == samples.bm25[i, j] == 4.0 - j
            assert samples.ranks[i, j] == j + 1
            assert np.rint(np.expm1(f[5])) == BACKGROUND_CLICKS[d]
    assert got == EXPECTED[split]


def test_valid_split_queries_and_unlisted_events() -> None:
    user = make_user_log(EVENTS)
    samples = build_samples(user, POOL, hand_lists(), "valid")
    assert samples.events.tolist() == [6]
    assert samples.query.tolist() == [[4, 0, 0]]
    assert samples.candidates.tolist() == [[0, 1, 2, 3]]
    assert samples.labels.tolist() == [[1, 0, 0, 0]]
    # e6 (query 1, session 3): d0 was clicked 3 times before (e0, e1, e2), never for query 1.
    assert np.rint(np.expm1(samples.features[0, 0, [0, 1]])).tolist() == [0, 3]
    with pytest.raises(ConfigError, match="split must be one of"):
        build_samples(user, POOL, hand_lists(), "background")
    # An event the lists do not cover is counted, not sampled, and still history.
    lists = hand_lists()
    keep = lists.event_ids != 7
    fewer = CandidateLists(
        event_ids=lists.event_ids[keep],
        docs=lists.docs[keep],
        scores=lists.scores[keep],
        ranks=lists.ranks[keep],
        labels=lists.labels[keep],
        background_clicks=BACKGROUND_CLICKS,
        depth=4,
        train_negatives=2,
        report={},
    )
    test = build_samples(user, POOL, fewer, "test")
    assert test.events.tolist() == [8] and test.n_unlisted == 1
    assert np.rint(np.expm1(test.features[0, 2, 0])) == 1  # e7's click on d5 is history


def test_lists_validate_their_shapes() -> None:
    lists = hand_lists()
    with pytest.raises(DataFormatError, match="strictly ascending"):
        CandidateLists(
            event_ids=lists.event_ids[::-1].copy(),
            docs=lists.docs,
            scores=lists.scores,
            ranks=lists.ranks,
            labels=lists.labels,
            background_clicks=BACKGROUND_CLICKS,
            depth=4,
            train_negatives=2,
            report={},
        )
    assert lists.rows(np.array([0, 2, 8, 99])).tolist() == [-1, 0, 5, -1]


def test_user_data_vocabulary_and_term_counts() -> None:
    user = make_user_log(EVENTS)
    vocab = Vocabulary.build([[f"w{i}" for i in range(20)]], min_count=1)
    (data,) = build_users([user], POOL, vocab, hand_lists())
    assert isinstance(data, UserData) and data.user_id == 42
    assert data.test.candidates.shape[1] == 3 and data.train.n_queries == 3
    # Background + train: queries e0 e1 e2 e4 (words 2, 3) and e3 e5 (word 4); clicks on
    # d0 x3, d1 x2, d2 x1. The test click on d5 (words OOV, 15) is not included.
    assert data.query_term_counts.tolist() == [[2, 4], [3, 4], [4, 2]]
    assert data.click_term_counts.tolist() == [[2, 6], [10, 3], [11, 2], [12, 1]]
    assert data.term_counts.tolist() == [[2, 10], [3, 4], [4, 2], [10, 3], [11, 2], [12, 1]]
    assert data.vocab_ids.tolist() == [2, 3, 4, 10, 11, 12] and data.vocab_ids.dtype == np.int32


# ---------------------------------------------------------------------------- tiny log


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> tuple[AolCorpus, SearchEngine, CandidateLists]:
    path = write_log(tmp_path_factory.mktemp("kit") / "log.tsv")
    split = split_by_time(load_aol(path))
    corpus = build_corpus(split, vocab_min_count=1)
    engine = SearchEngine(corpus.texts, corpus.indexed, corpus.past_docs)
    return corpus, engine, build_lists(split, engine, np.random.default_rng(0), depth=10)


def test_a_click_the_engine_does_not_retrieve_is_never_listed(kit) -> None:  # noqa: ANN001
    corpus, engine, lists = kit
    lg = corpus.split.log
    violin = int(np.flatnonzero(lg.queries[lg.query] == "violin")[0])
    assert lists.rows(np.array([violin]))[0] == -1
    assert lists.report["test"] == {
        "clicked": 2,
        "listed": 1,
        "click_not_retrieved": 1,
        "no_negative": 0,
    }
    quokka = int(np.flatnonzero(lg.queries[lg.query] == "quokka zoo")[0])
    row = lists.rows(np.array([quokka]))[0]
    docs = lists.docs[row][lists.docs[row] >= 0]
    future = int(np.flatnonzero(lg.urls == FUTURE_URL)[0])
    weather = int(np.flatnonzero(lg.urls == "http://www.weather.com/boston")[0])
    # Retrieved by the engine: the new page by its URL words, the weather page by its
    # background click-through text ("zoo weather"); the clicked one is labelled.
    assert set(docs.tolist()) == {future, weather}
    assert lists.labels[row][lists.docs[row] == future].tolist() == [True]
    assert np.all(lists.scores[row][lists.docs[row] >= 0] > 0)


def test_nothing_is_fitted_on_a_document_first_clicked_in_test(kit) -> None:  # noqa: ANN001
    corpus, engine, _ = kit
    lg = corpus.split.log
    future = int(np.flatnonzero(lg.urls == FUTURE_URL)[0])
    assert not corpus.past_docs[future] and corpus.indexed[future]
    assert FUTURE_WORD not in corpus.vocab and FUTURE_WORD not in corpus.segmenter
    # Its text is its URL words only (no click-through from after the background).
    assert corpus.texts[future][0] == FUTURE_WORD and "zoo" in corpus.texts[future]
    assert FUTURE_WORD in engine.dictionary  # the engine has crawled it
    # idf and length normalization come from the past documents only.
    n_past = int(corpus.past_docs.sum())
    assert n_past < int(corpus.indexed.sum())
    idf = engine.index.idf[engine.dictionary[FUTURE_WORD]]
    assert idf == pytest.approx(np.log1p((n_past + 0.5) / 0.5))  # df 0 among N_past
    lengths = np.array([len(t) for t in corpus.texts])
    assert engine.index.avgdl == pytest.approx(lengths[corpus.past_docs].mean())
    # Unknown words are dropped, never mapped to a shared id that would match other
    # unknown words.
    assert not np.any(corpus.pool.tokens == OOV_ID)
    assert all(not np.any(u.queries == OOV_ID) for u in corpus.users)
    (quokka_user,) = [u for u in corpus.users if u.user_id == 1]
    test_query = quokka_user.queries[quokka_user.split == TEST][0]
    assert test_query[test_query > 0].tolist() == [corpus.vocab.id("zoo")]


# ---------------------------------------------------------------------------- real log


@pytest.fixture(scope="module")
def corpus30(data_dir: Path) -> AolCorpus:
    path = data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the AOL click log is needed")
    return build_corpus(split_by_time(load_aol(path, users=30)))


@pytest.fixture(scope="module")
def engine30(corpus30: AolCorpus) -> SearchEngine:
    return SearchEngine(corpus30.texts, corpus30.indexed, corpus30.past_docs)


@pytest.fixture(scope="module")
def lists30(corpus30: AolCorpus, engine30: SearchEngine) -> CandidateLists:
    return build_lists(corpus30.split, engine30, np.random.default_rng(0))


@pytest.fixture(scope="module")
def users30(corpus30: AolCorpus, lists30: CandidateLists) -> list[UserData]:
    return build_users(corpus30.users, corpus30.pool, corpus30.vocab, lists30)


def _brute_force_top(
    engine: SearchEngine, corpus: AolCorpus, query: str, depth: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every indexed document scored, the matching ones sorted by (score desc, id)."""
    from fedrank.data.aol import tokenize

    q = engine.encode_queries([tokenize(query)])
    docs = np.flatnonzero(corpus.indexed)
    scores = engine.score(q, docs[None, :])[0]
    hit = scores > 0
    order = np.lexsort((docs[hit], -scores[hit]))[:depth]
    return docs[hit][order], scores[hit][order]


def test_real_lists_are_the_engines_top_50_with_no_click_inserted(
    corpus30: AolCorpus, engine30: SearchEngine, lists30: CandidateLists
) -> None:
    split = corpus30.split
    lg = split.log
    rng = np.random.default_rng(5)
    events = np.flatnonzero((split.split >= TRAIN) & (lg.clicks_per_event > 0))
    checked = {"listed": 0, "unlisted": 0}
    for e in rng.choice(events, size=150, replace=False):
        top, scores = _brute_force_top(engine30, corpus30, str(lg.queries[lg.query[e]]), 50)
        clicked = set(lg.click_docs[lg.click_ptr[e] : lg.click_ptr[e + 1]].tolist())
        hit = [d in clicked for d in top.tolist()]
        row = lists30.rows(np.array([e]))[0]
        if not (any(hit) and not all(hit)):
            assert row == -1
            checked["unlisted"] += 1
            continue
        checked["listed"] += 1
        assert row >= 0
        valid = lists30.docs[row] >= 0
        docs = lists30.docs[row][valid]
        labels = lists30.labels[row][valid]
        ranks = lists30.ranks[row][valid]
        assert np.array_equal(top[ranks - 1], docs)  # every candidate is retrieved
        np.testing.assert_allclose(lists30.scores[row][valid], scores[ranks - 1], rtol=1e-5)
        assert labels.tolist() == [d in clicked for d in docs.tolist()]
        if split.split[e] == TRAIN:
            # the retrieved clicks plus at most 5 of the retrieved others, in engine order
            assert set(docs[labels].tolist()) == clicked & set(top.tolist())
            assert 1 <= int((~labels).sum()) <= DEFAULT_TRAIN_NEGATIVES
            assert np.all(np.diff(ranks) > 0)
        else:
            assert np.array_equal(docs, top) and ranks.tolist() == list(range(1, top.size + 1))
    assert checked["listed"] > 30 and checked["unlisted"] > 10
    report = lists30.report
    for name, code in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        r = report[name]
        assert r["clicked"] == int(np.sum((split.split == code) & (lg.clicks_per_event > 0)))
        assert r["listed"] + r["click_not_retrieved"] + r["no_negative"] == r["clicked"]
        assert r["listed"] == int(np.sum(split.split[lists30.event_ids] == code))


def test_real_positives_and_negatives_match_the_query_alike(
    users30: list[UserData],
) -> None:
    for split in ("train", "test"):
        pos = np.concatenate([u.samples(split).bm25[u.samples(split).labels > 0] for u in users30])
        neg = np.concatenate(
            [
                u.samples(split).bm25[u.samples(split).mask & (u.samples(split).labels == 0)]
                for u in users30
            ]
        )
        assert pos.size > 100 and neg.size > 100
        assert np.all(pos > 0) and np.all(neg > 0)  # no-match rate 0 for both


def test_real_samples_follow_the_lists(
    corpus30: AolCorpus, lists30: CandidateLists, users30: list[UserData]
) -> None:
    assert len(users30) == len(corpus30.users)
    for log, data in zip(corpus30.users, users30, strict=True):
        assert data.user_id == log.user_id
        for split, code in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
            s = data.samples(split)
            rows = lists30.rows(log.event_id)
            assert np.array_equal(s.events, np.flatnonzero((log.split == code) & (rows >= 0)))
            assert s.n_unlisted == int(
                np.sum((log.split == code) & (rows < 0) & (log.clicks_per_event > 0))
            )
            assert np.array_equal(s.query, log.queries[s.events])
            assert np.all(s.labels.sum(axis=1) >= 1)
            assert np.all(((s.labels == 0) & s.mask).sum(axis=1) >= 1)
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


def test_real_lists_are_deterministic_per_seed(
    corpus30: AolCorpus, engine30: SearchEngine, lists30: CandidateLists
) -> None:
    again = build_lists(corpus30.split, engine30, np.random.default_rng(0))
    other = build_lists(corpus30.split, engine30, np.random.default_rng(1))
    for name in ("event_ids", "docs", "scores", "ranks", "labels"):
        assert np.array_equal(getattr(again, name), getattr(lists30, name)), name
    assert np.array_equal(other.event_ids, lists30.event_ids)
    test = corpus30.split.split[lists30.event_ids] == TEST
    assert np.array_equal(other.docs[test], lists30.docs[test])  # test lists: no draw
    assert not np.array_equal(other.docs[~test], lists30.docs[~test])  # train negatives: drawn


def test_bad_arguments(corpus30: AolCorpus, engine30: SearchEngine) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="depth"):
        build_lists(corpus30.split, engine30, rng, depth=1)
    with pytest.raises(ConfigError, match="train_negatives"):
        build_lists(corpus30.split, engine30, rng, train_negatives=0)
    with pytest.raises(ConfigError, match="Generator"):
        build_lists(corpus30.split, engine30, np.random.RandomState(0))  # type: ignore[arg-type]
    assert DEFAULT_DEPTH == 50
