"""Every script of ``examples/`` runs, with small sizes, and shows what it says it shows;
the custom aggregator also passes the aggregator conformance suite."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.cli.clirun import run
from tests.conformance import test_aggregator_conformance as conformance
from tests.server.serverkit import issue_tokens, running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _script(name: str, *args: str, timeout: float = 300.0) -> str:
    """Run ``examples/<name>`` with ``args``; its standard output (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), EXAMPLES / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def _conformance_checks() -> list[tuple[str, Any]]:
    """The suite's checks that are parametrized over aggregator cases."""
    checks = []
    for name, func in inspect.getmembers(conformance, inspect.isfunction):
        if not name.startswith("test_"):
            continue
        for mark in getattr(func, "pytestmark", []):
            cases = mark.args[1] if mark.name == "parametrize" else []
            if mark.args[0] == "case" and all(isinstance(c, conformance.AggCase) for c in cases):
                checks.append((name, func))
    return checks


CHECKS = _conformance_checks()


def test_the_conformance_suite_is_found() -> None:
    names = {name for name, _ in CHECKS}
    assert {"test_order_independence", "test_malformed_saved_states_are_refused"} <= names
    assert len(CHECKS) >= 10


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize(("name", "check"), CHECKS, ids=[n for n, _ in CHECKS])
def test_custom_aggregator_passes_the_conformance_suite(name: str, check: Any) -> None:
    module = _module("custom_aggregator.py")
    case = conformance.AggCase("UnweightedMean", module.UnweightedMean, exact=False, vector=True)
    check(case=case)


def test_custom_aggregator_in_a_federated_run(mq2008_dir: Path) -> None:
    out = _script(
        "custom_aggregator.py", "--data", str(mq2008_dir), "--rounds", "8", "--clients", "20"
    )
    rows = [line.split(" test nDCG@10 ") for line in out.strip().splitlines()]
    lines = {label.strip(): value for label, value in rows}
    assert set(lines) == {"WeightedMean (built in)", "UnweightedMean (custom)"}
    for value in lines.values():
        assert 0.3 < float(value) <= 1.0  # a trained linear ranker, not a random one


#: A FedAvg server with rounds of 2 seats out of 3 devices, short windows.
ROUNDS_SERVER = """
[server]
workload = "fedavg"
[fedavg]
dim = 3
[iteration]
tick_seconds = 0.05
[rounds]
enabled = true
clients_per_round = 2
t_max_seconds = 3
checkin_seconds = 0.3
min_checkins = 2
"""


def test_embed_client_against_a_real_server(tmp_path: Path) -> None:
    with running_server(tmp_path, ROUNDS_SERVER) as server:
        tokens = issue_tokens(server.store, 3)
        args = ["--server", server.url, "--rounds", "2", "--state", str(tmp_path / "devices")]
        out = _script("embed_client.py", *args, *(a for t in tokens for a in ("--token", t)))
        status = httpx.get(server.url + "/v1/status").json()
    lines = out.strip().splitlines()
    assert lines[0].startswith("round 1: ") and lines[1].startswith("round 2: ")
    for line in lines[:2]:
        assert line.count("update accepted") == 2  # the two seated devices
        assert line.count("not seated") == 1
    assert lines[2].startswith("final model version 2: ")
    assert status["model_version"] == 2 and status["updates_accepted_total"] == 4


def test_privacy_report_matches_the_command(tmp_path: Path) -> None:
    out_json = tmp_path / "rows.json"
    out = _script("privacy_report.py", "--rounds", "10", "--p", "0.9", "--json", str(out_json))
    rows = json.loads(out_json.read_text())
    foltr = rows["FOLtR-ES, randomized response"][0]
    per_message = 4 * math.log(0.9 * 10 / 0.1)  # Eq. (10), B = 4 values per message
    assert foltr["per_message"]["epsilon"] == pytest.approx(per_message)
    assert foltr["per_user"]["epsilon"] == pytest.approx(10 * per_message)
    assert rows["FedAvg, no DP"][0]["mechanism"] == "none"
    # the library's figure is the command's for the same server.toml
    module = _module("privacy_report.py")
    config = tmp_path / "server.toml"
    config.write_text(module.deployments(10, 3.0, 1e-6, 0.9)["FedAvg, central DP"])
    command = tmp_path / "command.json"
    result = run(
        ["privacy", "report", "--rounds", "10", "--config", str(config)] + ["--json", str(command)]
    )
    assert result.exit_code == 0, result.output
    assert rows["FedAvg, central DP"] == json.loads(command.read_text())["systems"]
    assert 0 < rows["FedAvg, central DP"][0]["per_user"]["epsilon"] <= 3.0
    assert "FedAvg, central DP: gaussian (central)" in out


def test_foltr_custom_click_model_trains(mq2008_dir: Path) -> None:
    args = ["--data", str(mq2008_dir), "--interactions", "80000", "--clients", "100"]
    out = _script("foltr_custom_ranker.py", *args)
    values = {
        label.strip(): float(value)
        for label, value in (
            line.split(" test nDCG@10 ") for line in out.splitlines() if "nDCG@10" in line
        )
    }
    assert set(values) == {
        "untrained (zero weights)",
        "navigational (built in)",
        "impatient (custom)",
    }
    # 200 iterations move both models well above the untrained ranking
    assert values["impatient (custom)"] > values["untrained (zero weights)"] + 0.05
    assert values["navigational (built in)"] > values["untrained (zero weights)"] + 0.05


def _dask_lines(out: str) -> dict[str, str]:
    return {line.split(" test nDCG@10 ")[0].strip(): line for line in out.splitlines()}


def test_dask_cluster_local_and_at_an_address(mq2008_dir: Path) -> None:
    from dask.distributed import LocalCluster

    small = ["--data", str(mq2008_dir), "--interactions", "40000", "--clients", "100"]
    out = _script("dask_cluster.py", *small, "--workers", "1")
    lines = _dask_lines(out)
    assert {"in process", "on Dask"} <= set(lines)
    assert "same final model bit for bit: True" in out
    # an existing scheduler, given by its address (workers in this test's process)
    with LocalCluster(
        n_workers=1, processes=False, protocol="tcp://", dashboard_address=None
    ) as cluster:
        out = _script("dask_cluster.py", *small, "--scheduler", cluster.scheduler_address)
    assert "same final model bit for bit: True" in out
    assert _dask_lines(out)["on Dask"].split("(")[0] == lines["on Dask"].split("(")[0]
