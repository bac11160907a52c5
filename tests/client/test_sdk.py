"""The client SDK against a real server process on loopback."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedrank.client import Client, ClientError
from fedrank.server.branches import branch_of
from fedrank.server.process import ServerProcess
from tests.server.serverkit import issue_tokens

SHARES = [("treatment", 0.6), ("control", 0.2), ("control-no-decay", 0.2)]
GRADIENT = {"gradient": [0.1] + [0.0] * 21, "n": 2}


def _treatment_id(prefix: str = "t") -> str:
    return next(
        f"{prefix}{i}" for i in range(100) if branch_of(f"{prefix}{i}", SHARES) == "treatment"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    base = tmp_path_factory.mktemp("sdk")
    with ServerProcess(base / "store", iteration_seconds=3600) as s:
        yield s


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_model_is_cached_with_its_etag(server: ServerProcess) -> None:
    with Client(server.url, enrollment_id=_treatment_id()) as c:
        first = c.fetch_model()
        before = _metric(server.url, 'fedrank_requests_total{endpoint="model",status="304"}')
        second = c.fetch_model()
        after = _metric(server.url, 'fedrank_requests_total{endpoint="model",status="304"}')
    assert second is first and after == before + 1
    assert first.branch == "treatment" and first.served == "trained"
    assert first.params.shape == (22,) and first.etag


def test_send_is_idempotent_and_reports_stale(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        '[server]\nadmin_token = "secret-token-for-sdk-tests"\n[iteration]\nseconds = 3600.0\n'
    )
    rng = np.random.default_rng(1)
    with (
        ServerProcess(tmp_path / "store", config=config) as s,
        Client(s.url, enrollment_id=_treatment_id(), rng=rng) as c,
    ):
        version = c.fetch_model().version
        first = c.send(GRADIENT, version, {"loss": 0.3})
        again = c.send(GRADIENT, version, {"loss": 0.3}, message_id=first.message_id)
        assert (first.status, again.status) == ("accepted", "duplicate")
        with pytest.raises(ClientError, match="422"):
            c.send({"gradient": [1.0]}, version)  # wrong length: a retry cannot fix it
        auth = {"Authorization": "Bearer secret-token-for-sdk-tests"}
        assert httpx.post(s.url + "/v1/admin/close", headers=auth).status_code == 200
        stale = c.send(GRADIENT, version)
        assert stale.status == "stale" and stale.body["current_version"] == version + 1
        assert c.fetch_model().version == version + 1  # the ETag changed with the version


def test_enrollment_id_is_kept_in_the_state_dir(tmp_path: Path, server: ServerProcess) -> None:
    with Client(server.url, state_dir=tmp_path) as a, Client(server.url, state_dir=tmp_path) as b:
        assert a.enrollment_id == b.enrollment_id
    with Client(server.url, state_dir=tmp_path / "other") as c:
        assert c.enrollment_id != a.enrollment_id


def _unused_port() -> int:
    """A port nothing listens on now (this test needs the URL before the server exists)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_queue_is_resent_with_the_same_message_id(tmp_path: Path) -> None:
    port = _unused_port()
    url = f"http://127.0.0.1:{port}"
    state = tmp_path / "client"
    client = Client(
        url,
        state_dir=state,
        enrollment_id=_treatment_id("q"),
        max_attempts=2,
        backoff=0.01,
        rng=np.random.default_rng(2),
    )
    queued = client.send(GRADIENT, 0, {"loss": 0.5})  # no server yet
    assert queued.status == "queued" and len(client.queued()) == 1
    with ServerProcess(tmp_path / "store", port=port, iteration_seconds=3600):
        results = client.flush()
        assert [r.status for r in results] == ["accepted"]
        assert results[0].message_id == queued.message_id
        assert client.queued() == []
        # a second flush has nothing to send; a resend of the same id is a duplicate
        assert client.flush() == []
        assert client.send(GRADIENT, 0, message_id=queued.message_id).status == "duplicate"
        status = httpx.get(url + "/v1/status").json()
    client.close()
    assert status["updates_accepted_total"] == 1


def test_checkin_on_a_round_server(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        '[server]\nworkload = "fedavg"\n[fedavg]\ndim = 3\n'
        "[rounds]\nenabled = true\nclients_per_round = 2\nt_max_seconds = 30\n"
        "checkin_seconds = 0.1\nmin_checkins = 3\n"
    )
    with ServerProcess(tmp_path / "store", config=config) as s:
        # a server with [rounds] takes enrolled devices: one per client (docs/devices.md)
        clients = [Client(s.url, enrollment_token=t) for t in issue_tokens(s.store, 3)]
        try:
            with ThreadPoolExecutor(max_workers=3) as pool:  # one window: 2 seats of 3 drawn
                answers = list(pool.map(lambda c: c.checkin(), clients))
            assert sorted(a["selected"] for a in answers) == [False, True, True]
            seated = next(i for i, a in enumerate(answers) if a.selected)
            left_out = next(i for i, a in enumerate(answers) if not a.selected)
            delta = {"delta": [0.1, 0.2, 0.3], "n": 4}
            ok = clients[seated].send(delta, 0, client_id=answers[seated].client_id)
            refused = clients[left_out].send(delta, 0, client_id=answers[left_out].client_id)
        finally:
            for c in clients:
                c.close()
    assert ok.status == "accepted" and refused.status == "refused"
    assert "not selected" in refused.body["detail"]
