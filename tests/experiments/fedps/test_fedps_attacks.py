"""FedPS under poisoning (:class:`fedrank.simulation.attacks.FedPSAttacker`): a fixed share
of the users sends boosted model-replacement deltas (Bagdasaryan et al. 2020) or a vector
attack; the run records it, and the attack changes what the server learns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fedrank.cli import main
from fedrank.errors import ConfigError
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.run import FedPSResult, run_fedps
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.simulation.attacks import Attack

FAST = {
    "rounds": 2,
    "clients_per_step": 4,
    "n_topics": 5,
    "patience": 8,
    "seed": 1,
    "warmup_rounds": 0,
}


def _maps(result: FedPSResult) -> list[tuple[float, float]]:
    """The validation and test MAP of every evaluation (times left out)."""
    return [(c["valid_MAP"], c.get("test_MAP", -1.0)) for c in result.curve]


def test_model_replacement_is_recorded_and_changes_the_model(small: FedPSData) -> None:
    settings = FedPSSettings(mode="flat", **FAST)  # type: ignore[arg-type]
    clean = run_fedps(small, settings)
    attacked = run_fedps(small, settings, attack=Attack(0.25, "model-replacement"))
    report = attacked.to_json()["attack"]
    assert report["attack"] == {"fraction": 0.25, "kind": "model-replacement"}
    assert report["malicious_users"] == 3 and report["users"] == len(small.users)
    assert report["messages"] == 2 * len(small.users)  # every client once per round
    assert report["malicious_messages"] == 2 * 3
    assert "attack" not in clean.to_json()
    assert _maps(attacked) != _maps(clean)


def test_attacks_need_a_federated_mode(small: FedPSData) -> None:
    with pytest.raises(ConfigError, match="federated run"):
        run_fedps(small, FedPSSettings(mode="central", **FAST),  # type: ignore[arg-type]
                  attack=Attack(0.2, "sign-flip"))  # fmt: skip
    with pytest.raises(ConfigError, match="does not apply to fedavg"):
        run_fedps(small, FedPSSettings(mode="flat", **FAST),  # type: ignore[arg-type]
                  attack=Attack(0.2, "targeted-seed"))  # fmt: skip


def test_cli_run_with_an_attack(aol_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["fedps", "run", "--mode", "proxy", "--log", str(aol_log), "--users", "8",
            "--seed", "1", "--rounds", "1", "-k", "4", "--per-proxy", "2", "--malicious",
            "0.25", "--attack", "model-replacement", "--warmup-rounds", "1",
            "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "attack: 25% malicious (model-replacement)" in result.output
    run = json.loads(out.read_text())["runs"][0]
    assert run["attack"]["malicious_users"] == 2
    bad = CliRunner().invoke(main, [*args[:3], "central", *args[4:]])
    assert bad.exit_code == 2 and "mode central has none" in bad.output
