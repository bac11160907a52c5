"""Privacy against utility, with the guarantee per round and per user over the whole
training (docs/privacy.md, "Privacy and utility"): FPDGD in its own setting (MQ2008 Fold 1,
Navigational clicks, 10 clients per round, B = 4, 40,000 interactions: 1,000 rounds) without
noise, with FPDGD's distributed Laplace mechanism and with the local one, at several
per-round epsilons, and with central DP (the server's Gaussian noise, calibrated to a
per-user budget over the training), over several seeds; test nDCG@10 and expected MaxRR
(mean and sd over seeds) beside each row's epsilon per round and per user
(``fedrank.privacy.report``: basic composition of the Laplace rounds, the Gaussian
mechanism's PLD accounting, for a client in every round).

Run only some rows with --modes (e.g. --modes none,central); --clients and --interactions
change the setting (central DP needs many clients per round: --clients 1000 --interactions
400000).

Prints JSON and writes it to --json (default results/benchmarks/privacy_utility.json).

Run: python benchmarks/bench_privacy_utility.py [--seeds 1,2,3] [--data ../shared/data/MQ2008]
"""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.core.json_io import write_json
from fedrank.data.letor.folds import load_folds
from fedrank.experiments.foltr.run import FoltrConfig, run_foltr
from fedrank.privacy.report import fpdgd_privacy

#: (mode, per-round epsilon): FPDGD's paper used 1.2 to 10.
SETTINGS: tuple[tuple[str, float], ...] = (
    ("none", 0.0),
    ("distributed", 10.0),
    ("distributed", 4.5),
    ("distributed", 1.2),
    ("local", 100.0),
    ("local", 10.0),
    ("local", 1.2),
    ("central", 16.0),
    ("central", 4.0),
    ("central", 1.0),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_data = Path(os.environ.get("FEDRANK_DATA", "../shared/data")) / "MQ2008"
    parser.add_argument("--data", type=Path, default=default_data)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--interactions", type=int, default=40_000)
    parser.add_argument("--clients", type=int, default=10, help="clients per round")
    parser.add_argument("--modes", default="none,distributed,local,central")
    parser.add_argument(
        "--json", type=Path, default=Path("results/benchmarks/privacy_utility.json")
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    fold = load_folds(args.data)[0]
    rows: list[dict[str, Any]] = []
    modes = set(args.modes.split(","))
    for mode, eps in SETTINGS:
        if mode not in modes:
            continue
        runs = []
        for seed in seeds:
            config = FoltrConfig(
                algorithm="fpdgd",
                clients=args.clients,
                interactions=args.interactions,
                dp=mode,  # type: ignore[arg-type]
                dp_epsilon=eps if mode != "none" else 4.5,
                seed=seed,
            )
            runs.append(run_foltr(config, fold))
        rounds = len(runs[0].batch_maxrr)
        report = fpdgd_privacy(asdict(runs[0].config), rounds)
        ndcg = np.array([r.ndcg10["test"] for r in runs])
        maxrr = np.array([r.expected_maxrr["test"] for r in runs])
        row = {
            "mode": mode,
            "epsilon_per_round": report.per_round
            if isinstance(report.per_round, str)
            else report.per_round["epsilon"],
            "epsilon_per_user": report.per_user
            if isinstance(report.per_user, str)
            else report.per_user["epsilon"],
            "rounds": rounds,
            "test_ndcg10_mean": float(ndcg.mean()),
            "test_ndcg10_sd": float(ndcg.std(ddof=1)) if len(seeds) > 1 else 0.0,
            "test_maxrr_mean": float(maxrr.mean()),
            "test_maxrr_sd": float(maxrr.std(ddof=1)) if len(seeds) > 1 else 0.0,
            "seeds": seeds,
        }
        rows.append(row)
        print(row, flush=True)
    out = {
        "machine": platform.platform(),
        "system": "fpdgd",
        "clients": args.clients,
        "interactions": args.interactions,
        "rows": rows,
    }
    write_json(out, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
