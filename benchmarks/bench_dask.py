"""One run on one process vs the same run on a local Dask cluster of 2 workers (issue
target: the Dask run takes at most 0.7x the wall time, with the same result).

Runs the commands a user runs, each in a fresh process, alternating single and Dask so
that drifts of the machine hit both alike, and reports every wall time, the medians and
their ratio, and whether the results are equal:

* ``fedrank fedps run --mode flat --users 100 --rounds 1 --seed 1`` (same MAP, MRR, P@1
  and KL to 1e-9; they are in fact bitwise equal);
* ``fedrank foltr train --data MQ2008 --seed 1`` (FOLtR-ES, 2M interactions; same
  expected MaxRR and final parameters; no speed target: an iteration's work is a few
  milliseconds);
* ``fedrank frecency simulate --users 3000 --iterations 20 --seed 1`` (the clients'
  finite-difference messages on the workers, the simulated users' searches in the driver;
  same ``loss_per_iteration`` and published weights; no speed target: the searches are
  most of the time).

Prints JSON and writes results/benchmarks/dask.json.

Run: python benchmarks/bench_dask.py [--repeats 2] [--mq2008 ../shared/data/MQ2008]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedrank.core.json_io import write_json

FEDPS = ["fedps", "run", "--mode", "flat", "--users", "100", "--rounds", "1", "--seed", "1"]
FEDPS_KEYS = ("MAP_mean", "MRR_mean", "P@1_mean", "kl_divergence")
FOLTR_KEYS = ("expected_maxrr.train", "expected_maxrr.test", "final_params")
FRECENCY = ["frecency", "simulate", "--users", "3000", "--iterations", "20", "--seed", "1"]
FRECENCY_KEYS = ("loss_per_iteration", "published_weights")


def _get(data: dict, key: str) -> object:
    for part in key.split("."):
        data = data[part]
    return data


def _close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return abs(float(a) - float(b)) <= 1e-9  # type: ignore[arg-type]


def timed(args: list[str], out: Path) -> tuple[float, dict[str, float]]:
    """Wall seconds of ``fedrank ARGS --json OUT`` in a fresh process, and its JSON."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "fedrank.cli", *args, "--json", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "100"},
    )
    seconds = time.perf_counter() - start
    return seconds, json.loads(out.read_text())


def compare(
    args: list[str], keys: tuple[str, ...], repeats: int, target: float | None
) -> dict[str, object]:
    single: list[float] = []
    dask: list[float] = []
    results: dict[str, list[dict[str, float]]] = {"single": [], "dask": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            seconds, data = timed(args, Path(tmp) / f"single{r}.json")
            single.append(seconds)
            results["single"].append({k: _get(data, k) for k in keys})
            seconds, data = timed([*args, "--dask-workers", "2"], Path(tmp) / f"dask{r}.json")
            dask.append(seconds)
            results["dask"].append({k: _get(data, k) for k in keys})
    first = results["single"][0]
    equal = all(_close(res[k], first[k]) for runs in results.values() for res in runs for k in keys)
    ratio = statistics.median(dask) / statistics.median(single)
    return {
        "command": "fedrank " + " ".join(args),
        "single_seconds": single,
        "dask_2_workers_seconds": dask,
        "median_ratio": ratio,
        "target_ratio": target,
        "met": None if target is None else ratio <= target,
        "results_equal_1e-9": equal,
        "result": {k: v for k, v in first.items() if k != "final_params"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mq2008", type=Path, default=Path("../shared/data/MQ2008"))
    parser.add_argument("--only", choices=["fedps", "foltr", "frecency"], default=None)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/dask.json"))
    args = parser.parse_args()
    foltr = ["foltr", "train", "--data", str(args.mq2008), "--seed", "1"]
    report = {
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
    }
    if args.only in (None, "fedps"):
        report["fedps_flat"] = compare(FEDPS, FEDPS_KEYS, args.repeats, 0.7)
    if args.only in (None, "foltr"):
        report["foltr_es_train"] = compare(foltr, FOLTR_KEYS, args.repeats, None)
    if args.only in (None, "frecency"):
        report["frecency_simulate"] = compare(FRECENCY, FRECENCY_KEYS, args.repeats, None)
    print(json.dumps(report, indent=2))
    write_json(report, args.out)


if __name__ == "__main__":
    main()
