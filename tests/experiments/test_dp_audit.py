"""fedrank.experiments.dp_audit: the empirical lower bound on DPStrategy's epsilon never
exceeds the accountant's upper bound, is not vacuous, and catches a wrapper whose noise is
smaller than the one it claims."""

from __future__ import annotations

import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.dp_audit import audit_gaussian
from fedrank.privacy.accounting import gaussian_epsilon
from fedrank.strategies.dp import DPStrategy
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from tests.cli.clirun import argv, ok

DELTA = 1e-5


def _dp(z: float) -> DPStrategy:
    return DPStrategy(FedAvgStrategy(FedAvgConfig(dim=3)), z, 0.5, 0)


@pytest.mark.parametrize(("z", "rounds"), [(0.5, 1), (1.0, 1), (2.0, 4)])
def test_the_lower_bound_stays_below_the_accountant(z: float, rounds: int) -> None:
    result = audit_gaussian(_dp(z), trials=10_000, rounds=rounds, delta=DELTA, seed=3)
    upper = gaussian_epsilon(z, DELTA, rounds)
    assert 0.3 * upper < result.epsilon_lower <= upper


def test_the_audit_catches_noise_smaller_than_claimed() -> None:
    claimed = gaussian_epsilon(1.0, DELTA, 1)  # the guarantee of z = 1 ...
    broken = audit_gaussian(_dp(0.2), trials=10_000, delta=DELTA, seed=3)  # ... noise of 0.2
    assert broken.epsilon_lower > claimed


def test_same_seed_same_audit_and_bad_settings() -> None:
    a = audit_gaussian(_dp(1.0), trials=2_000, seed=5)
    b = audit_gaussian(_dp(1.0), trials=2_000, seed=5)
    assert a == b
    with pytest.raises(ConfigError, match="trials >= 100"):
        audit_gaussian(_dp(1.0), trials=10)
    with pytest.raises(ConfigError, match="delta and alpha"):
        audit_gaussian(_dp(1.0), delta=0.0)


def test_cli_audit_prints_both_bounds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = ok(argv("privacy audit --noise-multiplier 1 --trials 2000 --json", tmp_path / "a.json"))
    assert "epsilon >=" in out.output and "epsilon <= 4.377" in out.output
