"""``fedrank frecency ...``, run in-process with click's CliRunner.

Study runs are kept small (a few hundred users, two weeks of history, a few iterations) so
that every test takes a few seconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES
from tests.cli.clirun import argv as _argv
from tests.cli.clirun import assert_clean_failure as _assert_clean_failure
from tests.cli.clirun import ok as _ok
from tests.cli.clirun import run as _run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STUDY_PLOTS = ("loss.png", "weights.png", "chars_typed.png")
BRANCHES = ("treatment", "control", "control-no-decay")
POLICY_ROW_KEYS = ("reached", "reports", "iterations", "hours")
POLICY_ROW_KEYS += ("initial_loss", "target_loss", "final_loss")
SMALL_STUDY = ["--users", "300", "--iterations", "3", "--seed", "1", "--history-days", "14"]


def _load(path: Path) -> Any:
    assert path.is_file(), path
    return json.loads(path.read_text())


def _assert_shows(text: str, value: float) -> None:
    """``text`` is ``value`` printed with some number of decimals (the format may change)."""
    match = re.fullmatch(r"\s*(-?\d+(?:\.(\d+))?)%?\s*", text)
    assert match, f"not a number: {text!r}"
    decimals = len(match.group(2) or "")
    assert abs(float(match.group(1)) - value) <= 0.5 * 10.0**-decimals + 1e-12, (text, value)


def _line_after(text: str, prefix: str) -> str:
    """The rest of the first line of ``text`` that starts with ``prefix``."""
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :]
    raise AssertionError(f"no line starting with {prefix!r} in:\n{text}")


def _assert_pngs(out_dir: Path, names: tuple[str, ...] = STUDY_PLOTS) -> None:
    for name in names:
        png = out_dir / name
        assert png.is_file(), png
        assert png.stat().st_size > 1000
        assert png.read_bytes()[:8] == PNG_SIGNATURE


# ----------------------------------------------------------------------------------------
# Top level
# ----------------------------------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    out = _ok(["--help"]).output
    assert "frecency" in out and "demo" in out
    out = _ok(["frecency", "--help"]).output
    for command in ("score", "simulate", "power", "policies"):
        assert command in out


def test_version() -> None:
    assert "0.1.0" in _ok(["--version"]).output


# ----------------------------------------------------------------------------------------
# frecency score
# ----------------------------------------------------------------------------------------


def test_score_real_places_modern(firefox_dir: Path, tmp_path: Path) -> None:
    places = firefox_dir / "places.sqlite"
    out = tmp_path / "sub" / "scores.json"  # parent directories are created
    result = _ok(
        ["frecency", "score", "--places", str(places), "--algorithm", "modern", "--json", str(out)]
    )
    assert "64 pages scored with the modern algorithm; 63 equal Firefox's stored frecency" in (
        result.output
    )
    assert f"wrote {out}" in result.output
    data = _load(out)
    assert data["algorithm"] == "modern"
    pages = data["pages"]
    assert len(pages) == 64
    assert sum(p["frecency"] == p["firefox_frecency"] for p in pages) == 63
    assert all(set(p) == {"place_id", "url", "frecency", "firefox_frecency"} for p in pages)
    by_url = {p["url"]: p for p in pages}
    assert by_url["http://127.0.0.1:8765/index.html"]["frecency"] == 21145
    assert by_url["http://127.0.0.1:8765/index.html"]["firefox_frecency"] == 21145


def test_score_defaults_to_modern_and_aged_copy_matches_everywhere(firefox_dir: Path) -> None:
    result = _ok(["frecency", "score", "--places", str(firefox_dir / "places-aged.sqlite")])
    assert "64 pages scored with the modern algorithm; 64 equal" in result.output


def test_score_classic(firefox_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "classic.json"
    places = str(firefox_dir / "places.sqlite")
    result = _ok(
        ["frecency", "score", "--places", places, "--algorithm", "classic", "--json", str(out)]
    )
    assert "64 pages scored with Firefox 62-68's classic frecency" in result.output
    by_url = {p["url"]: p["frecency"] for p in _load(out)["pages"]}
    assert by_url["http://127.0.0.1:8765/apple.html"] == 1200
    assert by_url["http://127.0.0.1:8765/zucchini/nutrition.html"] == 140


def test_score_counts_only_exact_matches(firefox_dir: Path, tmp_path: Path) -> None:
    import shutil
    import sqlite3
    from contextlib import closing

    copy = tmp_path / "places.sqlite"
    shutil.copyfile(firefox_dir / "places-aged.sqlite", copy)  # all 64 match
    with closing(sqlite3.connect(copy)) as conn:
        # One stored value above fedrank's, one below.
        conn.execute("UPDATE moz_places SET frecency = frecency + 1 WHERE url LIKE '%/index.html'")
        conn.execute("UPDATE moz_places SET frecency = frecency - 1 WHERE url LIKE '%/apple.html'")
        conn.commit()
    result = _ok(["frecency", "score", "--places", str(copy)])
    assert "64 pages scored with the modern algorithm; 62 equal" in result.output


def test_score_unknown_algorithm_is_a_usage_error(firefox_dir: Path) -> None:
    result = _run(
        ["frecency", "score", "--places", str(firefox_dir / "places.sqlite"), "--algorithm", "x"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--algorithm'" in result.output
    assert "Traceback" not in result.output


def test_score_requires_places() -> None:
    result = _run(["frecency", "score"])
    assert result.exit_code == 2
    assert "Missing option '--places'" in result.output


def test_score_not_sqlite_gives_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "places.sqlite"
    junk.write_bytes(b"not a database at all\n" * 50)
    result = _run(["frecency", "score", "--places", str(junk)])
    _assert_clean_failure(result, "could not be read as an SQLite database")
    assert str(junk) in result.output


def test_score_missing_table_gives_a_clear_error(tmp_path: Path) -> None:
    import sqlite3
    from contextlib import closing

    path = tmp_path / "places.sqlite"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
        conn.commit()
    result = _run(["frecency", "score", "--places", str(path)])
    _assert_clean_failure(result, "table 'moz_places' is missing")


def test_score_missing_places_file_gives_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-profile" / "places.sqlite"
    result = _run(["frecency", "score", "--places", str(missing)])
    assert result.exit_code == 2  # click's usage error: the option names a missing file
    assert "does not exist" in result.output and "places.sqlite" in result.output
    assert "Traceback" not in result.output


# ----------------------------------------------------------------------------------------
# frecency simulate
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulate_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path, Path]:
    base = tmp_path_factory.mktemp("simulate")
    json_path, out_dir = base / "study.json", base / "plots"
    result = _ok(
        ["frecency", "simulate", *SMALL_STUDY, "--json", str(json_path), "--out", str(out_dir)]
    )
    return result, json_path, out_dir


def test_simulate_writes_the_documented_json(simulate_run: tuple[Result, Path, Path]) -> None:
    result, json_path, _ = simulate_run
    data = _load(json_path)

    assert data["config"]["n_users"] == 300
    assert data["config"]["iterations"] == 3
    assert data["config"]["seed"] == 1

    losses = data["loss_per_iteration"]
    assert len(losses) == 3
    assert all(isinstance(x, float) and x >= 0 for x in losses)

    weights = data["weights_per_iteration"]
    assert len(weights) == 3
    for w in weights:
        assert list(w) == list(CLASSIC_WEIGHT_NAMES)
        assert len(w) == 22
        assert all(isinstance(v, float) for v in w.values())
    # Iteration 0 starts from Firefox's defaults.
    assert weights[0]["typedVisitBonus"] == 2000.0
    assert weights[0]["firstBucketCutoff"] == 4.0
    assert list(data["final_weights"]) == list(CLASSIC_WEIGHT_NAMES)

    assert isinstance(data["constraints_held"], bool)
    assert data["constraints_held"] is True

    evaluation = data["eval"]
    for branch in BRANCHES:
        ev = evaluation[branch]
        assert {"chars_typed_mean", "selected_rank_mean", "n", "n_users"} <= set(ev)
        assert ev["chars_typed_mean"] >= 1.0  # at least one character per search
        assert ev["selected_rank_mean"] >= 0.0
        assert isinstance(ev["n"], int) and ev["n"] > 0
    # Users are split 60/20/20; every user with a history selection counts once.
    assert sum(evaluation[b]["n_users"] for b in BRANCHES) <= 300
    assert evaluation["treatment"]["n_users"] > evaluation["control"]["n_users"]
    # The oracle (treatment users ranked by the hidden weights) on the same searches.
    assert data["oracle"]["n"] > 0

    tests = data["tests"]
    assert set(tests) == {
        "treatment_vs_control",
        "treatment_vs_control_no_decay",
        "treatment_vs_control_rank",
        "treatment_vs_control_no_decay_rank",
    }
    for test in tests.values():
        assert 0.0 <= test["pvalue"] <= 1.0 and test["unit"] == "user"
        assert isinstance(test["statistic"], float)

    # The summary printed matches the JSON, with the paper's figures beside ours.
    out = result.output
    assert f"constraints held: {data['constraints_held']}" in out
    for branch in BRANCHES:
        shown = re.search(
            rf"^\s*{re.escape(branch)}\s+chars typed (\S+) \(paper \S+\)\s+rank (\S+) \(paper",
            out,
            re.MULTILINE,
        )
        assert shown, out
        _assert_shows(shown.group(1), evaluation[branch]["chars_typed_mean"])
        _assert_shows(shown.group(2), evaluation[branch]["selected_rank_mean"])
    assert "(paper 4.26)" in out and "per-user means" in out
    assert f"wrote {json_path}" in out


def test_simulate_writes_png_plots(simulate_run: tuple[Result, Path, Path]) -> None:
    result, _, out_dir = simulate_run
    _assert_pngs(out_dir)
    for name in STUDY_PLOTS:
        assert f"wrote {out_dir / name}" in result.output
    assert not (out_dir / "stability.png").exists()  # only with --stability


def test_simulate_same_seed_gives_identical_json(
    simulate_run: tuple[Result, Path, Path], tmp_path: Path
) -> None:
    _, first, _ = simulate_run
    again = tmp_path / "again.json"
    _ok(["frecency", "simulate", *SMALL_STUDY, "--json", str(again)])
    assert again.read_text() == first.read_text()


def test_simulate_on_dask_gives_identical_json(
    simulate_run: tuple[Result, Path, Path], tmp_path: Path
) -> None:
    """The clients' messages computed on a real 2-worker Dask cluster: the driver folds the
    same messages in the same order, so the JSON is the same byte for byte."""
    _, first, _ = simulate_run
    spread = tmp_path / "dask.json"
    _ok(["frecency", "simulate", *SMALL_STUDY, "--dask-workers", "2", "--json", str(spread)])
    assert _load(spread)["loss_per_iteration"] == _load(first)["loss_per_iteration"]
    assert spread.read_text() == first.read_text()


def test_simulate_other_seed_gives_other_results(
    simulate_run: tuple[Result, Path, Path], tmp_path: Path
) -> None:
    _, first, _ = simulate_run
    other = tmp_path / "other.json"
    _ok(_argv("frecency simulate --users 300 --iterations 3 --seed 2 --history-days 14 --json",
              other))  # fmt: skip
    assert _load(other)["loss_per_iteration"] != _load(first)["loss_per_iteration"]


def test_simulate_sign_messages_and_stability(tmp_path: Path) -> None:
    json_path, out_dir = tmp_path / "sign.json", tmp_path / "plots"
    args = (
        "frecency simulate --users 200 --iterations 2 --message sign --optimizer adam "
        "--history-days 14"
    )
    _ok([*_argv(f"{args} --stability --json", json_path), *_argv("--out", out_dir)])
    data = _load(json_path)
    assert data["config"]["message"] == "sign"
    assert data["config"]["optimizer"] == "adam"
    assert data["config"]["track_stability"] is True
    assert len(data["stability"]) == 2
    _assert_pngs(out_dir, (*STUDY_PLOTS, "stability.png"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--blind-chars", "-1"], "--blind-chars must be >= 0"),
        (["--scan-continue", "2"], "--scan-continue must be in [0, 1]"),
        (["--history-days", "0"], "--history-days must be > 0"),
        (["--users", "1"], "--users must be in 3..100000 (an integer), got 1"),
        (["--users", "1000000000"], "--users must be in 3..100000"),
        (["--iterations", "0"], "--iterations must be >= 1"),
        (["--searches-per-iteration", "0"], "--searches-per-iteration must be > 0"),
        (["--eval-searches", "0"], "--eval-searches must be >= 1"),
        (["--delta", "-1"], "--delta must be >= 0 (a finite number)"),
        (["--dask-workers", "2", "--dask-scheduler", "tcp://h:1"], "not both"),
        (["--dask-workers", "0"], "--dask-workers must be in 1..256"),
    ],
)
def test_simulate_bad_values_fail_cleanly(args: list[str], message: str, tmp_path: Path) -> None:
    """A value the study refuses names the option typed (not the field it sets) and is a
    usage error (exit 2, the rule of `fedrank --help`)."""
    json_path = tmp_path / "never.json"
    result = _run(["frecency", "simulate", *args, "--json", str(json_path)])
    _assert_clean_failure(result, message)
    assert result.exit_code == 2
    assert not json_path.exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--preset", "nope"], "--preset"),
        (["--world", "mars"], "--world"),
        (["--setting", "mine"], "--setting"),
        (["--message", "dense"], "--message"),
        (["--users", "many"], "--users"),
    ],
)
def test_simulate_bad_choices_are_usage_errors(args: list[str], option: str) -> None:
    result = _run(["frecency", "simulate", *args])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.output
    assert "Traceback" not in result.output


# ----------------------------------------------------------------------------------------
# frecency power, frecency policies
# ----------------------------------------------------------------------------------------


def test_power_effect_writes_json(tmp_path: Path) -> None:
    json_path = tmp_path / "power.json"
    args = "frecency power --part effect --users 200 --iterations 2 --repetitions 20 --seed 3"
    result = _ok(_argv(f"{args} --json", json_path))
    data = _load(json_path)["effect"]
    assert data["metric"] == "selected_rank" and data["unit"] == "user"
    assert data["target_power"] == 0.8
    curve = data["curve"]
    assert curve and [p["n"] for p in curve] == sorted(p["n"] for p in curve)
    assert all(0.0 <= p["power"] <= 1.0 for p in curve)
    if data["reached"]:
        assert data["power"] >= 0.8 and f"{data['n']} users per branch" in result.output
    assert f"wrote {json_path}" in result.output


def test_power_effect_shift_and_weights_of_a_simulate_run(
    simulate_run: tuple[Result, Path, Path], tmp_path: Path
) -> None:
    json_path = tmp_path / "power.json"
    args = "frecency power --part effect --effect 0.5 --users 200 --iterations 1 --repetitions 20"
    _ok(_argv(f"{args} --json", json_path))
    data = _load(json_path)["effect"]
    assert data["treatment_mean"] == pytest.approx(data["control_mean"] + 0.5)
    assert data["reached"] is True
    _, study_json, _ = simulate_run
    args = "--part effect --users 200 --iterations 1 --repetitions 10 --json"
    _ok([*_argv("frecency power --weights", study_json), *_argv(args, json_path)])
    assert str(study_json) in _load(json_path)["effect"]["treatment"]


def test_power_weights_without_final_weights_fail_cleanly(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-study.json"
    bad.write_text(json.dumps({"pages": []}))
    result = _run(["frecency", "power", "--part", "effect", "--weights", str(bad)])
    _assert_clean_failure(result, "final_weights")
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--power", "1.5"], "power must lie in (0, 1)"),
        (["--repetitions", "0"], "repetitions"),
    ],
)
def test_power_bad_values_fail_cleanly(args: list[str], message: str) -> None:
    base = ["frecency", "power", "--part", "effect", "--users", "100", "--iterations", "1"]
    result = _run([*base, *args])
    _assert_clean_failure(result, message)


def test_calibrate_writes_the_fitted_typing_model(tmp_path: Path) -> None:
    json_path = tmp_path / "calibration.json"
    args = "frecency calibrate --users 30 --iterations 1 --max-evaluations 1 --json"
    result = _ok(_argv(args, json_path))
    data = _load(json_path)
    assert {"blind_chars", "scan_continue", "chars_typed_mean", "selected_rank_mean"} <= set(data)
    assert data["paper_control"] == {"chars_typed_mean": 4.26239, "selected_rank_mean": 0.3535}
    assert len(data["evaluations"]) >= 12
    assert "control types" in result.output


def test_policies_writes_json(tmp_path: Path) -> None:
    json_path = tmp_path / "policies.json"
    args = "frecency policies --users 200 --target-fraction 0.99 --seed 0 --json"
    result = _ok(_argv(args, json_path))
    data = _load(json_path)
    assert data["config"]["n_users"] == 200
    assert data["config"]["target_fraction"] == 0.99
    assert data["config"]["preset"] == "shifted"
    rows = data["policies"]
    assert [row["policy"] for row in rows] == [
        "fixed-time(30 min)",
        "min-updates(500)",
        "sign-stable(3 ticks, >= 100)",
    ]
    for row in rows:
        assert set(POLICY_ROW_KEYS) <= set(row)
        assert row["target_loss"] == pytest.approx(0.99 * row["initial_loss"])
        if row["reached"]:
            assert row["final_loss"] <= row["target_loss"]
            assert row["iterations"] >= 1 and row["reports"] > 0
        assert f"{row['policy']:32s} reached={row['reached']}" in result.output
    # MinUpdates(500) only closes an iteration after 500 reports.
    assert rows[1]["reports"] >= 500 * rows[1]["iterations"]


def test_policies_rejects_a_target_fraction_outside_0_1() -> None:
    result = _run(["frecency", "policies", "--users", "200", "--target-fraction", "1.5"])
    _assert_clean_failure(result, "--target-fraction must be in (0, 1) (a number), got 1.5")


def test_messages_writes_paired_json(tmp_path: Path) -> None:
    json_path = tmp_path / "messages.json"
    args = "frecency messages --users 200 --iterations 2 --seeds 0,1 --json"
    result = _ok(_argv(args, json_path))
    data = _load(json_path)
    assert data["seeds"] == [0, 1]
    assert data["config"]["n_users"] == 200 and data["config"]["iterations"] == 2
    rows = data["per_seed"]
    assert [row["seed"] for row in rows] == [0, 1]
    for row in rows:
        for kind in ("full", "sign"):
            assert row[kind]["final_loss"] > 0
            assert row[kind]["chars_typed_mean"] >= 1.0
        assert row["ratio"] == pytest.approx(row["sign"]["final_loss"] / row["full"]["final_loss"])
    full = sum(row["full"]["final_loss"] for row in rows) / 2
    sign = sum(row["sign"]["final_loss"] for row in rows) / 2
    assert data["full_final_loss_mean"] == pytest.approx(full)
    assert data["sign_final_loss_mean"] == pytest.approx(sign)
    assert data["ratio"] == pytest.approx(sign / full)
    assert f"wrote {json_path}" in result.output


@pytest.mark.parametrize(
    ("seeds", "code", "message"),
    [("a,b", 2, "--seeds must be comma-separated integers"), (",", 2, "at least one seed")],
)
def test_messages_bad_seeds_fail_cleanly(seeds: str, code: int, message: str) -> None:
    result = _run([*_argv("frecency messages --users 200 --iterations 1 --seeds"), seeds])
    _assert_clean_failure(result, message)
    assert result.exit_code == code


# ----------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------


def test_simulate_out_writes_report_json_and_plots(tmp_path: Path) -> None:
    """The in-process study's markdown report (``simulate --out``)."""
    out_dir = tmp_path / "study"
    result = _ok(["frecency", "simulate", *SMALL_STUDY, "--json", str(tmp_path / "r.json"),
                  "--out", str(out_dir)])  # fmt: skip
    data = _load(tmp_path / "r.json")
    report = (out_dir / "report.md").read_text()
    _assert_pngs(out_dir)
    assert f"wrote {out_dir / 'report.md'}" in result.output
    produced = _line_after(report, "Produced by `").split("`")[0]
    assert produced.startswith("fedrank frecency simulate ")
    for option in ("--users 300", "--iterations 3", "--seed 1", "--history-days 14.0",
                   f"--out {out_dir}"):  # fmt: skip
        assert option in produced, option
    assert "--preset" not in produced  # defaults are left out
    assert "beside the paper (Figure 5)" in report and "| 4.26239 |" in report
    assert _line_after(report, "- safeguards held in every iteration:").strip() == str(
        data["constraints_held"]
    )
    for branch in BRANCHES:
        ev = data["eval"][branch]
        cells = [c.strip() for c in _line_after(report, f"| {branch} |").split("|")]
        assert int(cells[0]) == ev["n_users"] and int(cells[1]) == ev["n"]
        _assert_shows(cells[2], ev["chars_typed_mean"])
        _assert_shows(cells[4], ev["selected_rank_mean"])
    for row in data["all_tests"]:
        assert f"| {row['metric']} | {row['a']} | {row['b']} |" in report
    for name in STUDY_PLOTS:
        assert f"]({name})" in report


def test_unwritable_json_path_gives_a_clear_error(tmp_path: Path, firefox_dir: Path) -> None:
    # --json names an existing directory: writing fails with an OSError, shown in one line.
    places = firefox_dir / "places.sqlite"
    result = _run([*_argv("frecency score --places", places), *_argv("--json", tmp_path)])
    _assert_clean_failure(result, str(tmp_path))


# ----------------------------------------------------------------------------------------
# frecency simulate / messages --model modern
# ----------------------------------------------------------------------------------------


def test_simulate_modern_writes_the_five_modern_weights(tmp_path: Path) -> None:
    from fedrank.models.frecency.modern import MODERN_WEIGHT_NAMES

    json_path, out_dir = tmp_path / "modern.json", tmp_path / "plots"
    args = ["frecency", "simulate", "--model", "modern", *SMALL_STUDY]
    result = _ok([*args, *_argv("--json", json_path), *_argv("--out", out_dir)])
    data = _load(json_path)
    config = data["config"]
    # The model's loss defaults are written resolved.
    assert (config["model"], config["score_scale"], config["delta"]) == ("modern", "raw", 6.0)
    assert len(data["weights_per_iteration"]) == 3
    for weights in data["weights_per_iteration"]:
        assert list(weights) == list(MODERN_WEIGHT_NAMES)
    assert data["weights_per_iteration"][0]["halfLifeDays"] == 30.0
    assert list(data["final_weights"]) == list(MODERN_WEIGHT_NAMES)
    assert data["constraints_held"] is True
    _assert_pngs(out_dir)
    assert f"constraints held: {data['constraints_held']}" in result.output


def test_simulate_explicit_loss_settings_override_the_model_defaults(tmp_path: Path) -> None:
    json_path = tmp_path / "classic.json"
    args = "frecency simulate --users 200 --iterations 1 --score-scale raw --delta 5 --json"
    _ok(_argv(args, json_path))
    config = _load(json_path)["config"]
    assert (config["model"], config["score_scale"], config["delta"]) == ("classic", "raw", 5.0)


def test_simulate_bad_model_is_a_usage_error() -> None:
    result = _run(["frecency", "simulate", "--model", "newest"])
    assert result.exit_code == 2
    assert "Invalid value for '--model'" in result.output
    assert "Traceback" not in result.output


def test_messages_modern(tmp_path: Path) -> None:
    json_path = tmp_path / "messages.json"
    args = "frecency messages --model modern --users 200 --iterations 2 --seeds 0 --json"
    _ok(_argv(args, json_path))
    data = _load(json_path)
    assert data["config"]["model"] == "modern"
    assert data["config"]["delta"] == 6.0
    assert data["seeds"] == [0]


def test_world_prints_the_shapes_beside_the_aol_log(tmp_path: Path) -> None:
    from tests.aolkit import write_browsing_log

    log = write_browsing_log(tmp_path / "log.tsv", n_users=20)
    json_path = tmp_path / "world.json"
    args = f"frecency world --users 50 --history-days 10 --aol-log {log} --json"
    result = _ok([*_argv(args), str(json_path)])
    data = _load(json_path)
    assert set(data["shapes"]) >= {"clicks_per_user", "once_share", "top10_share"}
    for row in data["shapes"].values():
        assert set(row) == {"synthetic", "aol"}
    assert data["shapes"]["clicks_per_user"]["aol"] > 0
    assert "clicks on the user's 10 most clicked hosts" in result.output
    assert data["synthetic_pages_per_host"] > 1.0


def test_simulate_aol_world_reports_without_a_hidden_preference(tmp_path: Path) -> None:
    from tests.aolkit import write_browsing_log

    log = write_browsing_log(tmp_path / "log.tsv", n_users=40)
    out_dir = tmp_path / "aol"
    args = ["frecency", "simulate", "--world", "aol", "--aol-log", str(log), "--users", "0",
            "--iterations", "4", "--seed", "1"]  # fmt: skip
    _ok([*args, *_argv("--json", tmp_path / "r.json"), *_argv("--out", out_dir)])
    data = _load(tmp_path / "r.json")
    report = (out_dir / "report.md").read_text()
    assert data["config"]["world"] == "aol" and data["oracle"] == {}
    assert "world `aol`" in report and "preset" not in report.split("\n")[4]
    changed = [line for line in report.splitlines() if "none (real log)" in line]
    moved = {
        n for n, w in data["final_weights"].items()
        if w != data["weights_per_iteration"][0][n]
    }  # fmt: skip
    assert len(changed) == len(moved)
