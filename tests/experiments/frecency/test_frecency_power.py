"""Power analysis of the frecency study at the level of users (``fedrank.experiments.
frecency_power``), on small simulated studies."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.frecency.power import effect_power, training_power
from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.experiments.frecency.study import FrecencyStudyConfig
from fedrank.models.frecency.weights import classic_defaults

SMALL = FrecencyStudyConfig(n_users=200, iterations=2, eval_searches_per_user=4,
                            history_days=14.0, seed=5)  # fmt: skip


def test_effect_power_resamples_users_of_a_pilot() -> None:
    rng = np.random.default_rng(0)
    res = effect_power(SMALL, hidden_weights("shifted"), repetitions=40, rng=rng)
    assert res["unit"] == "user" and res["metric"] == "selected_rank"
    assert res["pilot_users"]["control"] + res["pilot_users"]["treatment"] <= 200
    assert res["pilot_users"]["control"] > 50 and res["pilot_users"]["treatment"] > 50
    # a large shift of every control user needs few users; the same model needs many more
    shifted = effect_power(SMALL, classic_defaults(), effect=0.5, repetitions=40,
                           rng=np.random.default_rng(1))  # fmt: skip
    assert shifted["n"] is not None and shifted["n"] < 60
    assert shifted["treatment_mean"] == pytest.approx(shifted["control_mean"] + 0.5)
    same = effect_power(SMALL, classic_defaults(), repetitions=20, rng=np.random.default_rng(2),
                        power=0.9)  # fmt: skip
    assert same["n"] is None or same["n"] > 500  # defaults vs defaults: no real effect
    with pytest.raises(ConfigError, match="metric"):
        effect_power(SMALL, classic_defaults(), metric="loss", rng=rng)


def test_training_power_runs_whole_studies() -> None:
    config = FrecencyStudyConfig(n_users=60, iterations=4, eval_searches_per_user=1,
                                 history_days=10.0, seed=2)  # fmt: skip
    seen: list[int] = []
    res = training_power(config, target_reduction=0.01, probability=0.5, repetitions=2,
                         n_min=60, n_max=120, progress=lambda n, share: seen.append(n))  # fmt: skip
    assert set(res) >= {"n", "power", "curve", "reached", "reductions", "iterations"}
    assert seen and seen[0] == 60
    assert all(len(r) == 2 for r in res["reductions"].values())
    with pytest.raises(ConfigError):
        training_power(config, target_reduction=1.5)
