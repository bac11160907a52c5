"""fedrank.experiments.fedps_lists and ``fedrank fedps lists``: the candidate lists as a
table anyone can check with pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fedrank.cli import main
from fedrank.errors import ConfigError
from fedrank.experiments.fedps_data import FedPSData, prepare_aol
from fedrank.experiments.fedps_lists import LIST_COLUMNS, list_diagnostics, lists_table

COLUMNS = [
    "user_id", "query_id", "doc_id", "label", "bm25", "bm25_rank", "user_prior_clicks",
    "global_prior_clicks",
]  # fmt: skip


@pytest.fixture(scope="module")
def aol_log(data_dir: Path) -> Path:
    path = data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the AOL sample is needed")
    return path


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
