"""fedrank.data.aol: the AOL log as per-user logs (FedPS Sec. 4.1) on the real file."""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from fedrank.data.aol import (
    BACKGROUND,
    DEFAULT_BACKGROUND_END,
    OOV_ID,
    PAD_ID,
    SESSION_GAP_SECONDS,
    TEST,
    TRAIN,
    VALID,
    DocumentPool,
    QueryLog,
    TimeSplit,
    Vocabulary,
    WordSegmenter,
    assign_sessions,
    build_corpus,
    document_words,
    load_aol,
    segmenter_counts,
    split_by_time,
    tokenize,
    url_site,
    url_words,
    user_logs,
)
from fedrank.errors import ConfigError, DataFormatError

HEADER = "AnonID\tQuery\tQueryTime\tClickURL\n"


@pytest.fixture(scope="module")
def full_log(aol_log: Path) -> QueryLog:
    return load_aol(aol_log)


@pytest.fixture(scope="module")
def log30(full_log: QueryLog) -> QueryLog:
    return full_log.select_users(np.arange(30))


@pytest.fixture(scope="module")
def split30(log30: QueryLog) -> TimeSplit:
    return split_by_time(log30)


def _write(tmp_path: Path, body: str, name: str = "log.tsv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + body, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- loading


def test_full_file_counts_match_the_readme(full_log: QueryLog) -> None:
    assert full_log.n_rows == 407_929
    assert full_log.n_clicks == 407_929  # no repeated rows, no row without a click
    assert full_log.n_users == 1_000
    assert full_log.n_events == 318_023
    assert full_log.queries.size == 160_852
    assert full_log.urls.size == 106_870
    pairs = full_log.event_user.astype(np.int64) * full_log.queries.size + full_log.query
    assert np.unique(pairs).size == 177_857
    assert full_log.time.min() == np.datetime64("2006-03-01T00:01:44")
    assert full_log.time.max() == np.datetime64("2006-05-31T23:59:39")
    assert np.all(full_log.clicks_per_event >= 1)


def test_events_are_sorted_by_user_then_time(full_log: QueryLog) -> None:
    u = full_log.event_user.astype(np.int64)
    t = full_log.time.astype(np.int64)
    assert np.all(np.diff(u) >= 0)
    assert np.all((np.diff(t) >= 0) | (np.diff(u) > 0))
    assert np.all(np.diff(full_log.user_ids) > 0)
    assert np.array_equal(np.bincount(u, minlength=1000), np.diff(full_log.user_ptr))


def test_events_group_the_rows_of_the_file(aol_log: Path, log30: QueryLog) -> None:
    keep = {str(x) for x in log30.user_ids}
    expected: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    with gzip.open(aol_log, "rt", encoding="utf-8") as f:
        next(f)
        for line in f:
            anon, query, time, url = line.rstrip("\n").split("\t")
            if anon in keep:
                expected[(anon, query, time)].add(url)
    got = {}
    for e in range(log30.n_events):
        key = (
            str(log30.user_ids[log30.event_user[e]]),
            str(log30.queries[log30.query[e]]),
            str(log30.time[e]).replace("T", " "),
        )
        docs = log30.click_docs[log30.click_ptr[e] : log30.click_ptr[e + 1]]
        assert np.all(np.diff(docs) > 0)
        got[key] = {str(log30.urls[d]) for d in docs}
    assert got == dict(expected)


def test_first_users_are_the_smallest_anon_ids_and_loading_is_deterministic(
    aol_log: Path, full_log: QueryLog, log30: QueryLog
) -> None:
    direct = load_aol(aol_log, users=30)
    assert np.array_equal(direct.user_ids, full_log.user_ids[:30])
    for name in ("time", "query", "click_ptr", "click_docs", "session", "user_rows"):
        assert np.array_equal(getattr(direct, name), getattr(log30, name)), name
    assert np.array_equal(direct.urls, log30.urls)
    assert np.array_equal(direct.queries, log30.queries)
    a = load_aol(aol_log, users=5, rng=np.random.default_rng(7))
    b = load_aol(aol_log, users=5, rng=np.random.default_rng(7))
    assert np.array_equal(a.user_ids, b.user_ids) and a.n_users == 5
    assert np.array_equal(a.click_docs, b.click_docs)
    assert set(a.user_ids) <= set(full_log.user_ids)


def test_small_file_events_clicks_and_empty_click_url(tmp_path: Path) -> None:
    body = (
        "7\tb q\t2006-03-02 10:00:00\thttp://b.com/\n"
        "3\ta q\t2006-03-01 10:00:00\thttp://z.com/\n"
        "3\ta q\t2006-03-01 10:00:00\thttp://a.com/\n"
        "3\ta q\t2006-03-01 10:00:00\thttp://a.com/\n"  # repeated row: one click
        "3\tno click\t2006-03-01 10:05:00\t\n"
        "\n"  # blank lines are skipped
        "3\ta q\t2006-03-01 09:00:00\thttp://a.com/\n"
    )
    lg = load_aol(_write(tmp_path, body))
    assert lg.n_users == 2 and list(lg.user_ids) == [3, 7]
    assert lg.n_events == 4
    assert list(lg.urls) == ["http://a.com/", "http://b.com/", "http://z.com/"]
    assert [str(t) for t in lg.time] == [
        "2006-03-01T09:00:00",
        "2006-03-01T10:00:00",
        "2006-03-01T10:05:00",
        "2006-03-02T10:00:00",
    ]
    assert list(lg.clicks_per_event) == [1, 2, 0, 1]
    assert list(lg.click_docs) == [0, 0, 2, 1]
    assert lg.queries[lg.query[2]] == "no click"
    assert list(lg.user_rows) == [5, 1]


def test_crlf_and_uncompressed_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "crlf.tsv"
    path.write_bytes(
        (HEADER + "1\tq\t2006-03-01 00:00:01\thttp://x.org/\n").replace("\n", "\r\n").encode()
    )
    lg = load_aol(path)
    assert lg.urls[0] == "http://x.org/" and lg.n_events == 1


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        ("1\tq\t2006-03-01 00:00:01\n", 2, "expected 4 tab-separated fields"),
        ("1\tq\t2006-03-01 00:00:01\thttp://a/\n1\tq\tx\ty\tz\n", 3, "found 5"),
        ("x1\tq\t2006-03-01 00:00:01\thttp://a/\n", 2, "AnonID 'x1' is not a non-negative"),
        ("-4\tq\t2006-03-01 00:00:01\thttp://a/\n", 2, "AnonID '-4' is not a non-negative"),
        ("1\t\t2006-03-01 00:00:01\thttp://a/\n", 2, "Query is empty"),
        ("1\tq\t2006-03-01 00:00:01\thttp://a/\n\n1\tq\t2006-03-01\thttp://a/\n", 4, "QueryTime"),
        ("1\tq\t2006-13-01 00:00:01\thttp://a/\n", 2, "QueryTime '2006-13-01 00:00:01'"),
    ],
)
def test_malformed_lines_name_file_and_line(
    tmp_path: Path, body: str, line: int, what: str
) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(DataFormatError, match=f"log.tsv:{line}: .*{what}"):
        load_aol(path)


def test_malformed_header_and_encoding(tmp_path: Path) -> None:
    path = tmp_path / "h.tsv"
    path.write_text("user\tquery\ttime\turl\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"h.tsv:1: expected the header"):
        load_aol(path)
    path.write_bytes(HEADER.encode() + b"1\tq\t2006-03-01 00:00:01\thttp://a/\n1\t\xff\t")
    with pytest.raises(DataFormatError, match=r"h.tsv:3: not valid UTF-8"):
        load_aol(path)
    path.write_text(HEADER, encoding="utf-8")
    with pytest.raises(DataFormatError, match="no rows after the header"):
        load_aol(path)
    with pytest.raises(ConfigError, match="users must be a positive"):
        load_aol(path, users=0)


def test_asking_for_more_users_than_the_log_has_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.tsv"
    rows = "1\tq\t2006-03-01 00:00:01\thttp://a/\n2\tr\t2006-03-01 00:00:02\thttp://b/\n"
    path.write_text(HEADER + rows, encoding="utf-8")
    assert load_aol(path, users=2).n_users == 2
    with pytest.raises(ConfigError, match="has 2 users, fewer than the 3 asked for"):
        load_aol(path, users=3)


# ---------------------------------------------------------------------------- sessions


def test_sessions_split_exactly_after_30_minutes() -> None:
    t0 = np.datetime64("2006-03-01T00:00:00", "s")
    gaps = np.array([0, 1800, 1801, 1, 0, 3600], dtype=np.int64)
    time = t0 + np.cumsum(gaps).astype("timedelta64[s]")
    user = np.array([0, 0, 0, 0, 1, 1], dtype=np.int32)
    assert list(assign_sessions(user, time)) == [0, 0, 1, 1, 2, 3]
    with pytest.raises(DataFormatError, match="sorted"):
        assign_sessions(user[::-1], time[::-1])


def test_sessions_of_the_real_log(log30: QueryLog) -> None:
    t = log30.time.astype(np.int64)
    same_user = np.diff(log30.event_user) == 0
    new = np.diff(log30.session) == 1
    assert np.all((np.diff(log30.session) == 0) | new)
    assert np.array_equal(new, ~same_user | (np.diff(t) > SESSION_GAP_SECONDS))
    assert log30.session[0] == 0


# ---------------------------------------------------------------------------- time split


def test_split_proportions_and_time_order(full_log: QueryLog) -> None:
    split = split_by_time(full_log)
    lg = split.log
    counts = split.counts()
    assert (
        split.report.n_kept == lg.n_users and split.report.n_kept + split.report.n_dropped == 1000
    )
    assert np.all(counts >= 1)
    n = counts[:, 1:].sum(axis=1)
    assert np.all(np.abs(counts[:, 1] - 6 * n / 8) <= 1)
    assert np.all(np.abs(counts[:, 2] - n / 8) <= 1)
    assert np.all(np.abs(counts[:, 3] - n / 8) <= 1)
    assert np.all(lg.time[split.split == BACKGROUND] < DEFAULT_BACKGROUND_END)
    assert np.all(lg.time[split.split != BACKGROUND] >= DEFAULT_BACKGROUND_END)
    t = lg.time.astype(np.int64)
    user = lg.event_user
    for a, b in ((BACKGROUND, TRAIN), (TRAIN, VALID), (VALID, TEST)):
        last_a = np.full(lg.n_users, np.iinfo(np.int64).min)
        np.maximum.at(last_a, user[split.split == a], t[split.split == a])
        first_b = np.full(lg.n_users, np.iinfo(np.int64).max)
        np.minimum.at(first_b, user[split.split == b], t[split.split == b])
        assert np.all(last_a < first_b)


def test_filtered_users_are_reported(full_log: QueryLog) -> None:
    split = split_by_time(full_log, min_valid=10)
    report = split.report
    assert report.n_dropped > 0 and len(report.reasons) == report.n_dropped
    assert f"kept {report.n_kept} of 1000 users" in str(report)
    assert "valid" in str(report)
    assert np.all(split.counts()[:, VALID] >= 10)
    assert not set(report.dropped) & set(split.log.user_ids)
    assert np.array_equal(np.sort(np.concatenate([report.kept, report.dropped])), full_log.user_ids)
    with pytest.raises(ConfigError, match="ratios"):
        split_by_time(full_log, ratios=(6, 0, 1))


def test_tied_times_stay_on_one_side_of_a_boundary() -> None:
    t0 = DEFAULT_BACKGROUND_END
    offsets = np.array([-10, 0, 10, 20, 30, 40, 50, 50, 60], dtype=np.int64)
    time = t0 + offsets.astype("timedelta64[s]")
    n = time.size
    lg = QueryLog(
        source="synthetic",
        user_ids=np.array([1], dtype=np.int64),
        user_rows=np.array([n], dtype=np.int64),
        user_ptr=np.array([0, n], dtype=np.int64),
        event_user=np.zeros(n, dtype=np.int32),
        time=time,
        query=np.arange(n, dtype=np.int32),
        queries=np.array([f"q{i}" for i in range(n)]),
        click_ptr=np.arange(n + 1, dtype=np.int64),
        click_docs=np.zeros(n, dtype=np.int32),
        urls=np.array(["http://a.com/"]),
        session=np.zeros(n, dtype=np.int64),
    )
    split = split_by_time(lg, min_valid=0)
    # 8 later events: 6 train, 1 valid, 1 test; but the valid one (t=50) is tied with the
    # last train event, so it is train too.
    assert list(split.split) == [BACKGROUND, *[TRAIN] * 7, TEST]
    assert split_by_time(lg).report.reasons == ("0 valid events (< 1)",)


# ---------------------------------------------------------------------------- text


def test_tokenize() -> None:
    assert tokenize("Marblehead, Massachusetts LIBRARY") == [
        "marblehead",
        "massachusetts",
        "library",
    ]
    assert tokenize("the woman's book_of-revenge 2006!") == [
        "the",
        "woman",
        "s",
        "book",
        "of",
        "revenge",
        "2006",
    ]
    assert tokenize("   ...  ") == []


@pytest.mark.parametrize(
    ("url", "words", "site"),
    [
        ("http://www.peabodylibrary.org/", ["peabodylibrary"], "peabodylibrary.org"),
        ("http://www.books4you.addr.com/", ["books4you", "addr"], "addr.com"),
        ("http://en.wikipedia.org/", ["en", "wikipedia"], "wikipedia.org"),
        ("http://www.paladin-press.com/", ["paladin", "press"], "paladin-press.com"),
        ("http://www.bbc.co.uk/news/World.html", ["bbc", "news", "world"], "bbc.co.uk"),
        ("http://www.sausd.k12.ca.us/", ["sausd"], "sausd.k12.ca.us"),
        ("http://www.ekran.no/", ["ekran"], "ekran.no"),
        ("https://user@www2.shop.com.au:8080/a_b?x=1", ["shop", "a", "b", "x", "1"], "shop.com.au"),
        ("http://www.cde.ca.gov/", ["cde"], "cde.ca.gov"),
    ],
)
def test_url_words_drop_scheme_www_and_public_suffix(url: str, words: list[str], site: str) -> None:
    assert url_words(url) == words
    assert url_site(url) == site


def test_segmenter_splits_compound_hosts() -> None:
    seg = WordSegmenter({"peabody": 10, "library": 50, "myspace": 500, "my": 40, "space": 30})
    assert document_words("http://www.peabodylibrary.org/", seg) == ["peabody", "library"]
    assert document_words("http://www.peabodylibrary.org/", None) == ["peabodylibrary"]
    assert seg.segment("myspace") == ["myspace"]  # a frequent whole word is not split
    assert seg.segment("library") == ["library"]
    assert seg.segment("zzkqxw") == ["zzkqxw"]  # unknown text stays one piece
    assert seg.segment("peabodyxyz") == ["peabody", "xyz"]
    assert seg.segment("ekran") == ["ekran"]  # shorter than min_length
    assert seg(["mylibrary", "xyz"]) == ["my", "library", "xyz"]
    with pytest.raises(ConfigError, match="empty"):
        WordSegmenter({})
    with pytest.raises(ConfigError, match="positive"):
        WordSegmenter({"a": 0})


def test_segmenter_dictionary_keeps_compound_hosts_out() -> None:
    urls = [
        "http://www.peabodylibrary.org/",
        "http://peabodylibrary.org/",  # same site
        "http://library.harvard.edu/",
        "http://library.yale.edu/",
    ]
    counts = segmenter_counts(urls, [["peabody", "museum"], ["peabody"], ["a"]])
    assert "peabodylibrary" not in counts
    assert counts["library"] == 2 and counts["peabody"] == 2 and counts["museum"] == 1
    assert "a" not in counts  # shorter than min_word_length
    assert document_words(urls[0], WordSegmenter(counts)) == ["peabody", "library"]


def test_default_segmenter_on_the_real_log(split30: TimeSplit) -> None:
    corpus = build_corpus(split30)
    assert corpus.segmenter is not None
    words = document_words("http://www.spyequipmentguide.com/", corpus.segmenter)
    assert words == ["spy", "equipment", "guide"]
    assert document_words("http://www.revengelady.com/", corpus.segmenter) == ["revenge", "lady"]


# ---------------------------------------------------------------------------- vocabulary, pool


def test_vocabulary() -> None:
    vocab = Vocabulary.build([["b", "a", "b"], ["c", "a", "b"], ["d"]], min_count=2)
    assert vocab.words == ("<pad>", "<oov>", "b", "a")
    assert list(vocab.counts) == [0, 0, 3, 2]
    assert vocab.id("a") == 3 and vocab.id("zzz") == OOV_ID and "b" in vocab
    assert list(vocab.encode(["a", "x", "b"])) == [3, OOV_ID, 2]
    ids, lengths = vocab.encode_batch([["a", "b", "a"], [], ["x"]], max_len=2)
    assert ids.dtype == np.int32 and ids.tolist() == [[3, 2], [PAD_ID, PAD_ID], [OOV_ID, PAD_ID]]
    assert lengths.tolist() == [2, 0, 1]
    with pytest.raises(ConfigError, match="min_count"):
        Vocabulary.build([], min_count=0)


def test_corpus_pool_and_user_logs(split30: TimeSplit) -> None:
    corpus = build_corpus(split30, doc_max_len=12, query_max_len=10)
    pool, vocab = corpus.pool, corpus.vocab
    lg = split30.log
    assert isinstance(pool, DocumentPool) and np.array_equal(pool.urls, lg.urls)
    assert pool.tokens.shape == (lg.urls.size, 12) and pool.tokens.dtype == np.int32
    assert np.array_equal(pool.lengths, (pool.tokens != PAD_ID).sum(axis=1))
    # Texts are encoded with the past vocabulary; unknown words are dropped (never one
    # shared id that would make two unknown words match).
    assert not np.any(pool.tokens == OOV_ID)
    for doc in (0, 17, lg.urls.size - 1):
        known = [w for w in corpus.texts[doc] if w in vocab][:12]
        assert [vocab.words[i] for i in pool.tokens[doc, : pool.lengths[doc]]] == known
    assert np.mean(pool.lengths[corpus.past_docs] >= 1) > 0.9
    d = int(np.flatnonzero(lg.urls == "http://www.revengelady.com/")[0])
    # URL words first, then words of background queries that led to it
    assert [vocab.words[i] for i in pool.tokens[d, :2]] == ["revenge", "lady"]
    assert corpus.texts[d][:2] == ("revenge", "lady") and len(corpus.texts[d]) > 2
    assert len(corpus.users) == lg.n_users
    # Test-period query words are not in the vocabulary unless seen elsewhere.
    seen = {w for q in lg.query[split30.split <= TRAIN] for w in tokenize(lg.queries[q])}
    seen |= {w for u in lg.urls for w in document_words(u, corpus.segmenter)}
    assert set(vocab.words[2:]) <= seen
    u = corpus.users[3]
    lo, hi = lg.user_ptr[3], lg.user_ptr[4]
    assert u.user_id == lg.user_ids[3] and u.n_events == hi - lo
    assert u.queries.shape == (hi - lo, 10)
    q = lg.queries[lg.query[lo]]
    expect = [vocab.id(w) for w in tokenize(q) if w in vocab][:10]
    assert u.queries[0, : len(expect)].tolist() == expect
    assert np.array_equal(u.click_docs, lg.click_docs[lg.click_ptr[lo] : lg.click_ptr[hi]])
    assert np.array_equal(u.split, split30.split[lo:hi])
    again = build_corpus(split30, doc_max_len=12, query_max_len=10)
    assert again.vocab.words == vocab.words and np.array_equal(again.pool.tokens, pool.tokens)
    logs = user_logs(split30, vocab, max_query_len=10)
    assert all(
        np.array_equal(a.queries, b.queries) for a, b in zip(logs, corpus.users, strict=True)
    )
