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
from fedrank.systems.fedavg.config import FedAvgConfig
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
