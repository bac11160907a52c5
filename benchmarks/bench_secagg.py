"""Costs of secure aggregation (:mod:`fedrank.secagg`, Bonawitz et al. CCS 2017): per round,
the payload bytes each client sends and receives and the compute time of a client and of
the server, for n clients and vectors of dimension d (22: the frecency weights; 10,000: a
small neural model), with every client simulated in this one process, one after another.

Dropouts: 5% of the clients stop before MaskedInputCollection (the server then reconstructs
their mask keys and removes their pairwise masks from every survivor's input: its most
expensive path) and 5% before Unmasking. The threshold is t = floor(n/2) + 1. The sum is
checked against the plain sum of the inputs.

Times are CPU seconds of this process (time.process_time), so that a loaded machine does
not inflate them; the total wall time is reported too. Prints JSON and writes it to --json
(default results/benchmarks/secagg.json).

Run: python benchmarks/bench_secagg.py [--configs 100x22,100x10000,1000x22,1000x10000]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fedrank.core.json_io import write_json
from fedrank.secagg import FixedPointEncoder, SecAggParams, field, run_session


def parse_configs(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        n, d = item.lower().split("x")
        out.append((int(n), int(d)))
    return out


def bench(n: int, d: int, drop: float, progress: Progress) -> dict:
    rng = np.random.default_rng(n * 100_003 + d)
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    inputs = {u: enc.encode(rng.uniform(-1, 1, d)) for u in range(1, n + 1)}
    k = int(round(drop * n))
    ids = rng.permutation(np.arange(1, n + 1))
    drop_before = {int(u): "masked_input" for u in ids[:k]}
    drop_before |= {int(u): "unmasking" for u in ids[k : 2 * k]}
    params = SecAggParams(SecAggParams.new_session_id(), n // 2 + 1, d)
    task = progress.add_task(f"{n} x {d}", total=5 * n - 3 * k)  # messages clients send
    state = {"round": None, "base": 0}

    def report(name: str, done: int, total: int) -> None:
        if state["round"] != name:
            state["round"], state["base"] = name, progress.tasks[task].completed
        progress.update(task, completed=state["base"] + done)

    start, cpu_start = time.perf_counter(), time.process_time()
    result, trace = run_session(params, inputs, drop_before=drop_before, progress=report)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    expected = field.sum_vectors([inputs[u] for u in result.contributors])
    rounds = trace.summary()
    client_total = sum(r["client_seconds_mean"] for r in rounds.values())
    upload_total = sum(r["upload_bytes_per_client"] for r in rounds.values())
    return {
        "clients": n,
        "dimension": d,
        "threshold": params.threshold,
        "dropped_before_masked_input": k,
        "dropped_before_unmasking": k,
        "sum_exact": bool(np.array_equal(result.total, expected)),
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "rounds": rounds,
        "client_seconds_per_session": client_total,
        "server_seconds_per_session": sum(r["server_seconds"] for r in rounds.values()),
        "upload_bytes_per_client": upload_total,
        "plain_vector_bytes": field.ELEMENT_BYTES * d,
        "upload_expansion": upload_total / (field.ELEMENT_BYTES * d),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", default="100x22,100x10000,1000x22,1000x10000")
    parser.add_argument("--drop", type=float, default=0.05, help="fraction dropping per stage")
    parser.add_argument("--json", type=Path, default=Path("results/benchmarks/secagg.json"))
    args = parser.parse_args()
    runs = []
    columns = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True)) as progress:
        for n, d in parse_configs(args.configs):
            runs.append(bench(n, d, args.drop, progress))
    report = {
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "note": "one process, one core; every client simulated in turn",
        },
        "runs": runs,
    }
    print(json.dumps(report, indent=2))
    write_json(report, args.json)


if __name__ == "__main__":
    main()
