"""No client holds a connection, or the server's memory, for free (issue 15, F4; issue 51,
finding 1): a real server on loopback closes silent connections and half-sent headers after
``header_timeout``, answers a half-sent body with 408 after ``body_timeout``, closes idle
keep-alive connections after ``keep_alive_timeout`` and connections that trickle bytes
between requests after ``header_timeout``, closes a connection once it has answered a request
whose body has not come in, aborts a client that does not read its answers after
``write_timeout`` (holding one piece of the model meanwhile, not copies of it), answers 503
beyond ``max_connections`` and closes connections beyond ``max_connections_per_address``.

Before, idle connections and half-sent requests stayed open forever: two slow clients
filled all 20,000 file descriptors and new clients got empty replies; later, a body trickled
to an endpoint that reads none held its connection forever, and 150 clients pipelining
``GET /v1/model`` without reading took the server to 1.96 GB.

Timings are never asserted from above: a socket timeout far beyond the deadlines is the
only bound, and the tests wait on the server's state (its sockets, its TCP state as the
client sees it) rather than on sleeps."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.server.serverkit import (
    ADMIN_TOKEN,
    Live,
    es_message,
    live_server,
    stored_ids,
    wait_until,
)

LIMITS = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
header_timeout = 1.0
body_timeout = 1.0
request_timeout = 2.0
keep_alive_timeout = 1.0
max_connections = 4
max_connections_per_address = 2
"""
#: A FedAvg model whose JSON body is about 4 MB (its initial parameters are zeros).
BIG_MODEL = """
[server]
workload = "fedavg"
write_timeout = 1.0
[fedavg]
dim = 1000000
"""
#: Longer than any deadline here: a socket still open after this was never closed.
NEVER = 30.0


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("limits"), LIMITS) as server:
        yield server


def _connect(live: Live, source: str = "127.0.0.1", rcvbuf: int | None = None) -> socket.socket:
    """A connection to the server from ``source`` (any 127.x.y.z: all are loopback)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connecting: it sets the window the client advertises
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(NEVER)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", live.process.port))
    return sock


def _closed_after(sock: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closes ``sock``, and what it sent before."""
    start, received = time.monotonic(), b""
    while chunk := sock.recv(65536):
        received += chunk
    return time.monotonic() - start, received


def _server_sockets(live: Live, source: str) -> int:
    """The server process's open connections from ``source``."""
    assert live.process.process is not None
    server = psutil.Process(live.process.process.pid)
    return sum(
        1
        for c in server.net_connections(kind="tcp")
        if c.raddr and c.raddr.ip == source and c.status == psutil.CONN_ESTABLISHED
    )


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed or reset ``sock``: its TCP state (``TCP_INFO``) has
    left ESTABLISHED, read without reading any data."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return struct.unpack("B", info[:1])[0] != 1  # TCP_ESTABLISHED


def _trickle_until_closed(sock: socket.socket, byte: bytes) -> bytes:
    """Send ``byte`` every 0.2 s (faster than any deadline here) and read, until the server
    closes ``sock``; returns what it sent. Fails after :data:`NEVER` seconds."""
    sock.settimeout(0.2)
    received, deadline = b"", time.monotonic() + NEVER
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            try:
                sock.sendall(byte)
            except (BrokenPipeError, ConnectionResetError):
                return received
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the server kept the connection open; it sent {received[:200]!r}")


def test_a_silent_connection_is_closed(live: Live) -> None:
    with _connect(live) as sock:
        seconds, received = _closed_after(sock)
    assert seconds > 0.5 and received == b""  # by the header deadline, not at once


def test_half_sent_headers_are_closed(live: Live) -> None:
    with _connect(live) as sock:
        sock.sendall(b"POST /v1/updates HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        seconds, received = _closed_after(sock)
    assert seconds > 0.5 and received == b""


def test_a_half_sent_body_gets_408_and_the_connection_is_closed(live: Live) -> None:
    with _connect(live) as sock:
        sock.sendall(
            b"POST /v1/updates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"message_id":'
        )
        start = time.monotonic()
        answer = _trickle_until_closed(sock, b" ")
    assert time.monotonic() - start > 0.5
    assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"GET /v1/status", b"200"),
        (b"GET /v1/model", b"200"),
        (b"GET /metrics", b"200"),
        (b"GET /v1/nothing-here", b"404"),
        (b"POST /v1/admin/close", b"401"),
    ],
)
def test_a_body_trickled_to_an_endpoint_that_reads_none_is_closed_after_the_answer(
    live: Live, request_line: bytes, status: bytes
) -> None:
    """Issue 51, finding 1: a large Content-Length and one byte at a time held the
    connection forever (every byte restarted the keep-alive timer); now the connection
    closes as soon as the answer is out."""
    with _connect(live) as sock:
        sock.sendall(request_line + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nx")
        answer = _trickle_until_closed(sock, b"x")
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]


def test_bytes_trickled_between_requests_do_not_hold_the_connection(live: Live) -> None:
    """Line breaks between requests begin no request: before, each one cancelled the
    keep-alive timer and nothing closed the connection; now the header deadline does."""
    with _connect(live) as sock:
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _trickle_until_closed(sock, b"\r\n")
    assert answer.startswith(b"HTTP/1.1 200")


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
    assert received.startswith(b"HTTP/1.1 200") and seconds > 0.5


def test_beyond_max_connections_new_requests_get_503(live: Live) -> None:
    """Issue 51, finding 11: the holders are counted once the server holds them (its own
    sockets), not after a sleep that a busy machine can outlast."""
    sources = [f"127.0.0.{k}" for k in range(2, 6)]  # one each: below the per-address cap
    holders = [_connect(live, source) for source in sources]  # silent: each holds one
    try:
        wait_until(lambda: all(_server_sockets(live, s) == 1 for s in sources), what="the holders")
        assert httpx.get(live.process.url + "/v1/status", timeout=NEVER).status_code == 503
    finally:
        for sock in holders:
            sock.close()
    wait_until(lambda: not any(_server_sockets(live, s) for s in sources), what="the closes")
    assert httpx.get(live.process.url + "/v1/status", timeout=NEVER).status_code == 200


def test_beyond_the_per_address_cap_new_connections_are_closed(live: Live) -> None:
    """Issue 51, finding 1: one address held every connection slot; now it holds at most
    ``max_connections_per_address`` (2 here), and other addresses are still served."""
    source = "127.0.0.9"
    holders = [_connect(live, source) for _ in range(2)]
    try:
        wait_until(lambda: _server_sockets(live, source) == 2, what="the holders")
        with _connect(live, source) as third:
            try:
                third.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
                _, answer = _closed_after(third)
            except (BrokenPipeError, ConnectionResetError):
                answer = b""
        assert answer == b""  # closed unanswered
        assert httpx.get(live.process.url + "/v1/status", timeout=NEVER).status_code == 200
    finally:
        for sock in holders:
            sock.close()
    wait_until(lambda: not _server_sockets(live, source), what="the closes")


def _memory_mb(pid: int, field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (the peak so far) of process ``pid``, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_clients_that_never_read_are_closed_and_share_one_copy_of_the_model(
    tmp_path: Path,
) -> None:
    """Issue 51, finding 1: clients pipelining three ``GET /v1/model`` and never reading
    are aborted after ``write_timeout``, and meanwhile the server's peak memory grows by
    far less than a model per client (it grew by two or more: the model was serialized
    again for every request, and written whole into each connection's buffer)."""
    with live_server(tmp_path, BIG_MODEL) as big:
        assert big.process.process is not None
        pid = big.process.process.pid
        size = len(big.client.get("/v1/model").content) / 2**20  # serialized once, here
        assert size > 3
        before = _memory_mb(pid, "VmHWM")
        readers = [_connect(big, f"127.0.1.{k}", rcvbuf=4096) for k in range(20)]
        try:
            for sock in readers:
                sock.sendall(b"GET /v1/model HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
            wait_until(
                lambda: all(map(_closed_by_server, readers)), timeout=NEVER, what="the aborts"
            )
        finally:
            for sock in readers:
                sock.close()
        growth = _memory_mb(pid, "VmHWM") - before
        assert growth < 4 * size, (growth, size)
        assert big.client.get("/v1/status").status_code == 200


def _fd_limits_after(soft: int, hard: int, max_connections: int) -> str:
    """In a child process with ``RLIMIT_NOFILE`` = (soft, hard): ``fedrank serve``'s
    :func:`raise_fd_limit`, and the limits it leaves (or its error)."""
    code = f"""
import resource
from fedrank.errors import ConfigError
from fedrank.server.connections import raise_fd_limit
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
try:
    raise_fd_limit({max_connections})
except ConfigError as err:
    print(err)
else:
    print(resource.getrlimit(resource.RLIMIT_NOFILE))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_open_files_limit_is_raised_for_max_connections_or_refused_with_the_fix() -> None:
    assert _fd_limits_after(512, 4096, 1000) == "(4096, 4096)"  # soft raised to hard
    assert _fd_limits_after(2048, 4096, 1000) == "(2048, 4096)"  # enough already
    refusal = _fd_limits_after(512, 600, 1000)
    assert "max_connections = 1000" in refusal and "600" in refusal
    assert "ulimit" in refusal and "lower max_connections" in refusal
