"""Where one optimization iteration of the frecency study spends its time at 10,000 users
(docs/frecency.md, Speed): the median of every stage (the first two runs of each left out)
over iterations that alternate between one thread (draw, state, URL bar one after the
other) and the study's two-thread steps (the state while drawing, a URL-bar pass in two
halves); both give the same results, so the iterations are those of one study. numpy's
products run on the world's pipeline's BLAS threads (one), as in the study
(``fedrank.simulation.frecency.pipeline.Pipeline.blas``). Prints JSON and writes
results/benchmarks/frecency_stages.json.

Run: python benchmarks/bench_frecency_stages.py [--users 10000 --iterations 12]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedrank.core.json_io import write_json
from fedrank.experiments.frecency.clients import LocalFrecencyClients
from fedrank.experiments.frecency.study import (
    FrecencyStudyConfig,
    InProcessServer,
    build_world,
    study_streams,
)
from fedrank.federation.round import Round
from fedrank.simulation.frecency.branches import TREATMENT
from fedrank.simulation.frecency.urlbar import simulate_searches
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.strategy import FrecencyStrategy


def stages(users: int, iterations: int, seed: int) -> dict[str, float]:
    """Median seconds per stage over ``iterations`` iterations (after two warm-up ones) of
    the study's loop, the server stepping as in a study (module docstring)."""
    config = FrecencyStudyConfig(n_users=users, iterations=iterations, seed=seed).resolved()
    world_seed, train_seed, _, _ = study_streams(seed)
    world = build_world(config, np.random.default_rng(world_seed))
    server = InProcessServer(Round(FrecencyStrategy(config)))
    clients = LocalFrecencyClients(FrecencyClient(config))
    rng = np.random.default_rng(train_seed)
    times: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, run, *args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        out = run(*args, **kwargs)
        times[name].append(time.perf_counter() - start)
        return out

    common = ("due_visits", "shown_frecency", "branch_losses", "client_searches", "messages",
              "server_step", "record")  # fmt: skip
    with world.pipeline.blas():  # as the study's iterations run
        for k in range(iterations + 2):
            theta = server.model()
            timed("due_visits", world.due_searches, config.days_per_iteration)
            counts = rng.poisson(config.searches_per_iteration, size=world.n_users)
            searchers = np.repeat(np.arange(world.n_users), counts)
            if k % 2 == 0:  # one thread (the same results: the iterations alternate)
                searches = timed("draw", world.draw_searches, searchers, rng)
                state = timed("state", world.state, theta, searches.users)
                batch = timed(
                    "urlbar", simulate_searches, world.pages, state, searches.users,
                    searches.targets, searches.typed, rng, typing=world.typing, config=world.urlbar,
                )  # fmt: skip
            else:  # the study's way: the state while drawing, the URL bar in two halves
                searches = timed(
                    "draw_and_state_two_threads", world.draw_searches, searchers, rng,
                    state_for=theta,
                )  # fmt: skip
                batch = timed("urlbar_two_threads", world.search, searches, theta, rng)
            shown = timed("shown_frecency", world.shown_frecency, batch, theta)
            losses = timed("branch_losses", world.branch_losses, batch, theta, shown=shown)
            held = timed("client_searches", world.client_searches, batch, TREATMENT)
            reports = timed("messages", clients.messages, held, theta)
            server.report(world, batch, losses, reports)
            timed("server_step", server.close)
            timed("record", world.record, batch)
            world.advance(config.days_per_iteration)
    out = {name: float(np.median(values[2:])) for name, values in times.items()}
    rest = sum(out[name] for name in common)
    out["iteration_one_thread"] = rest + out["draw"] + out["state"] + out["urlbar"]
    out["iteration_two_threads"] = (
        rest + out["draw_and_state_two_threads"] + out["urlbar_two_threads"]
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/frecency_stages.json"))
    args = parser.parse_args()
    report = {
        "users": args.users,
        "iterations": args.iterations,
        "median_seconds": stages(args.users, args.iterations, args.seed),
    }
    print(json.dumps(report, indent=2))
    write_json(report, args.out)


if __name__ == "__main__":
    main()
