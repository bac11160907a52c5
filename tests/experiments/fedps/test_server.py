"""The FedPS central server: FedAvg step with the n_j-weighted mean of merged updates, as a
round of the FedAvg strategy, private by the privacy factory when asked."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments.fedps.server import FedPSServer
from fedrank.federation.privacy import PrivacyConfig


def _batch(rows: list[list[float]], n: list[int]) -> MessageBatch:
    return MessageBatch.of_vectors(np.array(rows, dtype=np.float64), np.array(n, dtype=float))


def test_apply_adds_the_weighted_mean_times_the_server_step() -> None:
    server = FedPSServer(np.zeros(3), learning_rate=2.0)
    server.fold(_batch([[1.0, 0.0, 0.0], [0.0, 3.0, 0.0]], [1, 3]))
    server.apply()
    np.testing.assert_allclose(server.broadcast(), 2.0 * np.array([0.25, 2.25, 0.0]))
    assert server.version == 1 and server.updates_applied == 2
    server.apply()  # every update of the step arrived too late
    np.testing.assert_allclose(server.broadcast(), [0.5, 4.5, 0.0])
    assert server.version == 2 and server.updates_applied == 2


def test_a_proxies_merged_state_counts_like_its_updates() -> None:
    """FedPSProxy: the proxies fold from the round's empty state; the merged state steps the
    model exactly as folding the same updates directly."""
    direct, proxied = FedPSServer(np.zeros(2)), FedPSServer(np.zeros(2))
    batch = _batch([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], [2, 1, 4])
    direct.fold(batch)
    proxied.merge(proxied.strategy.accumulate(proxied.empty(), batch))
    direct.apply()
    proxied.apply()
    np.testing.assert_array_equal(direct.broadcast(), proxied.broadcast())
    assert proxied.updates_applied == 3


def test_broadcast_is_a_copy() -> None:
    server = FedPSServer(np.ones(2, dtype=np.float32))
    sent = server.broadcast()
    sent[:] = 7
    np.testing.assert_array_equal(server.broadcast(), [1, 1])


def test_restart_from_goes_on_from_the_given_model() -> None:
    """An earlier stage's best model (the click-feature warm-up): the next step starts from
    it, the version counter goes on, and a vector of another shape is refused."""
    server = FedPSServer(np.zeros(3, dtype=np.float32))
    server.fold(_batch([[1.0, 1.0, 1.0]], [1]))
    server.apply()
    server.restart_from(np.array([5.0, 6.0, 7.0]))
    np.testing.assert_array_equal(server.broadcast(), [5, 6, 7])
    server.fold(_batch([[1.0, 1.0, 1.0]], [2]))
    server.apply()
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
    """With a budget the step is DPStrategy's: messages weigh 1 whatever their ``n``, every
    update is clipped to ``C``, and the mean gets ``N(0, (z C / m)^2)`` from the seeded
    generator."""
    privacy = PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0)
    server = FedPSServer(
        np.zeros(4, dtype=np.float32), privacy=privacy, seed=5, noise_multiplier=0.7
    )
    rows = [[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.3, 0.4]]
    server.fold(_batch(rows, [50, 1]))
    server.apply()
    clipped_mean = (np.array(rows[0]) / 5.0 + np.array(rows[1])) / 2
    noise = np.random.default_rng(5).normal(0.0, 0.7 * 1.0 / 2, size=4)
    np.testing.assert_allclose(server.broadcast(), clipped_mean + noise, rtol=0, atol=1e-6)
    # a fixed denominator W = 4 (e.g. K, when stragglers leave 2 of 4): the sum over 4
    fixed = FedPSServer(
        np.zeros(4, dtype=np.float32),
        privacy=PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, denominator=4.0),
        seed=5,
        noise_multiplier=0.7,
    )
    fixed.fold(_batch(rows, [1, 1]))
    fixed.apply()
    noise = np.random.default_rng(5).normal(0.0, 0.7 * 1.0, size=4)
    expected = (np.array(rows[0]) / 5.0 + np.array(rows[1]) + noise) / 4
    np.testing.assert_allclose(fixed.broadcast(), expected, rtol=0, atol=1e-6)
    # the budget's own multiplier when none is given
    budget = FedPSServer(np.zeros(4, dtype=np.float32), privacy=privacy, rounds=10)
    assert budget.strategy.noise_multiplier == pytest.approx(privacy.noise_multiplier(10))  # type: ignore[attr-defined]
