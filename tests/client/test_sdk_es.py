"""The SDK's FOLtR-ES path against real servers on loopback: clients check in (the SDK
polls through the round's check-in window until the seats are drawn), perturb the model
with the seed the server issued (or, on a server that lets clients choose, one they draw),
and report the metric with the seed's token (JSON, or the binary record). A server with
[rounds] takes enrolled devices (docs/devices.md): each client is one, with its token."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedrank.client.sdk import Checkin, Client
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.errors import FedrankError
from fedrank.server.process import ServerProcess
from fedrank.systems.foltr_es.client import ESTask
from fedrank.systems.foltr_es.wire import es_payload, es_record
from tests.server.serverkit import issue_tokens

ADMIN = "sdk-admin-token-0123"


def write_config(tmp_path: Path, server_seeds: bool, min_checkins: int = 1) -> Path:
    """A foltr-es server with rounds of 3 seats whose window closes once ``min_checkins``
    clients wait."""
    rounds = (
        "[rounds]\nenabled = true\nclients_per_round = 3\nt_max_seconds = 600\n"
        f"checkin_seconds = 0.1\nmin_checkins = {min_checkins}\n"
    )
    text = (
        f'[server]\nworkload = "foltr-es"\nadmin_token = "{ADMIN}"\n'
        f"[foltr_es]\nserver_seeds = {'true' if server_seeds else 'false'}\n{rounds}"
    )
    path = tmp_path / "server.toml"
    path.write_text(text)
    return path


def test_a_client_reports_the_seed_the_server_issued(tmp_path: Path) -> None:
    config = write_config(tmp_path, server_seeds=True, min_checkins=3)
    tokens = issue_tokens(tmp_path / "store", 4)  # before the server starts, as an operator may
    with ServerProcess(tmp_path / "store", config=config, iteration_seconds=0) as s:
        rng = np.random.default_rng(0)
        c, cb, cc, cd = (Client(s.url, rng=rng, enrollment_token=t) for t in tokens)
        try:
            _reports_the_issued_seed(s, c, cb, cc, cd)
        finally:
            for each in (c, cb, cc, cd):
                each.close()


def _reports_the_issued_seed(
    s: ServerProcess, c: Client, cb: Client, cc: Client, cd: Client
) -> None:
    """The test above, with its server and its four enrolled clients."""
    model = c.fetch_model()
    assert model.config["server_seeds"] is True
    with pytest.raises(FedrankError, match="this server issues the seeds"):
        c.es_task(None, model)
    # Three clients check in at once; each call returns when the seats are drawn.
    with ThreadPoolExecutor(max_workers=3) as pool:
        answer, b, c_answer = pool.map(lambda x: x.checkin(), (c, cb, cc))
    assert c_answer.selected and c_answer.model_version == 0
    assert isinstance(answer, Checkin) and answer.selected and answer["selected"] is True
    assert answer.seed is not None and answer.seed_token is not None
    assert answer["seed"] == answer.seed and answer.model_version == 0
    task = c.es_task(answer, model)
    assert task == ESTask(0, answer.seed, answer.seed_token, c.device_id)
    plus, minus = task.perturbed(model.params, model.config["sigma"])
    noise = gaussian_noise(answer.seed, model.params.size)
    np.testing.assert_allclose(plus - minus, 2 * np.float32(0.01) * noise, rtol=1e-5)
    result = c.send_es(task, 0.5, 0.25)
    assert result.status == "accepted", result.body
    again = c.send_es(task, 0.5, 0.25)  # the same seed under a new message id
    assert again.status == "refused" and again.body["error"] == "duplicate_seed"

    # A second client reports in the binary form, with the token's bytes appended.
    headers = {
        "Content-Type": "application/vnd.fedrank.update",
        "X-Message-Id": "sdk-b-1",
        "X-Model-Version": "0",
        "X-Client-Id": b.client_id,
    }
    assert b.seed is not None
    body = es_record(b.seed, 0.75, 0.25, b.seed_token)
    assert len(body) == 12 + 32
    sent = httpx.post(s.url + "/v1/updates", content=body, headers=headers, auth=cb.device.auth)
    assert sent.status_code == 202

    # The model moves on: the old seed is for the old version, and check-in gives a new one.
    closed = httpx.post(s.url + "/v1/admin/close", headers={"Authorization": f"Bearer {ADMIN}"})
    assert closed.status_code == 200, closed.text
    moved = c.fetch_model()
    assert moved.version == 1
    with pytest.raises(FedrankError, match="check in again for its seed"):
        c.es_task(answer, moved)
    fresh = cc.checkin()  # seated in this round: a seed for the new version
    assert fresh.model_version == 1 and fresh.seed_token != c_answer.seed_token
    assert cc.send_es(cc.es_task(fresh, moved), 0.0, 1.0).status == "accepted"
    full = cd.checkin()  # the seats were drawn already
    assert not full.selected and full.seed is None and full.retry_after_seconds
    with pytest.raises(FedrankError, match="not selected in round 0"):
        cd.es_task(full, moved)
    with pytest.raises(KeyError):
        full["seed"]


def test_on_a_server_that_lets_clients_choose_the_client_draws_its_seed(tmp_path: Path) -> None:
    config = write_config(tmp_path, server_seeds=False)
    (token,) = issue_tokens(tmp_path / "store", 1)
    with (
        ServerProcess(tmp_path / "store", config=config, iteration_seconds=0) as s,
        Client(s.url, rng=np.random.default_rng(1), enrollment_token=token) as c,
    ):
        model = c.fetch_model()
        answer = c.checkin()
        assert answer.selected and answer.seed is None and answer.seed_token is None
        task = c.es_task(answer, model)
        assert task.seed_token is None and 0 <= task.seed < 2**32 and task.client_id == c.device_id
        assert c.send_es(task, 0.5, 0.5).status == "accepted"
        assert len(es_record(task.seed, 0.5, 0.5)) == 12


def test_payload_helpers_check_what_they_build() -> None:
    assert es_payload(3, 0.5) == {"seed": 3, "metric": 0.5}
    assert es_payload(3, 0.5, 0.0, "ab")["seed_token"] == "ab"
    for bad in ((-1, 0.5), (2**32, 0.5), (True, 0.5), (1, 1.5), (1, float("nan"))):
        with pytest.raises(FedrankError):
            es_payload(*bad)
    with pytest.raises(FedrankError, match="hex"):
        es_record(1, 0.5, 0.5, "not hex")
    with pytest.raises(FedrankError, match="malformed"):
        Checkin.from_answer("x", {"selected": True, "round": 0, "seed": 1})
    with pytest.raises(FedrankError, match="malformed"):
        Checkin.from_answer("x", {"round": 0})


def test_checkin_gives_up_after_wait_seconds(tmp_path: Path) -> None:
    """A window that waits for more clients than come: the SDK polls it for at most
    ``wait_seconds`` and then says so."""
    config = write_config(tmp_path, server_seeds=False, min_checkins=2)
    tokens = issue_tokens(tmp_path / "store", 2)  # two devices: "alone" and the second
    with (
        ServerProcess(tmp_path / "store", config=config, iteration_seconds=0) as s,
        Client(s.url, enrollment_token=tokens[0]) as alone,
        Client(s.url, enrollment_token=tokens[1]) as second,
    ):
        with pytest.raises(FedrankError, match="window is still open after 0.3 s"):
            alone.checkin(wait_seconds=0.3)
        with ThreadPoolExecutor(max_workers=1) as pool:
            arrival = pool.submit(second.checkin)
            assert alone.checkin().selected  # the second arrival closes the window
            assert arrival.result().selected
