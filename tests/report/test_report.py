"""``fedrank report RUN.json``: every kind of run JSON, written by a small real run in the
test, gives a self-contained HTML page holding the figures' numbers; bad input gives a
one-line error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrank.report import KINDS, detect_kind
from fedrank.report.page import fmt, pvalue
from tests.cli.clirun import assert_clean_failure, ok, run
from tests.report.reportkit import report_page as _report


def test_frecency_simulate(tmp_path: Path) -> None:
    path = tmp_path / "frecency.json"
    ok(["frecency", "simulate", "--users", "300", "--iterations", "5", "--json", str(path)])
    data = json.loads(path.read_text())
    html = _report(path, tmp_path, "frecency-simulate")
    for branch, ev in data["eval"].items():
        assert fmt(ev["chars_typed_mean"]) in html, branch
        assert fmt(data["paper_eval"][branch]["chars_typed_mean"]) in html  # the paper's Fig. 5
    for t in data["all_tests"]:
        assert pvalue(t["pvalue"]) in html
        low, high = t["diff_ci95"]
        assert f"[{low:+.4f}, {high:+.4f}]" in html
    for value in data["branch_loss_per_iteration"]["treatment"]:
        assert fmt(value) in html
    assert html.count("<svg") >= 3  # loss curves, branch means, differences with CIs


def test_foltr_train(mq2008_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "foltr.json"
    ok(["foltr", "train", "--data", str(mq2008_dir), "--clients", "50", "--interactions",
        "4000", "--json", str(path)])  # fmt: skip
    data = json.loads(path.read_text())
    html = _report(path, tmp_path, "foltr-train")
    assert fmt(data["expected_maxrr"]["test"]) in html and fmt(data["ndcg10"]["train"]) in html
    assert all(fmt(v) in html for v in data["batch_maxrr"])  # 20 iterations: every one


def test_fedps_run_over_two_seeds(aol_log: Path, tmp_path: Path) -> None:
    path = tmp_path / "fedps.json"
    ok(["fedps", "run", "--mode", "central", "--log", str(aol_log), "--users", "8", "--seeds",
        "1,2", "--rounds", "1", "--warmup-rounds", "1", "--json", str(path)])  # fmt: skip
    data = json.loads(path.read_text())
    html = _report(path, tmp_path, "fedps-run")
    for metric in ("MAP", "MRR", "P@1"):
        assert fmt(data[f"{metric}_mean"]) in html
        assert all(f"{v:.4f}" in html for v in data[f"{metric}_per_seed"])
    assert "0.7115" in html  # the paper's Table 3 MAP of the central model
    assert "95% CI" in html


def test_foltr_reproduce(mq2008_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "repro"
    ok(["foltr", "reproduce", "--data", str(mq2008_dir), "--out", str(out), "--interactions",
        "8000", "--exploration-interactions", "64000", "--folds", "1", "--no-fpdgd"])  # fmt: skip
    data = json.loads((out / "results.json").read_text())
    html = _report(out / "results.json", tmp_path, "foltr-reproduce")
    for row, models in data["per_fold"].items():
        for model, splits in models.items():
            assert fmt(float(sum(splits["test"]) / len(splits["test"]))) in html, (row, model)
    assert html.count("<svg") >= 1 + sum(len(p) for p in data["exploration"].values())


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "none.json"
    assert_clean_failure(run(["report", str(path)]), f"{path}: no such file")


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("not json at all")
    result = run(["report", str(path)])
    assert_clean_failure(result, f"{path}: not JSON")
    assert len(result.output.strip().splitlines()) == 1


def test_unknown_kind(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": [1, 2, 3]}))
    result = run(["report", str(path)])
    assert_clean_failure(result, f"{path}: not the JSON of a fedrank run")
    assert len(result.output.strip().splitlines()) == 1
    path.write_text("[1, 2]")
    assert_clean_failure(run(["report", str(path)]), f"{path}: holds a JSON list")


def test_every_kind_is_told_apart() -> None:
    """Each kind's test accepts only its own minimal shape (no two kinds overlap)."""
    shapes = {
        "demo": {"server_status": {}, "loss_per_iteration": {}, "eval": {}, "config": {}},
        "frecency-simulate": {"branch_loss_per_iteration": {}, "eval": {}, "paper_eval": {}},
        "foltr-train": {"batch_maxrr": [], "expected_maxrr": {}},
        "foltr-reproduce": {"exploration": {}, "dataset": "MQ2008"},
        "fedps-run": {"mode": "flat", "runs": []},
        "fedps-reproduce": {"summary": {}, "runs": {}},
    }
    assert set(shapes) == set(KINDS)
    for kind, shape in shapes.items():
        assert detect_kind(shape, "x.json") == kind
