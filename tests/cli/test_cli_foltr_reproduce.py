"""``fedrank foltr reproduce`` with a tiny budget on real MQ2008 data, in one process and on
a 2-worker Dask cluster. Its own module so that the test runner can place it apart from
``test_cli_foltr.py`` (the suite spreads modules over its workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrank.privacy.accounting import randomized_response_epsilon
from tests.cli.clirun import ok
from tests.untimed import untimed

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "letor-cli"))


def result_args(data: Path, out_dir: Path) -> list[str]:
    """A tiny ``foltr reproduce``: one fold, no FPDGD (the grid runs twice, in one process
    and on Dask; a fold costs about 20 s of CPU each time)."""
    return [
        "foltr", "reproduce", "--data", str(data), "--out", str(out_dir), "--interactions",
        "8000", "--exploration-interactions", "64000", "--folds", "1", "--no-fpdgd",
    ]  # fmt: skip


def test_reproduce_with_a_tiny_budget(mq2008_dir: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "repro"
    result = ok(result_args(mq2008_dir, out_dir))
    assert "FOLtR-ES Two-Layer" in result.output and "RankingSVM" in result.output
    data = json.loads((out_dir / "results.json").read_text())
    table = data["table3"]
    assert set(table) == {"train", "test"}
    assert set(table["test"]) == {
        "MSE",
        "RankingSVM",
        "LambdaMART",
        "FOLtR-ES Linear",
        "FOLtR-ES Two-Layer",
    }
    assert len(data["per_fold"]["MSE"]["perfect"]["train"]) == 1
    for name in ("fig1_antithetic", "fig2_batch", "fig3_privacy", "fig4_folds_navigational"):
        assert (out_dir / f"{name}.png").read_bytes()[:8] == PNG
    # Figure 3 as privacy against utility: randomized response's epsilon per interaction,
    # per message of B = 4 and per client slot over every iteration, beside the quality
    fig3 = data["fig3_privacy_utility"]
    assert set(fig3) == {"p=0.15", "p=0.25", "p=0.5", "p=1.0"}
    eps = randomized_response_epsilon(0.5, 11)
    rounds = len(data["exploration"]["fig3_privacy"]["navigational"]["p=0.5"])
    half = fig3["p=0.5"]["privacy"]
    assert half["per_interaction"] == pytest.approx(eps)
    assert half["per_message"]["epsilon"] == pytest.approx(4 * eps)
    assert half["per_user"]["epsilon"] == pytest.approx(rounds * 4 * eps)
    assert fig3["p=1.0"]["privacy"]["per_interaction"] is None
    assert set(fig3["p=0.5"]["final_batch_maxrr"]) == set(data["exploration"]["fig3_privacy"])
    text = (out_dir / "fig3_privacy.md").read_text()
    assert f"| 0.5 | {eps:.4g} | {4 * eps:.4g} | {rounds * 4 * eps:.4g} ({rounds} rounds) |" in text
    assert "| 1.0 | - | no guarantee | no guarantee |" in text

    # The same grid on a real 2-worker Dask cluster: every run seeded on its own, so the
    # same results (wall-clock times and the output paths aside).
    on_dask = tmp_path / "dask"
    args = [*result_args(mq2008_dir, on_dask), "--dask-workers", "2"]
    ok(args)
    spread = json.loads((on_dask / "results.json").read_text())
    assert untimed(spread, drop=("figures",)) == untimed(data, drop=("figures",))
