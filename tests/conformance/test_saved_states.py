"""Saved states in the JSON layout that stores and proxies hold still load, for every
aggregator and optimizer (``saved_states.json``, in this directory).

Each aggregator state was saved after folding in updates with odd values (-0.0, 1e-308,
5e-324, 1e200, float32 rows) and is recorded with its ``finalize``; each optimizer state was
saved after three steps and is recorded with the step it takes next, for float64 and
float32 parameters, and the state after that step. Loading must restore the state exactly:
it saves back to the same JSON (bit for bit) and behaves as recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrank.aggregators import (
    CoordinateMedian,
    GatedMean,
    MetricMean,
    NormBounded,
    SignVote,
    TrimmedMean,
    WeightedMean,
)
from fedrank.aggregators.es_gradient import ESGradient
from fedrank.core.state_json import array_from_json, float_from_json
from fedrank.optim import SGD, Adam, Rprop
from fedrank.optim.chain import Chain, Scale
from tests.conformance.statekit import as_text

SAVED = json.loads((Path(__file__).parent / "saved_states.json").read_text())

#: The aggregators the saved states belong to, built as they were when saved.
AGGREGATORS: dict[str, Callable[[], Any]] = {
    "WeightedMean": lambda: WeightedMean(4),
    "GatedMean": lambda: GatedMean(4, z=1.0),
    "SignVote": lambda: SignVote(4),
    "SignVote-weighted": lambda: SignVote(4, weighted=True),
    "TrimmedMean": lambda: TrimmedMean(4, trim=0.25),
    "CoordinateMedian": lambda: CoordinateMedian(4),
    "NormBounded-WeightedMean": lambda: NormBounded(WeightedMean(4), bound=2.0, quantile=0.5),
    "NormBounded-TrimmedMean": lambda: NormBounded(TrimmedMean(4, trim=0.25), bound=2.0),
    "ESGradient": lambda: ESGradient(4, sigma=0.01, antithetic=True, difference_bound=0.5),
    "MetricMean": MetricMean,
}

#: The optimizers the saved states belong to.
OPTIMIZERS: dict[str, Callable[[], Any]] = {
    "Rprop": Rprop,
    "SGD": lambda: SGD(learning_rate=0.1),
    "Adam": lambda: Adam(learning_rate=0.1),
    "Scale": lambda: Scale(-2.0),
    "Chain(Scale,SGD)": lambda: Chain(Scale(-1.0), SGD(learning_rate=1.0)),
    "Chain(Scale,Adam)": lambda: Chain(Scale(2.0), Adam(learning_rate=0.1)),
    "Chain(Rprop)": lambda: Chain(
        Rprop(eta_plus=2.0, eta_minus=0.6, step_init=2.0, step_min=1.0, step_max=3.0)
    ),
}


def test_every_saved_state_has_its_component() -> None:
    assert sorted(SAVED["aggregators"]) == sorted(AGGREGATORS)
    assert sorted(SAVED["optimizers"]) == sorted(OPTIMIZERS)


def _same_array(result: np.ndarray, saved: dict[str, Any]) -> None:
    expected = array_from_json(saved)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    assert result.tobytes() == expected.tobytes()


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_a_saved_aggregator_state_loads_exactly(name: str) -> None:
    saved = SAVED["aggregators"][name]
    agg = AGGREGATORS[name]()
    state = agg.state_from_json(saved["state"])
    assert as_text(agg.state_to_json(state)) == as_text(saved["state"])
    with np.errstate(over="ignore", invalid="ignore"):  # GatedMean's squares of 1e200
        result = agg.finalize(state)
    if isinstance(result, dict):
        expected = {k: float_from_json(v) for k, v in saved["finalize"].items()}
        assert as_text(result) == as_text(expected)
    else:
        _same_array(result, saved["finalize"])


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_saved_optimizer_state_loads_exactly_and_steps_as_before(name: str) -> None:
    saved = SAVED["optimizers"][name]
    opt = OPTIMIZERS[name]()
    state = opt.state_from_json(saved["state"])
    assert as_text(opt.state_to_json(state)) == as_text(saved["state"])
    for check in saved["next"]:  # float64, then float32 parameters
        params = array_from_json(check["params"])
        step, after = opt.update(array_from_json(check["update"]), state, params)
        _same_array(step, check["step"])
        assert as_text(opt.state_to_json(after)) == as_text(check["after"])
