"""Server-selected rounds (FedPS Algorithm 1; Bonawitz et al. 2019): check-in selects the
first K clients with a deadline T_max, other reports are refused with the reason (not
selected, already reported, late), and a complete round closes the iteration. First the
:class:`~fedrank.server.cohort.Cohort` bookkeeping in-process, then real servers for foltr-es
and fedavg (whose clients are enrolled devices: serverkit's ``NamedDevices``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedrank.server.cohort import Cohort
from tests.server.serverkit import (
    ADMIN_TOKEN,
    Live,
    assert_error,
    binary_headers,
    closed_iteration,
    es_bytes,
    es_message,
    live_server,
    state_of,
    status,
    wait_until,
)

# -- the bookkeeping ----------------------------------------------------------------------------


def test_round_selects_the_first_k_and_answers_repeats_alike() -> None:
    r = Cohort(number=4, clients_per_round=2, t_max_seconds=10.0)
    a = r.checkin("a", now=100.0, model_version=3)
    assert a == {"selected": True, "round": 4, "model_version": 3, "deadline": 110.0}
    assert r.checkin("a", now=105.0, model_version=3) == a  # same answer, same deadline
    assert r.checkin("b", now=101.0, model_version=3)["deadline"] == 111.0
    refused = r.checkin("c", now=102.0, model_version=3)
    assert refused == {"selected": False, "round": 4, "retry_after_seconds": 2.5}
    assert Cohort(0, 1, 1.0).checkin("x", 0.0, 0)["selected"] is True
    full = Cohort(0, 1, 1.0)
    full.checkin("x", 0.0, 0)
    assert full.checkin("y", 0.0, 0)["retry_after_seconds"] == 1.0  # at least a second


def test_round_refusals_give_the_reason_and_reserve() -> None:
    r = Cohort(number=1, clients_per_round=3, t_max_seconds=5.0)
    r.checkin("a", now=0.0, model_version=0)
    r.checkin("b", now=0.0, model_version=0)
    r.checkin("c", now=0.0, model_version=0)

    def why(client: str | None, now: float) -> tuple[str, str]:
        refused = r.refusal(client, now)
        assert refused is not None
        return refused

    assert why(None, 1.0)[0] == "not_selected" and "send client_id" in why(None, 1.0)[1]
    assert why("zed", 1.0) == ("not_selected", "client 'zed' is not selected in round 1; check in")
    code, late = why("a", 7.25)
    assert code == "late" and late.startswith("late:") and "2.2 s ago" in late
    assert r.refusal("a", 5.0) is None  # exactly at the deadline: still in time, now reserved
    # while a's report is being stored, a second one is refused (no double report)
    assert why("a", 5.0)[0] == "already_reported"
    r.settle("a", accepted=False)  # that report was not stored: a may report again
    assert r.refusal("a", 5.0) is None
    r.settle("a", accepted=True)
    assert why("a", 1.0) == ("already_reported", "client 'a' has already reported in round 1")
    r.reported.add("b")
    assert why("b", 1.0)[0] == "already_reported"


def test_round_completes_when_all_reported_or_all_deadlines_passed() -> None:
    r = Cohort(number=0, clients_per_round=2, t_max_seconds=5.0)
    assert not r.complete(1000.0)  # nobody selected yet
    r.checkin("a", now=0.0, model_version=0)
    assert not r.complete(4.0)
    assert r.complete(5.5)  # the only deadline passed
    r.checkin("b", now=3.0, model_version=0)
    assert not r.complete(5.5)
    r.reported.update({"a", "b"})
    assert r.complete(0.0)  # K reports


def checkin_in_round(live: Live, client_id: str, number: int) -> dict[str, object] | None:
    """Check in; the answer if it is for round ``number``, else ``None``."""
    answer = live.client.post("/v1/checkin", json={"client_id": client_id}).json()
    return answer if answer["round"] == number else None


# -- a foltr-es server with rounds -----------------------------------------------------------

K = 3
ES_ROUNDS = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 0.05
[rounds]
enabled = true
clients_per_round = {K}
t_max_seconds = 60.0
"""


@pytest.fixture(scope="module")
def es_rounds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(
        tmp_path_factory.mktemp("es-rounds"),
        ES_ROUNDS,
        iteration_seconds=0,
        iteration_min_updates=K,
    ) as live:
        yield live


def test_checkin_selects_k_and_a_complete_round_closes_the_iteration(es_rounds: Live) -> None:
    client = es_rounds.client
    assert status(client)["policy"] == "rounds"
    before = time.time()
    selected = {}
    for name in ("a", "b", "c"):
        answer = client.post("/v1/checkin", json={"client_id": f"es-{name}"}).json()
        assert answer["selected"] is True and answer["round"] == 0
        assert answer["model_version"] == 0
        assert before + 60.0 <= answer["deadline"] <= time.time() + 60.0
        selected[name] = answer
    again = client.post("/v1/checkin", json={"client_id": "es-a"}).json()
    assert again == selected["a"]
    extra = client.post("/v1/checkin", json={"client_id": "es-d"}).json()
    assert extra == {"selected": False, "round": 0, "retry_after_seconds": 15.0}

    refused = state_of(client)
    # a report from no device (the server requires enrolled devices with [rounds])
    no_id = client.post("/v1/updates", json=es_message("r-0", 0, 1, 0.5, 0.5), auth=None)
    assert_error(no_id, 401, "unenrolled", "enroll")
    outsider = client.post("/v1/updates", json=es_message("r-1", 0, 1, 0.5, 0.5, client_id="es-d"))
    assert_error(outsider, 409, "not_selected", "not selected in round 0")
    malformed = client.post("/v1/updates", json=es_message("r-2", 0, 1, 9.0, 0.5, client_id="es-a"))
    assert_error(malformed, 422, "invalid_payload", "[0, 1]")
    assert state_of(client) == refused
    ping = {"message_id": "r-ping", "model_version": 0, "client_id": "es-d"}
    ping["metrics"] = {"clicks": 1}
    assert client.post("/v1/updates", json=ping).status_code == 202  # metrics need no selection

    # The three selected clients report: JSON, binary (X-Client-Id), batch.
    first = client.post("/v1/updates", json=es_message("r-a", 0, 1, 0.5, 0.25, client_id="es-a"))
    assert first.status_code == 202, first.text
    twice = client.post("/v1/updates", json=es_message("r-a2", 0, 2, 0.5, 0.25, client_id="es-a"))
    assert_error(twice, 409, "already_reported", "already reported in round 0")
    # A retry of the accepted report (its answer lost) is a duplicate, not a refusal.
    resent = client.post("/v1/updates", json=es_message("r-a", 0, 1, 0.5, 0.25, client_id="es-a"))
    assert resent.status_code == 200 and resent.json()["status"] == "duplicate"
    binary = client.post(
        "/v1/updates",
        content=es_bytes(2, 0.75, 0.25),
        headers=binary_headers("r-b", 0, client_id="es-b"),
    )
    assert binary.status_code == 202, binary.text
    batch = client.post(
        "/v1/updates:batch",
        json={"messages": [es_message("r-c", 0, 3, 0.5, 0.0, client_id="es-c")]},
    )
    assert batch.json()["statuses"] == [202]

    wait_until(lambda: status(client)["model_version"] == 1, what="the round's close")
    record = closed_iteration(es_rounds.store, 0)
    assert record["reason"] == "round 0 complete" and record["n_updates"] == K
    # The next round starts right after the close (a check-in may still meet round 0).
    nxt = wait_until(lambda: checkin_in_round(es_rounds, "es-a", 1), what="round 1")
    assert nxt["selected"] is True and nxt["model_version"] == 1
    old = client.post("/v1/updates", json=es_message("r-d", 1, 4, 0.5, 0.5, client_id="es-d"))
    assert_error(old, 409, "not_selected", "not selected in round 1")
    nope = client.post("/v1/checkin", json={"client_id": "bad id"})
    assert_error(nope, 422, "invalid", "client_id")
    assert_error(client.post("/v1/checkin", json={"client_id": "x", "y": 1}), 422, "invalid", "")
    assert_error(
        client.post("/v1/checkin", content=b"{", headers={"Content-Type": "application/json"}),
        400,
        "bad_json",
        "",
    )


LATE = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 0.05
[rounds]
enabled = true
clients_per_round = 3
t_max_seconds = 1.5
"""


def test_a_late_report_is_refused_with_the_reason(tmp_path: Path) -> None:
    with live_server(tmp_path, LATE, iteration_seconds=0, iteration_min_updates=1) as live:
        client = live.client
        a = client.post("/v1/checkin", json={"client_id": "late-a"}).json()
        # A second client checks in shortly before a's deadline, so the round is still open
        # (b's deadline ahead) when a reports too late.
        wait_until(lambda: time.time() > a["deadline"] - 0.2, what="a's deadline to come near")
        b = client.post("/v1/checkin", json={"client_id": "late-b"}).json()
        assert b["selected"] is True and b["round"] == a["round"] == 0
        wait_until(lambda: time.time() > a["deadline"] + 0.05, what="a's deadline to pass")
        before = state_of(client)
        late = client.post(
            "/v1/updates", json=es_message("late-1", 0, 1, 0.5, 0.5, client_id="late-a")
        )
        assert_error(late, 409, "late", "late: the reporting deadline passed")
        assert state_of(client) == before
        assert (
            client.post(
                "/v1/updates", json=es_message("late-2", 0, 2, 0.5, 0.5, client_id="late-b")
            ).status_code
            == 202
        )
        # b's deadline passes: the round is complete with one report (>= min_updates).
        wait_until(lambda: status(client)["model_version"] == 1, what="the round's close")
        assert closed_iteration(live.store, 0)["n_updates"] == 1
        # The next round starts right after the close.
        wait_until(lambda: checkin_in_round(live, "late-a", 1), what="round 1")


# -- fedavg: the round's reports make one FedAvg step ------------------------------------------

FEDAVG_ROUNDS = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 0.05
[fedavg]
dim = 5
server_learning_rate = 0.5
[rounds]
enabled = true
clients_per_round = 2
t_max_seconds = 60.0
"""


def test_fedavg_round_steps_by_the_weighted_mean(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    deltas = rng.normal(size=(2, 5))
    weights = np.array([3, 9])
    with live_server(tmp_path, FEDAVG_ROUNDS, iteration_seconds=0, iteration_min_updates=2) as live:
        client = live.client
        for i in range(2):
            answer = client.post("/v1/checkin", json={"client_id": f"fa-{i}"}).json()
            assert answer["selected"] is True
        # The round's selection lives in memory: after a crash clients check in again, and
        # the report already stored stays counted.
        msg = {
            "message_id": "fa-r0",
            "model_version": 0,
            "client_id": "fa-0",
            "payload": {"delta": deltas[0].tolist(), "n": int(weights[0])},
        }
        assert client.post("/v1/updates", json=msg).status_code == 202
        live.process.kill()
        live.process.start()
        assert status(client)["updates_in_iteration"] == 1
        msg1 = {
            "message_id": "fa-r1",
            "model_version": 0,
            "client_id": "fa-1",
            "payload": {"delta": deltas[1].tolist(), "n": int(weights[1])},
        }
        assert_error(client.post("/v1/updates", json=msg1), 409, "not_selected", "check in")
        for i in range(2):
            assert client.post("/v1/checkin", json={"client_id": f"fa-{i}"}).json()["selected"]
        assert client.post("/v1/updates", json=msg1).status_code == 202
        retry = client.post("/v1/updates", json=msg)  # stored before the crash
        assert retry.status_code == 200 and retry.json()["status"] == "duplicate"
        resend = {**msg, "message_id": "fa-r0b"}
        assert client.post("/v1/updates", json=resend).status_code == 202  # fa-0 in the new round
        wait_until(lambda: status(client)["model_version"] == 1, what="the round's close")
        record = closed_iteration(live.store, 0)
        assert record["n_updates"] == 3 and record["reason"] == "round 0 complete"
        used = np.vstack([deltas[0], deltas[1], deltas[0]])
        n = np.array([weights[0], weights[1], weights[0]])
        expected = 0.5 * (n @ used) / n.sum()
        np.testing.assert_allclose(
            client.get("/v1/model/1").json()["params"], expected, rtol=1e-12, atol=1e-12
        )
