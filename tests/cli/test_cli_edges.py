"""The rough edges of the ``fedrank`` command line (issue 52): option errors name the option
the user typed, one exit-code rule, help that is not cut short, a frecency loss reduction
over disjoint windows, fedps progress that stops counting, and ``fedrank serve`` for a
first try (store under ``fedrank-data/``, "new store", what is stored at shutdown,
``--quickstart``)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import click
import httpx
import pytest
from rich.console import Console
from rich.progress import Progress

from fedrank.cli import main
from fedrank.cli.fedps import _Bar, _users
from fedrank.experiments.frecency.report import comparison_window, loss_reduction
from fedrank.server.sections import ServerSection
from tests.cli.clirun import assert_clean_failure, run


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under ``command`` (groups included), e.g. ("frecency", "simulate")."""
    found = [path] if path else []
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += _commands(sub, (*path, name))
    return found


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("frecency simulate --users -5", "--users must be in 3..100000 (an integer), got -5"),
        ("frecency simulate --history-days 0", "--history-days must be > 0"),
        ("frecency simulate --iterations 0", "--iterations must be >= 1"),
        ("frecency power --users -5", "--users must be in 3..100000"),
        ("frecency policies --users 1", "--users must be >= 3 (one per branch), got 1"),
        ("fedps run --mode flat --users -5", "--users must be >= 2"),
        ("fedps run --mode flat --rounds -1", "--rounds must be >= 1"),
        ("demo --users -5", "--users must be in 3..100000"),
        ("frecency power --alpha 2", "--alpha must lie in (0, 1), got 2.0"),
        ("frecency world --users -3", "--users must be a positive integer, got -3"),
        ("frecency calibrate --max-evaluations -1", "'--max-evaluations': -1 is not in"),
        ("serve --port -1", "--port must be in 0..65535 (an integer), got -1"),
        ("serve --iteration-seconds -1", "--iteration-seconds must be >= 0"),
        ("devices enroll --store STORE --count -1", "--count must be in 1..10000, got -1"),
        ("devices enroll --store STORE --expires-hours -1", "--expires-hours must be > 0"),
    ],
)
def test_option_errors_name_the_option_typed(args: str, expected: str, tmp_path: Path) -> None:
    result = run(args.replace("STORE", str(tmp_path / "store")).split())
    assert result.exit_code == 2, result.output
    assert_clean_failure(result, expected)
    assert "n_users" not in result.output and "None" not in result.output


def test_foltr_interactions_error_names_interactions(mq2008_dir: Path) -> None:
    result = run(["foltr", "train", "--data", str(mq2008_dir), "--interactions", "-100"])
    assert result.exit_code == 2, result.output
    assert_clean_failure(result, "--interactions must be >= 1 (an integer), got -100")
    assert "8,000" not in result.output and "8000" not in result.output


def test_exit_code_rule_is_documented_and_kept(tmp_path: Path) -> None:
    helped = run(["--help"])
    assert helped.exit_code == 0
    assert "Exit codes: 0 success; 2 a usage error" in " ".join(helped.output.split())
    assert run(["frecency", "simulate", "--no-such-option"]).exit_code == 2  # click's own
    assert run(["frecency", "simulate", "--users", "-5"]).exit_code == 2  # an invalid value
    missing = run(["fedps", "run", "--mode", "original", "--log", str(tmp_path / "none.tsv")])
    assert missing.exit_code == 1  # a failure while running: the data is not there
    assert_clean_failure(missing, "does not exist")


def test_unreachable_server_is_one_line_and_exit_1(firefox_dir: Path, tmp_path: Path) -> None:
    args = ["client", "--server", "http://127.0.0.1:9", "--places"]
    result = run([*args, str(firefox_dir / "places.sqlite"), "--state", str(tmp_path / "c")])
    assert result.exit_code == 1
    assert_clean_failure(result, "cannot reach the server at http://127.0.0.1:9")
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("path", _commands(main), ids=" ".join)
def test_help_summaries_fit_and_every_option_is_described(path: tuple[str, ...]) -> None:
    command = _command(path)
    # click cuts a summary that does not fit with "..."; in an 80-column terminal it keeps
    # 80 - 6 - the longest command name (9) = 65 characters: 55 leaves room
    assert not command.get_short_help_str(limit=55).endswith("..."), path
    undescribed = [
        p.opts[0]
        for p in command.params
        if isinstance(p, click.Option) and not p.help and p.name not in ("help", "version")
    ]
    assert undescribed == [], path


def test_serve_help_shows_defaults() -> None:
    text = " ".join(run(["serve", "--help"]).output.split())
    assert f"[default: ({ServerSection().host})]" in text
    assert f"[default: ({ServerSection().port})]" in text
    assert "fedrank-data/store" in text
    assert "--quickstart" in text


def _study(losses: list[float]) -> SimpleNamespace:
    return SimpleNamespace(loss_per_iteration=losses)


def test_loss_reduction_compares_disjoint_windows() -> None:
    # five iterations: the old windows (first 5, last 5) were the same and gave 0.0
    losses = [10.0, 9.0, 8.0, 7.0, 6.0]
    assert comparison_window(5) == 2
    assert loss_reduction(_study(losses)) == pytest.approx(1 - 6.5 / 9.5)
    assert comparison_window(20) == 5
    assert loss_reduction(_study([2.0] * 5 + [9.0] * 10 + [1.0] * 5)) == pytest.approx(0.5)
    assert comparison_window(1) == 0
    assert loss_reduction(_study([3.0])) != loss_reduction(_study([3.0]))  # NaN


def test_fedps_stage_cut_short_stops_and_says_so() -> None:
    progress = Progress(console=Console(file=io.StringIO()))
    stages = _Bar(progress)
    stages("warm-up round 7/8", 1, 5)  # early stopping ends the round here
    stages("round 1/1", 5, 5)
    stages.close()
    by_name = {t.description: t for t in progress.tasks}
    cut = by_name["warm-up round 7/8 (stopped early)"]
    assert cut.stop_time is not None and cut.completed == 1
    assert by_name["round 1/1"].finished


def test_fedps_users_line_says_who_was_dropped() -> None:
    assert _users({"users": 50, "users_dropped": 0}) == "50 users"
    text = _users({"users": 49, "users_dropped": 1})
    assert text.startswith("49 users (1 of the 50 drawn dropped: no events in one of")


def _serve(tmp_path: Path, *flags: str) -> str:
    """``fedrank serve`` run from ``tmp_path`` with its default store until it answers
    ``/v1/status``, then stopped with SIGINT (Ctrl-C); its output."""
    cmd = [sys.executable, "-m", "fedrank.cli", "serve", "--port", "0", *flags]
    port_file = tmp_path / "port"
    port_file.unlink(missing_ok=True)  # a previous run's file would name a closed port
    proc = subprocess.Popen(
        [*cmd, "--port-file", str(port_file)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(600):
            if port_file.exists():
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        url = f"http://127.0.0.1:{port}/v1/status"
        for _ in range(600):
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        proc.send_signal(2)  # SIGINT
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


def test_serve_first_try_store_under_data_dir_new_then_resumed(tmp_path: Path) -> None:
    first = _serve(tmp_path, "--quickstart")
    assert (tmp_path / "fedrank-data" / "store").is_dir()
    assert "new store at fedrank-data/store" in first
    assert "resumed" not in first
    assert "quickstart: an iteration closes every 10 s" in first
    token = re.search(r"admin token \(this run only\): (\S+)", first)
    assert token is not None and len(token.group(1)) >= 16
    assert "stopped; the store fedrank-data/store holds model version 0" in first
    again = _serve(tmp_path)
    assert "resumed: iteration 0" in again and "new store" not in again
    assert "admin token" not in again


def test_gitignore_holds_the_data_directory() -> None:
    ignore = Path(__file__).resolve().parents[2] / ".gitignore"
    assert "/fedrank-data/" in ignore.read_text().splitlines()
