"""FedAvg's client half through the service: a device trains the served model on its own
data, and the SDK sends the delta of the shared parameters in the system's wire format
(``Client.client_half``, ``FedAvgClient.message``, ``Client.send_update``); the server steps
by the ``n``-weighted mean delta times the server learning rate (FedPS Algorithm 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.client.sdk import Client
from fedrank.errors import ConfigError, FedrankError
from fedrank.systems.fedavg.client import FedAvgClient
from fedrank.systems.fedavg.config import (
    DEFAULT_NORM_BOUND,
    DEFAULT_NORM_QUANTILE,
    FedAvgConfig,
)
from tests.server.serverkit import ADMIN_TOKEN, admin, live_server

TOML = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0
min_updates = 1000000
[fedavg]
dim = 5
server_learning_rate = 0.5
unbounded = true  # the paper's mean of the deltas as sent
"""


def test_devices_send_their_trained_deltas_with_the_sdk(tmp_path: Path) -> None:
    trained = {0: (np.arange(5.0), 1), 1: (-2.0 * np.ones(5), 3)}  # what each device learned
    with live_server(tmp_path, TOML) as live:
        for k, (change, n) in trained.items():
            with Client(live.process.url, enrollment_id=f"device-{k}") as device:
                model = device.fetch_model()
                half = device.client_half(model)
                assert isinstance(half, FedAvgClient) and half.privatizer is None
                message = half.message(model.params, model.params + change, n)
                assert device.send_update(model, message).status == "accepted"
                with pytest.raises(FedrankError, match="one device's message"):
                    device.send_update(model, message.take(np.array([0, 0])))
        assert admin(live.client, "close").status_code == 200
        served = np.array(live.client.get("/v1/model").json()["params"])
    mean = (1 * trained[0][0] + 3 * trained[1][0]) / 4
    np.testing.assert_allclose(served, 0.5 * mean, rtol=1e-12)


def test_a_message_is_the_delta_of_the_shared_parameters() -> None:
    half = FedAvgClient(FedAvgConfig(dim=3))
    message = half.message(np.zeros(3, np.float32), np.array([1.0, 2.0, 3.0]), 7)
    np.testing.assert_array_equal(message.vector, [[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(message.weight, [7.0])
    with pytest.raises(ConfigError, match="3 entries"):
        half.message(np.zeros(3), np.zeros(4), 1)
    with pytest.raises(ConfigError, match="n"):
        half.message(np.zeros(3), np.zeros(3), 0)


def _poisoned_close(tmp_path: Path, toml: str) -> tuple[np.ndarray, str]:
    """101 honest deltas (norm 0.5, n = 10) and one of -1e100 with n = 100,000 in one
    iteration; the published step, and the server's log."""
    rng = np.random.default_rng(5)
    honest = rng.normal(size=(101, 5))
    honest *= 0.5 / np.linalg.norm(honest, axis=1, keepdims=True)
    messages = [
        {"message_id": f"h{i}", "model_version": 0, "payload": {"delta": row.tolist(), "n": 10}}
        for i, row in enumerate(honest)
    ]
    poison = {"delta": [-1e100] * 5, "n": 100_000}
    messages.append({"message_id": "attacker", "model_version": 0, "payload": poison})
    with live_server(tmp_path, toml) as live:
        before = np.array(live.client.get("/v1/model").json()["params"])
        answer = live.client.post("/v1/updates:batch", json={"messages": messages}).json()
        assert answer["accepted"] == 102
        assert admin(live.client, "close").status_code == 200
        after = np.array(live.client.get("/v1/model").json()["params"])
        log = live.process.log.read_text()
    return after - before, log


def test_the_default_norm_bound_caps_one_poisoned_delta(tmp_path: Path) -> None:
    """Issue 51, finding 9: by default the service clips every FedAvg delta to an adaptive
    bound (starting at 1.0), so one delta of -1e100 with n = 100,000 among 101 honest ones
    moves the published model by at most server_learning_rate x the bound; with
    ``unbounded = true`` (logged as a warning) it decides every parameter, as before."""
    bounded = TOML.replace("unbounded = true  # the paper's mean of the deltas as sent\n", "")
    step, _ = _poisoned_close(tmp_path / "bounded", bounded)
    assert np.linalg.norm(step) <= 0.5 * DEFAULT_NORM_BOUND * (1 + 1e-12)
    step, log = _poisoned_close(tmp_path / "unbounded", TOML)
    assert np.all(step < -1e99)
    assert "unbounded = true" in log


def test_the_default_bound_is_the_adaptive_one_and_stays_out_of_dp_and_secagg(
    tmp_path: Path,
) -> None:
    from tests.server.serverkit import offline_config

    plain = offline_config(TOML.replace("unbounded = true", "unbounded = false"), tmp_path)
    section = plain.sections["fedavg"]
    assert (section.norm_bound, section.norm_quantile) == (
        DEFAULT_NORM_BOUND,
        DEFAULT_NORM_QUANTILE,
    )
    own = offline_config(TOML.replace("unbounded = true", "norm_bound = 3.0"), tmp_path)
    assert own.sections["fedavg"].norm_bound == 3.0 and own.sections["fedavg"].norm_quantile is None
    private = offline_config(
        TOML.replace("unbounded = true", "") + "[privacy]\nepsilon = 2.0\nclip = 0.5\nrounds = 3\n",
        tmp_path,
    )
    assert private.sections["fedavg"].norm_bound == 0.0  # the DP clip bounds the deltas
