"""Device identity against a real server on loopback (docs/devices.md; issue 51, "Device
identity"): unenrolled check-ins, updates and secure-aggregation messages get 401 with a
reason naming how to enroll; a forged MAC, a replayed old timestamp and a revoked device get
401; an enrollment token admits one device; a flood of fresh ids without enrollment costs
only 401s and 429s; the SDK enrolls and signs transparently."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedrank.client import Client
from fedrank.identity.device import DeviceAuth, IdentityError, enroll
from fedrank.identity.protocol import HEADER, DeviceKey
from fedrank.identity.registry import DeviceRegistry
from tests.cli.clirun import assert_clean_failure, ok, run
from tests.server.serverkit import (
    ADMIN,
    ADMIN_TOKEN,
    Device,
    Live,
    assert_error,
    enroll_devices,
    es_message,
    issue_tokens,
    live_server,
    state_of,
    status,
    wait_until,
)

ROUNDS = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[rounds]
enabled = true
clients_per_round = 50
t_max_seconds = 60.0
[identity]
device_rate = 5.0
device_burst = 20
address_rate = 5.0
address_burst = 40
"""
#: A round whose check-in window closes soon after the first check-in.
WINDOW = ROUNDS.replace("t_max_seconds = 60.0\n", "t_max_seconds = 60.0\ncheckin_seconds = 0.5\n")
#: Seconds between a test's polls of one device: within ``device_rate`` (5/s).
POLL = 0.25


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("identity"), ROUNDS, iteration_seconds=0) as live:
        yield live


def test_unenrolled_checkin_update_and_secagg_get_401_naming_how_to_enroll(live: Live) -> None:
    c = live.client
    before = state_of(c)
    checkin = c.post("/v1/checkin", json={"client_id": "c1"}, auth=None)
    assert_error(checkin, 401, "unenrolled", "enroll")
    update = es_message("m1", 0, 7, 0.5, 0.25, client_id="c1")
    single = c.post("/v1/updates", json=update, auth=None)
    assert_error(single, 401, "unenrolled", "fedrank devices enroll")
    batch = c.post("/v1/updates:batch", json={"messages": [update]}, auth=None)
    assert_error(batch, 401, "unenrolled")
    assert state_of(c) == before


def _seat(live: Live, device: Device) -> dict[str, Any]:
    """``device``'s check-in, polled through the round's window (every :data:`POLL`
    seconds): the server's decision once it has drawn the seats."""

    def ask() -> dict[str, Any] | None:
        answer = live.client.post("/v1/checkin", json={}, auth=device.auth)
        assert answer.status_code == 200, answer.text
        decided: dict[str, Any] = answer.json()
        return None if decided.get("waiting") else decided

    seat: dict[str, Any] = wait_until(ask, interval=POLL, what="the check-in window's draw")
    return seat


def test_an_enrolled_device_checks_in_as_itself_and_not_as_another(tmp_path: Path) -> None:
    with live_server(tmp_path, WINDOW, iteration_seconds=0) as live:
        (a, b) = enroll_devices(live, 2)
        answer = _seat(live, a)
        assert answer["selected"] is True
        same = live.client.post("/v1/checkin", json={"client_id": a.id}, auth=a.auth)
        assert same.json() == answer
        other = live.client.post("/v1/checkin", json={"client_id": a.id}, auth=b.auth)
        assert_error(other, 403, "client_mismatch", b.id)


def _signed(device_auth: DeviceAuth, method: str, url: str, body: bytes) -> httpx.Request:
    request = httpx.Request(method, url, content=body, headers={"content-type": "application/json"})
    device_auth.sign(request)
    return request


def test_a_forged_mac_a_replayed_timestamp_and_a_revoked_device_get_401(live: Live) -> None:
    (d,) = enroll_devices(live, 1)
    c = live.client
    assert c.post("/v1/checkin", json={}, auth=d.auth).status_code == 200  # opens a session
    url = f"{live.process.url}/v1/checkin"
    forged = _signed(d.auth, "POST", url, b"{}")
    device, expires, stamp, mac = forged.headers[HEADER].split(" ")
    forged.headers[HEADER] = f"{device} {expires} {stamp} {'0' * len(mac)}"
    assert_error(c.send(forged, auth=None), 401, "bad_signature")
    # another body under the same MAC
    tampered = _signed(d.auth, "POST", url, b"{}")
    headers = {HEADER: tampered.headers[HEADER], "content-type": "application/json"}
    tampered = httpx.Request("POST", url, content=b'{"client_id": "x"}', headers=headers)
    assert_error(c.send(tampered, auth=None), 401, "bad_signature")
    # a request signed now, replayed after the skew window (its clock is two minutes back)
    old = DeviceAuth(d.auth.key, live.process.url, clock=lambda: time.time() - 120)
    old.session = d.auth.session
    assert_error(c.send(_signed(old, "POST", url, b"{}"), auth=None), 401, "stale_timestamp")
    # revoked by the operator while the server runs: refused within REFRESH_SECONDS
    ok(["devices", "revoke", "--store", str(live.store), d.id])
    refused = wait_until(
        lambda: (r := c.post("/v1/checkin", json={}, auth=d.auth)).status_code == 401 and r,
        interval=POLL,
        what="the revocation to hold",
    )
    assert_error(refused, 401, "revoked")


def test_a_token_admits_one_device(live: Live) -> None:
    (token,) = issue_tokens(live.store, 1)
    first, second = DeviceKey.generate(), DeviceKey.generate()
    url = live.process.url
    assert enroll(live.client, url, first, token) == first.id
    assert enroll(live.client, url, first, token) == first.id  # a retry of the same device
    with pytest.raises(IdentityError, match="already used") as refused:
        enroll(live.client, url, second, token)
    assert refused.value.status == 401
    with pytest.raises(IdentityError, match="unknown enrollment token"):
        enroll(live.client, url, second, "not-a-token")


def test_admin_issues_tokens_and_only_the_admin(live: Live) -> None:
    answer = live.client.post("/v1/admin/devices", json={"count": 3, "label": "lab"}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    tokens = answer.json()["tokens"]
    assert len(set(tokens)) == 3
    key = DeviceKey.generate()
    assert enroll(live.client, live.process.url, key, tokens[0]) == key.id
    anyone = live.client.post("/v1/admin/devices", json={"count": 1}, auth=None)
    assert_error(anyone, 401, "unauthorized")
    too_many = live.client.post("/v1/admin/devices", json={"count": 10**6}, headers=ADMIN)
    assert_error(too_many, 422, "invalid", "count must be in 1..10000")


def test_a_flood_of_fresh_ids_costs_only_401s_and_429s(tmp_path: Path) -> None:
    with live_server(tmp_path, ROUNDS, iteration_seconds=0) as live:
        codes = [
            live.client.post("/v1/checkin", json={"client_id": f"sybil-{i}"}, auth=None).status_code
            for i in range(100)
        ]
        assert set(codes) == {401, 429}
        limited = live.client.post("/v1/checkin", json={"client_id": "sybil-x"}, auth=None)
        assert_error(limited, 429, "rate_limited", "retry after")
        assert limited.headers["retry-after"] == "1"
        update = es_message("f1", 0, 7, 0.5, 0.25, client_id="sybil-y")
        hot = live.client.post("/v1/updates", json=update, auth=None)  # the lean ASGI path
        assert_error(hot, 429, "rate_limited")
        assert hot.headers["retry-after"] == "1"
        answer = live.client.get("/v1/status", headers=ADMIN, auth=None).json()
        assert answer["updates_accepted_total"] == 0


def test_devices_cli_round_trip(tmp_path: Path) -> None:
    store = tmp_path / "store"
    printed = ok(["devices", "enroll", "--store", str(store), "--count", "2", "--label", "lab"])
    tokens = printed.output.split()
    assert len(tokens) == 2
    registry = DeviceRegistry(store)
    key = DeviceKey.generate()
    device = registry.enroll(tokens[0], key.public_bytes)
    registry.close()
    assert (store / "devices.sqlite").stat().st_mode & 0o777 == 0o600
    listed = ok(["devices", "list", "--store", str(store)]).output
    assert device in listed and "lab" in listed
    revoked = ok(["devices", "revoke", "--store", str(store), device]).output
    assert revoked.strip() == f"revoked {device}"
    again = run(["devices", "revoke", "--store", str(store), device])
    assert_clean_failure(again, "no enrolled, unrevoked device")
    bad = run(["devices", "enroll", "--store", str(store), "--count", "0"])
    assert_clean_failure(bad, "count must be in 1..10000")


def test_the_sdk_enrolls_once_and_signs_transparently(live: Live, tmp_path: Path) -> None:
    (token,) = issue_tokens(live.store, 1)
    state = tmp_path / "device"
    with Client(live.process.url, state_dir=state, enrollment_token=token) as c:
        checkin = c.checkin()
        assert checkin.selected and checkin.client_id == c.device_id
        model = c.fetch_model()
        sent = c.send({"seed": 3, "metric": 0.5, "antithetic_metric": 0.25}, model.version,
                      client_id=checkin.client_id)  # fmt: skip
        assert sent.status == "accepted", sent
        device = c.device_id
    assert (state / "device.key").stat().st_mode & 0o777 == 0o600
    with Client(live.process.url, state_dir=state) as again:  # no token: enrolled already
        assert again.device_id == device
        assert again.checkin().client_id == device


SECAGG = """
[server]
workload = "fedavg"
[fedavg]
dim = 4
[rounds]
enabled = true
clients_per_round = 3
t_max_seconds = 60.0
checkin_seconds = 0.5
[secagg]
enabled = true
l2_bound = 1.0
"""


def test_unenrolled_secure_aggregation_messages_get_401(tmp_path: Path) -> None:
    with live_server(tmp_path, SECAGG) as live:
        c = live.client
        body = {"client_id": "c1", "session": "s", "stage": "advertise", "message": {}}
        assert_error(c.post("/v1/secagg", json=body, auth=None), 401, "unenrolled", "enroll")
        view = c.get("/v1/secagg", params={"client_id": "c1", "session": "s"}, auth=None)
        assert_error(view, 401, "unenrolled")
        cohort = enroll_devices(live, 3)  # a secure round waits for K = 3 devices
        for device in cohort:
            assert c.post("/v1/checkin", json={}, auth=device.auth).status_code == 200
        seats = [_seat(live, device) for device in cohort]
        assert all(seat["selected"] for seat in seats)
        assert sorted(seat["secagg"]["id"] for seat in seats) == [1, 2, 3]
        d, seat = cohort[0], seats[0]
        mine = {"client_id": d.id, "session": seat["secagg"]["session"]}
        assert c.get("/v1/secagg", params=mine, auth=d.auth).status_code == 200
        other = {**mine, "client_id": "someone-else"}
        assert_error(c.get("/v1/secagg", params=other, auth=d.auth), 403, "client_mismatch")


def test_sybils_without_enrollment_get_no_seat_beside_a_secure_victim(tmp_path: Path) -> None:
    """Issue 51, finding 3: with K = 5, an attacker checked in four ids, let the victim be
    fifth, ran the protocol with zero deltas and read the victim's delta from two published
    models. Without enrollment the four ids get 401 and no seat; the round waits for five
    enrolled devices (the victim alone is never drawn), and when four honest devices arrive
    the five are seated together."""
    five = SECAGG.replace("clients_per_round = 3", "clients_per_round = 5")
    with live_server(tmp_path, five) as live:
        c = live.client
        for i in range(4):
            sybil = c.post("/v1/checkin", json={"client_id": f"sybil-{i}"}, auth=None)
            assert_error(sybil, 401, "unenrolled", "enroll")
        victim, *honest = enroll_devices(live, 5)
        for _ in range(6):  # well past the 0.5 s window: still waiting for four more devices
            assert c.post("/v1/checkin", json={}, auth=victim.auth).json()["waiting"] is True
            time.sleep(POLL)
        assert status(c)["secagg"]["cohort"] == 0
        for device in honest:
            assert c.post("/v1/checkin", json={}, auth=device.auth).status_code == 200
        seats = [_seat(live, device) for device in (victim, *honest)]
        assert all(seat["selected"] for seat in seats)
        assert sorted(seat["secagg"]["id"] for seat in seats) == [1, 2, 3, 4, 5]


FRECENCY = """
[server]
workload = "frecency"
[identity]
required = true
"""


def test_fedrank_client_enrolls_with_its_token_and_fails_in_one_line(
    tmp_path: Path, firefox_dir: Path
) -> None:
    state = tmp_path / "state"
    args = ["client", "--server", "", "--places", str(firefox_dir / "places.sqlite"),
            "--state", str(state)]  # fmt: skip
    with live_server(tmp_path, FRECENCY) as live:
        args[2] = live.process.url
        assert_clean_failure(run(args), "enrolled devices only")
        (token,) = issue_tokens(live.store, 1)
        assert "-> accepted" in ok([*args, "--enrollment-token", token]).output
        assert "-> accepted" in ok(args).output  # enrolled: the state remembers it
        assert_clean_failure(run([*args[:5], "--state", str(tmp_path / "new"),
                                  "--enrollment-token", token]), "already used")  # fmt: skip
    assert_clean_failure(run(args), "cannot reach the server")
