"""Central and distributed DP in the FedPS simulator (``--dp-epsilon``; DP-FedAvg through
:class:`~fedrank.strategies.dp.DPStrategy`, docs/privacy.md): the run reports each user's
epsilon over its participations as ``dp_accounting`` computes it, the noise changes what is
learned, the same seed gives the same run, and modes without a FedAvg step refuse it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fedrank.cli import main
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.experiments.fedps import central
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.run import FedPSResult, run_fedps
from fedrank.experiments.fedps.server import FedPSServer
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.federation.privacy import PrivacyConfig
from fedrank.privacy import skellam
from fedrank.privacy.accounting import gaussian_epsilon, gaussian_noise_multiplier
from fedrank.privacy.report import fedps_dp_block, report_run
from fedrank.privacy.skellam import skellam_epsilon, skellam_noise
from tests.untimed import untimed

FAST = {
    "rounds": 1,
    "clients_per_step": 4,
    "n_topics": 5,
    "patience": 8,
    "seed": 1,
    "warmup_rounds": 0,
}
DP = {"dp_epsilon": 4.0, "dp_clip": 0.5}


def _maps(result: FedPSResult) -> list[tuple[float, float]]:
    return [(c["valid_MAP"], c.get("test_MAP", -1.0)) for c in result.curve]


def test_a_private_run_reports_its_guarantee_and_is_reproducible(small: FedPSData) -> None:
    clean = run_fedps(small, FedPSSettings(mode="flat", **FAST))  # type: ignore[arg-type]
    private = run_fedps(small, FedPSSettings(mode="flat", **FAST, **DP))  # type: ignore[arg-type]
    again = run_fedps(small, FedPSSettings(mode="flat", **FAST, **DP))  # type: ignore[arg-type]
    z = gaussian_noise_multiplier(4.0, 1e-6, 1)
    privacy = private.to_json()["privacy"]
    assert privacy["mechanism"] == "gaussian (central)" and privacy["rounds"] == 1
    assert privacy["noise_multiplier"] == pytest.approx(z) and privacy["clip"] == 0.5
    assert privacy["epsilon"] == pytest.approx(gaussian_epsilon(z, 1e-6, 1), rel=1e-9)
    assert 3.9 < privacy["epsilon"] <= 4.0
    assert clean.to_json()["privacy"]["epsilon"] is None
    assert _maps(private) != _maps(clean)  # the noise changes what is learned
    assert _maps(private) == _maps(again) and private.metrics == again.metrics
    proxy_settings = FedPSSettings(mode="proxy", clients_per_proxy_step=2, **FAST, **DP)  # type: ignore[arg-type]
    proxy = run_fedps(small, proxy_settings)
    assert proxy.to_json()["privacy"]["epsilon"] == pytest.approx(privacy["epsilon"])


def test_dp_needs_a_federated_mode_and_a_clip() -> None:
    with pytest.raises(ConfigError, match="mode central has none"):
        FedPSSettings(mode="central", **DP)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dp_clip > 0"):
        FedPSSettings(mode="flat", dp_epsilon=4.0)
    for bad in ({"dp_denominator": 10.0}, {**DP, "dp_denominator": 0.0}):
        with pytest.raises(ConfigError, match="dp_denominator"):
            FedPSSettings(mode="flat", **bad)  # type: ignore[arg-type]


def test_poisson_sampling_gives_amplification_with_a_fixed_denominator(
    small: FedPSData,
) -> None:
    """``sampling = "poisson"``: every step of every round counts, each user in it with
    probability K / N, so the same budget needs far less noise; the run's privacy object,
    `fedrank privacy report --run` and dp_accounting called directly agree."""
    settings = FedPSSettings(mode="flat", sampling="poisson", dp_denominator=4.0, **FAST, **DP)  # type: ignore[arg-type]
    seen: list[int] = []
    result = run_fedps(small, settings, observer=lambda c, _: seen.append(c))
    again = run_fedps(small, settings)
    n = len(small.users)
    counts = np.bincount(seen, minlength=n)
    assert counts.sum() > 0 and not np.all(counts == 1)  # not one visit each, as shuffled
    steps, rate = -(-n // 4), 4 / n
    privacy = result.to_json()["privacy"]
    assert privacy["sampling_rate"] == pytest.approx(rate) and privacy["rounds"] == steps
    z = privacy["noise_multiplier"]
    assert z == pytest.approx(gaussian_noise_multiplier(4.0, 1e-6, steps, rate))
    # amplification needs small samples: at 296 users and K = 10 (q = 0.034, 4 rounds of
    # 30 steps) the budget takes z = 0.89 instead of the shuffled schedule's 2.39
    big = {**asdict(settings), "clients_per_step": 10, "rounds": 4, "dp_denominator": 10.0}
    poisson = fedps_dp_block(big, 296)
    shuffled = fedps_dp_block({**big, "sampling": "shuffle"}, 296)
    assert poisson is not None and shuffled is not None
    assert poisson["noise_multiplier"] < 0.4 * shuffled["noise_multiplier"]
    assert poisson["epsilon"] <= 4.0 and shuffled["epsilon"] <= 4.0
    assert 3.9 < privacy["epsilon"] <= 4.0
    assert privacy["epsilon"] == pytest.approx(gaussian_epsilon(z, 1e-6, steps, rate), rel=1e-9)
    (row,) = report_run(json.loads(json.dumps(untimed({"mode": "flat", "MAP_per_seed": [0],
        "runs": [result.to_json()]}))))  # fmt: skip
    assert row.per_user["epsilon"] == pytest.approx(privacy["epsilon"])
    assert any("Poisson" in note for note in row.notes)
    assert _maps(result) == _maps(again)
    assert result.steps == steps  # no early stop in one round: every step, empty ones too


def test_poisson_sampling_is_checked() -> None:
    with pytest.raises(ConfigError, match="needs a fixed denominator"):
        FedPSSettings(mode="flat", sampling="poisson", **DP)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mode proxy samples its own"):
        FedPSSettings(mode="proxy", sampling="poisson")
    with pytest.raises(ConfigError, match="sampling must be one of shuffle, poisson"):
        FedPSSettings(mode="flat", sampling="random")
    with pytest.raises(ConfigError, match="number of users"):
        fedps_dp_block({**DP, "dp_delta": 1e-6, "rounds": 1, "sampling": "poisson",
                        "clients_per_step": 4})  # fmt: skip


def test_cli_run_with_central_dp(aol_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["fedps", "run", "--mode", "flat", "--log", str(aol_log), "--users", "8", "--seed",
            "1", "--rounds", "1", "-k", "4", "--dp-epsilon", "2", "--dp-clip", "1",
            "--dp-denominator", "4", "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "central DP: epsilon 2 per user at delta 1e-06 over 1 rounds" in result.output
    data = json.loads(out.read_text())
    assert data["runs"][0]["privacy"]["epsilon"] <= 2.0
    assert data["runs"][0]["settings"]["dp_denominator"] == 4.0
    poisson = CliRunner().invoke(main, [*args, "--sampling", "poisson"])
    assert poisson.exit_code == 0, poisson.output
    assert "over 2 steps, each user in each with probability 0.5" in poisson.output
    (row,) = report_run(data)  # what `fedrank privacy report --run` prints
    assert row.mechanism == "gaussian (central)"
    assert row.per_user["epsilon"] == pytest.approx(data["runs"][0]["privacy"]["epsilon"])


def test_a_budget_outside_the_calibrated_range_fails_before_any_work() -> None:
    with pytest.raises(ConfigError, match="outside what the noise is calibrated for"):
        FedPSSettings(mode="flat", dp_epsilon=64.0, dp_clip=0.5)


# --------------------------------------------------------------------- distributed DP

DISTRIBUTED = {**DP, "dp_mode": "distributed"}


def test_a_distributed_dp_run_reports_its_plan_and_is_reproducible(small: FedPSData) -> None:
    """``dp_mode = "distributed"``: the clients' encoded updates carry Skellam shares, the
    guarantee is the plan's for the model's dimension (checked against the Skellam RDP
    computed directly), and `fedrank privacy report --run` reads it back."""
    settings = FedPSSettings(mode="flat", **FAST, **DISTRIBUTED)  # type: ignore[arg-type]
    private = run_fedps(small, settings)
    again = run_fedps(small, settings)
    clean = run_fedps(small, FedPSSettings(mode="flat", **FAST))  # type: ignore[arg-type]
    privacy = private.to_json()["privacy"]
    dim = central._new_model(small, True, 0, settings).get_flat_parameters().size
    privacy_config = settings.privacy()
    assert privacy_config is not None
    plan = privacy_config.skellam_plan(settings.rounds, dim, settings.clients_per_step)
    assert privacy["mode"] == "distributed" and privacy["dim"] == dim
    assert plan.clients == 4 and plan.threshold == 2
    assert privacy["epsilon"] == pytest.approx(
        skellam_epsilon(plan.variance, plan.l1, plan.l2, 1, 1e-6), rel=1e-12
    )
    assert 3.5 < privacy["epsilon"] <= 4.0
    steps = privacy["contributors_per_iteration"]
    assert len(steps) == private.steps and all(0 <= m <= 4 for m in steps)
    assert sum(steps) > 0
    assert privacy["aborted_iterations"] == sum(1 for m in steps if m == 0)
    assert _maps(private) != _maps(clean)  # the noise changes what is learned
    assert _maps(private) == _maps(again) and private.metrics == again.metrics
    assert again.to_json()["privacy"] == privacy
    (row,) = report_run({"MAP_per_seed": [0.5], "mode": "flat", "runs": [private.to_json()]})
    assert row.system == "fedps" and row.mechanism.startswith("skellam")
    assert row.per_user["epsilon"] == pytest.approx(privacy["epsilon"])
    proxy_settings = FedPSSettings(mode="proxy", clients_per_proxy_step=2, **FAST, **DISTRIBUTED)  # type: ignore[arg-type]
    proxy = run_fedps(small, proxy_settings).to_json()["privacy"]
    assert proxy["epsilon"] == pytest.approx(privacy["epsilon"])


def test_the_distributed_step_is_the_decoded_noisy_mean_or_nothing() -> None:
    """The server steps by (sum of the encoded clipped updates + the clients' noise) /
    scale / m; a step with fewer contributors than the threshold leaves the model."""
    dim, clip = 50, 1.0
    plan = skellam.plan(4.0, 1e-6, 2, clip, dim, 4, 3)
    start = np.zeros(dim, dtype=np.float32)
    budget = PrivacyConfig(4.0, 1e-6, clip, mode="distributed", threshold=0.75)
    server = FedPSServer(start, privacy=budget, seed=7, rounds=2, clients=4)
    assert server.strategy.plan == plan  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    updates = rng.normal(size=(3, dim)) * np.array([[0.1], [0.5], [3.0]])  # the last clipped
    server.fold(MessageBatch.of_vectors(updates, np.full(3, 9.0)))
    server.apply()
    norms = np.linalg.norm(updates, axis=1, keepdims=True)
    clipped = updates * np.minimum(1.0, clip / norms)
    encoded = np.rint(clipped * plan.scale).sum(axis=0)
    noise = skellam_noise(np.random.default_rng(7), plan.client_variance * 3, dim)
    expected = (encoded + noise) / plan.scale / 3
    np.testing.assert_allclose(server.broadcast(), expected.astype(np.float32), rtol=1e-6)
    assert np.abs(server.broadcast() - clipped.mean(axis=0)).max() < 20 * plan.noise_std
    before = server.broadcast()
    server.fold(MessageBatch.of_vectors(updates[:2], np.ones(2)))
    server.apply()  # 2 < t = 3: aborted
    assert np.array_equal(server.broadcast(), before) and server.version == 2


def test_distributed_dp_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="needs dp_epsilon"):
        FedPSSettings(mode="flat", dp_mode="distributed")
    with pytest.raises(ConfigError, match="neither Poisson sampling nor dp_denominator"):
        FedPSSettings(mode="flat", dp_denominator=4.0, **DISTRIBUTED)  # type: ignore[arg-type]
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="dp_threshold"):
            FedPSSettings(mode="flat", dp_threshold=bad, **DISTRIBUTED)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dp_mode must be one of central, distributed"):
        FedPSSettings(mode="flat", dp_mode="local", **DP)  # type: ignore[arg-type]
    for budget in (1e4, float("inf"), 0.001):  # refused before any work, as central DP's
        with pytest.raises(ConfigError, match="epsilon"):
            FedPSSettings(mode="flat", dp_mode="distributed", dp_epsilon=budget, dp_clip=0.5)


def test_cli_run_with_distributed_dp(aol_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["fedps", "run", "--mode", "flat", "--log", str(aol_log), "--users", "8", "--seed",
            "1", "--rounds", "1", "-k", "4", "--dp-epsilon", "2", "--dp-clip", "1",
            "--dp-mode", "distributed", "--dp-threshold", "0.75", "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "distributed DP: epsilon" in result.output
    privacy = json.loads(out.read_text())["runs"][0]["privacy"]
    assert privacy["threshold"] == 3 and privacy["epsilon"] <= 2.0
