"""The FedPS central server: FedAvg step with the n_j-weighted mean of merged updates."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import Message
from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments.fedps.server import FedPSServer


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


def test_bad_inputs() -> None:
    with pytest.raises(DataFormatError, match="flat parameter vector"):
        FedPSServer(np.zeros((2, 2)))
    with pytest.raises(ConfigError, match="learning_rate"):
        FedPSServer(np.zeros(2), learning_rate=0.0)
