"""The frecency studies shared by the acceptance tests of both frecency models, run once
per session in the calibrated synthetic world: classic frecency at the headline's full
size (``fedrank frecency simulate --preset shifted --users 3000 --iterations 40 --seed
11``, about a minute), modern frecency small (1,000 users, 20 iterations, seed 0; its
study is not meaningful in this world, docs/frecency.md)."""

from __future__ import annotations

import pytest

from fedrank.experiments.frecency.study import FrecencyStudyConfig, StudyResult, run_study

FULL = {"n_users": 3000, "iterations": 40, "seed": 11}
SMALL = {"n_users": 1000, "iterations": 20, "seed": 0}


@pytest.fixture(scope="session")
def classic_shifted() -> StudyResult:
    return run_study(FrecencyStudyConfig(model="classic", preset="shifted", **FULL))


@pytest.fixture(scope="session")
def modern_shifted() -> StudyResult:
    return run_study(FrecencyStudyConfig(model="modern", preset="shifted", **SMALL))


@pytest.fixture(params=("classic", "modern"))
def shifted_study(request: pytest.FixtureRequest) -> StudyResult:
    """The ``shifted`` study of each frecency model."""
    return request.getfixturevalue(f"{request.param}_shifted")
