"""``fedrank privacy report`` and ``fedrank frecency simulate --dp-epsilon``, in-process."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fedrank.experiments.foltr.run import FoltrConfig, FoltrResult
from fedrank.privacy.accounting import gaussian_epsilon, gaussian_noise_multiplier
from tests.cli.clirun import argv, assert_clean_failure, ok, run

TINY_STUDY = "frecency simulate --users 300 --iterations 2 --seed 1 --history-days 14"
DP = "--dp-epsilon 4 --dp-delta 1e-5 --dp-clip 0.05"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny study with and without central DP (same seed)."""
    out = tmp_path_factory.mktemp("runs")
    paths = {"dp": out / "dp.json", "plain": out / "plain.json"}
    ok(argv(f"{TINY_STUDY} {DP} --json", paths["dp"]))
    ok(argv(f"{TINY_STUDY} --json", paths["plain"]))
    return paths


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_dp_epsilon_writes_a_privacy_key_within_the_budget(runs: dict[str, Path]) -> None:
    dp, plain = _load(runs["dp"]), _load(runs["plain"])
    privacy = dp["privacy"]
    assert privacy["epsilon"] <= 4.0 and privacy["target_epsilon"] == 4.0
    assert (privacy["rounds"], privacy["delta"], privacy["clip"]) == (2, 1e-5, 0.05)
    assert privacy["sampling_rate"] == 1.0 and privacy["mechanism"] == "gaussian"
    z = privacy["noise_multiplier"]
    assert privacy["epsilon"] == pytest.approx(gaussian_epsilon(z, 1e-5, 2))
    stds = privacy["noise_std_per_iteration"]
    assert stds == pytest.approx([z * 0.05 / m for m in dp["reports_per_iteration"]])
    # without --dp-epsilon: a privacy object with no mechanism; the DP settings stay out of
    # the study's config, and the first iteration (before any step) is the same run
    assert plain["privacy"] == {
        "mechanism": "none",
        "epsilon": None,
        "delta": None,
        "rounds": None,
        "sampling_rate": 1.0,
        "noise_multiplier": None,
        "clip": None,
    }
    assert dp["config"] == plain["config"]
    assert dp["loss_per_iteration"][0] == plain["loss_per_iteration"][0]
    assert dp["final_weights"] != plain["final_weights"]


def test_report_on_a_private_run(runs: dict[str, Path], tmp_path: Path) -> None:
    privacy = _load(runs["dp"])["privacy"]
    out = ok(["privacy", "report", "--json", str(tmp_path / "r.json"), "--run", str(runs["dp"])])
    text = out.output
    assert "frecency: gaussian (central)" in text
    assert "per message:          none: central DP protects the aggregate" in text
    assert f"epsilon {privacy['epsilon']:.5g}, delta 1e-05 over 2 round(s)" in text
    row = _load(tmp_path / "r.json")["systems"][0]
    assert row["per_user"] == {"epsilon": privacy["epsilon"], "delta": 1e-5, "rounds": 2}
    one = gaussian_epsilon(privacy["noise_multiplier"], 1e-5, 1)
    assert row["per_round"]["epsilon"] == pytest.approx(one)
    assert one < privacy["epsilon"]


def test_report_on_a_run_without_privacy(runs: dict[str, Path]) -> None:
    text = ok(argv("privacy report --run", runs["plain"])).output
    assert "frecency: none" in text
    assert "per user (training):  none: no privacy mechanism" in text


def test_report_on_a_foltr_es_run(tmp_path: Path) -> None:
    path = tmp_path / "foltr.json"
    result = FoltrResult(config=FoltrConfig(p=0.8, batch=2), data={}, batch_maxrr=[0.1] * 5)
    path.write_text(json.dumps(result.to_json()))
    ok(["privacy", "report", "--json", str(tmp_path / "r.json"), "--run", str(path)])
    row = _load(tmp_path / "r.json")["systems"][0]
    per_value = math.log(0.8 * 10 / 0.2)
    assert row["mechanism"] == "randomized response (local)"
    assert row["per_message"]["epsilon"] == pytest.approx(2 * per_value)
    assert row["per_user"] == {"epsilon": pytest.approx(5 * 2 * per_value), "delta": 0.0,
                               "rounds": 5}  # fmt: skip
    # the run's own privacy object says the same
    assert result.to_json()["privacy"] == {
        "mechanism": "randomized response (local)",
        "epsilon": pytest.approx(5 * 2 * per_value),
        "delta": 0.0,
        "rounds": 5,
        "sampling_rate": 1.0,
        "noise_multiplier": None,
        "clip": None,
    }


def test_report_on_a_server_config(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('[server]\nworkload = "foltr-es"\n\n[foltr_es]\np = 0.9\nbatch = 4\n')
    text = ok(argv("privacy report --rounds 10 --config", config)).output
    per_message = 4 * math.log(0.9 * 10 / 0.1)
    assert f"per message:          epsilon {per_message:.5g} (pure) over 1 round(s)" in text
    assert f"per user (training):  epsilon {10 * per_message:.5g} (pure)" in text
    text = ok(argv("privacy report --config", config)).output
    assert "k x" in text  # per user: not known without --rounds


def test_report_on_a_private_server_config(tmp_path: Path) -> None:
    """``[privacy]``: the report gives what the server's /v1/status will say after the
    budget's rounds (dp_accounting's epsilon for the calibrated noise), or after --rounds."""
    config = tmp_path / "server.toml"
    config.write_text(
        '[server]\nworkload = "fedavg"\n[privacy]\nepsilon = 3.0\ndelta = 1e-6\n'
        "clip = 0.5\nrounds = 20\n"
    )
    ok(["privacy", "report", "--json", str(tmp_path / "r.json"), "--config", str(config)])
    row = _load(tmp_path / "r.json")["systems"][0]
    z = gaussian_noise_multiplier(3.0, 1e-6, 20)
    assert row["mechanism"] == "gaussian (central)"
    assert row["parameters"]["noise_multiplier"] == pytest.approx(z)
    assert row["per_user"]["epsilon"] == pytest.approx(gaussian_epsilon(z, 1e-6, 20))
    assert row["per_user"]["epsilon"] <= 3.0
    text = ok(argv("privacy report --rounds 5 --config", config)).output
    assert f"epsilon {gaussian_epsilon(z, 1e-6, 5):.5g}, delta 1e-06 over 5 round(s)" in text
    assert_clean_failure(run(argv("privacy report --rounds 21 --config", config)), "at most")


def test_report_refuses_unclear_input(runs: dict[str, Path], tmp_path: Path) -> None:
    assert_clean_failure(run(["privacy", "report"]), "exactly one of")
    other = tmp_path / "other.json"
    other.write_text('{"config": {}, "modes": {}}')
    assert_clean_failure(run(argv("privacy report --run", other)), "not a run JSON")
    assert_clean_failure(
        run(argv("privacy report --rounds 3 --run", runs["plain"])), "--rounds applies"
    )


def test_dp_options_refuse_a_bad_budget() -> None:
    assert_clean_failure(run(argv(f"{TINY_STUDY} --dp-epsilon 4 --dp-delta 0")), "delta")
    for alone in ("--dp-clip-quantile 0.5", "--dp-count-noise 5", "--dp-denominator 50"):
        assert_clean_failure(run(argv(f"{TINY_STUDY} {alone}")), "give --dp-epsilon")
    # a delta, clip or threshold alone used to be ignored: the run was not private
    for alone in ("--dp-delta 1e-6", "--dp-clip 0.05", "--dp-threshold 0.5"):
        assert_clean_failure(run(argv(f"{TINY_STUDY} {alone}")), "give --dp-epsilon")
    assert_clean_failure(
        run(argv(f"{TINY_STUDY} {DP} --dp-count-noise 5")), "give --dp-clip-quantile"
    )


def test_a_fixed_denominator_in_a_study(tmp_path: Path) -> None:
    """``--dp-denominator W``: the noise on each iteration's aggregate is ``z C / W``
    whatever the count; under Rprop, which steps on signs, the published weights are those
    of the run without it (dividing by W or by m keeps every sign); under SGD they differ."""
    docs = {}
    for name, extra in {
        "count": "",
        "fixed": " --dp-denominator 50",
        "sgd_count": " --optimizer sgd",
        "sgd_fixed": " --optimizer sgd --dp-denominator 50",
    }.items():
        path = tmp_path / f"{name}.json"
        ok(argv(f"{TINY_STUDY} {DP}{extra} --json", path))
        docs[name] = _load(path)
    privacy = docs["fixed"]["privacy"]
    assert privacy["denominator"] == 50.0 and "participation" in privacy["adjacency"]
    z = privacy["noise_multiplier"]
    assert privacy["noise_std_per_iteration"] == pytest.approx([z * 0.05 / 50] * 2)
    assert "denominator" not in docs["count"]["privacy"]
    assert docs["fixed"]["published_weights"] == docs["count"]["published_weights"]
    assert docs["sgd_fixed"]["published_weights"] != docs["sgd_count"]["published_weights"]


def test_distributed_dp_in_a_study(tmp_path: Path) -> None:
    """``--dp-mode distributed``: the clients' Skellam noise under (emulated) secure
    aggregation, the plan's guarantee in the JSON and `privacy report --run`, reproducible;
    central DP's options refused with it."""
    path = tmp_path / "distributed.json"
    ok(argv(f"{TINY_STUDY} {DP} --dp-mode distributed --json", path))
    privacy = _load(path)["privacy"]
    assert privacy["mechanism"] == "skellam (distributed, secure aggregation)"
    assert privacy["accountant"] == "rdp" and 3.9 < privacy["epsilon"] <= 4.0
    treatment = privacy["clients_per_round"]
    assert privacy["threshold"] == -(-treatment // 2)
    assert len(privacy["contributors_per_iteration"]) == 2
    assert all(
        privacy["threshold"] <= m <= treatment for m in privacy["contributors_per_iteration"]
    )
    ok(["privacy", "report", "--json", str(tmp_path / "r.json"), "--run", str(path)])
    row = _load(tmp_path / "r.json")["systems"][0]
    assert row["mechanism"] == privacy["mechanism"]
    assert row["per_user"]["epsilon"] == pytest.approx(privacy["epsilon"])
    assert 0 < row["per_round"]["epsilon"] < privacy["epsilon"]
    again = tmp_path / "again.json"
    ok(argv(f"{TINY_STUDY} {DP} --dp-mode distributed --json", again))
    assert _load(again)["published_weights"] == _load(path)["published_weights"]
    assert_clean_failure(
        run(argv(f"{TINY_STUDY} {DP} --dp-mode distributed --dp-denominator 50")),
        "drop clip_quantile and denominator",
    )
    assert_clean_failure(run(argv(f"{TINY_STUDY} --dp-mode distributed")), "needs --dp-epsilon")


def test_an_adaptive_clip_in_a_study(tmp_path: Path) -> None:
    """``--dp-clip-quantile``: the clip of every iteration in the JSON, the first the
    configured one, the noise scaled by each, epsilon within the budget."""
    path = tmp_path / "adaptive.json"
    out = ok(argv(f"{TINY_STUDY} {DP} --dp-clip-quantile 0.5 --dp-count-noise 5 --json", path))
    doc = _load(path)
    privacy = doc["privacy"]
    assert privacy["epsilon"] <= 4.0 and privacy["noise_multiplier"] == pytest.approx(
        gaussian_noise_multiplier(4.0, 1e-5, 2), rel=1e-6
    )
    clips = privacy["clip_per_iteration"]
    assert len(clips) == 2 and clips[0] == 0.05 and clips[1] != 0.05
    assert (privacy["clip_quantile"], privacy["count_noise"]) == (0.5, 5.0)
    z_u = privacy["update_noise_multiplier"]
    assert z_u > privacy["noise_multiplier"]
    counts = doc["reports_per_iteration"]
    assert privacy["noise_std_per_iteration"] == pytest.approx(
        [z_u * c / m for c, m in zip(clips, counts, strict=True)]
    )
    assert "adaptive clip (quantile 0.5" in out.output


def test_randomized_signs_in_a_study_and_its_report(tmp_path: Path) -> None:
    path = tmp_path / "ldp.json"
    ok(argv(f"{TINY_STUDY} --message sign --sign-epsilon 0.5 --json", path))
    data = _load(path)
    assert data["config"]["sign_epsilon"] == 0.5
    assert data["privacy"]["mechanism"] == "randomized response on signs (local)"
    assert data["privacy"]["epsilon"] == pytest.approx(2 * 22 * 0.5)  # 2 iterations
    text = ok(argv("privacy report --run", path)).output
    assert "per message:          epsilon 11 (pure)" in text
    assert_clean_failure(run(argv(f"{TINY_STUDY} --sign-epsilon 0.5")), "message = sign")
