"""``fedrank demo`` over several seeds: does the demo show its effect beyond its default
seed? (docs/frecency.md, "The demo").

Runs the command ``fedrank demo --seed S --out OUT/seed-S`` once per seed, one after the
other, each in its own process (the real command, its server on loopback), and prints a
markdown table from each run's ``results.json``: the paired difference in characters
typed per search (trained minus control weights, the same treatment users' evaluation
searches), its 95% CI, the paired t-test's and the Wilcoxon test's p-values, n, and the
command's wall time measured around the process (interpreter start included).

    python benchmarks/bench_demo_seeds.py --seeds 0,1,2,3,4 --out results/demo-seeds
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def run_seed(seed: int, out: Path, extra: list[str]) -> dict:
    """Run ``fedrank demo`` for ``seed`` into ``out/seed-<seed>``; its results.json plus
    the process's wall time."""
    target = out / f"seed-{seed}"
    command = [sys.executable, "-m", "fedrank.cli", "demo", "--seed", str(seed),
               "--out", str(target), *extra]  # fmt: skip
    began = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    data = json.loads((target / "results.json").read_text())
    data["process_seconds"] = wall
    return data


def table(rows: list[tuple[int, dict]]) -> str:
    """The markdown table of the runs."""
    lines = [
        "| seed | n users | control weights | trained | difference [95% CI] | paired t p "
        "| Wilcoxon p | p < 0.05 | wall time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for seed, data in rows:
        p = data["paired"]
        low, high = p["diff_ci95"]
        lines.append(
            f"| {seed} | {p['n_users']} | {p['control_mean']:.3f} | {p['trained_mean']:.3f} | "
            f"{p['diff']:+.3f} [{low:+.3f}, {high:+.3f}] | {p['t_pvalue']:.2g} | "
            f"{p['wilcoxon_pvalue']:.2g} | {'yes' if p['t_pvalue'] < 0.05 else 'no'} | "
            f"{data['process_seconds']:.0f} |"
        )
    shown = sum(d["paired"]["t_pvalue"] < 0.05 for _, d in rows)
    lines += ["", f"{shown} of {len(rows)} seeds show the effect at p < 0.05."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    parser.add_argument("--out", type=Path, default=Path("results/demo-seeds"))
    parser.add_argument("--users", type=int, default=None, help="passed to fedrank demo")
    parser.add_argument("--iterations", type=int, default=None, help="passed to fedrank demo")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give integers separated by commas, e.g. 0,1,2")
    extra = []
    if args.users is not None:
        extra += ["--users", str(args.users)]
    if args.iterations is not None:
        extra += ["--iterations", str(args.iterations)]
    rows = []
    for seed in seeds:
        rows.append((seed, run_seed(seed, args.out, extra)))
        print(f"seed {seed}: done in {rows[-1][1]['process_seconds']:.0f} s", file=sys.stderr)
    print(table(rows))


if __name__ == "__main__":
    main()
