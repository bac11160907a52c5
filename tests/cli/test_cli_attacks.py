"""``--malicious FRACTION --attack KIND`` on ``fedrank frecency simulate`` and ``fedrank foltr
train`` (:mod:`fedrank.simulation.attacks`): the JSON records the attack and its message
counts, ``--malicious 0`` changes nothing, and bad combinations fail with one clean line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.clirun import assert_clean_failure, ok, run
from tests.untimed import untimed

SMALL_STUDY = ["--users", "300", "--iterations", "3", "--seed", "1", "--history-days", "14"]
#: 200 clients x 4 interactions, 10 iterations.
SMALL_ES = ["--clients", "200", "--interactions", "8000", "--seed", "3"]
SMALL_FPDGD = ["--algorithm", "fpdgd", "--clients", "10", "--interactions", "2000", "--seed", "3"]


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "letor-atk"))


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _train(mq2008_dir: Path, tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    ok(["foltr", "train", "--data", str(mq2008_dir), *args, "--json", str(out)])
    return _json(out)


# ---------------------------------------------------------------------------- foltr train


def test_foltr_malicious_zero_changes_nothing(mq2008_dir: Path, tmp_path: Path) -> None:
    plain = _train(mq2008_dir, tmp_path, "plain", *SMALL_ES)
    zero = _train(mq2008_dir, tmp_path, "zero", *SMALL_ES, "--malicious", "0")
    drop = ("interactions_per_second",)
    assert "attack" not in plain and untimed(zero, drop) == untimed(plain, drop)


def test_foltr_targeted_seed_records_the_attack(mq2008_dir: Path, tmp_path: Path) -> None:
    args = [*SMALL_ES, "--malicious", "0.2", "--attack", "targeted-seed", "--attack-seeds", "50"]
    out = tmp_path / "targeted.json"
    result = ok(["foltr", "train", "--data", str(mq2008_dir), *args, "--json", str(out)])
    assert "attack: 20% malicious (targeted-seed): 400 of 2,000 messages malicious" in (
        result.output
    )
    report = _json(out)["attack"]
    assert report["attack"] == {"fraction": 0.2, "kind": "targeted-seed", "candidates": 50}
    assert report["messages"] == 2000 and report["malicious_messages"] == 400
    assert report["malicious_per_iteration"] == [40] * 10 and report["refused_messages"] == 0
    # Reproducible: the same seed gives the same run.
    again = _train(mq2008_dir, tmp_path, "again", *args)
    assert again["final_params"] == _json(out)["final_params"]
    issued = _train(mq2008_dir, tmp_path, "issued", *args[:-2], "--server-seeds")
    assert issued["attack"]["attack"]["server_seeds"] is True
    assert issued["final_params"] != again["final_params"]


def test_foltr_scale_is_refused_by_the_metric_range(mq2008_dir: Path, tmp_path: Path) -> None:
    report = _train(mq2008_dir, tmp_path, "scale", *SMALL_ES, "--malicious", "0.1", "--attack",
                    "scale", "--attack-factor", "10")["attack"]  # fmt: skip
    assert report["attack"] == {"fraction": 0.1, "kind": "scale", "factor": 10.0}
    assert report["malicious_messages"] == 200
    # Every scaled report with a click leaves MaxRR's [0, 1]; 10 x 0 = 0 stays.
    assert 150 <= report["refused_messages"] <= 200
    assert sum(report["refused_per_iteration"]) == report["refused_messages"]


def test_fpdgd_takes_the_vector_attacks(mq2008_dir: Path, tmp_path: Path) -> None:
    plain = _train(mq2008_dir, tmp_path, "fpdgd", *SMALL_FPDGD)
    flipped = _train(mq2008_dir, tmp_path, "flip", *SMALL_FPDGD, "--malicious", "0.3",
                     "--attack", "sign-flip")  # fmt: skip
    assert flipped["attack"]["malicious_messages"] == 3 * 50
    assert flipped["final_params"] != plain["final_params"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attack", "random"], "--attack random needs --malicious FRACTION > 0"),
        (["--malicious", "0.2"], "--malicious needs --attack"),
        (["--malicious", "1", "--attack", "random"], "must lie in [0, 1), got 1.0"),
        (["--malicious", "-0.5", "--attack", "random"], "must lie in [0, 1)"),
        (["--malicious", "0.2", "--attack", "random", "--attack-seeds", "9"],
         "--attack-seeds is the targeted-seed attack's"),
        (["--malicious", "0.2", "--attack", "random", "--attack-factor", "9"],
         "--attack-factor is the scale attack's"),
        (["--server-seeds"], "--server-seeds needs --malicious FRACTION and --attack"),
        (["--algorithm", "fpdgd", "--malicious", "0.2", "--attack", "targeted-seed"],
         "the targeted-seed attack does not apply to fpdgd"),
        (["--algorithm", "fpdgd", "--malicious", "0.2", "--attack", "random", "--server-seeds"],
         "server-issued seeds are a FOLtR-ES defense"),
    ],
)  # fmt: skip
def test_foltr_bad_attack_options_fail_cleanly(
    mq2008_dir: Path, args: list[str], message: str
) -> None:
    result = run(["foltr", "train", "--data", str(mq2008_dir), *SMALL_ES, *args])
    assert_clean_failure(result, message)


# ---------------------------------------------------------------------------- frecency


def test_frecency_malicious_zero_changes_nothing(tmp_path: Path) -> None:
    plain, zero = tmp_path / "plain.json", tmp_path / "zero.json"
    ok(["frecency", "simulate", *SMALL_STUDY, "--json", str(plain)])
    ok(["frecency", "simulate", *SMALL_STUDY, "--malicious", "0.0", "--json", str(zero)])
    assert plain.read_bytes() == zero.read_bytes()
    assert "attack" not in _json(plain)


def test_frecency_attack_with_defenses_records_the_counts(tmp_path: Path) -> None:
    out = tmp_path / "attacked.json"
    args = ["--malicious", "0.2", "--attack", "random", "--aggregator", "trimmed-mean",
            "--trim", "0.2", "--norm-bound", "0.05", "--norm-quantile", "0.5"]  # fmt: skip
    result = ok(["frecency", "simulate", *SMALL_STUDY, *args, "--json", str(out)])
    data = _json(out)
    report = data["attack"]
    assert report["attack"] == {"fraction": 0.2, "kind": "random"}
    treatment = report["treatment_users"]
    assert report["malicious_users"] == int(0.2 * treatment + 0.5)
    assert report["messages"] == sum(data["reports_per_iteration"])
    assert 0 < report["malicious_messages"] < report["messages"]
    assert len(report["malicious_per_iteration"]) == 3
    config = data["config"]
    assert (config["aggregator"], config["trim"], config["norm_bound"]) == ("trimmed-mean", 0.2,
                                                                           0.05)  # fmt: skip
    assert config["norm_quantile"] == 0.5
    assert "attack: 20% malicious (random)" in result.output
    again = tmp_path / "again.json"
    ok(["frecency", "simulate", *SMALL_STUDY, *args, "--json", str(again)])
    assert again.read_bytes() == out.read_bytes()  # the attack is seeded


def test_frecency_attack_changes_the_published_model(tmp_path: Path) -> None:
    plain, flipped = tmp_path / "plain.json", tmp_path / "flipped.json"
    ok(["frecency", "simulate", *SMALL_STUDY, "--json", str(plain)])
    ok(["frecency", "simulate", *SMALL_STUDY, "--malicious", "0.4", "--attack", "sign-flip",
        "--json", str(flipped)])  # fmt: skip
    a, b = _json(plain), _json(flipped)
    assert a["weights_per_iteration"][0] == b["weights_per_iteration"][0]
    assert a["final_weights"] != b["final_weights"]
    # The recorded losses are the users' true ones: the first iteration's is the same.
    assert a["loss_per_iteration"][0] == b["loss_per_iteration"][0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--malicious", "0.2", "--attack", "targeted-seed"], "'targeted-seed' is not one of"),
        (["--attack", "scale"], "--attack scale needs --malicious FRACTION > 0"),
        (["--malicious", "0.2"], "--malicious needs --attack"),
        (["--malicious", "2", "--attack", "scale"], "must lie in [0, 1)"),
        (["--malicious", "0.2", "--attack", "scale", "--server-seeds"], "No such option"),
    ],
)
def test_frecency_bad_attack_options_fail_cleanly(args: list[str], message: str) -> None:
    result = run(["frecency", "simulate", *SMALL_STUDY, *args])
    assert result.exit_code != 0 and message in result.output
    assert "Traceback" not in result.output
