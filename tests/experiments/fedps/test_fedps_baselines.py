"""GroupUser and CoverQuery server logs (FedPS Sec. 4.2, Sec. 3.2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.data.aol import AolCorpus, UserLog, build_corpus, load_aol, split_by_time
from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments.fedps.baselines import (
    cover_queries_for,
    cover_query_logs,
    group_members,
    group_user_logs,
)
from fedrank.privacy.cover_queries import CoverQueryGenerator
from fedrank.privacy.profile_kl import assign_groups
from fedrank.retrieval.candidates import CandidateLists, UserData, build_lists, build_users
from fedrank.retrieval.search_engine import SearchEngine

SPLITS = ("train", "valid", "test")
FIELDS = ("time", "split", "query_key", "queries", "click_ptr", "click_docs")


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> AolCorpus:
    path = data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the AOL sample is needed")
    log = load_aol(path, users=30, rng=np.random.default_rng(0))
    return build_corpus(split_by_time(log))


@pytest.fixture(scope="module")
def lists(corpus: AolCorpus) -> CandidateLists:
    engine = SearchEngine(corpus.texts, corpus.indexed, corpus.past_docs)
    return build_lists(corpus.split, engine, np.random.default_rng(0))


@pytest.fixture(scope="module")
def original_users(corpus: AolCorpus, lists: CandidateLists) -> list[UserData]:
    return build_users(corpus.users, corpus.pool, corpus.vocab, lists)


def by_event(users: list[UserData], split: str) -> dict[int, tuple]:
    """Every sample's (candidates, labels, bm25) keyed by its event id in the log."""
    out = {}
    for u in users:
        s = u.samples(split)
        for i, e in enumerate(s.event_ids.tolist()):
            m = s.mask[i]
            out[e] = (s.candidates[i][m].tolist(), s.labels[i][m].tolist(), s.bm25[i][m].tolist())
    return out


@pytest.fixture(scope="module")
def cover_generator(corpus: AolCorpus) -> CoverQueryGenerator:
    gen = CoverQueryGenerator(n_topics=5, max_iter=2, n_candidates=2)
    return gen.fit(corpus.pool.tokens, len(corpus.vocab), np.random.default_rng(0))


def make_log(
    user_id: int,
    seconds: list[int],
    sessions: list[int],
    clicks: list[list[int]],
    width: int = 3,
    key_base: int = 0,
) -> UserLog:
    """A small synthetic log; query ``i`` is ``[user_id + 2, i + 2, 0, ...]``."""
    e = len(seconds)
    queries = np.zeros((e, width), dtype=np.int32)
    queries[:, 0] = user_id + 2
    queries[:, 1] = np.arange(e) + 2
    ptr = np.concatenate([[0], np.cumsum([len(c) for c in clicks])]).astype(np.int64)
    docs = np.array([d for c in clicks for d in c], dtype=np.int32)
    return UserLog(
        user_id=user_id,
        event_id=user_id * 100 + np.arange(e, dtype=np.int64),
        time=np.datetime64("2006-03-01T00:00:00", "s") + np.array(seconds, dtype="timedelta64[s]"),
        session=np.array(sessions, dtype=np.int64),
        split=np.full(e, 1, dtype=np.int8),
        query_key=key_base + np.arange(e, dtype=np.int64),
        queries=queries,
        click_ptr=ptr,
        click_docs=docs,
    )


def event_rows(log: UserLog, i: int) -> tuple:
    """Everything about event ``i`` except its session id (queries without padding)."""
    q = log.queries[i]
    return (
        int(log.event_id[i]),
        int(log.time[i].astype(np.int64)),
        int(log.split[i]),
        int(log.query_key[i]),
        tuple(int(x) for x in q[q != 0]),
        tuple(int(x) for x in log.click_docs[log.click_ptr[i] : log.click_ptr[i + 1]]),
    )


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a[i] == a[j]`` exactly when ``b[i] == b[j]``."""
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return pairs.shape[0] == np.unique(a).size == np.unique(b).size


def n_samples(users: list[UserData], split: str) -> int:
    return sum(u.samples(split).n_queries for u in users)


# ------------------------------------------------------------------------------ GroupUser


def test_group_members_partition_in_id_order() -> None:
    groups = np.array([7, 2, 7, 5, 2, 2], dtype=np.int32)
    members = group_members(groups)
    assert [m.tolist() for m in members] == [[1, 4, 5], [3], [0, 2]]
    assert all(m.dtype == np.int64 for m in members)
    assert group_members(np.zeros(0, dtype=np.int64)) == []


def test_merge_orders_ties_by_member_then_event() -> None:
    a = make_log(10, [0, 5, 5, 9], [3, 3, 4, 4], [[1], [], [2, 3], [4]], width=2)
    b = make_log(20, [5, 5, 7], [3, 3, 8], [[5], [6], []], width=4, key_base=100)
    (merged,) = group_user_logs([a, b], np.array([4, 4]))
    assert merged.user_id == 4
    expected = [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1), (b, 2), (a, 3)]
    assert merged.queries.shape == (7, 4)
    for i, (log, j) in enumerate(expected):
        assert event_rows(merged, i) == event_rows(log, j)
    # a's session 3, a's 4, b's 3 (not a's 3), b's 8: ids by first event
    assert merged.session.tolist() == [0, 0, 1, 2, 2, 3, 1]


def test_group_logs_hold_every_member_event_once(corpus: AolCorpus) -> None:
    logs = corpus.users
    groups = assign_groups(len(logs), 7, np.random.default_rng(1))
    merged = group_user_logs(logs, groups)
    members = group_members(groups)
    assert [g.user_id for g in merged] == sorted(set(groups.tolist()))
    for glog, mem in zip(merged, members, strict=True):
        assert isinstance(glog, UserLog)
        assert glog.n_events == sum(logs[i].n_events for i in mem)
        assert glog.click_docs.size == sum(logs[i].click_docs.size for i in mem)
        assert np.all(np.diff(glog.time.astype(np.int64)) >= 0)
        # Reference: sort (time, member position, event index).
        ref = sorted(
            (int(logs[i].time[j].astype(np.int64)), pos, j)
            for pos, i in enumerate(mem)
            for j in range(logs[i].n_events)
        )
        got = [event_rows(glog, k) for k in range(glog.n_events)]
        assert got == [event_rows(logs[mem[pos]], j) for _, pos, j in ref]
        pair = np.array([pos * 10**9 + int(logs[mem[pos]].session[j]) for _, pos, j in ref])
        assert same_partition(glog.session, pair)


def test_singleton_groups_reproduce_the_logs(corpus: AolCorpus) -> None:
    logs = corpus.users
    n = len(logs)
    groups = (1000 - np.arange(n)).astype(np.int64)  # descending ids: output is reversed
    merged = group_user_logs(logs, groups)
    assert len(merged) == n
    for glog, log, gid in zip(merged, logs[::-1], groups[::-1], strict=True):
        assert glog.user_id == gid
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(glog, name), getattr(log, name), err_msg=name)
            assert getattr(glog, name).dtype == getattr(log, name).dtype, name
        assert same_partition(glog.session, log.session)


def test_build_users_on_group_logs(
    corpus: AolCorpus, lists: CandidateLists, original_users: list[UserData]
) -> None:
    groups = assign_groups(len(corpus.users), 10, np.random.default_rng(2))
    merged = group_user_logs(corpus.users, groups)
    grouped = build_users(merged, corpus.pool, corpus.vocab, lists)
    assert len(grouped) == 3
    for split in SPLITS:
        assert n_samples(grouped, split) == n_samples(original_users, split)
        # exactly the lists every other mode ranks, event by event
        assert by_event(grouped, split) == by_event(original_users, split)
    # The group profile holds every member's words.
    for g, mem in zip(grouped, group_members(groups), strict=True):
        words = np.unique(np.concatenate([original_users[i].vocab_ids for i in mem]))
        np.testing.assert_array_equal(g.vocab_ids, words)


@pytest.mark.parametrize(
    ("groups", "match"),
    [
        (np.zeros(2, dtype=np.int64), r"shape \(3,\)"),
        (np.zeros((3, 1), dtype=np.int64), r"shape \(3,\)"),
        (np.zeros(3), "integer array.*float64"),
        (np.zeros(3, dtype=bool), "integer array"),
        ([0, 0, 1], "integer array.*list"),
    ],
)
def test_group_bad_groups(groups: object, match: str) -> None:
    logs = [make_log(u, [0, 1], [0, 0], [[1], []]) for u in range(3)]
    with pytest.raises(DataFormatError, match=match):
        group_user_logs(logs, groups)  # type: ignore[arg-type]


def test_group_bad_inputs() -> None:
    with pytest.raises(DataFormatError, match="1-D"):
        group_members(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(DataFormatError, match=r"logs\[1\].*UserLog"):
        group_user_logs([make_log(0, [0], [0], [[1]]), "user"], np.zeros(2, dtype=np.int64))  # type: ignore[list-item]
    assert group_user_logs([], np.zeros(0, dtype=np.int64)) == []


# ------------------------------------------------------------------------------ CoverQuery


def random_covers(logs: tuple[UserLog, ...], m: int, n_words: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for log in logs:
        c = rng.integers(2, n_words, size=(log.n_events, m, log.queries.shape[1]))
        out.append(np.where(log.queries[:, None, :] != 0, c, 0).astype(np.int32))
    return out


def test_cover_logs_interleave_covers(corpus: AolCorpus) -> None:
    m = 2
    logs = corpus.users
    covers = random_covers(logs, m, len(corpus.vocab), seed=0)
    covered = cover_query_logs(logs, covers)
    real_keys = np.concatenate([log.query_key for log in logs])
    cover_keys = []
    for log, c, cl in zip(logs, covers, covered, strict=True):
        e = log.n_events
        assert isinstance(cl, UserLog) and cl.user_id == log.user_id
        assert cl.n_events == e * (1 + m)
        real = np.arange(e) * (1 + m)
        cov = np.setdiff1d(np.arange(cl.n_events), real)
        for name in ("event_id", "time", "session", "split", "query_key", "queries"):
            np.testing.assert_array_equal(getattr(cl, name)[real], getattr(log, name))
        assert np.all(cl.event_id[cov] == -1)
        np.testing.assert_array_equal(cl.clicks_per_event[real], log.clicks_per_event)
        np.testing.assert_array_equal(cl.click_docs, log.click_docs)
        assert np.all(cl.clicks_per_event[cov] == 0)
        np.testing.assert_array_equal(cl.queries[cov].reshape(e, m, -1), c)
        for name in ("time", "session", "split"):
            np.testing.assert_array_equal(getattr(cl, name)[cov], np.repeat(getattr(log, name), m))
        cover_keys.append(cl.query_key[cov])
    cover_keys = np.concatenate(cover_keys)
    assert np.unique(cover_keys).size == cover_keys.size
    assert not np.isin(cover_keys, real_keys).any()


def test_build_users_on_cover_logs(
    corpus: AolCorpus, lists: CandidateLists, original_users: list[UserData]
) -> None:
    m = 1
    covers = random_covers(corpus.users, m, len(corpus.vocab), seed=1)
    covered = cover_query_logs(corpus.users, covers)
    users = build_users(covered, corpus.pool, corpus.vocab, lists)
    for split in SPLITS:
        assert n_samples(users, split) == n_samples(original_users, split)
        assert by_event(users, split) == by_event(original_users, split)
    for new, old in zip(users, original_users, strict=True):
        assert np.isin(old.vocab_ids, new.vocab_ids).all()
        for split in SPLITS:
            a, b = new.samples(split), old.samples(split)
            np.testing.assert_array_equal(a.events, b.events * (1 + m))
            np.testing.assert_array_equal(a.candidates, b.candidates)
            np.testing.assert_array_equal(a.labels, b.labels)
            np.testing.assert_array_equal(a.features, b.features)
    assert sum(u.vocab_ids.size for u in users) > sum(u.vocab_ids.size for u in original_users)


def test_cover_logs_zero_covers_and_wider_covers() -> None:
    logs = [make_log(0, [0, 1], [0, 0], [[1], []], width=2)]
    (same,) = cover_query_logs(logs, [np.zeros((2, 0, 2), dtype=np.int32)])
    for name in (*FIELDS, "session"):
        np.testing.assert_array_equal(getattr(same, name), getattr(logs[0], name))
    (wide,) = cover_query_logs(logs, [np.full((2, 1, 3), 9, dtype=np.int64)])
    assert wide.queries.shape == (4, 3) and wide.queries.dtype == np.int32
    assert wide.queries[0].tolist() == [2, 2, 0] and wide.queries[1].tolist() == [9, 9, 9]


@pytest.mark.parametrize(
    ("covers", "match"),
    [
        ([np.zeros((2, 1, 2), dtype=np.int32)], "1 entries for 2 user logs"),
        ([np.zeros((2, 1, 2), dtype=np.int32), np.zeros((2, 1))], r"covers\[1\].*integer"),
        (
            [np.zeros((2, 1, 2), dtype=np.int32), np.zeros((3, 1, 2), dtype=np.int32)],
            r"\(2, m, Lq\)",
        ),
        ([np.zeros((2, 1, 2), dtype=np.int32), np.zeros((2, 2), dtype=np.int32)], r"\(2, m, Lq\)"),
        (
            [np.zeros((2, 1, 2), dtype=np.int32), np.zeros((2, 2, 2), dtype=np.int32)],
            "same number m",
        ),
        ([np.zeros((2, 1, 2), dtype=np.int32), np.full((2, 1, 2), -1)], r"\[0, 2\*\*31\)"),
        ([np.zeros((2, 1, 2), dtype=np.int32), [[[0]]]], r"covers\[1\].*list"),
    ],
)
def test_cover_bad_covers(covers: list[np.ndarray], match: str) -> None:
    logs = [make_log(u, [0, 1], [0, 0], [[1], []], width=2) for u in range(2)]
    with pytest.raises(DataFormatError, match=match):
        cover_query_logs(logs, covers)


def test_cover_queries_for_shapes_and_determinism(
    corpus: AolCorpus, cover_generator: CoverQueryGenerator
) -> None:
    logs = corpus.users[:4]
    covers = cover_queries_for(logs, cover_generator, 2, np.random.default_rng(5))
    assert len(covers) == len(logs)
    for log, c in zip(logs, covers, strict=True):
        assert c.shape == (log.n_events, 2, log.queries.shape[1]) and c.dtype == np.int32
        # Covers fill exactly the real query's word positions: splitting back is aligned.
        np.testing.assert_array_equal(c != 0, np.repeat((log.queries != 0)[:, None], 2, axis=1))
    again = cover_queries_for(logs, cover_generator, 2, np.random.default_rng(5))
    for a, b in zip(covers, again, strict=True):
        np.testing.assert_array_equal(a, b)
    other = cover_queries_for(logs, cover_generator, 2, np.random.default_rng(6))
    assert any(not np.array_equal(a, b) for a, b in zip(covers, other, strict=True))
    covered = cover_query_logs(logs, covers)
    assert sum(c.n_events for c in covered) == 3 * sum(log.n_events for log in logs)


def test_cover_queries_for_bad_inputs(
    corpus: AolCorpus, cover_generator: CoverQueryGenerator
) -> None:
    logs = corpus.users[:1]
    with pytest.raises(ConfigError, match="numpy.random.Generator"):
        cover_queries_for(logs, cover_generator, 1, 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="generate"):
        cover_queries_for(logs, object(), 1, np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="m = 5"):
        cover_queries_for(logs, cover_generator, 5, np.random.default_rng(0))
    assert cover_queries_for([], cover_generator, 1, np.random.default_rng(0)) == []
    zero = cover_queries_for(logs, cover_generator, 0, np.random.default_rng(0))
    assert zero[0].shape == (logs[0].n_events, 0, logs[0].queries.shape[1])
