"""The HTTP API of a real ``fedrank serve`` over loopback: every status-code rule (202
accepted, 200 duplicate, 409 stale, 4xx with an explicit reason, 503 while paused), the
binary encodings (ES 8/12 bytes, frecency 2-bit signs), the batch endpoint (messages and a
proxy's aggregate), ETag polling, models by version, status vs. Prometheus, per-branch
summaries, study branches and the admin endpoints.

Each server is module-scoped; a test that needs the current model version asks for it, and
message ids carry the test's name, so the tests do not depend on their order.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedrank.aggregators.es_gradient import ESGradient
from fedrank.aggregators.gated_mean import GatedMean
from fedrank.aggregators.mean import WeightedMean
from fedrank.core.message import MessageBatch
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES
from fedrank.server.branches import branch_of
from fedrank.server.workloads import make_workload
from tests.server.serverkit import (
    ADMIN_TOKEN,
    PROXIES_TOML,
    PROXY,
    Live,
    admin,
    assert_error,
    binary_headers,
    closed_iteration,
    es_bytes,
    es_message,
    f32,
    live_server,
    prometheus,
    recompute_state,
    recompute_step,
    row_count,
    state_of,
    status,
    stored_rows,
)

NO_CLOSE = {"iteration_seconds": 0, "iteration_min_updates": 10**9}

ES_TOML = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
max_body_bytes = 4096
{PROXIES_TOML}"""

ES_PLAIN_TOML = """
[server]
workload = "foltr-es"
[foltr_es]
antithetic = false
"""

FRECENCY_SIGN_TOML = f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
[frecency]
message = "sign"
significance_z = 0.0
{PROXIES_TOML}"""

FRECENCY_FULL_TOML = f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
{PROXIES_TOML}"""

FEDAVG_TOML = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[fedavg]
dim = 8
server_learning_rate = 0.5
unbounded = true  # the weighted mean of deltas as sent, which proxies fold
{PROXIES_TOML}"""


def _live(factory: pytest.TempPathFactory, name: str, text: str) -> Iterator[Live]:
    with live_server(factory.mktemp(name), text, **NO_CLOSE) as live:
        yield live


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    yield from _live(tmp_path_factory, "es", ES_TOML)


@pytest.fixture(scope="module")
def es_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    yield from _live(tmp_path_factory, "es-plain", ES_PLAIN_TOML)


@pytest.fixture(scope="module")
def frecency_sign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    yield from _live(tmp_path_factory, "frecency-sign", FRECENCY_SIGN_TOML)


@pytest.fixture(scope="module")
def frecency_full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    yield from _live(tmp_path_factory, "frecency-full", FRECENCY_FULL_TOML)


@pytest.fixture(scope="module")
def fedavg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    yield from _live(tmp_path_factory, "fedavg", FEDAVG_TOML)


def enrollment_in(live: Live, branch: str, start: int = 0) -> str:
    """An enrollment id that the server puts in ``branch``."""
    shares = [(b.name, b.share) for b in live.config.branches]
    for i in range(start, start + 10_000):
        candidate = f"enr-{i}"
        if branch_of(candidate, shares) == branch:
            return candidate
    raise AssertionError(f"no enrollment id for {branch}")


def close_now(live: Live) -> dict[str, object]:
    """Admin close (the iteration must hold updates); returns the answer."""
    response = admin(live.client, "close")
    assert response.status_code == 200, response.text
    return response.json()


def ensure_closable(live: Live, tag: str) -> None:
    """One accepted ES update in the open iteration, so that an admin close can run."""
    msg = es_message(f"{tag}-filler", live.version(), 7, 0.5, 0.25)
    assert live.client.post("/v1/updates", json=msg).status_code == 202


# -- the basic rules ----------------------------------------------------------------------


def test_openapi_lists_every_endpoint(es: Live) -> None:
    doc = es.client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in (
        "/v1/model",
        "/v1/model/{version}",
        "/v1/updates",
        "/v1/updates:batch",
        "/v1/checkin",
        "/v1/status",
        "/v1/summary",
        "/metrics",
        "/v1/admin/{action}",
    ):
        assert path in doc["paths"], path


def test_accepted_then_duplicate_never_counted_twice(es: Live) -> None:
    client, version = es.client, es.version()
    before = status(client)
    msg = es_message("api-dup-1", version, 11, 0.75, 0.5)
    first = client.post("/v1/updates", json=msg)
    assert first.status_code == 202
    assert first.json() == {
        "status": "accepted",
        "message_id": "api-dup-1",
        "iteration": before["iteration"],
    }
    again = client.post("/v1/updates", json=msg)
    assert again.status_code == 200
    assert again.json() == {"status": "duplicate", "message_id": "api-dup-1"}
    # The same id with another payload is still the same message: answered, not counted.
    other = client.post("/v1/updates", json=es_message("api-dup-1", version, 99, 0.1, 0.2))
    assert other.status_code == 200 and other.json()["status"] == "duplicate"
    after = status(client)
    assert after["updates_accepted_total"] == before["updates_accepted_total"] + 1
    assert after["updates_in_iteration"] == before["updates_in_iteration"] + 1
    assert after["updates_duplicate_total"] == before["updates_duplicate_total"] + 2
    (row,) = [r for r in stored_rows(es.store) if r["message_id"] == "api-dup-1"]
    assert row["payload"] == {"seed": 11, "metric": 0.75, "antithetic_metric": 0.5}
    assert row["kind"] == "update" and row["count"] == 1


def test_binary_es_12_bytes(es: Live) -> None:
    client, version = es.client, es.version()
    body = es_bytes(123456, 0.3, 0.7)
    assert len(body) == 12
    response = client.post(
        "/v1/updates", content=body, headers=binary_headers("api-bin12", version)
    )
    assert response.status_code == 202, response.text
    again = client.post("/v1/updates", content=body, headers=binary_headers("api-bin12", version))
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    (row,) = [r for r in stored_rows(es.store) if r["message_id"] == "api-bin12"]
    # Stored as the float32 values that travelled, exactly.
    assert row["payload"] == {"seed": 123456, "metric": f32(0.3), "antithetic_metric": f32(0.7)}
    assert row["model_version"] == version


def test_binary_es_8_bytes_on_a_plain_server(es_plain: Live) -> None:
    client, version = es_plain.client, es_plain.version()
    body = es_bytes(42, 0.625)
    assert len(body) == 8
    ok = client.post("/v1/updates", content=body, headers=binary_headers("plain-8", version))
    assert ok.status_code == 202, ok.text
    (row,) = [r for r in stored_rows(es_plain.store) if r["message_id"] == "plain-8"]
    assert row["payload"] == {"seed": 42, "metric": 0.625}
    before = state_of(client)
    twelve = client.post(
        "/v1/updates", content=es_bytes(42, 0.5, 0.5), headers=binary_headers("plain-12", version)
    )
    assert_error(twelve, 422, "invalid_payload", "8 bytes, got 12")
    anti = client.post("/v1/updates", json=es_message("plain-anti", version, 1, 0.5, 0.5))
    assert_error(anti, 422, "invalid_payload", "antithetic")
    assert state_of(client) == before


@pytest.mark.parametrize(
    ("body", "headers", "status_code", "code", "detail"),
    [
        (es_bytes(1, 0.5), {}, 422, "invalid_payload", "12 bytes, got 8"),
        (b"", {}, 422, "invalid_payload", "12 bytes, got 0"),
        (es_bytes(1, 0.5, 0.5) + b"\x00", {}, 422, "invalid_payload", "12 bytes, got 13"),
        (
            b"\x01\x00\x00\x00" + b"\x00\x00\xc0\x7f" + b"\x00\x00\x00\x00",
            {},
            422,
            "invalid_payload",
            "not finite",
        ),
        (
            b"\x01\x00\x00\x00" + b"\x00\x00\x80\x7f" + b"\x00\x00\x00\x00",
            {},
            422,
            "invalid_payload",
            "not finite",
        ),
        (es_bytes(1, 1.5, 0.5), {}, 422, "invalid_payload", "in [0, 1]"),
        (es_bytes(1, 0.5, -0.25), {}, 422, "invalid_payload", "in [0, 1]"),
        (es_bytes(1, 0.5, 0.5), {"X-Message-Id": None}, 422, "invalid", "X-Message-Id"),
        (es_bytes(1, 0.5, 0.5), {"X-Message-Id": "has space"}, 422, "invalid", "X-Message-Id"),
        (es_bytes(1, 0.5, 0.5), {"X-Model-Version": None}, 422, "invalid", "X-Model-Version"),
        (es_bytes(1, 0.5, 0.5), {"X-Model-Version": "abc"}, 422, "invalid", "X-Model-Version"),
        (es_bytes(1, 0.5, 0.5), {"X-Model-Version": "-1"}, 422, "invalid", "X-Model-Version"),
        (es_bytes(1, 0.5, 0.5), {"X-Model-Version": "1.0"}, 422, "invalid", "X-Model-Version"),
        # A non-ASCII digit (latin-1 superscript two) once reached int() and answered 500.
        (es_bytes(1, 0.5, 0.5), {"X-Model-Version": b"\xb2"}, 422, "invalid", "X-Model-Version"),
        (
            es_bytes(1, 0.5, 0.5),
            {"X-Model-Version": "123456789"},
            422,
            "unknown_version",
            "does not exist",
        ),
        (es_bytes(1, 0.5, 0.5), {"X-Enrollment-Id": "a b"}, 422, "invalid", "X-Enrollment-Id"),
        (es_bytes(1, 0.5, 0.5), {"X-Client-Id": b"\xe9"}, 422, "invalid", "X-Client-Id"),
    ],
)
def test_binary_refusals(
    es: Live,
    body: bytes,
    headers: dict[str, str | bytes | None],
    status_code: int,
    code: str,
    detail: str,
) -> None:
    client = es.client
    sent: dict[str, str | bytes] = dict(binary_headers("api-bin-bad", es.version()))
    for key, value in headers.items():
        if value is None:
            sent.pop(key)
        else:
            sent[key] = value
    before, rows = state_of(client), row_count(es.store)
    response = client.post("/v1/updates", content=body, headers=sent)
    assert_error(response, status_code, code, detail)
    assert state_of(client) == before
    assert row_count(es.store) == rows


def _env(**changes: object) -> dict[str, object]:
    """A valid antithetic ES message (version 0 is filled in per test) with changes."""
    msg: dict[str, object] = es_message("api-bad", 0, 5, 0.5, 0.25)
    msg.update(changes)
    return msg


def _payload(**changes: object) -> dict[str, object]:
    payload: dict[str, object] = {"seed": 5, "metric": 0.5, "antithetic_metric": 0.25}
    payload.update(changes)
    return _env(payload=payload)


RAW = "raw"  # marks a case whose body is raw bytes


@pytest.mark.parametrize(
    ("body", "status_code", "code", "detail"),
    [
        ((RAW, b"{"), 400, "bad_json", "not valid JSON"),
        ((RAW, b""), 400, "bad_json", "not valid JSON"),
        (
            (RAW, b'{"message_id":"x","model_version":0,"payload":{"seed":1,"metric":NaN}}'),
            400,
            "bad_json",
            "not valid JSON",
        ),
        (
            (RAW, b'{"message_id":"x","model_version":0,"payload":{"seed":1,"metric":1e999}}'),
            400,
            "bad_json",
            "not valid JSON",
        ),
        (
            (RAW, b'{"message_id":"x","model_version":0,"payload":{"seed":1,"metric":Infinity}}'),
            400,
            "bad_json",
            "not valid JSON",
        ),
        ([], 422, "invalid", "a message must be a JSON object"),
        ("text", 422, "invalid", "a message must be a JSON object"),
        (_env(extra=1), 422, "invalid", "unknown field(s) ['extra']"),
        ({"model_version": 0, "payload": {}}, 422, "invalid", "message_id"),
        (_env(message_id=""), 422, "invalid", "message_id"),
        (_env(message_id="a/b"), 422, "invalid", "message_id"),
        (_env(message_id="x" * 129), 422, "invalid", "message_id"),
        (_env(message_id=17), 422, "invalid", "message_id"),
        (_env(model_version="0"), 422, "invalid", "model_version"),
        (_env(model_version=-1), 422, "invalid", "model_version"),
        (_env(model_version=True), 422, "invalid", "model_version"),
        (_env(model_version=0.0), 422, "invalid", "model_version"),
        (_env(model_version=10**6), 422, "unknown_version", "does not exist yet"),
        (_env(model_version=2**64), 422, "invalid", "model_version"),
        (_env(enrollment_id="white space"), 422, "invalid", "enrollment_id"),
        (_env(client_id=[]), 422, "invalid", "client_id"),
        (_env(payload=[1, 2]), 422, "invalid", "payload must be a JSON object"),
        (_env(payload=None), 422, "invalid", "payload must be a JSON object"),
        (_env(metrics=[1]), 422, "invalid", "metrics must be an object"),
        (_env(metrics={f"m{i}": 1 for i in range(33)}), 422, "invalid", "at most 32"),
        (_env(metrics={"": 1.0}), 422, "invalid", "1-64 characters"),
        (_env(metrics={"x" * 65: 1.0}), 422, "invalid", "1-64 characters"),
        (_env(metrics={"ndcg": "1"}), 422, "invalid", "finite number"),
        (_env(metrics={"ndcg": True}), 422, "invalid", "finite number"),
        (_env(metrics={"ndcg": None}), 422, "invalid", "finite number"),
        (_env(metrics={"loss": 1.0}), 422, "unknown_metric", "clicks, maxrr, ndcg"),
        (_env(metrics={"ndcg": 1e308}), 422, "metric_range", "outside its range [0, 1]"),
        (_env(metrics={"clicks": -1}), 422, "metric_range", "outside its range [0, 10000]"),
        (_payload(metric="0.5"), 422, "invalid_payload", "metric must be a finite number"),
        (_payload(metric=True), 422, "invalid_payload", "metric must be a finite number"),
        (_payload(metric=[0.5]), 422, "invalid_payload", "metric must be a finite number"),
        (_payload(metric=1.5), 422, "invalid_payload", "in [0, 1]"),
        (_payload(metric=1e308), 422, "invalid_payload", "in [0, 1]"),
        (_payload(antithetic_metric=-1e-9), 422, "invalid_payload", "in [0, 1]"),
        (_payload(seed=-1), 422, "invalid_payload", "seed must be an integer"),
        (_payload(seed=2**32), 422, "invalid_payload", "seed must be an integer"),
        (_payload(seed=1.0), 422, "invalid_payload", "seed must be an integer"),
        (_payload(seed=False), 422, "invalid_payload", "seed must be an integer"),
        (_payload(extra=1), 422, "invalid_payload", "unknown payload field(s) ['extra']"),
        (
            _env(payload={"seed": 1, "metric": 0.5}),
            422,
            "invalid_payload",
            "payload lacks ['antithetic_metric']",
        ),
        (_env(payload={"gradient": [0.0]}), 422, "invalid_payload", "unknown payload field"),
    ],
)
def test_malformed_json_is_refused_with_a_reason_and_changes_nothing(
    es: Live, body: object, status_code: int, code: str, detail: str
) -> None:
    client, version = es.client, es.version()
    before, rows = state_of(client), row_count(es.store)
    if isinstance(body, tuple) and body[0] == RAW:
        response = client.post(
            "/v1/updates", content=body[1], headers={"Content-Type": "application/json"}
        )
    else:
        zero = isinstance(body, dict) and type(body.get("model_version")) is int
        if zero and body["model_version"] == 0:  # type: ignore[index]
            body = {**body, "model_version": version}  # type: ignore[dict-item]
        response = client.post("/v1/updates", json=body)
    assert_error(response, status_code, code, detail)
    assert state_of(client) == before
    assert row_count(es.store) == rows


def test_media_type_and_size_limits(es: Live) -> None:
    client = es.client
    before, rows = state_of(client), row_count(es.store)
    msg = json.dumps(es_message("api-mt", es.version(), 1, 0.5, 0.5)).encode()
    wrong = client.post("/v1/updates", content=msg, headers={"Content-Type": "text/plain"})
    assert_error(wrong, 415, "media_type", "application/json")
    form = client.post("/v1/updates", data={"message_id": "x"})
    assert_error(form, 415, "media_type", "application/x-www-form-urlencoded")
    # max_body_bytes = 4096: refused by Content-Length, and when streamed without one.
    big = client.post(
        "/v1/updates", content=b" " * 5000, headers={"Content-Type": "application/json"}
    )
    assert_error(big, 413, "too_large", "4096 bytes")

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b" " * 1000

    streamed = client.post(
        "/v1/updates", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_error(streamed, 413, "too_large", "4096 bytes")
    batch = client.post(
        "/v1/updates:batch", content=b" " * 5000, headers={"Content-Type": "application/json"}
    )
    assert_error(batch, 413, "too_large", "4096 bytes")
    assert state_of(client) == before
    assert row_count(es.store) == rows
    # A body just under the limit is read normally.
    msg = msg.replace(b"api-mt", b"api-mt-ok")
    padded = msg + b" " * (4096 - len(msg))
    ok = client.post("/v1/updates", content=padded, headers={"Content-Type": "application/json"})
    assert ok.status_code == 202, ok.text


def test_ping_carries_metrics_only(es: Live) -> None:
    client = es.client
    before = status(client)
    ping = {"message_id": "api-ping", "model_version": es.version(), "metrics": {"clicks": 3}}
    assert client.post("/v1/updates", json=ping).status_code == 202
    after = status(client)
    assert after["updates_accepted_total"] == before["updates_accepted_total"] + 1
    assert after["updates_counted_total"] == before["updates_counted_total"] + 1
    assert after["updates_in_iteration"] == before["updates_in_iteration"]  # not an update
    (row,) = [r for r in stored_rows(es.store) if r["message_id"] == "api-ping"]
    assert row["kind"] == "ping" and row["payload"] == {} and row["metrics"] == {"clicks": 3.0}


def test_stale_version_is_409_for_updates_and_pings(es: Live) -> None:
    client = es.client
    ensure_closable(es, "api-stale")
    old = es.version()
    closed = close_now(es)
    assert closed["model_version"] == old + 1
    before = state_of(client)
    stale = client.post("/v1/updates", json=es_message("api-stale-1", old, 3, 0.5, 0.5))
    assert_error(stale, 409, "stale", f"model version {old}")
    assert stale.json()["current_version"] == old + 1
    stale_bin = client.post(
        "/v1/updates", content=es_bytes(3, 0.5, 0.5), headers=binary_headers("api-stale-2", old)
    )
    assert_error(stale_bin, 409, "stale", "fetch the model")
    assert state_of(client) == before
    # A stale message is not remembered as seen: the same id on the new version is accepted.
    fresh = client.post("/v1/updates", json=es_message("api-stale-1", old + 1, 3, 0.5, 0.5))
    assert fresh.status_code == 202
    # A ping's metrics describe the model it names: an old one's would be counted in the new
    # iteration's summary, so it is refused like a stale update (issue 15, F6).
    ping = {"message_id": "api-stale-ping", "model_version": old, "metrics": {"ndcg": 0.5}}
    assert_error(client.post("/v1/updates", json=ping), 409, "stale", f"model version {old}")
    batch = client.post("/v1/updates:batch", json={"messages": [ping]})
    assert batch.status_code == 200 and batch.json()["statuses"] == [409]
    ping["model_version"] = old + 1
    assert client.post("/v1/updates", json=ping).status_code == 202


def test_admin_requires_the_bearer_token(es: Live, es_plain: Live) -> None:
    client = es.client
    before = state_of(client)
    for token in (None, "wrong", ADMIN_TOKEN + "x", ADMIN_TOKEN.upper()):
        assert_error(admin(client, "close", token), 401, "unauthorized", "bearer token")
        assert_error(admin(client, "pause", token), 401, "unauthorized", "bearer token")
    no_scheme = client.post("/v1/admin/close", headers={"Authorization": ADMIN_TOKEN})
    assert_error(no_scheme, 401, "unauthorized", "bearer token")
    assert_error(admin(client, "explode"), 404, "not_found", "explode")
    assert state_of(client) == before and not status(client)["paused"]
    # A server without admin_token has admin disabled, whatever is sent.
    assert_error(admin(es_plain.client, "close", "anything"), 403, "admin_disabled", "admin_token")
    assert_error(admin(es_plain.client, "pause"), 403, "admin_disabled", "admin_token")


def test_refused_admin_calls_are_not_refused_updates(es: Live) -> None:
    """Issue 15, F10: a 401 or 404 from the admin endpoints once counted as a rejected
    update; it is a refused request, counted apart."""
    client = es.client
    before = status(client)
    assert_error(admin(client, "close", "wrong-token-of-many-chars"), 401, "unauthorized")
    assert_error(admin(client, "explode"), 404, "not_found")
    after = status(client)
    assert after["updates_rejected_total"] == before["updates_rejected_total"]
    assert after["requests_refused_total"] == before["requests_refused_total"] + 2
    text = prometheus(client.get("/metrics").text)
    assert text['fedrank_requests_refused_total{endpoint="admin",reason="unauthorized"}'] >= 1


def test_pause_answers_503_then_resume(es: Live) -> None:
    client, version = es.client, es.version()
    paused = admin(client, "pause")
    assert paused.status_code == 200 and paused.json() == {"paused": True}
    try:
        assert status(client)["paused"] is True
        before, rows = state_of(client), row_count(es.store)
        msg = es_message("api-paused", version, 1, 0.5, 0.5)
        assert_error(client.post("/v1/updates", json=msg), 503, "paused", "retry later")
        binary = client.post(
            "/v1/updates", content=es_bytes(1, 0.5, 0.5), headers=binary_headers("api-p2", version)
        )
        assert_error(binary, 503, "paused", "retry later")
        batch = client.post("/v1/updates:batch", json={"messages": [msg]})
        assert_error(batch, 503, "paused", "retry later")
        assert client.get("/v1/model").status_code == 200  # reading goes on
        assert state_of(client) == before and row_count(es.store) == rows
    finally:
        resumed = admin(client, "resume")
    assert resumed.status_code == 200 and resumed.json() == {"paused": False}
    assert client.post("/v1/updates", json=msg).status_code == 202


def test_admin_close_of_an_empty_iteration_is_409(es: Live) -> None:
    ensure_closable(es, "api-empty")
    close_now(es)
    before = state_of(es.client)
    assert_error(admin(es.client, "close"), 409, "empty", "no updates")
    assert state_of(es.client) == before


def test_etag_and_models_by_version(es: Live) -> None:
    client = es.client
    first = client.get("/v1/model")
    assert first.status_code == 200
    etag = first.headers["ETag"]
    version = first.json()["model_version"]
    assert etag == f'"{version}-treatment"'
    cached = client.get("/v1/model", headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b""
    assert cached.headers["ETag"] == etag
    assert client.get("/v1/model", headers={"If-None-Match": '"other"'}).status_code == 200
    ensure_closable(es, "api-etag")
    close_now(es)
    changed = client.get("/v1/model", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    assert changed.json()["model_version"] == version + 1
    by_version = client.get(f"/v1/model/{version + 1}")
    assert by_version.status_code == 200
    assert by_version.json()["params"] == changed.json()["params"]
    assert by_version.json()["model_version"] == version + 1
    zero = client.get("/v1/model/0").json()
    assert zero["params"] == make_workload(es.config).initial_params().tolist()
    assert_error(client.get("/v1/model/999999"), 404, "not_found", "999999")
    for bad in ("abc", "1.5", "-1", "%C2%B2", "1" * 13):
        assert_error(client.get(f"/v1/model/{bad}"), 422, "invalid", "integer")
    assert_error(client.get("/v1/model?enrollment_id=a%20b"), 422, "invalid", "enrollment_id")


def test_status_and_prometheus_agree(es: Live) -> None:
    client, version = es.client, es.version()
    before = prometheus(client.get("/metrics").text)
    for i in range(3):
        msg = es_message(f"api-prom-{i}", version, i, 0.5, 0.5)
        assert client.post("/v1/updates", json=msg).status_code == 202
    bad = client.post("/v1/updates", json=es_message("api-prom-x", version, 1, 2.0, 0.5))
    assert bad.status_code == 422
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = prometheus(response.text)
    current = status(client)
    assert samples["fedrank_updates_accepted_total"] == current["updates_accepted_total"]
    assert samples["fedrank_updates_duplicate_total"] == current["updates_duplicate_total"]
    assert samples["fedrank_model_version"] == current["model_version"]
    assert samples["fedrank_iteration"] == current["iteration"]
    assert samples["fedrank_updates_in_iteration"] == current["updates_in_iteration"]
    by_reason = {
        k: v for k, v in samples.items() if k.startswith("fedrank_updates_rejected_total{")
    }
    # per-reason series only (no unlabeled total beside them, which sum() would count twice)
    assert "fedrank_updates_rejected_total" not in samples
    assert sum(by_reason.values()) == current["updates_rejected_total"]
    key = 'fedrank_requests_total{endpoint="updates",status="202"}'
    assert samples[key] - before.get(key, 0) == 3
    reason = 'fedrank_updates_rejected_total{reason="invalid_payload"}'
    assert samples[reason] - before.get(reason, 0) == 1
    assert samples["fedrank_updates_accepted_total"] == row_count(es.store)
    assert samples["fedrank_commits_total"] >= 1
    # the commit-duration histogram: cumulative buckets ending in +Inf == count, three more
    # commits than before (one per accepted message, sent one at a time)
    name = "fedrank_store_commit_seconds"
    buckets = [v for k, v in samples.items() if k.startswith(f"{name}_bucket{{")]
    assert buckets == sorted(buckets) and len(buckets) == 12
    assert samples[f'{name}_bucket{{le="+Inf"}}'] == samples[f"{name}_count"]
    assert samples[f"{name}_count"] - before[f"{name}_count"] == 3
    assert samples[f"{name}_count"] <= samples["fedrank_commits_total"]
    assert samples[f"{name}_sum"] > before[f"{name}_sum"]


def test_checkin_without_rounds_is_404(es: Live) -> None:
    response = es.client.post("/v1/checkin", json={"client_id": "c1"})
    assert_error(response, 404, "no_rounds", "does not select")


# -- batches --------------------------------------------------------------------------------


def test_batch_of_mixed_messages_answers_each(es: Live) -> None:
    client = es.client
    ensure_closable(es, "api-batch")
    close_now(es)
    version = es.version()
    assert (
        client.post("/v1/updates", json=es_message("api-b-known", version, 1, 0.5, 0.5)).status_code
        == 202
    )
    messages = [
        es_message("api-b-1", version, 1, 0.25, 0.5),
        es_message("api-b-2", version, 2, 7.0, 0.5),  # metric out of range
        es_message("api-b-known", version, 1, 0.5, 0.5),  # sent before
        es_message("api-b-3", version, 3, 0.5, 0.0),
        es_message("api-b-3", version, 3, 0.5, 0.0),  # twice in this batch
        es_message("api-b-4", version + 5, 4, 0.5, 0.5),  # unknown version
        es_message("api-b-5", version - 1, 5, 0.5, 0.5),  # stale
        {"message_id": "api-b-6", "model_version": version, "metrics": {"ndcg": 0.5}},  # ping
        "not an object",
    ]
    before = status(client)
    response = client.post("/v1/updates:batch", json={"messages": messages})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["statuses"] == [202, 422, 200, 202, 200, 422, 409, 202, 422]
    assert body["accepted"] == 3 and body["duplicates"] == 2
    errors = {e["index"]: e for e in body["errors"]}
    assert sorted(errors) == [1, 5, 6, 8]  # bodies only for the refused messages
    assert errors[1]["error"] == "invalid_payload" and "[0, 1]" in errors[1]["detail"]
    assert errors[5]["error"] == "unknown_version" and errors[5]["detail"]
    assert errors[6]["error"] == "stale" and errors[6]["current_version"] == version
    assert errors[8]["error"] == "invalid" and errors[8]["detail"]
    assert all(errors[k]["status"] == body["statuses"][k] for k in errors)
    after = status(client)
    assert after["updates_accepted_total"] == before["updates_accepted_total"] + 3
    assert after["updates_in_iteration"] == before["updates_in_iteration"] + 2
    ids = [r["message_id"] for r in stored_rows(es.store)]
    assert ids.count("api-b-3") == 1 and "api-b-2" not in ids and "api-b-5" not in ids


@pytest.mark.parametrize(
    ("body", "status_code", "detail"),
    [
        (b"nope", 400, "not valid JSON"),
        (b"[]", 422, "messages"),
        (b'{"messages": []}', 422, "1..10000"),
        (b'{"messages": {}}', 422, "a list of messages"),
        (b'{"messages": [], "x": 1}', 422, "a list of messages"),
        (b'{"message": [{}]}', 422, "a list of messages"),
        (b'{"aggregate": {}}', 422, "exactly: aggregate, count, batch_id, model_version"),
    ],
)
def test_batch_envelope_refusals(fedavg: Live, body: bytes, status_code: int, detail: str) -> None:
    client = fedavg.client
    before, rows = state_of(client), row_count(fedavg.store)
    headers = {"Content-Type": "application/json", **PROXY}
    response = client.post("/v1/updates:batch", content=body, headers=headers)
    assert_error(response, status_code, "bad_json" if status_code == 400 else "invalid", detail)
    assert state_of(client) == before and row_count(fedavg.store) == rows


def test_batch_larger_than_the_limit_is_refused(fedavg: Live) -> None:
    before = state_of(fedavg.client)
    response = fedavg.client.post("/v1/updates:batch", json={"messages": [{}] * 10_001})
    assert_error(response, 422, "invalid", "1..10000")
    assert state_of(fedavg.client) == before


def _aggregate_body(
    state_json: object, count: object, batch_id: object, version: object
) -> dict[str, object]:
    return {"aggregate": state_json, "count": count, "batch_id": batch_id, "model_version": version}


def test_fedavg_updates_and_a_proxy_aggregate_make_one_step(fedavg: Live) -> None:
    client, store = fedavg.client, fedavg.store
    rng = np.random.default_rng(20240601)
    dim = fedavg.config.sections["fedavg"].dim
    if status(client)["updates_in_iteration"]:
        close_now(fedavg)
    version = fedavg.version()
    before = status(client)
    direct = [(rng.normal(size=dim), int(rng.integers(1, 20))) for _ in range(3)]
    for i, (delta, n) in enumerate(direct):
        msg = {
            "message_id": f"fa-{version}-{i}",
            "model_version": version,
            "payload": {"delta": delta.tolist(), "n": n},
            "metrics": {"loss": float(i)},
        }
        assert client.post("/v1/updates", json=msg).status_code == 202
    proxied = rng.normal(size=(4, dim))
    weights = rng.integers(1, 20, size=4).astype(float)
    mean = WeightedMean(dim)
    state = mean.accumulate_batch(mean.zero(), MessageBatch.of_vectors(proxied, weights))
    state_json = mean.state_to_json(state)
    batch_id = f"proxy-{version}"
    ok = client.post(
        "/v1/updates:batch", headers=PROXY, json=_aggregate_body(state_json, 4, batch_id, version)
    )
    assert ok.status_code == 202, ok.text
    assert ok.json() == {
        "status": "accepted",
        "message_id": batch_id,
        "iteration": before["iteration"],
    }
    again = client.post(
        "/v1/updates:batch", headers=PROXY, json=_aggregate_body(state_json, 4, batch_id, version)
    )
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    after = status(client)
    assert after["updates_in_iteration"] == before["updates_in_iteration"] + 3 + 4
    assert after["updates_accepted_total"] == before["updates_accepted_total"] + 4
    assert after["updates_counted_total"] == before["updates_counted_total"] + 3 + 4
    (row,) = [r for r in stored_rows(store) if r["message_id"] == batch_id]
    assert row["kind"] == "aggregate" and row["count"] == 4

    closed = close_now(fedavg)
    assert closed == {
        "closed_iteration": before["iteration"],
        "model_version": version + 1,
        "updates": 7,
    }
    # The published step, computed here by hand: params += lr * weighted mean of deltas.
    deltas = np.vstack([d for d, _ in direct] + list(proxied))
    n = np.concatenate([[w for _, w in direct], weights])
    expected_mean = (n @ deltas) / n.sum()
    old = np.array(client.get(f"/v1/model/{version}").json()["params"])
    new = np.array(client.get(f"/v1/model/{version + 1}").json()["params"])
    lr = fedavg.config.sections["fedavg"].server_learning_rate
    np.testing.assert_allclose(new, old + lr * expected_mean, rtol=1e-12, atol=1e-12)
    # ... and with the workload's own pieces, from the stored rows.
    rows = stored_rows(store, before["iteration"])
    offline = recompute_state(fedavg.config, rows)
    np.testing.assert_allclose(
        new, recompute_step(fedavg.config, store, version, offline), rtol=1e-12, atol=1e-12
    )
    record = closed_iteration(store, before["iteration"])
    assert record["n_updates"] == 7 and record["reason"] == "admin"
    assert record["aggregate"]["count"] == 7
    assert record["summary"]["treatment"]["updates"] == 7
    assert record["summary"]["treatment"]["metrics"] == {"loss": 1.0}
    # An aggregate computed on the old version is now stale.
    stale = client.post(
        "/v1/updates:batch",
        headers=PROXY,
        json=_aggregate_body(state_json, 4, "proxy-stale", version),
    )
    assert_error(stale, 409, "stale", f"model version {version}")


def _mean_state_json(dim: int, rows: int = 2) -> dict[str, object]:
    mean = WeightedMean(dim)
    state = mean.accumulate_batch(
        mean.zero(), MessageBatch.of_vectors(np.ones((rows, dim)), np.ones(rows))
    )
    return mean.state_to_json(state)


def _with(data: dict[str, object], **changes: object) -> dict[str, object]:
    out = json.loads(json.dumps(data))
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


GOOD = _mean_state_json(8)


@pytest.mark.parametrize(
    ("body", "code", "detail"),
    [
        (_aggregate_body(GOOD, 3, "agg-bad", 0), "invalid", "folds 2 messages, not 3"),
        (_aggregate_body(GOOD, 0, "agg-bad", 0), "invalid", "count must be an integer"),
        (_aggregate_body(GOOD, True, "agg-bad", 0), "invalid", "count must be an integer"),
        (_aggregate_body(GOOD, 2.0, "agg-bad", 0), "invalid", "count must be an integer"),
        (_aggregate_body(GOOD, 10**10, "agg-bad", 0), "invalid", "count must be an integer"),
        (_aggregate_body(GOOD, 2, "bad id!", 0), "invalid", "batch_id"),
        (_aggregate_body(GOOD, 2, "agg-bad", -1), "invalid", "model_version"),
        (_aggregate_body(GOOD, 2, "agg-bad", 10**9), "unknown_version", "does not exist"),
        ({**_aggregate_body(GOOD, 2, "agg-bad", 0), "x": 1}, "invalid", "exactly"),
        (_aggregate_body(_mean_state_json(9), 2, "agg-bad", 0), "invalid_aggregate", "dimension"),
        (
            _aggregate_body(_with(GOOD, type="SignVote"), 2, "agg-bad", 0),
            "invalid_aggregate",
            "type",
        ),
        (_aggregate_body("state", 2, "agg-bad", 0), "invalid_aggregate", "not a valid"),
        (
            _aggregate_body(_with(GOOD, count=3), 2, "agg-bad", 0),
            "invalid",
            "folds 3 messages, not 2",
        ),
        (
            _aggregate_body(_with(GOOD, count="x"), 2, "agg-bad", 0),
            "invalid_aggregate",
            "not a valid",
        ),
        (
            _aggregate_body(_with(GOOD, weighted_sum={"data": ["nan"] * 8}), 2, "agg-bad", 0),
            "invalid",
            "non-finite",
        ),
        # Non-finite scalars once slipped through (only arrays were checked) and poisoned the
        # iteration: every later close failed.
        (
            _aggregate_body(_with(GOOD, total_weight="nan"), 2, "agg-bad", 0),
            "invalid",
            "non-finite",
        ),
        (
            _aggregate_body(_with(GOOD, total_weight="inf"), 2, "agg-bad", 0),
            "invalid",
            "non-finite",
        ),
        # A finite state whose mean is not finite.
        (
            _aggregate_body(_with(GOOD, total_weight=1e-320), 2, "agg-bad", 0),
            "invalid",
            "non-finite",
        ),
        # Integers beyond int64 once answered 500 (OverflowError).
        (
            _aggregate_body(
                _with(GOOD, weighted_sum={"dtype": "int64", "data": [10**19] * 8}), 2, "agg-bad", 0
            ),
            "invalid_aggregate",
            "not a valid",
        ),
        (
            _aggregate_body(_with(GOOD, weighted_sum={"shape": [2, -4]}), 2, "agg-bad", 0),
            "invalid_aggregate",
            "not a valid",
        ),
        (
            _aggregate_body(_with(GOOD, weighted_sum={"dtype": "complex128"}), 2, "agg-bad", 0),
            "invalid_aggregate",
            "dtype",
        ),
        (
            _aggregate_body(_with(GOOD, weighted_sum={"dtype": "nope"}), 2, "agg-bad", 0),
            "invalid_aggregate",
            "not a valid",
        ),
    ],
)
def test_aggregate_refusals(fedavg: Live, body: dict[str, object], code: str, detail: str) -> None:
    client = fedavg.client
    if body.get("model_version") == 0:
        body = {**body, "model_version": fedavg.version()}
    before, rows = state_of(client), row_count(fedavg.store)
    response = client.post("/v1/updates:batch", headers=PROXY, json=body)
    assert_error(response, 422, code, detail)
    assert state_of(client) == before and row_count(fedavg.store) == rows
    # The server still closes iterations normally afterwards (nothing was poisoned).
    msg = {
        "message_id": f"agg-after-{row_count(fedavg.store)}",
        "model_version": fedavg.version(),
        "payload": {"delta": [0.5] * 8, "n": 1},
    }
    assert client.post("/v1/updates", json=msg).status_code == 202
    assert admin(client, "close").status_code == 200


def test_aggregates_need_a_proxy_token_and_a_consistent_state(
    fedavg: Live, frecency_full: Live, es_plain: Live
) -> None:
    """Issue 15, F3: anyone could post an aggregate standing for 1e9 updates, with negative
    weights, or a GatedMean state with sum n_i^2 = 0 whose close then failed with a 500
    (ZeroDivisionError) in a loop. Now: a configured proxy's token, at most its
    max_clients, and a state some messages could produce; nothing else changes state."""
    version = fedavg.version()
    body = _aggregate_body(GOOD, 2, "f3-agg", version)
    before, rows = state_of(fedavg.client), row_count(fedavg.store)
    no_token = fedavg.client.post("/v1/updates:batch", json=body)
    assert_error(no_token, 401, "unauthorized", "proxy's bearer token")
    wrong = {"Authorization": "Bearer " + "x" * 21}
    assert_error(
        fedavg.client.post("/v1/updates:batch", headers=wrong, json=body), 401, "unauthorized"
    )
    too_many = _aggregate_body(_with(GOOD, count=2000), 2000, "f3-agg", version)
    assert_error(
        fedavg.client.post("/v1/updates:batch", headers=PROXY, json=too_many),
        422,
        "invalid",
        "exceeds proxy 'test-proxy''s max_clients (1000)",
    )
    negative = _aggregate_body(_with(GOOD, total_weight=-2.0), 2, "f3-agg", version)
    assert_error(
        fedavg.client.post("/v1/updates:batch", headers=PROXY, json=negative),
        422,
        "invalid_aggregate",
        "must be >= 0",
    )
    assert state_of(fedavg.client) == before and row_count(fedavg.store) == rows
    # No [[proxies]]: aggregates are refused whoever sends them.
    plain = es_plain.client.post("/v1/updates:batch", headers=PROXY, json=body)
    assert_error(plain, 403, "aggregates_disabled", "[[proxies]]")
    # The GatedMean forgery (sum of squared weights 0) that once made every close fail.
    agg = GatedMean(len(CLASSIC_WEIGHT_NAMES))
    honest = agg.accumulate_batch(
        agg.zero(), MessageBatch.of_vectors(np.ones((2, agg.dim)), np.ones(2))
    )
    forged = agg.state_to_json(honest._replace(total_sq_weight=0.0))
    version = frecency_full.version()
    response = frecency_full.client.post(
        "/v1/updates:batch", headers=PROXY, json=_aggregate_body(forged, 2, "f3-g", version)
    )
    assert_error(response, 422, "invalid_aggregate", "sum of squared weights 0 is impossible")
    real = _aggregate_body(agg.state_to_json(honest), 2, "f3-g", version)
    assert (
        frecency_full.client.post("/v1/updates:batch", headers=PROXY, json=real).status_code == 202
    )
    assert admin(frecency_full.client, "close").status_code == 200


def test_es_aggregate_merges_like_the_messages(es: Live) -> None:
    client, store = es.client, es.store
    if status(client)["updates_in_iteration"]:
        close_now(es)
    version = es.version()
    iteration = status(client)["iteration"]
    section = es.config.sections["foltr_es"]
    dim = make_workload(es.config).dim
    agg = ESGradient(dim, section.sigma, section.antithetic)
    seeds = np.arange(100, 106, dtype=np.uint64)
    metric = np.linspace(0.1, 0.6, 6)
    anti = np.linspace(0.5, 0.0, 6)
    state = agg.accumulate_batch(agg.zero(), MessageBatch.of_es(seeds, metric, anti))
    body = _aggregate_body(agg.state_to_json(state), 6, f"es-proxy-{version}", version)
    assert client.post("/v1/updates:batch", headers=PROXY, json=body).status_code == 202
    messages = [es_message(f"es-m-{version}-{i}", version, 200 + i, 0.5, 0.125) for i in range(3)]
    assert client.post("/v1/updates:batch", json={"messages": messages}).json()["accepted"] == 3
    close_now(es)
    record = closed_iteration(store, iteration)
    offline = recompute_state(es.config, stored_rows(store, iteration))
    stored_state = agg.state_from_json(record["aggregate"])
    assert stored_state.count == offline.count == 9
    np.testing.assert_allclose(stored_state.weighted_noise, offline.weighted_noise, rtol=1e-12)
    new = np.array(client.get(f"/v1/model/{version + 1}").json()["params"])
    np.testing.assert_allclose(
        new, recompute_step(es.config, store, version, offline), rtol=1e-9, atol=1e-12
    )


# -- frecency: sign bits, full gradients, branches, summaries ----------------------------


def _sign_bytes(signs: list[int]) -> bytes:
    """2 bits per weight, written by hand: bit 2i marks +1, bit 2i+1 marks -1, bytes filled
    from their least significant bit."""
    value = 0
    for i, s in enumerate(signs):
        if s > 0:
            value |= 1 << (2 * i)
        elif s < 0:
            value |= 1 << (2 * i + 1)
    return value.to_bytes((2 * len(signs) + 7) // 8, "little")


def test_frecency_sign_bits(frecency_sign: Live) -> None:
    live = frecency_sign
    client, store = live.client, live.store
    dim = make_workload(live.config).dim
    assert dim == 22
    if status(client)["updates_in_iteration"]:
        close_now(live)
    version, iteration = live.version(), status(client)["iteration"]
    rng = np.random.default_rng(7)
    votes = rng.choice([-1, 0, 1], size=(5, dim))
    for i, signs in enumerate(votes):
        body = _sign_bytes(signs.tolist())
        assert len(body) == 6
        response = client.post(
            "/v1/updates", content=body, headers=binary_headers(f"sign-{version}-{i}", version)
        )
        assert response.status_code == 202, response.text
    # The JSON form: the same bits in base64.
    extra = rng.choice([-1, 1], size=dim)
    json_msg = {
        "message_id": f"sign-{version}-json",
        "model_version": version,
        "payload": {"signs": base64.b64encode(_sign_bytes(extra.tolist())).decode()},
    }
    assert client.post("/v1/updates", json=json_msg).status_code == 202
    rows = stored_rows(store, iteration)
    for i, signs in enumerate(votes):
        (row,) = [r for r in rows if r["message_id"] == f"sign-{version}-{i}"]
        assert base64.b64decode(row["payload"]["signs"]) == _sign_bytes(signs.tolist())
    close_now(live)
    record = closed_iteration(store, iteration)
    all_votes = np.vstack([votes, extra])
    assert record["aggregate"]["pos"]["data"] == (all_votes > 0).sum(axis=0).tolist()
    assert record["aggregate"]["neg"]["data"] == (all_votes < 0).sum(axis=0).tolist()
    new = np.array(client.get(f"/v1/model/{version + 1}").json()["params"])
    offline = recompute_state(live.config, rows)
    np.testing.assert_array_equal(new, recompute_step(live.config, store, version, offline))


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"\x00" * 5, "22 signs take 6 bytes"),
        (b"\x00" * 7, "22 signs take 6 bytes"),
        (b"", "22 signs take 6 bytes"),
        (b"\x00" * 5 + b"\x10", "padding bits"),
        (b"\x03" + b"\x00" * 5, "both +1 and -1"),
    ],
)
def test_frecency_sign_refusals(frecency_sign: Live, body: bytes, detail: str) -> None:
    client = frecency_sign.client
    before = state_of(client)
    response = client.post(
        "/v1/updates", content=body, headers=binary_headers("sign-bad", frecency_sign.version())
    )
    assert_error(response, 422, "invalid_payload", detail)
    assert state_of(client) == before


def test_frecency_sign_json_refusals_and_control_branch(frecency_sign: Live) -> None:
    live = frecency_sign
    client, version = live.client, live.version()
    before = state_of(client)

    def post(payload: object, **extra: object) -> httpx.Response:
        msg = {"message_id": "sign-json-bad", "model_version": version, "payload": payload}
        return client.post("/v1/updates", json={**msg, **extra})

    assert_error(post({"signs": "!!notbase64"}), 422, "invalid_payload", "not valid base64")
    assert_error(post({"signs": 5}), 422, "invalid_payload", "base64 string")
    assert_error(post({"signs": "AAAA"}), 422, "invalid_payload", "6 bytes")
    assert_error(post({"gradient": [0.0] * 22}), 422, "invalid_payload", "unknown payload field")
    good = base64.b64encode(_sign_bytes([1] * 22)).decode()
    assert_error(post({"signs": good, "n": 0}), 422, "invalid_payload", "n must be an integer")
    control = enrollment_in(live, "control")
    assert_error(
        post({"signs": good}, enrollment_id=control), 422, "control_branch", "metrics only"
    )
    binary = client.post(
        "/v1/updates",
        content=_sign_bytes([1] * 22),
        headers=binary_headers("sign-ctl", version, enrollment_id=control),
    )
    assert_error(binary, 422, "control_branch", "metrics only")
    assert state_of(client) == before


def test_frecency_full_gradients_refusals(frecency_full: Live) -> None:
    client, version = frecency_full.client, frecency_full.version()
    before = state_of(client)

    def post(payload: object) -> httpx.Response:
        msg = {"message_id": "full-bad", "model_version": version, "payload": payload}
        return client.post("/v1/updates", json=msg)

    assert_error(post({"gradient": [0.0] * 21}), 422, "invalid_payload", "22 entries, got 21")
    assert_error(post({"gradient": [0.0] * 23}), 422, "invalid_payload", "22 entries, got 23")
    assert_error(post({"gradient": "0"}), 422, "invalid_payload", "list of 22 numbers")
    assert_error(post({"gradient": [0.0] * 21 + ["1"]}), 422, "invalid_payload", "numbers")
    assert_error(post({"gradient": [0.0] * 21 + [None]}), 422, "invalid_payload", "numbers")
    assert_error(post({"gradient": [0.0] * 21 + [True]}), 422, "invalid_payload", "numbers")
    assert_error(post({"gradient": [0.0] * 21 + [1e301]}), 422, "invalid_payload", "finite")
    assert_error(post({"gradient": [[0.0]] * 22}), 422, "invalid_payload", "numbers")
    assert_error(post({"signs": "AAAAAAAA"}), 422, "invalid_payload", "unknown payload field")
    assert_error(post({"gradient": [0.0] * 22, "n": -3}), 422, "invalid_payload", "n must be")
    assert_error(post({"gradient": [0.0] * 22, "n": 1.5}), 422, "invalid_payload", "n must be")
    assert_error(post({"n": 1}), 422, "invalid_payload", "payload lacks ['gradient']")
    binary = client.post(
        "/v1/updates", content=_sign_bytes([1] * 22), headers=binary_headers("full-bin", version)
    )
    assert_error(binary, 422, "invalid_payload", "sign bits")
    assert state_of(client) == before


def test_fedavg_has_no_binary_form(fedavg: Live) -> None:
    before = state_of(fedavg.client)
    response = fedavg.client.post(
        "/v1/updates", content=b"\x00" * 8, headers=binary_headers("fa-bin", fedavg.version())
    )
    assert_error(response, 422, "invalid_payload", "no binary update format")
    assert state_of(fedavg.client) == before


def test_branches_are_stable_and_control_is_served_defaults(frecency_full: Live) -> None:
    live = frecency_full
    client = live.client
    defaults = make_workload(live.config).initial_params().tolist()
    expected_decay = {"treatment": False, "control": True, "control-no-decay": False}
    etags = set()
    for branch, decay in expected_decay.items():
        enrollment = enrollment_in(live, branch)
        first = client.get("/v1/model", params={"enrollment_id": enrollment})
        second = client.get("/v1/model", params={"enrollment_id": enrollment})
        assert first.json()["branch"] == second.json()["branch"] == branch
        assert first.headers["ETag"] == second.headers["ETag"]
        assert first.json()["config"]["decay"] is decay
        assert "admin_token" not in json.dumps(first.json())
        etags.add(first.headers["ETag"])
        if branch != "treatment":
            assert first.json()["params"] == defaults
    assert len(etags) == 3
    assert client.get("/v1/model").json()["branch"] == "treatment"  # no enrollment id


def test_summary_per_branch_and_control_after_a_close(frecency_full: Live) -> None:
    """The only test that stores messages on this server: sends per-branch metrics, checks the
    live summary, closes, then checks the stored summary and what each branch is served."""
    live = frecency_full
    client, store = live.client, live.store
    version, iteration = live.version(), status(client)["iteration"]
    defaults = make_workload(live.config).initial_params()
    rng = np.random.default_rng(3)
    sent: dict[str, list[float]] = {"treatment": [], "control": [], "control-no-decay": []}
    updates = 0
    for branch in sent:
        for k in range(4):
            enrollment = enrollment_in(live, branch, start=100 * k)
            value = float(rng.integers(0, 10))
            msg: dict[str, object] = {
                "message_id": f"sum-{branch}-{k}",
                "model_version": version,
                "enrollment_id": enrollment,
                "metrics": {"selected_rank": value},
            }
            if branch == "treatment":
                gradient = np.ones(22) + 0.05 * rng.normal(size=22)
                msg["payload"] = {"gradient": gradient.tolist(), "n": 2}
                updates += 1
            response = client.post("/v1/updates", json=msg)
            assert response.status_code == 202, response.text
            sent[branch].append(value)
    live_summary = client.get("/v1/summary").json()["iterations"]
    current = live_summary[-1]
    assert current["iteration"] == iteration and current["closed_at"] is None
    assert current["n_updates"] == updates
    for branch, values in sent.items():
        entry = current["branches"][branch]
        assert entry["messages"] == len(values)
        assert entry["updates"] == (updates if branch == "treatment" else 0)
        assert entry["metrics"]["selected_rank"] == pytest.approx(np.mean(values))
    close_now(live)
    summary = client.get("/v1/summary").json()["iterations"]
    (closed,) = [it for it in summary if it["iteration"] == iteration]
    assert closed["closed_at"] is not None and closed["reason"] == "admin"
    assert closed["n_updates"] == updates
    for branch, values in sent.items():
        assert closed["branches"][branch]["metrics"]["selected_rank"] == pytest.approx(
            np.mean(values)
        )
    assert summary[-1]["iteration"] == iteration + 1 and summary[-1]["n_updates"] == 0
    trained = client.get("/v1/model", params={"enrollment_id": enrollment_in(live, "treatment")})
    control = client.get("/v1/model", params={"enrollment_id": enrollment_in(live, "control")})
    assert trained.json()["model_version"] == control.json()["model_version"] == version + 1
    assert control.json()["params"] == defaults.tolist()
    assert trained.json()["params"] != defaults.tolist()
    offline = recompute_state(live.config, stored_rows(store, iteration))
    np.testing.assert_allclose(
        trained.json()["params"], recompute_step(live.config, store, version, offline), atol=1e-12
    )


def test_unknown_routes_and_methods_are_4xx(es: Live) -> None:
    client = es.client
    assert client.get("/nope").status_code == 404
    assert client.get("/v1/updates").status_code == 405
    assert client.delete("/v1/model").status_code == 405
    assert client.get("/v1/admin/close").status_code == 405


def test_store_path_is_reported_nowhere(es: Live) -> None:
    body = es.client.get("/v1/model").text + es.client.get("/v1/status").text
    assert str(Path(es.store)) not in body
    assert ADMIN_TOKEN not in body
