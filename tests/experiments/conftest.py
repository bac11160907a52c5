"""Full-size frecency studies (3,000 users, 40 iterations, seed 0; a few seconds each), run
once per session and shared by the acceptance tests of both frecency models."""

from __future__ import annotations

import pytest

from fedrank.experiments.frecency_study import FrecencyStudyConfig, StudyResult, run_study

MODELS = ("classic", "modern")


def _full_size(model: str, preset: str) -> StudyResult:
    config = FrecencyStudyConfig(model=model, preset=preset, n_users=3000, iterations=40, seed=0)
    return run_study(config)


@pytest.fixture(scope="session")
def classic_shifted() -> StudyResult:
    return _full_size("classic", "shifted")


@pytest.fixture(scope="session")
def modern_shifted() -> StudyResult:
    return _full_size("modern", "shifted")


@pytest.fixture(params=MODELS)
def shifted_study(request: pytest.FixtureRequest) -> StudyResult:
    """The ``shifted`` study of each frecency model."""
    return request.getfixturevalue(f"{request.param}_shifted")


@pytest.fixture(params=MODELS)
def paper_study(request: pytest.FixtureRequest) -> StudyResult:
    """The ``paper`` study (hidden preference = the defaults) of each frecency model."""
    return _full_size(request.param, "paper")
