"""Cost of one securely aggregated round through the service (``[secagg]``, docs/secagg.md
"In the service"): a real ``fedrank serve`` over loopback and K SDK clients in threads of
``--client-processes`` processes, each checking in and running
:func:`fedrank.client.secagg.send_secure` with a random delta of dimension d; 5% of them drop
out before their masked input and 5% after it.

Measured: the round's wall time (first check-in to the published model), the server
process's CPU seconds over the round (``/proc/<pid>/stat``), the bytes each client sends and
receives on the wire (request and response bodies, JSON; headers not counted), and the
largest gap between the model's step and the clear aggregate of the contributors' clipped
deltas (the fixed-point error). The clients share the machine with the server, so the wall
time is an upper bound for a server with remote clients.

Prints JSON and writes it to --json (default results/benchmarks/secagg_service.json).

Run: python benchmarks/bench_secagg_service.py [--configs 100x22,300x22]
     python benchmarks/bench_secagg_service.py --configs 1000x22 --stage-seconds 600 \
         --client-processes 2 --max-poll-seconds 10
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedrank.client import Client
from fedrank.client.secagg import send_secure
from fedrank.core.json_io import write_json
from fedrank.identity.registry import DeviceRegistry
from fedrank.secagg.client import SecAggClient
from fedrank.secagg.field import FixedPointEncoder
from fedrank.server.process import ServerProcess

L2_BOUND = 1.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _deltas(k: int, d: int) -> np.ndarray:
    rng = np.random.default_rng(k * 1000 + d)
    deltas = rng.normal(size=(k, d))
    return deltas * rng.uniform(0.1, 1.5, (k, 1)) / np.linalg.norm(deltas, axis=1, keepdims=True)


def _drop(i: int, k: int) -> str | None:
    """5% drop out before their masked input (after their shares and their share check),
    5% after it."""
    return "check_shares" if i < k // 20 else "masked_input" if i < k // 10 else None


def _clients(
    url: str, k: int, d: int, ids: list[int], tokens: list[str], max_poll: float
) -> tuple[list[float], list[float]]:
    """SDK clients ``ids`` (threads of this process), devices enrolled with ``tokens`` (one
    each): check in and run the secure round; the bytes each sent and received (request and
    response bodies)."""
    deltas = _deltas(k, d)
    token_of = dict(zip(ids, tokens, strict=True))
    sent = dict.fromkeys(ids, 0.0)
    received = dict.fromkeys(ids, 0.0)
    lock = threading.Lock()
    # Each client stands for a device of its own. Hundreds of threads that compute their
    # shares at once in one interpreter all progress together (the GIL shares the core
    # among them: at K = 1,000 at most 46 had sent theirs when a 400 s stage closed); one
    # at a time, they finish one after the other, as devices working in parallel would.
    compute = threading.Lock()
    for name in ("share_keys", "check_shares", "masked_input"):
        original = getattr(SecAggClient, name)

        def one_at_a_time(self: SecAggClient, *args: Any, _f: Any = original) -> Any:
            with compute:
                return _f(self, *args)

        setattr(SecAggClient, name, one_at_a_time)

    def client(i: int) -> None:
        def on_request(request: httpx.Request) -> None:
            with lock:
                sent[i] += len(request.content)

        def on_response(response: httpx.Response) -> None:
            response.read()
            with lock:
                received[i] += len(response.content)

        hooks = {"request": [on_request], "response": [on_response]}
        with (
            httpx.Client(timeout=300.0, event_hooks=hooks) as http,
            Client(url, http=http, rng=np.random.default_rng(i), enrollment_token=token_of[i]) as c,
        ):
            checkin = c.checkin()
            send_secure(
                c, checkin, deltas[i], poll_seconds=0.1, max_poll_seconds=max_poll,
                drop_after=_drop(i, k), timeout=7200.0,
            )  # fmt: skip

    with ThreadPoolExecutor(max_workers=len(ids)) as pool:
        list(pool.map(client, ids))
    return [sent[i] for i in ids], [received[i] for i in ids]


def run(k: int, d: int, stage_seconds: float, processes: int, max_poll: float) -> dict[str, Any]:
    toml = (  # every client holds a connection while it polls: room for all of them
        f'[server]\nworkload = "fedavg"\nmax_connections = {k + 100}\n'
        f"max_connections_per_address = {k + 100}\n"  # all from one loopback address
        f"[iteration]\nseconds = 0.0\n[fedavg]\ndim = {d}\n"
        "[identity]\naddress_rate = 0\n"  # every client on the loopback address
        f"[rounds]\nenabled = true\nclients_per_round = {k}\nt_max_seconds = 3600.0\n"
        "checkin_seconds = 1.0\n"
        f"[secagg]\nenabled = true\nl2_bound = {L2_BOUND}\nstage_seconds = {stage_seconds}\n"
    )
    deltas = _deltas(k, d)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "server.toml"
        config.write_text(toml)
        registry = DeviceRegistry(Path(tmp) / "store")  # the operator enrolls k devices
        tokens = registry.issue(k, "bench", 24.0)
        registry.close()
        server = ServerProcess(Path(tmp) / "store", config=config)
        server.start()
        try:
            assert server.process is not None
            pid = server.process.pid
            with httpx.Client(base_url=server.url) as probe:
                params0 = np.array(probe.get("/v1/model").json()["params"])
                parts = [list(range(p, k, processes)) for p in range(processes)]
                cpu0, wall0 = _cpu_seconds(pid), time.perf_counter()
                with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
                    runs = [
                        pool.submit(
                            _clients, server.url, k, d, ids, [tokens[i] for i in ids], max_poll
                        )
                        for ids in parts
                    ]
                    bytes_of = [r.result() for r in runs]
                waited = time.perf_counter()
                while probe.get("/v1/status").json()["model_version"] < 1:
                    if time.perf_counter() - waited > 600:
                        raise RuntimeError("the round's model was not published within 600 s")
                    time.sleep(0.05)
                wall = time.perf_counter() - wall0
                cpu = _cpu_seconds(pid) - cpu0
                params1 = np.array(probe.get("/v1/model").json()["params"])
        finally:
            server.stop()
    sent = np.concatenate([b[0] for b in bytes_of])
    received = np.concatenate([b[1] for b in bytes_of])
    encoder = FixedPointEncoder.with_max_scale(k, l2_bound=L2_BOUND)
    contributors = [i for i in range(k) if _drop(i, k) != "check_shares"]
    clear = np.mean([encoder.clip(deltas[i]) for i in contributors], axis=0)
    return {
        "clients": k,
        "dimension": d,
        "threshold": k // 2 + 1,
        "dropped_before_masked_input": sum(_drop(i, k) == "check_shares" for i in range(k)),
        "dropped_after_masked_input": sum(_drop(i, k) == "masked_input" for i in range(k)),
        "client_processes": processes,
        "max_poll_seconds": max_poll,
        "round_wall_seconds": wall,
        "server_cpu_seconds": cpu,
        "stage_seconds": stage_seconds,
        "bytes_sent_per_client_mean": float(sent.mean()),
        "bytes_received_per_client_mean": float(received.mean()),
        "max_error_vs_clear_mean": float(np.max(np.abs(params1 - params0 - clear))),
        "error_bound": encoder.error_bound(len(contributors)) / len(contributors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="100x22,300x22", help="KxD,KxD,...")
    parser.add_argument(
        "--stage-seconds",
        type=float,
        default=20.0,
        help="each stage's deadline; dropouts make the stages they miss wait for it",
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="processes the clients' threads are spread over (their Shamir sharing is Python)",
    )
    parser.add_argument(
        "--max-poll-seconds",
        type=float,
        default=1.0,
        help="the clients' longest pause between polls (each poll is a request)",
    )
    parser.add_argument("--json", type=Path, default=Path("results/benchmarks/secagg_service.json"))
    args = parser.parse_args()
    rows = []
    for item in args.configs.split(","):
        k, d = (int(v) for v in item.lower().split("x"))
        rows.append(run(k, d, args.stage_seconds, args.client_processes, args.max_poll_seconds))
        print(rows[-1], flush=True)
    out = {"machine": platform.platform(), "cpus": os.cpu_count(), "runs": rows}
    write_json(out, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
