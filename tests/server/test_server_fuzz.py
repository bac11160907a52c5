"""Property-based fuzzing of a real server's API with hypothesis: arbitrary JSON, mutated
valid messages (wrong types and lengths, NaN / Infinity literals in the raw bytes, huge and
negative numbers, unknown fields, bad ids), random binary bodies and headers, wrong content
types, oversize bodies, odd paths and query strings, and mutated aggregator states.

For every request: the status is below 500, a refusal (4xx) carries ``{"error", "detail"}``
and leaves the state unchanged (the status counters, iteration, model version and the
number of stored rows), and an acceptance changes the state by exactly what was accepted.
Examples are derandomized, so every run sends the same requests.
"""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrank.aggregators.mean import WeightedMean
from fedrank.core.message import MessageBatch
from tests.server.serverkit import (
    ADMIN_TOKEN,
    BINARY,
    PROXIES_TOML,
    PROXY,
    Live,
    admin,
    es_bytes,
    live_server,
    row_count,
    state_of,
)

FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

LIMIT = 4096
ES_TOML = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
max_body_bytes = {LIMIT}
"""
DIM = 6
FEDAVG_TOML = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
max_body_bytes = {LIMIT}
[fedavg]
dim = {DIM}
{PROXIES_TOML}[rounds]
enabled = true
clients_per_round = 1000
t_max_seconds = 3600.0
checkin_seconds = 0.1
min_checkins = 400
"""
SELECTED = [f"fz-client-{i}" for i in range(400)]
#: Placeholder for "a selected client that has not reported yet" (each reports only once).
A_SELECTED_CLIENT = "<selected>"
_unused_clients = iter(SELECTED)
_message_numbers = itertools.count()
#: Placeholder for a batch id never used before.
A_FRESH_ID = "<fresh>"


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(
        tmp_path_factory.mktemp("fuzz-es"),
        ES_TOML,
        iteration_seconds=0,
        iteration_min_updates=10**9,
    ) as live:
        yield live
        assert_clean_log(live)


@pytest.fixture(scope="module")
def fedavg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(
        tmp_path_factory.mktemp("fuzz-fedavg"),
        FEDAVG_TOML,
        iteration_seconds=0,
        iteration_min_updates=10**9,
    ) as live:
        for client_id in SELECTED:  # one window: all 400 seated when the last arrives
            live.client.post("/v1/checkin", json={"client_id": client_id})
        for client_id in SELECTED:
            answer = live.client.post("/v1/checkin", json={"client_id": client_id}).json()
            assert answer["selected"] is True
        yield live
        assert_clean_log(live)


def assert_clean_log(live: Live) -> None:
    """The server is alive and logged no exception."""
    assert live.process.process is not None and live.process.process.poll() is None
    assert "Traceback" not in live.process.log.read_text()


# -- the property ---------------------------------------------------------------------------


def check(live: Live, send: Callable[[httpx.Client], httpx.Response]) -> httpx.Response:
    """Send one request and check the invariants (see the module docstring)."""
    client = live.client
    before, rows = state_of(client), row_count(live.store)
    response = send(client)
    code, method = response.status_code, response.request.method
    assert code < 500, (code, response.text[:500])
    after, rows_after = state_of(client), row_count(live.store)
    json_body = response.headers.get("content-type") == "application/json" and method != "HEAD"
    if code >= 400:
        assert after == before, (code, response.text[:300])
        assert rows_after == rows
        if json_body:
            body = response.json()
            assert isinstance(body["error"], str) and body["error"]
            assert isinstance(body["detail"], str) and body["detail"]
        else:  # only the router's own answers are not JSON
            assert code in (404, 405) or method == "HEAD", (code, response.text[:300])
        return response
    if method != "POST" or not json_body:
        assert after == before and rows_after == rows
        return response
    accepted = rows_after - rows
    assert after["updates_accepted_total"] - before["updates_accepted_total"] == accepted
    assert after["model_version"] == before["model_version"]
    assert after["iteration"] == before["iteration"]
    body = response.json()
    if "statuses" in body:  # a batch: one status per message, bodies for the refused
        codes = body["statuses"]
        assert all(isinstance(c, int) and c < 500 for c in codes), codes
        assert codes.count(202) == accepted == body["accepted"]
        duplicates = after["updates_duplicate_total"] - before["updates_duplicate_total"]
        assert duplicates == codes.count(200) == body["duplicates"]
        refused = [k for k, c in enumerate(codes) if c >= 400]
        assert [e["index"] for e in body["errors"]] == refused
        for error in body["errors"]:
            assert error["error"] and error["detail"] and error["status"] == codes[error["index"]]
    elif code == 202:
        assert accepted == 1 and body["status"] == "accepted"
    elif code == 200 and body.get("status") == "duplicate":
        assert accepted == 0
        assert after["updates_duplicate_total"] == before["updates_duplicate_total"] + 1
    else:
        assert accepted == 0 and after == before
    return response


# -- strategies -----------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)
EXTREME_NUMBERS = st.sampled_from(
    [0, -1, 1, 2**31, 2**32, 2**32 - 1, 2**53 + 1, 2**63 - 1, 2**64 - 1, -(2**63)]
    + [0.0, -0.0, 1e-300, 5e-324, 1e300, -1e300, 1.7976931348623157e308, 0.5, 1.0000001]
)
ODD = JSON | EXTREME_NUMBERS
NUMBERS = st.floats(allow_nan=False, allow_infinity=False) | EXTREME_NUMBERS
#: Magnitudes around the limits where weighted sums and squares overflow.
HUGE = st.sampled_from([1e300, -1e300, 1e200, 1e154, -1e154, 1e100, -1e100, 1.0000001e100])
IDS = st.text(
    alphabet=string.ascii_letters + string.digits + "._:-", min_size=1, max_size=128
) | st.text(max_size=140)
# Header values a client can put on the wire (visible ASCII and obs-text, no CR/LF/NUL).
HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=20,
)
NONFINITE_TEXT = st.sampled_from(["nan", "inf", "-inf", "NaN", "1e999"])
#: Text that looks like a number to a lax parser (non-ASCII digits among them).
NUMBERISH = st.sampled_from(
    ["²", "¹", "³", "٣", "９", "0", "00", "-0", "+1", "1e3", "0x1", "1.0", "99999999999999"]
)
NONFINITE = [b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"nan", b"inf"]
BAD_NUMBER_TEXT = NONFINITE + [b"01", b"+1", b".5", b"1.", b"0x10", b"1e", b"--1", b"\xff"]


def es_valid(draw: st.DrawFn, version: int) -> dict[str, Any]:
    return {
        "message_id": draw(st.sampled_from(["fz-a", "fz-b", "fz-c"]))
        + str(draw(st.integers(0, 10**6))),
        "model_version": version,
        "payload": {
            "seed": draw(st.integers(0, 2**32 - 1)),
            "metric": draw(st.floats(0, 1)),
            "antithetic_metric": draw(st.floats(0, 1)),
        },
        "metrics": {"ndcg": draw(st.floats(0, 1))},
    }


@st.composite
def mutated_es_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A valid ES message with one or more fields broken."""
    msg = es_valid(draw, 0)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["envelope", "payload", "metrics"]))
        target = msg if where == "envelope" else msg.setdefault(where, {})
        if not isinstance(target, dict):
            target = msg
        keys = sorted(target) + ["unknown", "message_id", "model_version"]
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["set", "delete", "extreme", "id", "list"]))
        if action == "delete":
            target.pop(key, None)
        elif action == "extreme":
            target[key] = draw(EXTREME_NUMBERS)
        elif action == "id":
            target[key] = draw(IDS)
        elif action == "list":
            target[key] = draw(st.lists(EXTREME_NUMBERS, max_size=60))
        else:
            target[key] = draw(ODD)
    return msg


def _version_of(live: Live) -> int:
    return int(state_of(live.client)["model_version"])


# -- /v1/updates -------------------------------------------------------------------------


@FUZZ
@given(body=JSON)
def test_arbitrary_json_to_updates(es: Live, body: Any) -> None:
    check(es, lambda c: c.post("/v1/updates", json=body))


@FUZZ
@given(msg=mutated_es_messages())
def test_mutated_messages_to_updates(es: Live, msg: dict[str, Any]) -> None:
    check(es, lambda c: c.post("/v1/updates", json=msg))


@FUZZ
@given(
    data=st.data(),
    literal=st.sampled_from(BAD_NUMBER_TEXT),
    field=st.sampled_from(["metric", "antithetic_metric", "seed", "model_version", "ndcg"]),
)
def test_nonfinite_literals_in_raw_bytes(
    es: Live, data: st.DataObject, literal: bytes, field: str
) -> None:
    msg = es_valid(data.draw, _version_of(es))
    marker = "__VALUE__"
    if field in msg["payload"]:
        msg["payload"][field] = marker
    elif field == "ndcg":
        msg["metrics"]["ndcg"] = marker
    else:
        msg[field] = marker
    raw = json.dumps(msg).encode().replace(f'"{marker}"'.encode(), literal)
    response = check(
        es,
        lambda c: c.post("/v1/updates", content=raw, headers={"Content-Type": "application/json"}),
    )
    assert response.status_code in (400, 422), response.text


@FUZZ
@given(
    body=st.binary(max_size=40),
    message_id=st.none() | IDS.filter(lambda s: s.isascii() and s.isprintable()) | HEADER_TEXT,
    version=st.none() | HEADER_TEXT | NUMBERISH | st.integers(-5, 10**13).map(str),
    enrollment=st.none() | HEADER_TEXT,
    ctype=st.sampled_from(
        [BINARY, BINARY + "; charset=x", BINARY.upper(), "application/octet-stream"]
    ),
)
def test_random_binary_bodies_and_headers(
    es: Live,
    body: bytes,
    message_id: str | None,
    version: str | None,
    enrollment: str | None,
    ctype: str,
) -> None:
    headers: dict[str, bytes] = {"Content-Type": ctype.encode()}
    for name, value in (
        ("X-Message-Id", message_id),
        ("X-Model-Version", version),
        ("X-Enrollment-Id", enrollment),
    ):
        if value:
            headers[name] = value.encode("latin-1", "replace").strip() or b"x"
    check(es, lambda c: c.post("/v1/updates", content=body, headers=headers))


@FUZZ
@given(
    seed=st.integers(0, 2**32 - 1),
    metric=st.floats(width=32, allow_nan=True, allow_infinity=True),
    anti=st.none() | st.floats(width=32, allow_nan=True, allow_infinity=True),
    message_id=st.integers(0, 10**9),
)
def test_binary_es_messages(
    es: Live, seed: int, metric: float, anti: float | None, message_id: int
) -> None:
    body = es_bytes(seed, metric, anti)
    headers = {
        "Content-Type": BINARY,
        "X-Message-Id": f"fzb-{message_id}",
        "X-Model-Version": str(_version_of(es)),
    }
    response = check(es, lambda c: c.post("/v1/updates", content=body, headers=headers))
    valid = anti is not None and all(np.isfinite(x) and 0 <= x <= 1 for x in (metric, anti))
    assert (response.status_code in (200, 202)) == valid, response.text


@FUZZ
@given(
    ctype=st.sampled_from(
        ["text/plain", "application/xml", "multipart/form-data", "application/json; x=1", ""]
    )
    | HEADER_TEXT.filter(lambda s: s.isascii()),
    body=st.binary(max_size=200),
)
def test_content_types(es: Live, ctype: str, body: bytes) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    check(es, lambda c: c.post("/v1/updates", content=body, headers=headers))


@settings(FUZZ, max_examples=25)
@given(
    size=st.integers(LIMIT - 64, 3 * LIMIT),
    chunked=st.booleans(),
    endpoint=st.sampled_from(["/v1/updates", "/v1/updates:batch"]),
)
def test_oversize_bodies(es: Live, size: int, chunked: bool, endpoint: str) -> None:
    filler = b" " * size

    def send(c: httpx.Client) -> httpx.Response:
        headers = {"Content-Type": "application/json"}
        content: Any = (
            iter([filler[i : i + 1000] for i in range(0, size, 1000)]) if chunked else filler
        )
        return c.post(endpoint, content=content, headers=headers)

    response = check(es, send)
    if size > LIMIT:
        assert response.status_code == 413
    else:
        assert response.status_code == 400  # whitespace only: not JSON


# -- batches and aggregates ------------------------------------------------------------------


@FUZZ
@given(
    body=JSON
    | st.fixed_dictionaries({"messages": st.lists(mutated_es_messages(), max_size=8)})
    | st.fixed_dictionaries({"messages": JSON})
)
def test_batches(es: Live, body: Any) -> None:
    check(es, lambda c: c.post("/v1/updates:batch", json=body))


#: Beyond int64 (numpy's conversion raised ``OverflowError``), beyond uint64, and huge.
HUGE_INTEGERS = [2**63, 2**64, -(2**63) - 1, 10**30]


@pytest.mark.parametrize("value", HUGE_INTEGERS)
def test_a_huge_model_version_is_refused_on_every_path(es: Live, value: int) -> None:
    """Issue 51, finding 8: ``"model_version": 9223372036854775808`` in a JSON batch raised
    ``OverflowError`` in the batch fast path (500, a traceback per request); now every path
    answers 422 naming the field."""
    message = {"message_id": "huge-version", "model_version": value, "payload": {}}
    single = check(es, lambda c: c.post("/v1/updates", json=message))
    assert single.status_code == 422 and "model_version" in single.json()["detail"]
    batch = check(es, lambda c: c.post("/v1/updates:batch", json={"messages": [message]}))
    assert batch.status_code == 200, batch.text
    (error,) = batch.json()["errors"]
    assert error["status"] == 422 and "model_version" in error["detail"]
    columnar = {"batch": {"size": 1}, "message_ids": ["huge-version"], "model_version": value}
    answer = check(es, lambda c: c.post("/v1/updates:batch", json=columnar))
    assert answer.status_code == 422 and "model_version" in answer.json()["detail"]


def test_many_bad_requests_write_no_traceback(es: Live) -> None:
    """Issue 51, finding 8: 2,000 such requests wrote 2,000 tracebacks (5.8 MB); the log
    stays as it was (and uvicorn's error log is rate-limited, for the failures that are
    bugs)."""
    before = es.process.log.stat().st_size
    message = {"message_id": "huge-version", "model_version": 2**63, "payload": {}}
    for _ in range(300):
        answer = es.client.post("/v1/updates:batch", json={"messages": [message]})
        assert answer.status_code == 200
    assert es.process.log.stat().st_size - before < 1000
    assert_clean_log(es)


_UPDATE = b'"message_id": "a", "model_version": 0'
DUPLICATE_KEYS = [  # (server, path, body, the key sent twice)
    ("es", "/v1/updates", b'{"message_id": "b", ' + _UPDATE + b"}", "message_id"),
    (
        "es",
        "/v1/updates",
        b"{" + _UPDATE + b', "payload": {"seed": 1, "seed": 2, "metric": 0.5}}',
        "seed",
    ),
    (  # the same key spelled with an escape, and a colon in a string (the slow check)
        "es",
        "/v1/updates",
        b'{"message_id": "a:1", "model_version": 0, "payload": {"metric": 0.5, "\\u006detric": 1}}',
        "metric",
    ),
    (
        "es",
        "/v1/updates:batch",
        b'{"messages": [{' + _UPDATE + b', "model_version": 0}]}',
        "model_version",
    ),
    ("fedavg", "/v1/checkin", b'{"client_id": "a", "client_id": "b"}', "client_id"),
]


@pytest.mark.parametrize(("server", "path", "raw", "key"), DUPLICATE_KEYS)
def test_duplicate_json_keys_are_refused(
    request: pytest.FixtureRequest, server: str, path: str, raw: bytes, key: str
) -> None:
    """Issue 51, finding 10: a key sent twice was accepted (the parser kept the last one,
    and another parser on the way may keep the first); now 422 naming the key."""
    live = request.getfixturevalue(server)
    headers = {"Content-Type": "application/json"}
    # Where devices are required, one device signs the bytes as they are (the client's
    # NamedDevices would parse the body, keep one of the keys, and re-encode it).
    auth = live.devices.device("a") if live.devices is not None else None
    answer = check(live, lambda c: c.post(path, content=raw, headers=headers, auth=auth))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "duplicate_key" and repr(key) in answer.json()["detail"]


def _aggregate(count: int) -> dict[str, Any]:
    mean = WeightedMean(DIM)
    rng = np.random.default_rng(count)
    state = mean.accumulate_batch(
        mean.zero(), MessageBatch.of_vectors(rng.normal(size=(count, DIM)), np.ones(count))
    )
    return mean.state_to_json(state)


AGGREGATE_PATHS = [
    ("aggregate", "total_weight"),
    ("aggregate", "weighted_sum", "data"),
    ("aggregate", "count"),
    ("count",),
    ("model_version",),
    ("batch_id",),
    ("aggregate",),
    ("aggregate", "type"),
    ("aggregate", "dim"),
    ("aggregate", "weighted_sum"),
    ("aggregate", "weighted_sum", "dtype"),
    ("aggregate", "weighted_sum", "shape"),
]


@st.composite
def mutated_aggregates(draw: st.DrawFn) -> dict[str, Any]:
    """A real WeightedMean state, with up to two fields replaced or deleted."""
    count = draw(st.integers(1, 4))
    body: dict[str, Any] = {
        "aggregate": _aggregate(count),
        "count": count,
        "batch_id": A_FRESH_ID,
        "model_version": 0,
    }
    for _ in range(draw(st.integers(0, 2))):
        path = draw(st.sampled_from(AGGREGATE_PATHS))
        target: Any = body
        for key in path[:-1]:
            target = target.get(key) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            continue
        value = NONFINITE_TEXT | HUGE | EXTREME_NUMBERS
        choice = draw(st.integers(0, 3))
        if choice == 0:
            target[path[-1]] = draw(value)
        elif choice == 1:
            target[path[-1]] = draw(
                st.lists(value, min_size=DIM, max_size=DIM) | st.lists(value, max_size=8)
            )
        elif choice == 2:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = draw(ODD)
    return body


def closes_after_acceptance(live: Live, response: httpx.Response) -> None:
    """An accepted message must never make the close of its iteration fail (a NaN or an
    overflowing sum in the aggregate would refuse every later close: the server would be
    stuck on its model)."""
    if response.status_code == 202:
        closed = admin(live.client, "close")
        assert closed.status_code == 200, closed.text


def _current(live: Live, version: Any) -> Any:
    """Version 0 (the strategies' placeholder) becomes the current version."""
    return _version_of(live) if type(version) is int and version == 0 else version


@FUZZ
@given(body=mutated_aggregates())
def test_mutated_aggregates(fedavg: Live, body: dict[str, Any]) -> None:
    if "model_version" in body:
        body["model_version"] = _current(fedavg, body["model_version"])
    if body.get("batch_id") == A_FRESH_ID:
        body["batch_id"] = f"fz-agg-{next(_message_numbers)}"
    response = check(fedavg, lambda c: c.post("/v1/updates:batch", headers=PROXY, json=body))
    closes_after_acceptance(fedavg, response)


@st.composite
def fedavg_messages(draw: st.DrawFn) -> dict[str, Any]:
    """Half of them well-formed (extreme magnitudes and weights included) from a selected
    client, the other half broken somewhere."""
    if draw(st.booleans()):
        delta = draw(st.lists(HUGE | NUMBERS, min_size=DIM, max_size=DIM))
        n: Any = draw(st.sampled_from([10**9, 2]) | st.integers(1, 10**9))
        client: str | None = A_SELECTED_CLIENT
    else:
        delta = draw(st.lists(NUMBERS | ODD, min_size=DIM - 1, max_size=DIM + 1))
        n = draw(st.integers(-2, 10**9 + 2) | ODD)
        client = draw(st.none() | st.just(A_SELECTED_CLIENT) | IDS)
    msg: dict[str, Any] = {
        "message_id": "set-when-sent",
        "model_version": 0,
        "payload": {"delta": delta, "n": n},
    }
    if client is not None:
        msg["client_id"] = client
    return msg


@FUZZ
@given(msg=fedavg_messages())
def test_fedavg_vectors_and_rounds(fedavg: Live, msg: dict[str, Any]) -> None:
    msg["model_version"] = _version_of(fedavg)
    msg["message_id"] = f"fz-fa-{next(_message_numbers)}"  # never a duplicate
    if msg.get("client_id") == A_SELECTED_CLIENT:
        msg["client_id"] = next(_unused_clients, SELECTED[-1])
    response = check(fedavg, lambda c: c.post("/v1/updates", json=msg))
    closes_after_acceptance(fedavg, response)


@FUZZ
@given(body=JSON | st.fixed_dictionaries({"client_id": IDS | ODD}))
def test_checkin(fedavg: Live, body: Any) -> None:
    response = check(fedavg, lambda c: c.post("/v1/checkin", json=body))
    if response.status_code == 200:
        assert isinstance(response.json()["selected"], bool)


# -- reads and odd paths ---------------------------------------------------------------------

PATH_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=30
).map(lambda s: quote(s, safe=""))


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    prefix=st.sampled_from(
        [
            "/v1/model/",
            "/v1/model",
            "/v1/admin/",
            "/v1/",
            "/",
            "/metrics",
            "/v1/status",
            "/v1/summary",
        ]
    ),
    tail=PATH_TEXT | NUMBERISH.map(lambda s: quote(s, safe="")),
    query=st.dictionaries(
        st.sampled_from(["enrollment_id", "x", "version", ""]), PATH_TEXT, max_size=3
    ),
    auth=st.none() | HEADER_TEXT.filter(lambda s: s.isascii()),
    if_none_match=st.none() | HEADER_TEXT.filter(lambda s: s.isascii()),
)
def test_odd_paths_and_queries(
    es: Live,
    method: str,
    prefix: str,
    tail: str,
    query: dict[str, str],
    auth: str | None,
    if_none_match: str | None,
) -> None:
    headers = {}
    if auth:
        headers["Authorization"] = "Bearer " + auth
    if if_none_match:
        headers["If-None-Match"] = if_none_match
    url = prefix + tail
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    response = check(es, lambda c: c.request(method, url, headers=headers))
    if response.status_code == 200 and method == "POST" and prefix == "/v1/admin/":
        raise AssertionError(f"an admin action ran without the token: {url}")


def test_server_survived_the_fuzzing(es: Live, fedavg: Live) -> None:
    for live in (es, fedavg):
        assert_clean_log(live)
        assert live.client.get("/v1/status").status_code == 200
