"""No client holds a connection for free (issue 15, F4): a real server on loopback closes
silent connections and half-sent headers after ``header_timeout``, answers a half-sent
body with 408 after ``body_timeout``, closes idle keep-alive connections after
``keep_alive_timeout``, and answers 503 beyond ``max_connections``.

Before, idle connections and half-sent requests stayed open forever: two slow clients
filled all 20,000 file descriptors and new clients got empty replies."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.server.serverkit import Live, es_message, live_server, stored_ids

LIMITS = """
[server]
workload = "foltr-es"
header_timeout = 1.0
body_timeout = 1.0
keep_alive_timeout = 1.0
max_connections = 4
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("limits"), LIMITS) as server:
        yield server


def _connect(live: Live) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", live.process.port), timeout=10)
    sock.settimeout(10)
    return sock


def _closed_after(sock: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closes ``sock``, and what it sent before."""
    start, received = time.monotonic(), b""
    while chunk := sock.recv(65536):
        received += chunk
    return time.monotonic() - start, received


def test_a_silent_connection_is_closed(live: Live) -> None:
    with _connect(live) as sock:
        seconds, received = _closed_after(sock)
    assert 0.5 < seconds < 5 and received == b""


def test_half_sent_headers_are_closed(live: Live) -> None:
    with _connect(live) as sock:
        sock.sendall(b"POST /v1/updates HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        seconds, received = _closed_after(sock)
    assert 0.5 < seconds < 5 and received == b""


def test_a_half_sent_body_gets_408(live: Live) -> None:
    with _connect(live) as sock:
        sock.sendall(
            b"POST /v1/updates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"message_id":'
        )
        start = time.monotonic()
        answer = sock.recv(65536)
        assert 0.5 < time.monotonic() - start < 5
        while b"body_timeout" not in answer and (chunk := sock.recv(65536)):
            answer += chunk  # the head and the chunked body may come in two segments
    assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer


def test_a_body_cut_short_by_a_disconnect_is_never_read_as_a_whole(live: Live) -> None:
    """A client declares a longer body, sends a complete-looking message and disconnects:
    nothing is stored, and the same message sent whole later is new, not a duplicate
    (before, the lean ``POST /v1/updates`` handler read what had arrived as the whole body
    and accepted it)."""
    message = es_message("cut-short", live.version(), seed=7, metric=0.5, antithetic=0.25)
    body = json.dumps(message).encode()
    with _connect(live) as sock:
        sock.sendall(
            b"POST /v1/updates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body) + 10}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.3)  # the server has the head and the message, and waits for the rest
    time.sleep(0.3)  # the disconnect reaches the handler
    assert "cut-short" not in stored_ids(live.store)
    whole = live.client.post("/v1/updates", json=message)
    assert whole.status_code == 202, whole.text


def test_an_idle_keep_alive_connection_is_closed(live: Live) -> None:
    with _connect(live) as sock:
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
        seconds, received = _closed_after(sock)
    assert received.startswith(b"HTTP/1.1 200") and 0.5 < seconds < 5


def test_beyond_max_connections_new_requests_get_503(live: Live) -> None:
    holders = [_connect(live) for _ in range(4)]  # silent: each holds a connection
    try:
        time.sleep(0.2)
        assert httpx.get(live.process.url + "/v1/status", timeout=5).status_code == 503
    finally:
        for sock in holders:
            sock.close()
    time.sleep(0.3)
    assert httpx.get(live.process.url + "/v1/status", timeout=5).status_code == 200
