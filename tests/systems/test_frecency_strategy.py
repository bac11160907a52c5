"""The federated frecency strategy: its server step on hand-computed cases (the direction of
Rprop's step, the safeguards, the deployed setting's rules), and its config section."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, classic_defaults
from fedrank.optim.constraints import ConstraintChain, LowerBound
from fedrank.strategies.base import SafeguardError
from fedrank.systems.frecency.config import PAPER_SIGNIFICANCE_Z, FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy

DIM = len(CLASSIC_WEIGHT_NAMES)


def _step(strategy: FrecencyStrategy, gradients: np.ndarray, params: np.ndarray | None = None):
    agg = strategy.aggregator
    state = agg.accumulate_batch(
        agg.zero(), MessageBatch.of_vectors(gradients, np.ones(gradients.shape[0]))
    )
    params = strategy.initial_params() if params is None else params
    return strategy.server_step(state, params, strategy.init(params))


def test_the_first_step_moves_every_weight_against_the_clients_gradient() -> None:
    """Rprop's first step is step_init (1) against the sign of the aggregate (Sec. 5.3):
    gradients of the loss that all point down raise every weight by exactly 1, a step
    every safeguard allows."""
    strategy = FrecencyStrategy(FrecencyConfig(significance_z=0.0))
    step = _step(strategy, np.full((3, DIM), -2.0))
    np.testing.assert_array_equal(step.params, classic_defaults() + 1.0)
    np.testing.assert_array_equal(step.aggregate, np.full(DIM, -2.0))
    down = _step(strategy, np.full((3, DIM), 2.0))
    raised = classic_defaults() > 0
    np.testing.assert_array_equal(down.params[raised], classic_defaults()[raised] - 1.0)


def test_the_default_gate_still_steps_when_a_fifth_of_the_clients_flip_their_signs() -> None:
    """A share ``f`` of sign-flipped gradients shrinks each weight's mean by ``1 - 2f`` and
    keeps its spread. Weight 0's honest gradients sit 2.5 standard errors from 0: with 20%
    of them flipped they sit at about 1.4, so the old gate of 2 would stop the step and the
    default gate of 1 (``PAPER_SIGNIFICANCE_Z``) lets it through, in the honest direction."""
    rng = np.random.default_rng(3)
    n = 400
    honest = rng.normal(0.0, 1.0, size=(n, DIM))
    honest -= honest.mean(axis=0)  # exactly mean 0, then a known signal on weight 0
    honest[:, 0] += -2.5 * honest[:, 0].std() / np.sqrt(n)
    sent = honest.copy()
    sent[: n // 5] *= -1.0  # the attackers: a fixed fifth of the clients
    default = _step(FrecencyStrategy(FrecencyConfig()), sent)
    assert FrecencyConfig().resolved().significance_z == PAPER_SIGNIFICANCE_Z == 1.0
    assert default.aggregate[0] < 0 and default.params[0] > classic_defaults()[0]
    old = _step(FrecencyStrategy(FrecencyConfig(significance_z=2.0)), sent)
    assert old.aggregate[0] == 0.0 and old.params[0] == classic_defaults()[0]
    clean = _step(FrecencyStrategy(FrecencyConfig(significance_z=2.0)), honest)
    assert clean.aggregate[0] < 0  # without the attack the old gate stepped too


def test_the_safeguards_hold_a_weight_at_zero() -> None:
    """A gradient that pushes the zero bonuses below zero: the step proposes -1, the
    non-negativity safeguard (Sec. 5.6) keeps them at 0."""
    strategy = FrecencyStrategy(FrecencyConfig(significance_z=0.0))
    step = _step(strategy, np.full((2, DIM), 5.0))
    zero = classic_defaults() == 0
    assert zero.sum() == 7
    np.testing.assert_array_equal(step.step[zero], -1.0)
    np.testing.assert_array_equal(step.params[zero], 0.0)
    assert np.all(step.params >= 0)


def test_the_significance_gate_keeps_noisy_weights_still() -> None:
    """Under the ``paper`` setting's gate (1 standard error) a weight whose gradients
    disagree does not move; one whose gradients agree does."""
    strategy = FrecencyStrategy(FrecencyConfig())
    gradients = np.zeros((20, DIM))
    gradients[:, 0] = np.tile([1.0, -1.0], 10)  # mean 0, noisy
    gradients[:, 5] = -1.0  # every client: raise secondBucketWeight
    step = _step(strategy, gradients)
    expected = classic_defaults()
    expected[5] += 1.0
    np.testing.assert_array_equal(step.params, expected)


def test_the_deployed_setting_shifts_and_publishes_integers() -> None:
    """mozilla-deployed: Rprop from step 2, non-negativity by shifting every weight by the
    most negative one, integer weights published (the Scala server)."""
    strategy = FrecencyStrategy(FrecencyConfig(setting="mozilla-deployed"))
    assert strategy.config.significance_z == 0.0 and strategy.config.step_init == 2.0
    step = _step(strategy, np.full((1, DIM), 1.0))
    # every weight falls by 2; the zero bonuses would be -2, so all are shifted up by 2
    np.testing.assert_array_equal(step.params, classic_defaults())
    published = strategy.publish(np.full(DIM, 2.5))
    np.testing.assert_array_equal(published, np.full(DIM, 3.0))  # Java's round: ties up
    paper = FrecencyStrategy(FrecencyConfig())
    np.testing.assert_array_equal(paper.publish(np.full(DIM, 2.5)), np.full(DIM, 2.5))


def test_a_step_the_safeguards_cannot_repair_is_refused() -> None:
    strategy = FrecencyStrategy(FrecencyConfig(significance_z=0.0))

    class Unrepairable(LowerBound):
        def project(self, params: np.ndarray, previous: np.ndarray) -> np.ndarray:
            return params  # claims a bound it never enforces

    strategy.constraints = ConstraintChain(Unrepairable(1e9, [0]), dim=DIM)
    with pytest.raises(SafeguardError, match="could not be satisfied"):
        _step(strategy, np.full((1, DIM), 1.0))


def test_the_step_does_not_touch_its_inputs() -> None:
    strategy = FrecencyStrategy(FrecencyConfig(significance_z=0.0))
    agg = strategy.aggregator
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_vectors(np.ones((2, DIM)), np.ones(2)))
    params = strategy.initial_params()
    opt_state = strategy.init(params)
    before = (params.copy(), agg.state_to_json(state), strategy.optimizer.state_to_json(opt_state))
    strategy.server_step(state, params, opt_state)
    np.testing.assert_array_equal(params, before[0])
    assert agg.state_to_json(state) == before[1]
    assert strategy.optimizer.state_to_json(opt_state) == before[2]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "nope"}, "model must be one of classic, modern"),
        ({"setting": "x"}, "setting must be one of paper, mozilla-deployed"),
        ({"message": "half"}, "message must be one of full, sign"),
        ({"optimizer": "lbfgs"}, "optimizer must be one of rprop, sgd, adam"),
        ({"model": "modern", "setting": "mozilla-deployed"}, "deployed server tuned classic"),
        ({"eps": 0.0}, r"eps must be > 0 \(a finite number\)"),
        ({"significance_z": -1.0}, r"significance_z must be >= 0 \(a finite number\)"),
        ({"significance_z": "1"}, r"significance_z must be >= 0 \(a finite number\)"),
        ({"significance_z": True}, r"significance_z must be >= 0 \(a finite number\)"),
        ({"delta": float("nan")}, "delta"),
        ({"decay_rate": 1.5}, "decay_rate must be in"),
        ({"score_scale": "sqrt"}, "score_scale must be one of log, raw"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FrecencyConfig(**kwargs)


def test_resolved_fills_the_settings_defaults() -> None:
    paper = FrecencyConfig().resolved()
    assert (paper.significance_z, paper.eta_plus, paper.step_init) == (1.0, 1.2, 1.0)
    assert (paper.score_scale, paper.delta) == ("log", 0.1)
    deployed = FrecencyConfig(setting="mozilla-deployed", eta_plus=1.5).resolved()
    assert (deployed.significance_z, deployed.eta_plus, deployed.eta_minus) == (0.0, 1.5, 0.6)
    modern = FrecencyStrategy(FrecencyConfig(model="modern"))
    assert modern.dim == 5 and modern.config.score_scale == "raw"
