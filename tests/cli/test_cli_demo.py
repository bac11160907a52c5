"""``fedrank demo``: the federated frecency study through a real server process on
loopback, with simulated users as HTTP clients (a small population, a few iterations).
The same study run in one process (``run_study`` with the branches the server assigned)
gives the same model, and every model the server published kept the safeguards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrank.experiments.frecency.study import FrecencyStudyConfig, run_study
from fedrank.models.frecency.safeguards import frecency_safeguards
from fedrank.models.frecency.weights import classic_defaults
from tests.cli.clirun import ok


def test_demo_runs_the_study_through_the_service(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = ok(["demo", "--users", "90", "--iterations", "4", "--seed", "1", "--out", str(out)])
    data = json.loads((out / "results.json").read_text())
    status = data["server_status"]
    # every iteration was closed by the server and published a new model version
    assert status["model_version"] == 4 and status["iteration"] == 4
    assert sum(data["users_per_branch"].values()) == 90
    assert len(data["loss_per_iteration"]["treatment"]) == 4
    # every evaluation ping reached the server's store
    assert sum(e["users"] for e in data["eval"].values()) == 90
    assert data["requests"] > 90 * 6
    assert status["updates_rejected_total"] == 0
    assert set(data["final_weights"]) == set(data["hidden_weights"])
    report = (out / "report.md").read_text()
    assert "fedrank demo --seed 1 --users 90 --iterations 4" in report
    for name in ("loss.png", "chars_typed.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "HTTP requests" in result.output
    assert "starting the server..." in result.output and "/dashboard" in result.output
    assert data["wall_seconds"] >= data["seconds"] > 0
    assert (out / "store" / "parquet").is_dir()  # closed iterations were audited

    # the same study in one process, with the server's branches: the same model
    twin = run_study(FrecencyStudyConfig(**data["study"]), branches=np.array(data["branches"]))
    served = np.array(list(data["final_weights"].values()))
    np.testing.assert_allclose(served, list(twin.published_weights.values()), rtol=1e-12)
    assert not np.array_equal(served, classic_defaults())  # the model moved
    # every published model kept the Sec. 5.6 safeguards against the one before it
    path = [np.array(list(w.values())) for w in data["served_weights_per_iteration"]]
    assert len(path) == 5 and np.array_equal(path[0], classic_defaults())
    guard = frecency_safeguards()
    assert all(guard.holds(b, a) for a, b in zip(path[:-1], path[1:], strict=True))


def test_demo_report_states_the_paired_effect(tmp_path: Path) -> None:
    """The paired comparison is made from what the server stored, and report.md,
    report.html and the command's output state its design, estimate, 95% CI, n and p with
    the baseline beside it."""
    out = tmp_path / "demo"
    result = ok(["demo", "--users", "60", "--iterations", "3", "--seed", "2", "--out", str(out)])
    data = json.loads((out / "results.json").read_text())
    paired = data["paired"]
    treated = data["users_per_branch"]["treatment"]
    assert paired["n_users"] == data["eval"]["treatment"]["users"] == treated
    assert paired["diff"] == pytest.approx(paired["trained_mean"] - paired["control_mean"])
    low, high = paired["diff_ci95"]
    assert low < paired["diff"] < high
    assert 0.0 < paired["t_pvalue"] <= 1.0 and 0.0 < paired["wilcoxon_pvalue"] <= 1.0
    estimate = f"{paired['diff']:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}]"
    for page in ("report.md", "report.html"):
        text = (out / page).read_text()
        assert estimate in text, page
        assert f"{paired['t_pvalue']:.3g}" in text and f"{paired['control_mean']:.4f}" in text
        assert "paired" in text and str(paired["n_users"]) in text
    assert f"{paired['n_users']} treatment users" in result.output
    assert f"paired t p = {paired['t_pvalue']:.2g}" in result.output
