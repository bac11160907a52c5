"""A FOLtR-ES run on a Dask cluster.

Every FOLtR-ES client draws its random numbers from its own stream (run seed, iteration,
client: :class:`fedrank.core.client_random.ClientRandom`), so the clients of an iteration
can run anywhere and the run is the same bit for bit. :func:`fedrank.experiments.foltr.
run.run_foltr` takes a ``distributed.Client`` and sends each iteration's clients to the
cluster's workers; :func:`fedrank.experiments.executors.dask_client` makes one, for a new
local cluster (``--workers N``) or an existing scheduler (``--scheduler tcp://HOST:PORT``,
whose workers must have fedrank installed). The script runs the same configuration in
this process and on the cluster and prints both results.

Run::

    python examples/dask_cluster.py --data PATH/TO/MQ2008 --workers 2
    python examples/dask_cluster.py --data PATH/TO/MQ2008 --scheduler tcp://10.0.0.5:8786
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from fedrank.data.letor.folds import load_fold
from fedrank.experiments.executors import dask_client
from fedrank.experiments.foltr.run import FoltrConfig, FoltrResult, run_foltr


def _line(where: str, result: FoltrResult, seconds: float) -> str:
    return (
        f"{where:12s} test nDCG@10 {result.ndcg10['test']:.6f}  final batch MaxRR "
        f"{result.batch_maxrr[-1]:.6f}  ({seconds:.1f} s)"
    )


def main() -> None:
    """Parse the arguments, run in process and on the cluster, print both and whether the
    final models are identical."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the MQ2008 directory")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=2, help="a local cluster of N workers")
    where.add_argument("--scheduler", default=None, help="an existing cluster's address")
    parser.add_argument("--interactions", type=int, default=200_000, help="in all")
    parser.add_argument("--clients", type=int, default=500, help="clients per iteration")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed")
    args = parser.parse_args()
    fold = load_fold(args.data, 1)
    config = FoltrConfig(clients=args.clients, interactions=args.interactions, seed=args.seed)
    start = time.perf_counter()
    local = run_foltr(config, fold)
    print(_line("in process", local, time.perf_counter() - start))
    workers = None if args.scheduler else args.workers
    with dask_client(workers, args.scheduler) as client:
        start = time.perf_counter()
        remote = run_foltr(config, fold, dask=client)
        print(_line("on Dask", remote, time.perf_counter() - start))
    same = np.array_equal(local.params, remote.params)
    print(f"same final model bit for bit: {same}")


if __name__ == "__main__":
    main()
