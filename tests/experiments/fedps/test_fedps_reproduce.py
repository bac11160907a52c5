"""``fedrank fedps reproduce`` end to end on a small real slice of the AOL log: the tables,
resuming from finished runs, ``--finished-only``. Its own module so that the test runner
can place it apart from ``test_fedps.py`` (the suite spreads modules over its workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fedrank.cli import main
from fedrank.report.page import fmt, pvalue
from tests.report.reportkit import report_page


def test_cli_reproduce_writes_tables_and_resumes(aol_log: Path, tmp_path: Path) -> None:
    args = ["fedps", "reproduce", "--log", str(aol_log), "--users", "8", "--rounds", "1",
            "--seeds", "1,2", "--lrs", "1e-3,3e-3", "--tables", "3,6", "--jobs", "2",
            "--warmup-rounds", "1", "--out", str(tmp_path)]  # fmt: skip
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    text = (tmp_path / "tables.md").read_text()
    for label in ("FedPSFlat", "FedPSProxy", "GroupUser", "CoverQuery", "K-NRM", "P-Click",
                  "LightGBM"):  # fmt: skip
        assert f"| {label}" in text, label
    assert "| 118,067 | 10% | 100 |" in text
    assert "KL" in text and "reversed vs paper" in text
    assert "## Table 3 by query kind" in text and "Central minus GBDT on new-document" in text
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    kinds, rows = summary["query_kinds"], summary["table3"]["rows"]
    assert rows["gbdt"]["test_vs_gbdt"] is None and "| vs LightGBM [95% CI], p |" in text
    assert rows["central"]["test_vs_gbdt"]["diff"] == pytest.approx(
        rows["central"]["MAP"] - rows["gbdt"]["MAP"], abs=1e-9
    )
    share = kinds["refinding_share"]
    for mode, by_kind in kinds["rows"].items():  # the two kinds make up the whole MAP
        assert share * by_kind["refinding"] + (1 - share) * by_kind["new"] == pytest.approx(
            rows[mode]["MAP"], abs=1e-9
        ), mode
    # its HTML report (fedrank report; tests/report covers the other kinds of run)
    html = report_page(tmp_path / "results.json", tmp_path, "fedps-reproduce")
    for mode, row in rows.items():
        assert fmt(row["MAP"]) in html, mode
        test = row.get("test_vs_central")
        if test is not None:
            assert pvalue(test["p"]) in html
    assert "0.7074" in html  # the paper's FedPSFlat MAP
    runs = sorted(p.name for p in (tmp_path / "runs").glob("*.json"))
    assert "flat_s1.json" in runs and "central_lr3e-3_s2.json" in runs
    # upload case 3's central model runs on every seed, as central does
    assert "central_frozen_s2.json" in runs and "| ... global embeddings frozen" in text
    frozen = json.loads((tmp_path / "runs" / "central_frozen_s2.json").read_text())
    assert frozen["settings"]["upload"] == "frozen"
    stamp = (tmp_path / "runs" / "flat_s1.json").stat().st_mtime_ns
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert (tmp_path / "runs" / "flat_s1.json").stat().st_mtime_ns == stamp  # reused
    assert (tmp_path / "tables.md").read_text() == text
    assert "--warmup-rounds 1" in text and frozen["settings"]["warmup_rounds"] == 1
    # runs left from other settings are never mixed in: a clear error, nothing lost
    other = [*args[:-4], "--warmup-rounds", "0", "--out", str(tmp_path)]
    stale = CliRunner().invoke(main, other)
    assert stale.exit_code != 0
    assert "other settings" in stale.output and "warmup_rounds: 1 -> 0" in stale.output
    assert (tmp_path / "runs" / "flat_s1.json").stat().st_mtime_ns == stamp
    assert (tmp_path / "tables.md").read_text() == text
    # every run records the code that ran it; a run of other code is named in the tables
    from fedrank.core.provenance import code_version

    assert frozen["code"] == code_version()
    assert f"Code version: `{code_version()}` (all " in text
    flat = json.loads((tmp_path / "runs" / "flat_s1.json").read_text())
    (tmp_path / "runs" / "flat_s1.json").write_text(json.dumps({**flat, "code": "0123456789ab"}))
    mixed = CliRunner().invoke(main, [*args, "--finished-only"])
    assert mixed.exit_code == 0, mixed.output
    mixed_text = (tmp_path / "tables.md").read_text()
    assert "**The runs come from 2 code versions**" in mixed_text
    assert "Runs not from the first: `0123456789ab`: flat_s1." in mixed_text
    versions = json.loads((tmp_path / "results.json").read_text())["summary"]["code_versions"]
    assert versions["0123456789ab"] == ["flat_s1"] and "flat_s1" not in versions[code_version()]
    # --finished-only runs nothing and writes what it has, naming what is missing
    (tmp_path / "runs" / "proxy_s2.json").unlink()
    partial = CliRunner().invoke(main, [*args, "--finished-only"])
    assert partial.exit_code == 0, partial.output
    assert not (tmp_path / "runs" / "proxy_s2.json").exists()
    text = (tmp_path / "tables.md").read_text()
    assert "Not finished yet (runs missing): FedPSProxy (Algorithm 1) (proxy_s2)" in text
    assert "| FedPSFlat (Algorithm 1) |" in text and "| FedPSProxy (Algorithm 1) |" not in text
    assert "--finished-only" in text and "waits for GroupUser" in text
    (tmp_path / "runs" / "central_lr3e-3_s2.json").unlink()
    no_central = CliRunner().invoke(main, [*args, "--finished-only"])
    assert no_central.exit_code != 0 and "central runs" in no_central.output


def test_a_figure4_run_from_other_settings_is_not_reused(tmp_path: Path) -> None:
    from fedrank.errors import ConfigError
    from fedrank.experiments.fedps.reproduce import _continuous
    from fedrank.experiments.fedps.reproduce_grid import ReproduceConfig

    config = ReproduceConfig(log=tmp_path / "log.tsv", out_dir=tmp_path, tables=("fig4",))
    recorded = {"stages": [], "base_settings": {"mode": "central", "warmup_rounds": 0}}
    (tmp_path / "continuous.json").write_text(json.dumps(recorded))
    with pytest.raises(ConfigError, match="other settings"):
        _continuous(config, None)
    assert json.loads((tmp_path / "continuous.json").read_text()) == recorded
