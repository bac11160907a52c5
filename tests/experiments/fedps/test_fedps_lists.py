"""fedrank.experiments.fedps.lists and ``fedrank fedps lists``: the candidate lists as a
table anyone can check with pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fedrank.cli import main
from fedrank.errors import ConfigError
from fedrank.experiments.fedps.data import FedPSData, prepare_aol
from fedrank.experiments.fedps.lists import (
    LIST_COLUMNS,
    list_diagnostics,
    lists_table,
    refinding_queries,
)
from fedrank.retrieval.candidates import DEFAULT_DEPTH

COLUMNS = [
    "user_id", "query_id", "doc_id", "label", "bm25", "bm25_rank", "user_prior_clicks",
    "global_prior_clicks",
]  # fmt: skip


@pytest.fixture(scope="module")
def data(aol_log: Path) -> FedPSData:
    return prepare_aol(aol_log, users=10, seed=1, dim=16, word2vec_epochs=1)


@pytest.fixture(scope="module")
def table(data: FedPSData) -> pd.DataFrame:
    return lists_table(data, "test").to_pandas()


def test_columns_and_list_shape(table: pd.DataFrame) -> None:
    assert list(table.columns) == COLUMNS == list(LIST_COLUMNS)
    per_query = table.groupby("query_id")
    assert (per_query["label"].max() == 1).all() and (per_query["label"].min() == 0).all()
    assert (table["bm25"] > 0).all()  # every candidate was retrieved for its query
    for _, q in list(per_query)[:50]:
        assert q["bm25_rank"].tolist() == list(range(1, len(q) + 1))
        assert (np.diff(q["bm25"].to_numpy()) <= 1e-6).all()
    assert table.groupby("query_id")["user_id"].nunique().max() == 1


def test_prior_clicks_match_the_logs(data: FedPSData, table: pd.DataFrame) -> None:
    lists = data.lists
    np.testing.assert_array_equal(
        table["global_prior_clicks"], lists.background_clicks[table["doc_id"]]
    )
    logs = {u.user_id: u for u in data.corpus.users}
    rng = np.random.default_rng(0)
    checked = 0
    for i in rng.choice(len(table), size=300, replace=False):
        row = table.iloc[i]
        log = logs[int(row["user_id"])]
        e = int(np.flatnonzero(log.event_id == row["query_id"])[0])
        earlier = log.time[log.click_event] < log.time[e]
        expected = int(np.sum(earlier & (log.click_docs == row["doc_id"])))
        assert row["user_prior_clicks"] == expected
        checked += expected > 0
    assert checked > 5


def test_diagnostics_agree_with_the_table(data: FedPSData, table: pd.DataFrame) -> None:
    d = list_diagnostics(data, "test")
    rel = table["label"] == 1
    assert d["queries"] == table["query_id"].nunique() and d["candidates"] == len(table)
    assert d["no_match_engine"] == {"relevant": 0.0, "irrelevant": 0.0}
    assert d["popular"]["relevant"] == pytest.approx((table["global_prior_clicks"][rel] > 0).mean())
    assert d["user_clicked"]["irrelevant"] == pytest.approx(
        (table["user_prior_clicks"][~rel] > 0).mean()
    )
    assert d["bm25_rank"]["relevant"] == pytest.approx(table["bm25_rank"][rel].mean())
    r = d
    assert r["clicked_queries"] == d["queries"] + r["click_not_retrieved"] + r["no_negative"]
    with pytest.raises(ConfigError, match="split"):
        lists_table(data, "background")


def test_cli_writes_parquet(aol_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "lists.parquet"
    args = ["fedps", "lists", "--log", str(aol_log), "--users", "10", "--seed", "1",
            "--split", "test", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert list(frame.columns) == COLUMNS and len(frame) > 100
    assert "no_match_engine" in result.output and str(out) in result.output
    bad = CliRunner().invoke(main, [*args[:-4], "--split", "dev", "--out", str(out)])
    assert bad.exit_code != 0


# ------------------------------------------------------------------ more checks on the AOL sample


def test_labels_users_and_splits_come_from_the_log(data: FedPSData, table: pd.DataFrame) -> None:
    """label = 1 exactly for the documents the query event clicked; every query is a test
    event of the user in its row."""
    from fedrank.data.aol import TEST

    lg = data.corpus.split.log
    events = table["query_id"].to_numpy()
    docs = table["doc_id"].to_numpy()
    clicks = {
        (int(e), int(d))
        for e in np.unique(events)
        for d in lg.click_docs[lg.click_ptr[e] : lg.click_ptr[e + 1]]
    }
    expected = np.array([(int(e), int(d)) in clicks for e, d in zip(events, docs, strict=True)])
    np.testing.assert_array_equal(table["label"].to_numpy() == 1, expected)
    assert (data.corpus.split.split[events] == TEST).all()
    np.testing.assert_array_equal(lg.user_ids[lg.event_user[events]], table["user_id"])
    assert table.duplicated(["query_id", "doc_id"]).sum() == 0
    assert set(table["label"].unique()) == {0, 1}


def test_every_test_list_is_the_engine_top_list(table: pd.DataFrame) -> None:
    """Within every test query: ranks 1..n in row order, BM25 non-increasing, equal BM25 in
    document-id order."""
    for _, q in table.groupby("query_id", sort=False):
        assert q["bm25_rank"].tolist() == list(range(1, len(q) + 1))
        bm25, doc = q["bm25"].to_numpy(), q["doc_id"].to_numpy()
        assert np.all(np.diff(bm25) <= 0)
        tie = np.diff(bm25) == 0
        assert np.all(np.diff(doc)[tie] > 0)
        assert len(q) <= DEFAULT_DEPTH


def test_bm25_column_is_the_engine_score(data: FedPSData, table: pd.DataFrame) -> None:
    """Rebuild the search engine from the corpus (indexed texts, past statistics) and score
    the raw query strings against the listed documents."""
    from fedrank.data.aol import tokenize
    from fedrank.retrieval.search_engine import SearchEngine

    corpus = data.corpus
    engine = SearchEngine(corpus.texts, corpus.indexed, corpus.past_docs)
    lg = corpus.split.log
    rows = np.random.default_rng(3).choice(len(table), size=min(400, len(table)), replace=False)
    sub = table.iloc[rows]
    q = engine.encode_queries([tokenize(str(lg.queries[lg.query[e]])) for e in sub["query_id"]])
    got = engine.score(q, sub["doc_id"].to_numpy()[:, None])[:, 0]
    np.testing.assert_allclose(sub["bm25"].to_numpy(), got, rtol=1e-5)


def test_train_lists_are_clicks_plus_few_negatives(data: FedPSData) -> None:
    train = lists_table(data, "train").to_pandas()
    assert list(train.columns) == COLUMNS
    per_query = train.groupby("query_id")
    assert (per_query["label"].max() == 1).all()
    negatives = per_query["label"].apply(lambda x: int((x == 0).sum()))
    assert negatives.between(1, data.lists.train_negatives).all()
    assert negatives.max() == data.lists.train_negatives
    for _, q in list(per_query)[:200]:
        ranks = q["bm25_rank"].to_numpy()
        assert ranks.min() >= 1 and ranks.max() <= data.lists.depth
        assert np.all(np.diff(ranks) > 0)  # a sub-list of the engine's list: ranks can skip


def test_write_lists_round_trip_and_bad_splits(data: FedPSData, tmp_path: Path) -> None:
    from fedrank.experiments.fedps.lists import write_lists

    path = tmp_path / "nested" / "dir" / "valid.parquet"
    written = write_lists(data, "valid", path)
    assert path.is_file()
    frame = pd.read_parquet(path)
    pd.testing.assert_frame_equal(frame, written.to_pandas())
    pd.testing.assert_frame_equal(frame, lists_table(data, "valid").to_pandas())
    assert list(frame.columns) == COLUMNS
    assert frame["query_id"].nunique() == list_diagnostics(data, "valid")["queries"]
    bad = tmp_path / "bad.parquet"
    for split in ("background", "dev", "TEST", ""):
        with pytest.raises(ConfigError, match="split"):
            write_lists(data, split, bad)
        with pytest.raises(ConfigError, match="split"):
            list_diagnostics(data, split)
    assert not bad.exists()


def test_diagnostics_every_key(data: FedPSData, table: pd.DataFrame) -> None:
    d = list_diagnostics(data, "test")
    rel = (table["label"] == 1).to_numpy()
    report = data.lists.report["test"]
    assert d["split"] == "test" and d["relevant"] == int(rel.sum())
    assert d["clicked_queries"] == report["clicked"]
    assert d["listed_share"] == pytest.approx(report["listed"] / report["clicked"])
    assert 0 < d["listed_share"] <= 1
    for key, column in (("popular", "global_prior_clicks"), ("user_clicked", "user_prior_clicks")):
        for side, sel in (("relevant", rel), ("irrelevant", ~rel)):
            assert d[key][side] == pytest.approx((table[column][sel] > 0).mean()), (key, side)
    for side, sel in (("relevant", rel), ("irrelevant", ~rel)):
        assert d["bm25_rank"][side] == pytest.approx(table["bm25_rank"][sel].mean())
        assert d["log_popularity"][side] == pytest.approx(
            np.log1p(table["global_prior_clicks"][sel]).mean(), rel=1e-5
        )
        assert 0.0 <= d["no_match_model"][side] <= 1.0
    # relevant candidates sit higher in the engine's lists than irrelevant ones
    assert d["bm25_rank"]["relevant"] < d["bm25_rank"]["irrelevant"]


def test_cli_with_the_documented_arguments(
    aol_log: Path, tmp_path: Path, table: pd.DataFrame
) -> None:
    """The CLI writes the same test lists as the API (the lists do not depend on the
    word-vector size)."""
    out = tmp_path / "l.parquet"
    args = ["fedps", "lists", "--log", str(aol_log), "--users", "10", "--seed", "1",
            "--split", "test", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert f"{table['query_id'].nunique():,} queries" in result.output
    assert f"{len(table):,} rows" in result.output
    pd.testing.assert_frame_equal(pd.read_parquet(out), table)
    bad = CliRunner().invoke(main, [*args[:-4], "--split", "background", "--out", str(out)])
    assert bad.exit_code == 2 and "Invalid value" in bad.output


# ------------------------------------------------------------------ the hand-written log


@pytest.fixture(scope="module")
def kit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.aolkit import write_log

    return write_log(tmp_path_factory.mktemp("aolkit") / "log.tsv")


@pytest.fixture(scope="module")
def kit(kit_log: Path) -> FedPSData:
    return prepare_aol(kit_log, users=None, seed=1, dim=8, word2vec_epochs=1)


def kit_bm25(texts: list[tuple[str, ...]], past: np.ndarray, query: list[str], doc: int) -> float:
    """BM25 by hand: N, df and avgdl over the past documents, k1 = 1.2, b = 0.75."""
    stats = [texts[d] for d in np.flatnonzero(past)]
    n, avgdl = len(stats), np.mean([len(t) for t in stats])
    score = 0.0
    for w in query:
        tf = texts[doc].count(w)
        if tf:
            df = sum(w in t for t in stats)
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(texts[doc]) / avgdl))
    return score


def test_hand_log_test_lists_exactly(kit: FedPSData) -> None:
    """User 1's test query "quokka zoo" (event 10) lists the new quokka page (clicked, never
    clicked before by anyone) and the weather page (its background text has "zoo"; user 1
    clicked it in training on 2006-04-14, user 2 twice in the background). User 2's test
    query "violin" matches nothing: no list."""
    from tests.aolkit import FUTURE_URL

    lg = kit.corpus.split.log
    urls = lg.urls.tolist()
    quokka, weather = urls.index(FUTURE_URL), urls.index("http://www.weather.com/boston")
    table = lists_table(kit, "test").to_pandas()
    assert table[["user_id", "query_id", "doc_id", "label", "bm25_rank"]].values.tolist() == [
        [1, 10, quokka, 1, 1],
        [1, 10, weather, 0, 2],
    ]
    assert table["user_prior_clicks"].tolist() == [0, 1]
    assert table["global_prior_clicks"].tolist() == [0, 2]
    texts = list(kit.corpus.texts)
    assert set(texts[quokka]) == {"quokka", "zoo"} and "zoo" in texts[weather]
    want = [kit_bm25(texts, kit.corpus.past_docs, ["quokka", "zoo"], d) for d in (quokka, weather)]
    np.testing.assert_allclose(table["bm25"], want, rtol=1e-6)
    assert want[0] == pytest.approx(4.383566, abs=1e-6)  # 6 docs, 5 past, avgdl 2.8

    d = list_diagnostics(kit, "test")
    assert (d["queries"], d["candidates"], d["relevant"]) == (1, 2, 1)
    assert (d["clicked_queries"], d["click_not_retrieved"], d["no_negative"]) == (2, 1, 0)
    assert d["listed_share"] == 0.5
    assert d["no_match_engine"] == {"relevant": 0.0, "irrelevant": 0.0}
    assert d["popular"] == {"relevant": 0.0, "irrelevant": 1.0}
    assert d["user_clicked"] == {"relevant": 0.0, "irrelevant": 1.0}
    assert d["bm25_rank"] == {"relevant": 1.0, "irrelevant": 2.0}
    assert d["log_popularity"]["irrelevant"] == pytest.approx(np.log1p(2))


def test_hand_log_prior_clicks_are_strictly_earlier_any_query(kit: FedPSData) -> None:
    """Brute force over every row of every split: the user's clicks on the document before
    the event's time (any query), and the document's background clicks (all users)."""
    from fedrank.data.aol import BACKGROUND

    lg, split = kit.corpus.split.log, kit.corpus.split.split
    logs = {u.user_id: u for u in kit.corpus.users}
    click_event = np.repeat(np.arange(lg.time.size), np.diff(lg.click_ptr))
    background = split[click_event] == BACKGROUND
    rows = 0
    for name in ("train", "valid", "test"):
        table = lists_table(kit, name).to_pandas()
        for r in table.itertuples():
            log = logs[r.user_id]
            e = int(np.flatnonzero(log.event_id == r.query_id)[0])
            t_click = log.time[log.click_event]
            assert r.user_prior_clicks == int(
                np.sum((t_click < log.time[e]) & (log.click_docs == r.doc_id))
            )
            assert r.global_prior_clicks == int(np.sum(background & (lg.click_docs == r.doc_id)))
            rows += 1
    assert rows == 29  # 23 train + 4 valid + 2 test rows
    # user 2's valid query (event 21, 2006-04-20): the weather page clicked on 03-07, 03-08
    # and 04-11; the Boston library on 03-05, 04-12 and 04-14
    valid = lists_table(kit, "valid").to_pandas().set_index(["query_id", "doc_id"])
    urls = lg.urls.tolist()
    weather, library = (
        urls.index("http://www.weather.com/boston"),
        urls.index("http://www.bostonlibrary.org/"),
    )
    assert valid.loc[(21, weather), "user_prior_clicks"] == 3
    assert valid.loc[(21, library), "user_prior_clicks"] == 3
    assert valid.loc[(21, weather), "label"] == 1 and valid.loc[(21, library), "label"] == 0


def test_hand_log_refinding_queries(kit: FedPSData) -> None:
    """Event 10's clicked quokka page is new to user 1; event 21's clicked weather page was
    clicked by user 2 three times before."""
    events, refinding = refinding_queries(kit, "test")
    assert events.tolist() == [10] and refinding.tolist() == [False]
    events, refinding = refinding_queries(kit, "valid")
    assert dict(zip(events.tolist(), refinding.tolist(), strict=True))[21] is True
    with pytest.raises(ConfigError, match="split must be one of"):
        refinding_queries(kit, "background")


def test_refinding_queries_agree_with_the_table(data: FedPSData, table: pd.DataFrame) -> None:
    events, refinding = refinding_queries(data, "test")
    clicked_before = (table["label"] == 1) & (table["user_prior_clicks"] > 0)
    want = clicked_before.groupby(table["query_id"]).any()
    assert sorted(events.tolist()) == sorted(want.index.tolist())
    assert dict(zip(events.tolist(), refinding.tolist(), strict=True)) == want.to_dict()
    assert 0 < refinding.mean() < 1


def test_hand_log_cli(kit_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "kit.parquet"
    result = CliRunner().invoke(
        main, ["fedps", "lists", "--log", str(kit_log), "--seed", "1", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        "test: 1 queries (50.0% of the clicked ones: 1 clicks not retrieved, 0 without a "
        "non-clicked document), 2 rows"
    )
    assert lines[-1] == f"wrote {out}"
    assert any(
        line.split() == ["popular", "relevant", "0.000", "irrelevant", "1.000"] for line in lines
    )
    frame = pd.read_parquet(out)
    assert frame["query_id"].tolist() == [10, 10] and frame["label"].tolist() == [1, 0]
