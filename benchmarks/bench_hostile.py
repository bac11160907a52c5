"""Hostile sockets against a real server (docs/service.md, "Connections"; issue 51, finding 1).

A real ``fedrank serve`` (FedAvg with a model of about 6 MB of JSON, so ``GET /v1/model``
is large) on loopback, and, spread over source addresses 127.0.0.2, 127.0.0.3, ... (at most
``--per-address`` each, below the server's per-address cap):

* ``--slow-body`` sockets that declare a large ``Content-Length`` and then send one body
  byte every ``--trickle-seconds`` to endpoints that never read a body: ``GET /v1/status``,
  ``GET /v1/model``, ``GET /metrics``, a 404 and an admin call that gets 401 (an equal
  share each); they read what they are sent;
* ``--slow-readers`` sockets that pipeline three ``GET /v1/model`` and never read.

Measured while they are open: a fresh ``GET /v1/status`` (a new connection each time,
from 127.0.0.1) every ``--probe-seconds``: its latency (p50, max) and status; the server's
resident memory (``/proc/<pid>/status``: VmRSS sampled, VmHWM its peak); how many hostile
sockets the server closed, and when (seconds on the probes' clock, which starts as the first
hostile socket opens) (a socket is closed by the server when its TCP state,
``TCP_INFO``, leaves ESTABLISHED: no need to read). Before that, ``--one-address`` silent
sockets from one address show what the per-address cap does.

Prints JSON and writes it to --out (default results/benchmarks/hostile.json).
Targets: status < 1 s and the server below 1 GB throughout.

Run: python benchmarks/bench_hostile.py [--slow-body 1000 --slow-readers 1000 --seconds 45]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import selectors
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedrank.core.json_io import write_json
from fedrank.server.process import ServerProcess

ADMIN_TOKEN = "hostile-benchmark-admin-token"
#: TCP_ESTABLISHED in ``struct tcp_info``'s first byte (linux/tcp.h).
ESTABLISHED = 1
#: The endpoints of the slow-body sockets: none of them reads a body.
SLOW_BODY_TARGETS = (
    ("status", b"GET /v1/status"),
    ("model", b"GET /v1/model"),
    ("metrics", b"GET /metrics"),
    ("not_found", b"GET /v1/nothing-here"),
    ("admin_401", b"POST /v1/admin/close"),
)


def config_text(dim: int) -> str:
    return f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
max_connections = 4000
[fedavg]
dim = {dim}
"""


def memory(pid: int) -> dict[str, float]:
    """The process's resident memory now and at its peak, in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def established(sock: socket.socket) -> bool:
    """Whether the server has not closed ``sock`` (its TCP state, read without reading)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return False
    return struct.unpack("B", info[:1])[0] == ESTABLISHED


class Addresses:
    """Source addresses 127.0.0.2, 127.0.0.3, ..., ``per_address`` sockets each."""

    def __init__(self, per_address: int) -> None:
        self.per_address, self.used = per_address, 0

    def next(self) -> str:
        k = self.used // self.per_address
        self.used += 1
        return f"127.0.{k // 250}.{k % 250 + 2}"


def connect(port: int, source: str, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connecting: it sets the advertised window
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def one_address_cap(port: int, count: int) -> dict[str, Any]:
    """``count`` silent sockets from 127.1.0.1: how many the server closes at once."""
    socks = [connect(port, "127.1.0.1") for _ in range(count)]
    time.sleep(1.0)  # well below header_timeout (10 s): only the cap closes this early
    closed = sum(not established(s) for s in socks)
    for s in socks:
        s.close()
    return {"opened": count, "closed_within_1s": closed, "kept": count - closed}


class Prober(threading.Thread):
    """A fresh ``GET /v1/status`` (new connection, from 127.0.0.1) every ``every`` seconds,
    and the server's resident memory then, in a thread of its own (the sockets' loop never
    delays it, and it never delays theirs)."""

    def __init__(self, url: str, pid: int, every: float) -> None:
        super().__init__(daemon=True)
        self.url, self.pid, self.every = url, pid, every
        self.origin = time.monotonic()
        self.tries: list[dict[str, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            start = time.monotonic()
            try:
                status = httpx.get(self.url + "/v1/status", timeout=10.0).status_code
            except httpx.HTTPError:
                status = 0
            latency = time.monotonic() - start
            rss = memory(self.pid)["VmRSS"]
            self.tries.append(
                {"at_s": start - self.origin, "latency_s": latency, "status": status, "rss_mb": rss}
            )


def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess(
            Path(tmp) / "store", config=_write(Path(tmp), config_text(args.dim))
        ) as server,
    ):
        assert server.process is not None and server.port is not None
        pid, port = server.process.pid, server.port
        model_bytes = len(httpx.get(server.url + "/v1/model", timeout=30).content)
        idle = memory(pid)
        cap = one_address_cap(port, args.one_address)
        addresses = Addresses(args.per_address)
        selector = selectors.DefaultSelector()
        prober = Prober(server.url, pid, args.probe_seconds)
        prober.start()  # its clock starts before the first hostile socket opens
        slow_body: list[tuple[str, socket.socket]] = []
        for i in range(args.slow_body):
            name, line = SLOW_BODY_TARGETS[i % len(SLOW_BODY_TARGETS)]
            sock = connect(port, addresses.next())
            sock.sendall(line + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nx")
            selector.register(sock, selectors.EVENT_READ, name)
            slow_body.append((name, sock))
        pipelined = b"GET /v1/model HTTP/1.1\r\nHost: x\r\n\r\n" * 3
        readers = []
        for _ in range(args.slow_readers):
            sock = connect(port, addresses.next(), rcvbuf=4096)
            sock.sendall(pipelined)
            readers.append(sock)
        opened = time.monotonic() - prober.origin
        closed_at: dict[int, float] = {}  # id(sock) -> seconds on the prober's clock
        kinds = {id(s): name for name, s in slow_body} | {id(s): "slow_reader" for s in readers}
        next_trickle = next_check = time.monotonic()
        while (now := time.monotonic()) - prober.origin < opened + args.seconds:
            for key, _ in selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    closed_at[id(sock)] = time.monotonic() - prober.origin
                    selector.unregister(sock)
            if now >= next_trickle:
                next_trickle = now + args.trickle_seconds
                for _, sock in slow_body:
                    if id(sock) not in closed_at:
                        with contextlib.suppress(OSError):  # closed meanwhile
                            sock.send(b"x")
            if now >= next_check:
                next_check = now + 0.5
                for sock in readers:
                    if id(sock) not in closed_at and not established(sock):
                        closed_at[id(sock)] = time.monotonic() - prober.origin
        prober.done.set()
        prober.join()
        peak = memory(pid)
        by_kind: dict[str, dict[str, Any]] = {}
        for sock_id, kind in kinds.items():
            entry = by_kind.setdefault(kind, {"sockets": 0, "closed": 0, "closed_at_s": []})
            entry["sockets"] += 1
            if sock_id in closed_at:
                entry["closed"] += 1
                entry["closed_at_s"].append(closed_at[sock_id])
        for entry in by_kind.values():
            times = entry.pop("closed_at_s")
            entry["closed_at_s"] = (
                {"min": min(times), "median": float(np.median(times)), "max": max(times)}
                if times
                else None
            )
        for _, sock in slow_body:
            sock.close()
        for sock in readers:
            sock.close()
    tries = prober.tries
    lat = np.array([t["latency_s"] for t in tries])
    statuses = {t["status"] for t in tries}
    return {
        "model_body_bytes": model_bytes,
        "hostile_sockets": {"slow_body": args.slow_body, "slow_readers": args.slow_readers},
        "source_addresses": -(-(args.slow_body + args.slow_readers) // args.per_address),
        "all_open_at_s": opened,
        "seconds_open": args.seconds,
        "status_probe": {
            "tries": len(lat),
            "p50_s": float(np.median(lat)),
            "max_s": float(lat.max()),
            "statuses": sorted(statuses),
            "each": [{k: round(v, 4) for k, v in t.items()} for t in tries],
        },
        "server_rss_mb": {
            "idle": idle["VmRSS"],
            "max_sampled": max(t["rss_mb"] for t in tries),
            "peak_vmhwm": peak["VmHWM"],
        },
        "closed_by_server": by_kind,
        "one_address_cap": cap,
        "targets": {
            "status_under_1s": bool(lat.max() < 1.0) and statuses == {200},
            "rss_under_1gb": peak["VmHWM"] < 1024,
        },
    }


def _write(directory: Path, text: str) -> Path:
    path = directory / "server.toml"
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slow-body", type=int, default=1000)
    parser.add_argument("--slow-readers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=45.0, help="how long they stay open")
    parser.add_argument("--trickle-seconds", type=float, default=3.0)
    parser.add_argument("--probe-seconds", type=float, default=1.0)
    parser.add_argument("--per-address", type=int, default=40)
    parser.add_argument("--one-address", type=int, default=100)
    parser.add_argument(
        "--dim", type=int, default=1_500_000, help="FedAvg model dimension (zeros: 4 B each)"
    )
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/hostile.json"))
    args = parser.parse_args()
    report = {
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "command": "python benchmarks/bench_hostile.py "
        f"--slow-body {args.slow_body} --slow-readers {args.slow_readers} "
        f"--seconds {args.seconds:g} --dim {args.dim}",
        **run(args),
    }
    print(json.dumps(report, indent=2))
    write_json(report, args.out)


if __name__ == "__main__":
    main()
