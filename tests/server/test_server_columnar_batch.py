"""Columnar JSON batches (``{"batch": <MessageBatch JSON>, "message_ids", "model_version"}``,
what ``Client.send_batch`` sends) against a real server: stored in each message's JSON
form in the same id space as single messages, and refused whole, with the reason, when
anything is wrong (another workload's columns, counts that are not integers, values out
of range, ids that do not match the batch, an unknown version). A server that selects
clients per round refuses columnar batches: they name no client."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrank.client.sdk import Client, ClientError
from fedrank.core.codec import unpack_signs
from fedrank.core.message import MessageBatch
from tests.server.serverkit import Live, assert_error, live_server, row_count, state_of, stored_rows

NO_CLOSE = {"iteration_seconds": 0, "iteration_min_updates": 10**9}


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    text = '[server]\nworkload = "foltr-es"\n'
    with live_server(tmp_path_factory.mktemp("cb-es"), text, **NO_CLOSE) as live:
        yield live


@pytest.fixture(scope="module")
def frecency_sign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    text = '[server]\nworkload = "frecency"\n[frecency]\nmessage = "sign"\n'
    with live_server(tmp_path_factory.mktemp("cb-sign"), text, **NO_CLOSE) as live:
        yield live


def _sdk(live: Live) -> Client:
    return Client(live.process.url, enrollment_id="proxy-1", http=live.client, max_attempts=1)


def test_a_columnar_batch_is_stored_like_single_messages(es: Live) -> None:
    version = es.version()
    single = {
        "message_id": "cb-1",
        "model_version": version,
        "payload": {"seed": 1, "metric": 0.5, "antithetic_metric": 0.25},
    }
    assert es.client.post("/v1/updates", json=single).status_code == 202
    batch = MessageBatch.of_es(
        np.array([1, 2, 3], dtype=np.uint64), np.array([0.5, 0.75, 0.1]), np.array([0.25, 0, 1])
    )
    answer = _sdk(es).send_batch(batch, version, message_ids=["cb-1", "cb-2", "cb-3"])
    assert answer == {"accepted": 2, "duplicates": 1, "statuses": [200, 202, 202], "errors": []}
    rows = {r["message_id"]: r for r in stored_rows(es.store)}
    assert rows["cb-3"]["payload"] == {"seed": 3, "metric": 0.1, "antithetic_metric": 1.0}
    assert rows["cb-2"]["kind"] == "update" and rows["cb-2"]["model_version"] == version
    again = _sdk(es).send_batch(batch, version, message_ids=["cb-1", "cb-2", "cb-3"])
    assert again["statuses"] == [200, 200, 200]


def test_a_sign_batch_is_stored_as_packed_signs(frecency_sign: Live) -> None:
    signs = np.zeros((2, 22))
    signs[0, :3] = [1, -1, 1]
    signs[1, 5] = -1
    batch = MessageBatch.of_vectors(signs, np.array([1.0, 4.0]))
    answer = _sdk(frecency_sign).send_batch(batch, frecency_sign.version(), ["s-1", "s-2"])
    assert answer["accepted"] == 2
    rows = {r["message_id"]: r for r in stored_rows(frecency_sign.store)}
    stored = base64.b64decode(rows["s-1"]["payload"]["signs"])
    np.testing.assert_array_equal(unpack_signs(stored, 22), signs[0])
    assert rows["s-2"]["payload"]["n"] == 4


def _es_body(version: int, **changes: Any) -> dict[str, Any]:
    batch = MessageBatch.of_es(np.array([5, 6], dtype=np.uint64), [0.5, 0.5], [0.5, 0.5])
    body: dict[str, Any] = {"batch": batch.to_json(), "message_ids": ["x-1", "x-2"]}
    body["model_version"] = version
    for key, value in changes.items():
        if key.startswith("batch_"):
            body["batch"][key[len("batch_") :]] = value
        else:
            body[key] = value
    return body


@pytest.mark.parametrize(
    ("changes", "code", "detail"),
    [
        ({"message_ids": ["x-1"]}, "invalid_payload", "2 messages and 1 ids"),
        ({"message_ids": ["x 1", "x-2"]}, "invalid", "message ids"),
        ({"message_ids": []}, "invalid", "1..10000"),
        ({"model_version": 99}, "unknown_version", "does not exist"),
        ({"extra": 1}, "invalid", "columnar batch"),
        ({"batch_metric": [0.5, 1.5]}, "invalid_payload", "message 1: metric is a mean MaxRR"),
        ({"batch_metric": [0.5, "a"]}, "invalid_payload", "not numeric"),
        ({"batch_seed": [5, 2**40]}, "invalid_payload", "seed"),
        ({"batch_antithetic": None}, "invalid_payload", "must be a list of 2 numbers"),
        ({"batch_vector": [[1.0], [2.0]], "batch_dim": 1}, "invalid_payload", "columns"),
    ],
)
def test_a_bad_columnar_batch_is_refused_whole(
    es: Live, changes: dict[str, Any], code: str, detail: str
) -> None:
    before, rows = state_of(es.client), row_count(es.store)
    response = es.client.post("/v1/updates:batch", json=_es_body(es.version(), **changes))
    assert_error(response, 422, code, detail)
    assert state_of(es.client) == before and row_count(es.store) == rows


def test_vector_batches_refuse_what_a_count_or_a_sign_cannot_be(frecency_sign: Live) -> None:
    sdk = _sdk(frecency_sign)
    version = frecency_sign.version()
    half = MessageBatch.of_vectors(np.zeros((1, 22)), np.array([1.5]))
    with pytest.raises(ClientError, match="message 0: n must be an integer") as err:
        sdk.send_batch(half, version, ["v-1"])
    assert err.value.status == 422
    with pytest.raises(ClientError, match="-1, 0, \\+1"):
        sdk.send_batch(MessageBatch.of_vectors(np.full((1, 22), 0.5), np.ones(1)), version)
    with pytest.raises(ClientError, match="columns"):
        sdk.send_batch(MessageBatch.of_es(np.array([1], dtype=np.uint64), [0.5]), version)
    assert not any(r["message_id"] == "v-1" for r in stored_rows(frecency_sign.store))


FEDAVG_ROUNDS = """
[server]
workload = "fedavg"
[fedavg]
dim = 5
[rounds]
enabled = true
clients_per_round = 2
t_max_seconds = 600.0
checkin_seconds = 0.1
"""


def test_under_rounds_a_columnar_batch_is_refused_whole(tmp_path: Path) -> None:
    """Issue 51, finding 2: with rounds on, a client that never checked in had 1,000
    columnar FedAvg updates with n = 100,000 accepted. A columnar batch names no client, so
    a server that selects clients per round refuses it whole, saying what to send instead."""
    with live_server(tmp_path, FEDAVG_ROUNDS, **NO_CLOSE) as live:
        before, rows = state_of(live.client), row_count(live.store)
        batch = MessageBatch.of_vectors(np.full((1000, 5), -1.0), np.full(1000, 100_000))
        with pytest.raises(ClientError, match="a columnar batch names no client") as err:
            _sdk(live).send_batch(batch, 0, [f"sybil-{k}" for k in range(1000)])
        assert err.value.status == 409 and err.value.body["error"] == "not_selected"
        assert state_of(live.client) == before and row_count(live.store) == rows
