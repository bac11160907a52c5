"""Server-selected rounds (FedPS Algorithm 1; Bonawitz et al. 2019): a check-in window, then
K seats drawn uniformly at random from the clients that checked in (never first-come), a
deadline T_max from the draw; other reports are refused with the reason (not selected,
already reported, late), on every path a report takes, and a complete round closes the
iteration. First the :class:`~fedrank.server.cohort.Cohort` bookkeeping in-process (with
the fairness of the draw under a flood of fresh ids: issue 51, finding 4), then real servers
for foltr-es and fedavg (every ingestion path obeys the round: finding 2), whose clients are
enrolled devices (serverkit's ``NamedDevices``)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrank.aggregators.mean import WeightedMean
from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.server.cohort import Cohort
from fedrank.server.config import load_config
from fedrank.server.sections import RoundsSection
from tests.server.serverkit import (
    ADMIN_TOKEN,
    PROXIES_TOML,
    PROXY,
    Live,
    assert_error,
    binary_headers,
    closed_iteration,
    es_bytes,
    es_message,
    live_server,
    row_count,
    state_of,
    status,
    wait_until,
)

# -- the bookkeeping ----------------------------------------------------------------------------


def rounds(k: int, t_max: float = 10.0, window: float = 5.0, **more: Any) -> RoundsSection:
    return RoundsSection(
        enabled=True, clients_per_round=k, t_max_seconds=t_max, checkin_seconds=window, **more
    )


def seated(k: int, clients: list[str], t_max: float = 5.0) -> Cohort:
    """A round of ``k`` seats whose window saw exactly ``clients`` (all seated if
    ``len(clients) <= k``), drawn at time 0."""
    r = Cohort(1, rounds(k, t_max, window=1.0), random.Random(0))
    for client in clients:
        r.checkin(client, now=-1.0, model_version=0)
    r.select(0.0)
    return r


def test_a_window_then_a_uniform_draw_of_k_seats() -> None:
    r = Cohort(number=4, rounds=rounds(2), rng=random.Random(7))
    a = r.checkin("a", now=100.0, model_version=3)  # the first check-in opens the window
    waiting = {"selected": False, "waiting": True, "round": 4, "poll_at": 105.0}
    assert a == {**waiting, "retry_after_seconds": 5.0}
    assert r.checkin("b", now=101.5, model_version=3) == {**waiting, "retry_after_seconds": 3.5}
    assert r.checkin("c", now=102.0, model_version=3)["poll_at"] == 105.0
    assert r.checkin("a", now=103.0, model_version=3)["waiting"] is True  # still one candidate
    assert r.waiting == 3 and r.select(104.9) == [] and not r.complete(1e9)
    # The first poll at the window's end draws the seats: 2 of the 3, a deadline from now.
    first = r.checkin("a", now=105.0, model_version=3)
    assert r.waiting == 0 and r.selected_at == 105.0 and len(r.deadlines) == 2
    assert set(r.deadlines) < {"a", "b", "c"} and set(r.deadlines.values()) == {115.0}
    answers = {c: r.checkin(c, now=106.0, model_version=3) for c in "abc"}
    assert answers["a"] == first
    for client, answer in answers.items():
        if client in r.deadlines:
            assert answer == {"selected": True, "round": 4, "model_version": 3, "deadline": 115.0}
        else:
            assert answer == {"selected": False, "round": 4, "retry_after_seconds": 2.5}
    late = r.checkin("d", now=106.0, model_version=3)  # after the draw: the next round
    assert late == {"selected": False, "round": 4, "retry_after_seconds": 2.5}
    assert r.select(200.0) == []  # drawn once
    # Fewer candidates than seats: all of them, and the retry is at least a second.
    small = Cohort(0, rounds(3, t_max=1.0, window=0.5), random.Random(0))
    small.checkin("x", 0.0, 0)
    assert small.select(0.5) == ["x"]
    assert small.checkin("y", 0.6, 0)["retry_after_seconds"] == 1.0


def test_a_window_waits_for_min_checkins() -> None:
    r = Cohort(0, rounds(2, window=1.0, min_checkins=3), random.Random(0))
    r.checkin("a", now=0.0, model_version=0)
    r.checkin("b", now=0.5, model_version=0)
    still = r.checkin("a", now=2.0, model_version=0)  # past the window, two of three
    assert still["waiting"] is True and still["poll_at"] == 3.0 and r.select(2.5) == []
    third = r.checkin("c", now=2.5, model_version=0)  # the last one waited for: drawn now
    assert r.selected_at == 2.5 and len(r.deadlines) == 2
    assert third["selected"] is (("c" in r.deadlines) is True)
    # A secure round waits for K: the override.
    secure = Cohort(0, rounds(3, window=1.0), random.Random(0), min_checkins=3)
    secure.checkin("a", 0.0, 0)
    assert secure.select(5.0) == [] and secure.min_checkins == 3


def test_round_refusals_give_the_reason_and_reserve() -> None:
    r = seated(3, ["a", "b", "c"])

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
    # All or none: an aggregate naming b and an outsider reserves neither.
    assert r.refusal_of_all(["b", "zed"], 1.0) == why("zed", 1.0)
    assert r.pending == set() and r.refusal_of_all(["b", "c"], 1.0) is None
    assert r.pending == {"b", "c"}
    assert r.refusal_of_all(["c"], 1.0) == ("already_reported", why("c", 1.0)[1])


def test_round_completes_when_all_reported_or_all_deadlines_passed() -> None:
    assert not Cohort(0, rounds(2), random.Random(0)).complete(1000.0)  # nobody seated
    r = seated(2, ["a", "b"])
    assert not r.complete(4.0)
    assert r.complete(5.5)  # the deadlines passed
    r.reported.add("a")
    assert not r.complete(1.0)
    r.reported.add("b")
    assert r.complete(0.0)  # every seat reported
    fewer = seated(3, ["a"])  # one seat of three taken: its report completes the round
    fewer.reported.add("a")
    assert fewer.complete(0.0)


@pytest.mark.parametrize("cap", [0, 20])
@pytest.mark.parametrize("honest_at", [0, 200])
def test_a_flood_of_fresh_ids_gains_seats_only_in_proportion(honest_at: int, cap: int) -> None:
    """Finding 4: 200 fresh ids check in every round against K = 5 with one honest client
    among them (first or last). First-come gave the flood every seat when it
    came first; the uniform draw gives the honest client a seat at the rate K / N = 5 / 201
    wherever it arrives, also when the window keeps only 20 (the reservoir). The generator is
    seeded, so the count is fixed; the bounds are four standard deviations."""
    k, flood, n_rounds = 5, 200, 2000
    config = rounds(k, window=1.0, max_waiting=cap)
    rng = random.Random(2024)
    seats, flood_seats = 0, 0
    for number in range(n_rounds):
        r = Cohort(number, config, rng)
        ids = [f"sybil-{number}-{i}" for i in range(flood)]
        ids.insert(honest_at, "honest")
        for client in ids:
            r.checkin(client, now=0.0, model_version=0)
        assert r.waiting == (cap or flood + 1)  # memory bounded by the cap
        drawn = r.select(1.0)
        assert len(drawn) == k == len(set(drawn))  # one client, one seat
        seats += "honest" in drawn
        flood_seats += sum(c.startswith("sybil-") for c in drawn)
    expected = n_rounds * k / (flood + 1)
    assert abs(seats - expected) < 4 * np.sqrt(expected), (seats, expected)
    assert seats + flood_seats == n_rounds * k


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("checkin_seconds = 0", "[rounds] checkin_seconds must be in (0, 3600]"),
        ("min_checkins = 0", "[rounds] min_checkins must be >= 1"),
        ("max_waiting = 3", "max_waiting (3) must be 0 (100 x clients_per_round) or at least"),
        ("min_checkins = 501", "min_checkins (501) must be at most max_waiting"),
        ("selection_seed = -2", "[rounds] selection_seed (-1: a CSPRNG"),
    ],
)
def test_the_window_keys_refuse_what_cannot_work(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "server.toml"
    path.write_text(f"[rounds]\nclients_per_round = 5\n{text}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)
    assert load_config().rounds.waiting_cap == 100 * 100  # 100 x K by default


def decided(live: Live, client_id: str) -> dict[str, Any]:
    """Check in, polling through the round's window: the server's decision (seated or not)."""

    def ask() -> dict[str, Any] | None:
        response = live.client.post("/v1/checkin", json={"client_id": client_id})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return None if answer.get("waiting") else answer

    return wait_until(ask, what=f"the draw of {client_id!r}'s round")  # type: ignore[no-any-return]


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
checkin_seconds = 0.2
min_checkins = {K}
selection_seed = 1
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


def test_checkin_draws_k_and_a_complete_round_closes_the_iteration(es_rounds: Live) -> None:
    client = es_rounds.client
    assert status(client)["policy"] == "rounds"
    before = time.time()
    first = client.post("/v1/checkin", json={"client_id": "es-a"}).json()
    assert first["waiting"] is True and first["selected"] is False and first["round"] == 0
    assert before < first["poll_at"] <= time.time() + 0.2
    for name in ("b", "c"):
        client.post("/v1/checkin", json={"client_id": f"es-{name}"})
    selected = {name: decided(es_rounds, f"es-{name}") for name in ("a", "b", "c")}
    for answer in selected.values():
        assert answer["selected"] is True and answer["round"] == 0
        assert answer["model_version"] == 0
        assert before + 60.0 <= answer["deadline"] <= time.time() + 60.0
    assert len({a["deadline"] for a in selected.values()}) == 1  # one draw, one deadline
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
    wait_until(lambda: checkin_in_round(es_rounds, "es-a", 1), what="round 1")
    for name in ("b", "d"):
        client.post("/v1/checkin", json={"client_id": f"es-{name}"})
    nxt = decided(es_rounds, "es-a")
    assert nxt["selected"] is True and nxt["round"] == 1 and nxt["model_version"] == 1
    old = client.post("/v1/updates", json=es_message("r-d", 1, 4, 0.5, 0.5, client_id="es-c"))
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


# The scheduler never ticks (tick_seconds is an hour): the seats are drawn by a check-in
# after the window, and the round stays open past its deadline, so a late report meets it.
LATE = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 3600
[rounds]
enabled = true
clients_per_round = 3
t_max_seconds = 1.0
checkin_seconds = 0.1
min_checkins = 2
"""


def test_a_late_report_is_refused_with_the_reason(tmp_path: Path) -> None:
    with live_server(tmp_path, LATE, iteration_seconds=0, iteration_min_updates=1) as live:
        client = live.client
        client.post("/v1/checkin", json={"client_id": "late-a"})
        client.post("/v1/checkin", json={"client_id": "late-b"})
        a, b = decided(live, "late-a"), decided(live, "late-b")
        assert a["selected"] is b["selected"] is True and a["round"] == b["round"] == 0
        assert client.post(
            "/v1/updates", json=es_message("late-2", 0, 2, 0.5, 0.5, client_id="late-b")
        ).status_code == 202  # fmt: skip
        wait_until(lambda: time.time() > a["deadline"] + 0.05, what="a's deadline to pass")
        before = state_of(client)
        late = client.post(
            "/v1/updates", json=es_message("late-1", 0, 1, 0.5, 0.5, client_id="late-a")
        )
        assert_error(late, 409, "late", "late: the reporting deadline passed")
        assert state_of(client) == before


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
unbounded = true  # the weighted mean of deltas as sent
[rounds]
enabled = true
clients_per_round = 2
t_max_seconds = 60.0
checkin_seconds = 0.2
min_checkins = 2
"""


def test_fedavg_round_steps_by_the_weighted_mean(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    deltas = rng.normal(size=(2, 5))
    weights = np.array([3, 9])
    with live_server(tmp_path, FEDAVG_ROUNDS, iteration_seconds=0, iteration_min_updates=2) as live:
        client = live.client
        for i in range(2):
            client.post("/v1/checkin", json={"client_id": f"fa-{i}"})
        for i in range(2):
            assert decided(live, f"fa-{i}")["selected"] is True
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
            client.post("/v1/checkin", json={"client_id": f"fa-{i}"})
        for i in range(2):
            assert decided(live, f"fa-{i}")["selected"] is True
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


# -- every ingestion path obeys the round (finding 2) -------------------------------------------

DIM = 5
PATHS = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 0.05
[fedavg]
dim = {DIM}
unbounded = true  # the proxies fold plain weighted means
{PROXIES_TOML}[rounds]
enabled = true
clients_per_round = 3
t_max_seconds = 600.0
checkin_seconds = 0.2
min_checkins = 3
"""


def _update(message_id: str, client_id: str | None, n: int = 1, version: int = 0) -> dict[str, Any]:
    message: dict[str, Any] = {"message_id": message_id, "model_version": version}
    message["payload"] = {"delta": [0.1] * DIM, "n": n}
    if client_id is not None:
        message["client_id"] = client_id
    return message


def _aggregate(batch_id: str, count: int, clients: list[str] | None) -> dict[str, Any]:
    """A proxy's merged aggregate of ``count`` updates, naming ``clients`` if given."""
    aggregator = WeightedMean(DIM)
    updates = MessageBatch.of_vectors(np.full((count, DIM), 0.1), np.ones(count))
    state = aggregator.accumulate_batch(aggregator.zero(), updates)
    body = {"aggregate": aggregator.state_to_json(state), "count": count}
    body |= {"batch_id": batch_id, "model_version": 0}
    if clients is not None:
        body["clients"] = clients
    return body


def test_every_ingestion_path_refuses_a_client_that_never_checked_in(tmp_path: Path) -> None:
    """Finding 2: with rounds on, a client that never checked in had columnar batches (1,000
    FedAvg updates with n = 100,000) and a proxy's aggregates accepted. Every path now
    refuses it and stores nothing; a merged aggregate names its contributors, each seated
    and not yet reported, ``count`` of them."""
    with live_server(tmp_path, PATHS, iteration_seconds=0, iteration_min_updates=10**9) as live:
        client = live.client
        for name in ("p-a", "p-b", "p-c"):
            client.post("/v1/checkin", json={"client_id": name})
        assert all(decided(live, name)["selected"] for name in ("p-a", "p-b", "p-c"))
        before, rows = state_of(client), row_count(live.store)

        single = client.post("/v1/updates", json=_update("x-1", "mallory", n=100_000))
        assert_error(single, 409, "not_selected", "not selected in round 0")
        plain = [_update(f"x-b{i}", "mallory", n=100_000) for i in range(100)]
        batch = client.post("/v1/updates:batch", json={"messages": plain}).json()
        assert batch["statuses"] == [409] * 100 and batch["accepted"] == 0
        anonymous = [_update(f"x-c{i}", None) for i in range(3)]
        batch = client.post("/v1/updates:batch", json={"messages": anonymous}).json()
        assert batch["statuses"] == [409] * 3
        columns = MessageBatch.of_vectors(np.full((1000, DIM), -1.0), np.full(1000, 100_000))
        columnar = client.post("/v1/updates:batch", json={
            "batch": columns.to_json(), "model_version": 0,
            "message_ids": [f"x-col{i}" for i in range(1000)]})  # fmt: skip
        assert_error(columnar, 409, "not_selected", "a columnar batch names no client")
        post = lambda body: client.post("/v1/updates:batch", headers=PROXY, json=body)  # noqa: E731
        # A merged aggregate names its contributors by their device ids.
        p_a, p_b, mallory = (live.device_id(name) for name in ("p-a", "p-b", "mallory"))
        assert_error(post(_aggregate("agg-0", 2, None)), 409, "not_selected", "name the")
        assert_error(post(_aggregate("agg-1", 2, [p_a, mallory])), 409, "not_selected",
                     f"client '{mallory}' is not selected")  # fmt: skip
        assert_error(post(_aggregate("agg-2", 2, [p_a])), 422, "invalid", "2 (count) distinct")
        assert_error(post(_aggregate("agg-3", 2, [p_a, p_a])), 422, "invalid", "distinct")
        assert state_of(client) == before and row_count(live.store) == rows

        # Seated clients: an aggregate naming two of them counts once per contributor.
        accepted = post(_aggregate("agg-4", 2, [p_a, p_b]))
        assert accepted.status_code == 202, accepted.text
        assert post(_aggregate("agg-4", 2, [p_a, p_b])).status_code == 200  # a retry
        again = client.post("/v1/updates", json=_update("p-a-1", "p-a"))
        assert_error(again, 409, "already_reported", f"'{p_a}' has already reported")
        assert_error(post(_aggregate("agg-5", 1, [p_b])), 409, "already_reported", f"'{p_b}'")
        last = client.post("/v1/updates", json=_update("p-c-1", "p-c"))
        assert last.status_code == 202, last.text
        assert status(client)["updates_in_iteration"] == 3


# -- a check-in flood against a live server (finding 4) ------------------------------------------

FLOOD = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
max_connections = 2000
[iteration]
tick_seconds = 0.05
[fedavg]
dim = {DIM}
[rounds]
enabled = true
clients_per_round = 5
t_max_seconds = 600.0
checkin_seconds = 0.2
min_checkins = 201
selection_seed = 51
"""


def test_a_checkin_flood_cannot_take_the_seats_and_rounds_publish(tmp_path: Path) -> None:
    """Finding 4: 200 fresh ids check in every round before an honest client. First-come
    gave them all the seats (the honest client was selected once in 50 tries and no model
    was published); now every round draws 5 of the 201 at random, the honest client is a
    candidate like any other, and each round publishes (the seated report). The rate is
    checked in-process (test_a_flood_of_fresh_ids_gains_seats_only_in_proportion)."""
    with live_server(tmp_path, FLOOD, iteration_seconds=0, iteration_min_updates=1) as live:
        client = live.client
        first_come = 0
        for number in range(3):
            ids = [f"flood-{number}-{i}" for i in range(200)] + ["honest"]
            wait_until(lambda n=number: checkin_in_round(live, f"flood-{n}-0", n),
                       what=f"round {number}")  # fmt: skip
            for client_id in ids[1:]:
                answer = client.post("/v1/checkin", json={"client_id": client_id}).json()
                assert answer["round"] == number  # waiting; the last one completes the window
            answers = {c: decided(live, c) for c in ids}
            seats = [c for c, a in answers.items() if a["selected"]]
            assert len(seats) == 5 and all(a["round"] == number for a in answers.values())
            first_come += set(seats) == set(ids[:5])
            for c in seats:
                response = client.post("/v1/updates", json=_update(f"{c}-r", c, version=number))
                assert response.status_code == 202, response.text
            wait_until(lambda n=number: status(client)["model_version"] == n + 1,
                       what=f"round {number}'s close")  # fmt: skip
        assert first_come == 0
