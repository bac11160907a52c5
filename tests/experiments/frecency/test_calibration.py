"""Fitting the typing model to the paper's control branch (``fedrank.simulation.
calibration``): the search on a known response, and one real (tiny) control phase."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.frecency.calibration import (
    PAPER_CONTROL,
    calibrate_typing,
    control_metrics,
)
from fedrank.experiments.frecency.study import FrecencyStudyConfig
from fedrank.simulation.frecency.urlbar import TypingModel


def response(config: object, typing: TypingModel) -> tuple[float, float]:
    """A smooth stand-in for the simulated control branch: more blind characters type more
    and select higher; reading deeper types less and selects lower."""
    chars = 2.0 + 1.1 * typing.blind_chars - 1.5 * typing.scan_continue
    rank = 0.05 + 0.6 * typing.scan_continue - 0.03 * typing.blind_chars
    return chars, rank


def test_calibration_finds_the_typing_model_of_a_known_response() -> None:
    target = response(None, TypingModel(2.3, 0.45))
    res = calibrate_typing(object(), target, metrics=response, max_evaluations=80)
    assert res.typing.blind_chars == pytest.approx(2.3, abs=0.05)
    assert res.typing.scan_continue == pytest.approx(0.45, abs=0.02)
    assert res.chars_typed == pytest.approx(target[0], rel=0.01)
    assert res.selected_rank == pytest.approx(target[1], rel=0.02)
    data = res.to_json()
    assert data["paper_control"]["chars_typed_mean"] == target[0]
    assert len(data["evaluations"]) >= 12  # the grid, then Nelder-Mead
    assert min(e["error"] for e in data["evaluations"]) == pytest.approx(
        ((res.chars_typed - target[0]) / target[0]) ** 2
        + ((res.selected_rank - target[1]) / target[1]) ** 2
    )


def test_the_paper_target_and_bad_targets() -> None:
    assert PAPER_CONTROL == (4.26239, 0.35350)
    with pytest.raises(ConfigError):
        calibrate_typing(object(), (0.0, 0.3), metrics=response)


def test_control_metrics_run_the_control_phase() -> None:
    config = FrecencyStudyConfig(n_users=60, iterations=2, eval_searches_per_user=2,
                                 history_days=10.0, seed=1)  # fmt: skip
    lazy = control_metrics(config, TypingModel(0.0, 1.0))
    patient = control_metrics(config, TypingModel(4.0, 0.0))
    assert 1.0 <= lazy[0] < patient[0]  # typing before looking types more
    assert patient[1] < lazy[1]  # reading only the top row selects higher
    assert np.isfinite(lazy).all() and np.isfinite(patient).all()
