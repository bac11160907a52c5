"""``fedrank foltr ...`` on real MQ2008 data: train, baselines, eps-table, reproduce (a
tiny budget), their JSON and PNG outputs, and clean failures on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrank.core.provenance import code_version
from tests.cli.clirun import argv, assert_clean_failure, ok, run
from tests.untimed import untimed

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "letor-cli"))


def test_train_writes_json_and_plot(mq2008_dir: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "run.json", tmp_path / "curve.png"
    result = ok(
        [
            "foltr",
            "train",
            "--data",
            str(mq2008_dir),
            "--fold",
            "2",
            "--clients",
            "200",
            "--interactions",
            "40000",
            "--seed",
            "3",
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert "expected MaxRR" in result.output and "epsilon 4.500" in result.output
    data = json.loads(out.read_text())
    assert len(data["batch_maxrr"]) == 50 and data["interactions"] == 40_000
    assert set(data["expected_maxrr"]) == {"train", "test"} and data["wall_seconds"] > 0
    assert data["config"]["p"] == 0.9 and data["data"]["name"].endswith("Fold2")
    assert png.read_bytes()[:8] == PNG
    # The same run with its clients on a real 2-worker Dask cluster: every client's random
    # numbers are its own, so the report is the same bit for bit (timings aside).
    again = tmp_path / "again.json"
    ok(
        [
            "foltr",
            "train",
            "--data",
            str(mq2008_dir),
            "--fold",
            "2",
            "--clients",
            "200",
            "--interactions",
            "40000",
            "--seed",
            "3",
            "--dask-workers",
            "2",
            "--json",
            str(again),
        ]
    )
    spread = json.loads(again.read_text())
    assert spread["final_params"] == data["final_params"]
    drop = ("interactions_per_second",)
    assert untimed(spread, drop=drop) == untimed(data, drop=drop)


def test_train_fpdgd_with_central_dp(mq2008_dir: Path, tmp_path: Path) -> None:
    """``--dp central``: the server's Gaussian noise (drawn in the driver, so a run with its
    clients on Dask is the same bit for bit), each client's epsilon over the training."""
    args = "foltr train --algorithm fpdgd --clients 10 --interactions 2000 --dp central"
    args += " --dp-epsilon 4 --dp-delta 1e-5 --dp-clip 0.5 --seed 3 --data"
    single, spread = tmp_path / "single.json", tmp_path / "spread.json"
    output = ok([*argv(args, mq2008_dir), "--json", str(single)]).output
    assert "central DP: epsilon 4 per client over 50 iterations at delta 1e-05" in output
    ok([*argv(args, mq2008_dir), "--dask-workers", "2", "--json", str(spread)])
    one, two = json.loads(single.read_text()), json.loads(spread.read_text())
    assert one["final_params"] == two["final_params"]
    assert one["code"] == two["code"] == code_version()  # the source that ran them
    privacy = one["privacy"]
    assert privacy["mechanism"] == "gaussian (central)" and privacy["clip"] == 0.5
    assert privacy["epsilon"] == pytest.approx(one["epsilon"]) and privacy["epsilon"] <= 4.0


def test_train_fpdgd_and_p_one(mq2008_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "fpdgd.json"
    ok(
        [
            "foltr",
            "train",
            "--data",
            str(mq2008_dir),
            "--algorithm",
            "fpdgd",
            "--clients",
            "10",
            "--interactions",
            "2000",
            "--dp",
            "local",
            "--dp-epsilon",
            "2",
            "--json",
            str(out),
        ]
    )
    assert json.loads(out.read_text())["epsilon"] == 2.0
    # FPDGD with distributed noise, in one process and with its clients on a real 2-worker
    # Dask cluster: every client's queries, rankings, clicks and noise are its own numbers,
    # so the reports are the same bit for bit (timings aside).
    args = "foltr train --algorithm fpdgd --ranker two-layer --clients 10 --interactions 2000"
    args += " --dp distributed --dp-epsilon 5 --seed 4 --data"
    single, spread = tmp_path / "single.json", tmp_path / "spread.json"
    ok([*argv(args, mq2008_dir), "--json", str(single)])
    ok([*argv(args, mq2008_dir), "--dask-workers", "2", "--json", str(spread)])
    one, two = json.loads(single.read_text()), json.loads(spread.read_text())
    assert one["final_params"] == two["final_params"]
    assert one["epsilon"] == 5.0 and one["config"]["ranker"] == "two-layer"
    drop = ("interactions_per_second",)
    assert untimed(one, drop=drop) == untimed(two, drop=drop)
    out = tmp_path / "truth.json"
    ok(
        [
            "foltr",
            "train",
            "--data",
            str(mq2008_dir),
            "--p",
            "1",
            "--clients",
            "100",
            "--interactions",
            "800",
            "--json",
            str(out),
        ]
    )
    assert json.loads(out.read_text())["epsilon"] is None


def test_eps_table_prints_and_writes_table_2(tmp_path: Path) -> None:
    out = tmp_path / "eps.json"
    result = ok(
        [
            "foltr",
            "eps-table",
            "--list-length",
            "5",
            "--ps",
            "0.25,0.5,0.75,0.9,0.95,0.99",
            "--click-models",
            "perfect,navigational,informational",
            "--json",
            str(out),
        ]
    )
    table = json.loads(out.read_text())
    assert list(table) == ["theoretical", "perfect", "navigational", "informational"]
    assert all(len(v) == 6 for v in table.values())
    np.testing.assert_allclose(table["perfect"], table["theoretical"])
    assert "informational" in result.output


def test_baselines_writes_the_documented_shape(mq2008_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "base.json"
    ok(["foltr", "baselines", "--data", str(mq2008_dir), "--fold", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    for name in ("mse", "ranking_svm", "lambdamart"):
        assert set(data[name]["expected_maxrr"]) == {"perfect", "navigational", "informational"}
        for cell in data[name]["expected_maxrr"].values():
            assert set(cell) == {"train", "test"} and 0 < cell["train"] < 1
        assert set(data[name]["ndcg10"]) == {"train", "test"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--p", "0.05"], "--p must be in (1/11, 1] (a number), got 0.05"),
        (["--fold", "9"], "fold"),
        (["--batch", "3"], "batch must be even with antithetic"),
        (["--clients", "0"], "--clients must be >= 1 (an integer), got 0"),
        (["--dp", "local"], "dp applies to FPDGD"),
        (["--difference-bound", "-1"], "--difference-bound must be >= 0"),
        (["--difference-bound", "0.5", "--no-antithetic"], "needs antithetic"),
        (["--difference-bound", "0.5", "--algorithm", "fpdgd"], "FPDGD sends model deltas"),
        (["--dask-workers", "2", "--dask-scheduler", "tcp://h:1"], "not both"),
    ],
)
def test_train_bad_values_fail_cleanly(mq2008_dir: Path, args: list[str], message: str) -> None:
    result = run(["foltr", "train", "--data", str(mq2008_dir), "--interactions", "8000", *args])
    assert_clean_failure(result, message)


def test_train_with_a_difference_bound(mq2008_dir: Path, tmp_path: Path) -> None:
    """``--difference-bound``: in the run's config, and it changes the model (honest
    differences above the bound are clipped too)."""
    args = "foltr train --clients 100 --interactions 8000 --seed 2 --data"
    plain, bounded = tmp_path / "plain.json", tmp_path / "bounded.json"
    ok([*argv(args, mq2008_dir), "--json", str(plain)])
    ok([*argv(args, mq2008_dir), "--difference-bound", "0.25", "--json", str(bounded)])
    one, two = json.loads(plain.read_text()), json.loads(bounded.read_text())
    assert one["config"]["difference_bound"] == 0.0 and two["config"]["difference_bound"] == 0.25
    assert one["final_params"] != two["final_params"]
    # what an operator reads to choose the bound: every report's |f+ - f-|
    diffs = one["report_differences"]
    assert diffs["reports"] == one["iterations"] * 100
    assert 0.0 <= diffs["median"] <= diffs["p90"] <= diffs["p99"] <= 1.0
    assert 0.0 <= diffs["share_within"]["0.5"] <= 1.0


def test_not_a_letor_directory_fails_cleanly(tmp_path: Path) -> None:
    assert_clean_failure(run(["foltr", "train", "--data", str(tmp_path)]), "S1.txt")
    assert_clean_failure(
        run(["foltr", "reproduce", "--data", str(tmp_path), "--folds", "1,1"]), "distinct"
    )
