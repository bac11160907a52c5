"""Speed of FedPS's KL privacy measure (:func:`fedrank.privacy.profile_kl.profile_kl`) at
the AOL sample's scale: 1,000 users' real profiles over 60,000 words against 10 observed
profiles (target: well under a second). Prints JSON and writes results/benchmarks/kl.json.

Run: python benchmarks/bench_kl.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
from scipy import sparse

from fedrank.core.json_io import write_json
from fedrank.privacy.profile_kl import ObservedProfiles, profile_kl


def counts(rng: np.random.Generator, n: int, v: int, per_row: int) -> sparse.csr_matrix:
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(2, v, size=rows.size)
    data = rng.integers(1, 6, size=rows.size).astype(np.float64)
    return sparse.csr_matrix((data, (rows, cols)), shape=(n, v))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/kl.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(2)
    real = counts(rng, 1000, 60_000, 200)
    observed = ObservedProfiles(
        sparse.csr_matrix(counts(rng, 10, 60_000, 20_000)), np.repeat(np.arange(10), 100)
    )
    profile_kl(real, observed)  # warm-up
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        profile_kl(real, observed)
        times.append(time.perf_counter() - start)
    report = {
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "users": 1000,
        "words": 60_000,
        "median_seconds": float(np.median(times)),
        "max_seconds": float(np.max(times)),
        "target_seconds": 1.0,
        "met": bool(np.median(times) < 1.0),
    }
    print(json.dumps(report, indent=2))
    write_json(report, args.out)


if __name__ == "__main__":
    main()
