"""Wall time and memory of FedPS on the whole AOL sample (issue target: the 1,000-user run,
central and proxy with the default settings -- at most 4 rounds, validation every quarter
round, early stopping -- each under 30 minutes including data preparation; the full run
fits in 8 GB). Each mode runs in its
own process, one after the other, so its peak resident memory is its own. Prints JSON and
writes results/benchmarks/fedps.json.

Run: python benchmarks/bench_fedps.py [--log PATH] [--users N] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from fedrank.core.json_io import write_json

TARGET_SECONDS = 30 * 60
TARGET_BYTES = 8 * 2**30


def one_mode(log: str, users: int | None, mode: str, rounds: int, seed: int) -> dict[str, Any]:
    """Prepare the data and run ``mode`` in this (fresh) process."""
    from fedrank.experiments.fedps.data import prepare_aol
    from fedrank.experiments.fedps.run import run_fedps
    from fedrank.experiments.fedps.settings import FedPSSettings

    start = time.perf_counter()
    data = prepare_aol(log, users=users, seed=seed)
    prepared = time.perf_counter() - start
    result = run_fedps(data, FedPSSettings(mode=mode, rounds=rounds, seed=seed))
    total = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    out = result.to_json()
    rounds_run = out["curve"][-1]["round"]  # early stopping may end before ``rounds``
    warm = out["warmup"]  # the click-feature warm-up's own rounds, before the full model's
    warmup_run = warm["curve"][-1]["round"] if warm else 0.0
    return {
        "mode": mode,
        "users": out["data"]["users"],
        "rounds": rounds,
        "steps": out["steps"],
        "prepare_seconds": round(prepared, 1),
        "run_seconds": round(out["wall_seconds"], 1),
        "total_seconds": round(total, 1),
        "rounds_run": rounds_run,
        "warmup_rounds_run": warmup_run,
        # over both stages' rounds (a warm-up round computes no text: it is cheaper)
        "seconds_per_round": round(out["wall_seconds"] / (rounds_run + warmup_run), 1),
        "peak_rss_bytes": int(peak),
        "MAP": round(out["MAP"], 4),
        "best_round": out["best_round"],
        "meets_time_target": total < TARGET_SECONDS,
        "meets_memory_target": peak < TARGET_BYTES,
    }


def main() -> None:
    from fedrank.experiments.fedps.data import default_log_path

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--users", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="central,proxy")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedps.json"))
    args = parser.parse_args()
    log = args.log or default_log_path()
    if not log.is_file():
        sys.exit(f"AOL log {log} not found: pass --log or set FEDRANK_DATA_DIR")
    runs = []
    for mode in args.modes.split(","):
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            runs.append(
                pool.submit(one_mode, str(log), args.users, mode, args.rounds, args.seed).result()
            )
        print(json.dumps(runs[-1]), flush=True)
    report = {
        "benchmark": "fedps",
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "targets": {"seconds": TARGET_SECONDS, "peak_rss_bytes": TARGET_BYTES},
        "runs": runs,
    }
    print(json.dumps(report, indent=2))
    write_json(report, args.out)


if __name__ == "__main__":
    main()
