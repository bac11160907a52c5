"""The study tuning *modern* Firefox frecency (5 parameters) recovers the ``shifted``
preference; the acceptance criteria shared with classic frecency are in
``test_frecency_study_acceptance.py``."""

from __future__ import annotations

from fedrank.experiments.frecency_presets import hidden_weights
from fedrank.experiments.frecency_study import StudyResult
from fedrank.models.frecency.modern import MODERN_DEFAULTS, MODERN_WEIGHT_NAMES
from fedrank.optim.constraints import modern_frecency_safeguards


def test_modern_shifted_constraints_held_and_weights_moved_towards_the_hidden_ones(
    modern_shifted: StudyResult,
) -> None:
    assert modern_shifted.constraints_held
    chain = modern_frecency_safeguards(max_change=3.0)
    traj = modern_shifted.weight_trajectory()
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
    # Hidden: low 0, medium 5, high 120, half-life 20 days (defaults 20, 50, 100, 30). Only
    # the ratios of the class weights matter, so compare high / medium, not the values.
    final = modern_shifted.final_weights
    hidden = dict(zip(MODERN_WEIGHT_NAMES, hidden_weights("shifted", "modern"), strict=True))
    assert final["mediumWeight"] < 15
    assert final["highWeight"] / final["mediumWeight"] > 10
    assert abs(final["halfLifeDays"] - hidden["halfLifeDays"]) < 3
    assert final["veryHighWeight"] == dict(MODERN_DEFAULTS)["veryHighWeight"]  # no signal
