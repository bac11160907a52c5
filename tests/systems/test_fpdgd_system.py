"""FPDGD as a system of its own (Wang et al., ICTIR 2021): ``fedrank serve --workload fpdgd``
with real devices that run the system's client half on their own MQ2008 queries and send
through the SDK, the same model as the in-process Round of the same messages; the FOLtR
simulator's FPDGD is that system (its strategy, client half and privacy factory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.client.sdk import Client
from fedrank.core.client_random import ClientRandom
from fedrank.data.query_bank import QueryBank
from fedrank.federation.registry import SYSTEMS
from fedrank.federation.round import Round
from fedrank.models.click_models import click_model, grades_of
from fedrank.systems.fpdgd.client import FpdgdClient
from fedrank.systems.fpdgd.config import FpdgdConfig
from fedrank.systems.fpdgd.strategy import FpdgdStrategy
from tests.server.serverkit import ADMIN_TOKEN, admin, live_server

DEVICES = 4
ROUNDS = 2

TOML = f"""
[server]
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0
min_updates = 1000000
[fpdgd]
batch = 6
learning_rate = 0.2
"""


def test_fpdgd_is_a_system_of_the_registry() -> None:
    system = SYSTEMS["fpdgd"]
    config = system.config()
    assert isinstance(system.strategy(config), FpdgdStrategy)
    assert isinstance(system.client(config), FpdgdClient)
    assert system.wire(config, system.max_n).dim == 46
    with pytest.raises(Exception, match="laplace must be one of"):
        FpdgdConfig(laplace="gaussian")


def test_devices_train_fpdgd_through_the_service_with_the_sdk(
    tmp_path: Path, mq2008_fold1: object
) -> None:
    """Each device holds a slice of MQ2008's training queries and a simulated user's clicks;
    per round it fetches the model, runs PDGD on its own interactions (the system's client
    half) and sends the delta with ``Client.send_update``; the operator closes the round.
    The served model is the in-process Round's on the same messages, and it moved."""
    split = mq2008_fold1.train  # type: ignore[attr-defined]
    slices = np.array_split(np.arange(split.n_queries), DEVICES)
    banks = [QueryBank(split.subset(ids)) for ids in slices]
    users = click_model("navigational", grades_of(split.labels))
    with live_server(tmp_path, TOML, workload="fpdgd") as live:
        devices = [
            Client(live.process.url, enrollment_id=f"device-{k}", http=live.client)
            for k in range(DEVICES)
        ]
        sent = []
        for r in range(ROUNDS):
            for k, (device, bank) in enumerate(zip(devices, banks, strict=True)):
                model = device.fetch_model()
                assert model.workload == "fpdgd" and model.version == r
                half = device.client_half(model)
                assert isinstance(half, FpdgdClient)
                reports = half.estimator(users).run(
                    model.params, bank, ClientRandom(11, r, np.array([k]))
                )
                message = reports.messages(half.config.batch)
                result = device.send_update(model, message, {"maxrr": float(reports.maxrr.mean())})
                assert result.status == "accepted", result
                sent.append(message)
            closed = admin(live.client, "close")
            assert closed.status_code == 200, closed.text
        served = np.array(live.client.get("/v1/model").json()["params"])
        config = live.config.system_config
    round_ = Round(SYSTEMS["fpdgd"].strategy(config))
    initial = round_.model()
    for r in range(ROUNDS):
        for message in sent[r * DEVICES : (r + 1) * DEVICES]:
            round_.fold(message)
        round_.close()
    np.testing.assert_allclose(served, round_.model(), rtol=1e-12, atol=1e-12)
    assert not np.allclose(served, initial)


def test_the_simulator_trains_the_fpdgd_system(mq2008_fold1: object) -> None:
    """``fedrank foltr train --algorithm fpdgd``'s first iteration is one Round of the FPDGD
    system: its strategy's first model, its client half's deltas, FedAvg of them."""
    from fedrank.experiments.foltr.run import FoltrConfig, run_foltr

    config = FoltrConfig(algorithm="fpdgd", clients=30, batch=4, interactions=120, seed=2)
    result = run_foltr(config, mq2008_fold1)  # type: ignore[arg-type]
    split = mq2008_fold1.train  # type: ignore[attr-defined]
    section = config.fpdgd_config(split.n_features)
    users = click_model(config.click_model, grades_of(split.labels))
    round_ = Round(FpdgdStrategy(section))
    update = FpdgdClient(section).estimator(users)
    reports = update.run(round_.params, QueryBank(split), ClientRandom(2, 0, np.arange(30)))
    round_.fold(reports.messages(4))
    round_.close()
    np.testing.assert_array_equal(result.params, round_.params)
