"""Binary batches (``application/vnd.fedrank.batch``) against a real server: what a proxy
forwards. Accepted and stored like JSON messages (one id space: a message sent as JSON and
again in a binary batch is a duplicate), all-or-nothing refusal of a bad batch (header,
ids, records, version), and 415 for a workload without a binary form. Also: ids holding a
newline are refused on every path (the batch fast path joins ids with newlines). A server
that selects clients per round refuses binary batches: they name no client."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedrank.core.codec import encode_batch
from tests.server.serverkit import (
    Live,
    assert_error,
    es_bytes,
    es_message,
    f32,
    live_server,
    row_count,
    state_of,
    status,
    stored_rows,
)

BATCH = "application/vnd.fedrank.batch"
NO_CLOSE = {"iteration_seconds": 0, "iteration_min_updates": 10**9}


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    text = '[server]\nworkload = "foltr-es"\n'
    with live_server(tmp_path_factory.mktemp("bb-es"), text, **NO_CLOSE) as live:
        yield live


@pytest.fixture(scope="module")
def frecency_sign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    text = '[server]\nworkload = "frecency"\n[frecency]\nmessage = "sign"\n'
    with live_server(tmp_path_factory.mktemp("bb-sign"), text, **NO_CLOSE) as live:
        yield live


@pytest.fixture(scope="module")
def frecency_full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    text = '[server]\nworkload = "frecency"\n'
    with live_server(tmp_path_factory.mktemp("bb-full"), text, **NO_CLOSE) as live:
        yield live


def by_hand(ids: list[str], version: int, records: bytes) -> bytes:
    """The documented layout, written here without the codec: ``"FRB1" | count u32 |
    model_version u32 | id bytes u32`` (little-endian), ids each ending in a newline, then
    the records."""
    block = "".join(f"{i}\n" for i in ids).encode()
    return b"FRB1" + struct.pack("<III", len(ids), version, len(block)) + block + records


def post_batch(live: Live, body: bytes):  # noqa: ANN201 - an httpx.Response
    return live.client.post("/v1/updates:batch", content=body, headers={"Content-Type": BATCH})


def test_binary_batch_is_stored_and_shares_ids_with_json(es: Live) -> None:
    version = es.version()
    sent_as_json = es_message("bb-1", version, 1, 0.5, 0.25)
    assert es.client.post("/v1/updates", json=sent_as_json).status_code == 202
    ids = ["bb-1", "bb-2", "bb-3", "bb-2"]  # bb-1 sent as JSON before; bb-2 twice here
    triples = [(1, 0.5, 0.25), (2, 0.75, 0.0), (3, 1.0 / 3.0, 0.5), (2, 0.75, 0.0)]
    body = by_hand(ids, version, b"".join(es_bytes(*t) for t in triples))
    assert body == encode_batch(ids, version, b"".join(es_bytes(*t) for t in triples))
    before = status(es.client)
    response = post_batch(es, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer == {
        "accepted": 2,
        "duplicates": 2,
        "statuses": [200, 202, 202, 200],
        "errors": [],
    }
    after = status(es.client)
    assert after["updates_accepted_total"] == before["updates_accepted_total"] + 2
    assert after["updates_in_iteration"] == before["updates_in_iteration"] + 2
    rows = {r["message_id"]: r for r in stored_rows(es.store)}
    assert rows["bb-3"]["payload"] == {"seed": 3, "metric": f32(1 / 3), "antithetic_metric": 0.5}
    assert rows["bb-3"]["model_version"] == version and rows["bb-3"]["kind"] == "update"
    assert rows["bb-2"]["payload"]["metric"] == 0.75
    # the same batch again: every message is a duplicate, nothing changes
    again = post_batch(es, body).json()
    assert again["accepted"] == 0 and again["statuses"] == [200] * 4
    assert status(es.client)["updates_accepted_total"] == after["updates_accepted_total"]


def _es_records(n: int) -> bytes:
    return b"".join(es_bytes(k, 0.5, 0.5) for k in range(n))


@pytest.mark.parametrize(
    ("make", "detail"),
    [
        (lambda v: b"FRB", "16-byte header"),  # shorter than the header
        (lambda v: b"FRB2" + by_hand(["x"], v, _es_records(1))[4:], "magic"),
        (lambda v: by_hand(["x", "y"], v, _es_records(1)), "declares 2 messages"),
        (lambda v: by_hand(["x"], v, _es_records(1) + b"\x00"), "declares 1 messages"),
        (lambda v: by_hand(["x"], v, _es_records(1))[:-1], "declares 1 messages"),
        (lambda v: by_hand(["x y"], v, _es_records(1)), "message ids"),
        (lambda v: by_hand(["a\nb"], v, _es_records(1)), "hold 1 ids"),  # 2 lines, 1 declared
        (lambda v: by_hand(["é"], v, _es_records(1)), "ASCII"),
        (lambda v: by_hand([], v, b""), "1..10000"),
        (lambda v: by_hand(["x"], v + 7, _es_records(1)), "version"),
        (lambda v: by_hand(["x"], v, struct.pack("<Iff", 1, 2.0, 0.5)), "[0, 1]"),
        (lambda v: by_hand(["x"], v, struct.pack("<Iff", 1, 0.5, float("nan"))), "[0, 1]"),
    ],
)
def test_a_bad_binary_batch_is_refused_whole(es: Live, make, detail: str) -> None:  # noqa: ANN001
    before, rows = state_of(es.client), row_count(es.store)
    response = post_batch(es, make(es.version()))
    assert 400 <= response.status_code < 500, response.text
    assert detail in response.json()["detail"], response.json()
    assert state_of(es.client) == before and row_count(es.store) == rows


def test_a_sign_batch_is_stored_in_its_json_form(frecency_sign: Live) -> None:
    live = frecency_sign
    rng = np.random.default_rng(3)
    votes = rng.choice([-1, 0, 1], size=(3, 22))

    def pack(signs: np.ndarray) -> bytes:  # 2 bits per weight: +1 -> 01, -1 -> 10
        bits = np.zeros(48, dtype=np.uint8)
        bits[0:44:2] = signs > 0
        bits[1:44:2] = signs < 0
        return np.packbits(bits, bitorder="little").tobytes()

    ids = [f"bb-sign-{k}" for k in range(3)]
    response = post_batch(live, by_hand(ids, live.version(), b"".join(pack(v) for v in votes)))
    assert response.status_code == 200 and response.json()["accepted"] == 3, response.text
    rows = {r["message_id"]: r for r in stored_rows(live.store)}
    for k, mid in enumerate(ids):
        assert rows[mid]["payload"] == {"signs": base64.b64encode(pack(votes[k])).decode()}
        assert rows[mid]["branch"] == "treatment"  # a proxy forwards the trained branch


def test_a_workload_without_a_binary_form_answers_415(frecency_full: Live) -> None:
    before = state_of(frecency_full.client)
    response = post_batch(frecency_full, by_hand(["x"], 0, b"\x00" * 6))
    assert_error(response, 415, "media_type", "no binary batch format; send JSON")
    assert state_of(frecency_full.client) == before


def test_ids_with_a_newline_are_refused_everywhere(es: Live) -> None:
    version = es.version()
    before, rows = state_of(es.client), row_count(es.store)
    single = es.client.post("/v1/updates", json=es_message("nl\nid", version, 1, 0.5, 0.5))
    assert_error(single, 422, "invalid", "message_id")
    messages = [
        es_message("bb-nl-ok", version, 1, 0.5, 0.5),
        es_message("a\nb", version, 2, 0.5, 0.5),
    ]
    answer = es.client.post("/v1/updates:batch", json={"messages": messages}).json()
    assert answer["statuses"] == [202, 422]
    assert answer["errors"][0]["index"] == 1 and "message_id" in answer["errors"][0]["detail"]
    assert row_count(es.store) == rows + 1
    assert "a\nb" not in {r["message_id"] for r in stored_rows(es.store)}
    assert state_of(es.client)["updates_accepted_total"] == before["updates_accepted_total"] + 1


ES_ROUNDS = """
[server]
workload = "foltr-es"
[rounds]
enabled = true
clients_per_round = 2
t_max_seconds = 600.0
checkin_seconds = 0.1
"""


def test_under_rounds_a_binary_batch_is_refused_whole(tmp_path: Path) -> None:
    """Issue 51, finding 2: with rounds on, a client that never checked in had 5,000 ES
    reports accepted in one binary batch. A binary batch names no client, so a server that
    selects clients per round refuses it whole, saying what to send instead."""
    with live_server(tmp_path, ES_ROUNDS, **NO_CLOSE) as live:
        before, rows = state_of(live.client), row_count(live.store)
        ids = [f"sybil-{k}" for k in range(5000)]
        response = post_batch(live, encode_batch(ids, 0, _es_records(5000)))
        assert_error(response, 409, "not_selected", "a binary batch names no client")
        assert "client_id" in response.json()["detail"]
        assert state_of(live.client) == before and row_count(live.store) == rows
