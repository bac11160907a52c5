"""Small frecency studies in the calibrated synthetic world (1,000 users, 20 iterations,
seed 0; about half a minute each), run once per session and shared by the acceptance
tests of both frecency models. The full-size claims (3,000 users, 40 iterations) are in
docs/frecency.md with the commands that measure them."""

from __future__ import annotations

import pytest

from fedrank.experiments.frecency.study import FrecencyStudyConfig, StudyResult, run_study

SMALL = {"n_users": 1000, "iterations": 20, "seed": 0}


@pytest.fixture(scope="session")
def classic_shifted() -> StudyResult:
    return run_study(FrecencyStudyConfig(model="classic", preset="shifted", **SMALL))


@pytest.fixture(scope="session")
def modern_shifted() -> StudyResult:
    return run_study(FrecencyStudyConfig(model="modern", preset="shifted", **SMALL))


@pytest.fixture(params=("classic", "modern"))
def shifted_study(request: pytest.FixtureRequest) -> StudyResult:
    """The ``shifted`` study of each frecency model."""
    return request.getfixturevalue(f"{request.param}_shifted")
