"""The FedPS central server: FedAvg step with the n_j-weighted mean of merged updates."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedrank.core.message import Message
from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments.fedps.server import CentralDP, FedPSServer


def test_apply_adds_the_weighted_mean_times_the_server_step() -> None:
    server = FedPSServer(np.zeros(3), learning_rate=2.0)
    agg = server.aggregator
    state = agg.accumulate(agg.zero(), Message(update=np.array([1.0, 0.0, 0.0]), n=1))
    state = agg.accumulate(state, Message(update=np.array([0.0, 3.0, 0.0]), n=3))
    server.apply(state)
    np.testing.assert_allclose(server.broadcast(), 2.0 * np.array([0.25, 2.25, 0.0]))
    assert server.version == 1 and server.updates_applied == 2
    server.apply(agg.zero())  # every update of the step arrived too late
    np.testing.assert_allclose(server.broadcast(), [0.5, 4.5, 0.0])
    assert server.version == 2 and server.updates_applied == 2


def test_broadcast_is_a_copy() -> None:
    server = FedPSServer(np.ones(2, dtype=np.float32))
    sent = server.broadcast()
    sent[:] = 7
    np.testing.assert_array_equal(server.broadcast(), [1, 1])


def test_restart_from_goes_on_from_the_given_model() -> None:
    """An earlier stage's best model (the click-feature warm-up): the next step starts from
    it, the version counter goes on, and a vector of another shape is refused."""
    server = FedPSServer(np.zeros(3, dtype=np.float32))
    agg = server.aggregator
    server.apply(agg.accumulate(agg.zero(), Message(update=np.ones(3), n=1)))
    server.restart_from(np.array([5.0, 6.0, 7.0]))
    np.testing.assert_array_equal(server.broadcast(), [5, 6, 7])
    server.apply(agg.accumulate(agg.zero(), Message(update=np.ones(3), n=2)))
    np.testing.assert_array_equal(server.broadcast(), [6, 7, 8])
    assert server.version == 2
    with pytest.raises(DataFormatError, match="shape"):
        server.restart_from(np.zeros(4))


def test_bad_inputs() -> None:
    with pytest.raises(DataFormatError, match="flat parameter vector"):
        FedPSServer(np.zeros((2, 2)))
    with pytest.raises(ConfigError, match="learning_rate"):
        FedPSServer(np.zeros(2), learning_rate=0.0)


def test_central_dp_clips_unweighted_and_adds_the_calibrated_noise() -> None:
    """With ``dp`` the step is DPStrategy's: messages weigh 1 (``prepare``), every update is
    clipped to ``C``, and the mean gets ``N(0, (z C / m)^2)`` from the seeded generator."""
    dp = CentralDP(noise_multiplier=0.7, clip=1.0, seed=5)
    server = FedPSServer(np.zeros(4, dtype=np.float32), dp=dp)
    rows = [np.array([3.0, 4.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.3, 0.4])]
    state = server.aggregator.zero()
    for row, n in zip(rows, (50, 1), strict=True):
        message = server.prepare(Message(update=row, n=n))
        assert message.n == 1
        state = server.aggregator.accumulate(state, message)
    server.apply(state)
    clipped_mean = (rows[0] / 5.0 + rows[1]) / 2
    noise = np.random.default_rng(5).normal(0.0, 0.7 * 1.0 / 2, size=4)
    np.testing.assert_allclose(server.broadcast(), clipped_mean + noise, rtol=0, atol=1e-6)
    plain = FedPSServer(np.zeros(4, dtype=np.float32))
    assert plain.prepare(Message(update=rows[0], n=50)).n == 50
    # a fixed denominator W = 4 (e.g. K, when stragglers leave 2 of 4): the sum over 4
    fixed = FedPSServer(np.zeros(4, dtype=np.float32), dp=dataclasses.replace(dp, denominator=4))
    state = fixed.aggregator.zero()
    for row in rows:
        state = fixed.aggregator.accumulate(state, fixed.prepare(Message(update=row, n=1)))
    fixed.apply(state)
    noise = np.random.default_rng(5).normal(0.0, 0.7 * 1.0, size=4)
    expected = (rows[0] / 5.0 + rows[1] + noise) / 4
    np.testing.assert_allclose(fixed.broadcast(), expected, rtol=0, atol=1e-6)
