"""``fedrank fedps reproduce``: FedPS Tables 2-6 and Figure 4 on the AOL log.

Every trained configuration is one *job* (a :class:`~fedrank.experiments.fedps.FedPSSettings`)
whose result is written to ``<out>/runs/<name>.json`` (and its per-query test metrics to
``<name>.npy``) as soon as it finishes; a rerun skips finished jobs, so an interrupted
reproduction resumes. Jobs run in ``jobs`` worker processes (spawned; each prepares the data
once). Then :func:`write_tables` assembles ``tables.md`` and ``results.json``:

* Tables 2-3: every mode's MAP / MRR / P@1, its change relative to the centrally trained
  model, a paired t-test against it (per test query; the modes that rebuild the server's log,
  CoverQuery and GroupUser, have their own candidate lists and get no paired test) and the KL
  divergence of the privacy measure.
* Table 4: FedPSProxy with K in {5, 10, 20, 30, 100}: the round of the best validation MAP,
  steps to it, and its test MAP. The sweeps use ten proxies (``users / 10`` clients per
  proxy) so that every K is ``K/10`` proxies x 10 clients at any scale.
* Table 5: the same for E in {1, 2, 3} (K = 10).
* Table 6: the communication time of one round (:mod:`fedrank.simulation.communication`)
  for the paper's 118,067 users and for this log's users, K in {100, 1000}, delay ratios
  10% and 20%; computed from the topology and the sampling schedule, no training.
* Figure 4: continuous updating (:mod:`fedrank.experiments.fedps_continuous`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from fedrank.aggregators.hierarchy import Topology
from fedrank.core.json_io import write_json
from fedrank.errors import ConfigError
from fedrank.experiments.fedps import FedPSSettings, run_fedps
from fedrank.experiments.fedps_data import FedPSData, prepare_aol
from fedrank.simulation.client_sampling import flat_schedule, proxy_schedule
from fedrank.simulation.communication import flat_round_time, proxy_round_time

TABLE3_MODES: tuple[str, ...] = (
    "original",
    "pclick",
    "knrm",
    "central",
    "groupuser",
    "coverquery",
    "flat",
    "proxy",
)
K_VALUES: tuple[int, ...] = (5, 10, 20, 30, 100)
E_VALUES: tuple[int, ...] = (1, 2, 3)
DELAY_RATIOS: tuple[float, ...] = (0.1, 0.2)
PAPER_USERS = 118_067
TABLES: tuple[str, ...] = ("3", "4", "5", "6", "fig4")

#: The paper's Table 3 (AOL, MAP) and Table 2 (KL), for the report's side-by-side.
PAPER_MAP = {
    "original": 0.2504,
    "knrm": 0.4291,
    "central": 0.7115,
    "groupuser": 0.6917,
    "coverquery": 0.7101,
    "flat": 0.7074,
    "proxy": 0.7112,
}
LABELS = {
    "original": "Original rank (BM25)",
    "pclick": "P-Click",
    "knrm": "K-NRM",
    "central": "PEPS-style, central",
    "groupuser": "GroupUser",
    "coverquery": "CoverQuery",
    "flat": "FedPSFlat",
    "proxy": "FedPSProxy",
}


@dataclass(frozen=True)
class ReproduceConfig:
    """What to reproduce, and at which scale.

    Attributes:
        log: the AOL click log.
        out_dir: where runs, tables and the figure go.
        users: draw this many users (``None``: all).
        rounds: ``R`` of every trained job (epochs of central training).
        sweep_rounds: ``R`` of the Table 4-5 sweeps (larger K needs more rounds).
        continuous_users: users of the Figure 4 simulation (7 stages x 3 trained models;
            ``None``: all).
        seed: the seed of every job.
        tables: which of :data:`TABLES` to produce.
        jobs: worker processes.
    """

    log: Path
    out_dir: Path
    users: int | None = None
    rounds: int = 4
    sweep_rounds: int = 6
    continuous_users: int | None = 300
    seed: int = 0
    tables: tuple[str, ...] = TABLES
    jobs: int = 2

    def __post_init__(self) -> None:
        unknown = set(self.tables) - set(TABLES)
        if unknown:
            raise ConfigError(f"unknown tables {sorted(unknown)}; choose from {TABLES}")
        if self.jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {self.jobs}")


def _sweep_name(k: int, e: int) -> str:
    """Run name of a Table 4-5 configuration (K = 10, E = 1 is shared by both tables)."""
    return f"proxy_K{k}_E{e}"


def planned_jobs(config: ReproduceConfig) -> dict[str, FedPSSettings]:
    """The trained configurations the requested tables need, by run name."""
    base = FedPSSettings(mode="central", rounds=config.rounds, seed=config.seed)
    jobs: dict[str, FedPSSettings] = {}
    if "3" in config.tables:
        # the longest and most important runs first
        for mode in ("central", "flat", "proxy", "coverquery", "groupuser", "knrm"):
            jobs[mode] = replace(base, mode=mode)
        for mode in ("original", "pclick"):
            jobs[mode] = replace(base, mode=mode)
    # Ten proxies whatever the number of users, so that K = 100 is 10 proxies x 10 clients
    # (the paper's 100 users per proxy on the full sample).
    per_proxy = max(10, (config.users or 1000) // 10)
    sweep = replace(base, mode="proxy", rounds=config.sweep_rounds, clients_per_proxy=per_proxy)
    if "4" in config.tables:
        for k in K_VALUES:
            jobs[_sweep_name(k, 1)] = replace(sweep, clients_per_step=k)
    if "5" in config.tables:
        for e in E_VALUES:
            jobs[_sweep_name(10, e)] = replace(sweep, local_epochs=e)
    return jobs


_DATA: dict[tuple[str, int | None, int], FedPSData] = {}


def _run_job(log: str, users: int | None, settings: FedPSSettings, out: str) -> str:
    """Worker: prepare the data (once per process) and run one job."""
    key = (log, users, settings.seed)
    if key not in _DATA:
        _DATA[key] = prepare_aol(log, users=users, seed=settings.seed)
    result = run_fedps(_DATA[key], settings)
    path = Path(out)
    np.save(path.with_suffix(".npy"), result.per_query)
    write_json(result.to_json(), path)
    return out


def run_jobs(
    config: ReproduceConfig,
    jobs: dict[str, FedPSSettings],
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run the jobs without a result file yet; return every job's result JSON."""
    runs = config.out_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    todo = {n: s for n, s in jobs.items() if not (runs / f"{n}.json").is_file()}
    done = len(jobs) - len(todo)
    if progress is not None:
        progress("FedPS jobs", done, len(jobs))
    if todo:
        context = get_context("spawn")
        with ProcessPoolExecutor(max_workers=config.jobs, mp_context=context) as pool:
            futures = [
                pool.submit(_run_job, str(config.log), config.users, s, str(runs / f"{n}.json"))
                for n, s in todo.items()
            ]
            for future in futures:
                future.result()  # re-raises a worker's error
                done += 1
                if progress is not None:
                    progress("FedPS jobs", done, len(jobs))
    return {n: json.loads((runs / f"{n}.json").read_text()) for n in jobs}


# --------------------------------------------------------------------------- tables


def communication_table(
    n_clients: int, seed: int = 0, k_values: Sequence[int] = (100, 1000)
) -> list[dict[str, Any]]:
    """Table 6: one round's communication time, flat vs proxy, per K and delay ratio (the
    paper's topology: 100 clients per proxy, 1,000 proxies per group server)."""
    rows = []
    for ratio in DELAY_RATIOS:
        rng = np.random.default_rng(seed)
        straggler = np.zeros(n_clients, dtype=bool)
        straggler[rng.permutation(n_clients)[: int(round(ratio * n_clients))]] = True
        topology = Topology.build(n_clients, rng)
        for k in k_values:
            flat = flat_round_time(flat_schedule(n_clients, k, rng), straggler)
            proxy = proxy_round_time(proxy_schedule(topology, k, rng), straggler, topology)
            rows.append({"delay_ratio": ratio, "K": k, "flat": str(flat), "proxy": str(proxy)})
    return rows


def _paired_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided paired t-test of per-query AP (queries with a relevant candidate)."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2 or np.allclose(a[ok], b[ok]):
        return float("nan")
    return float(stats.ttest_rel(a[ok], b[ok]).pvalue)


def _p_text(p: float | None) -> str:
    if p is None:
        return "-"
    return "< 1e-300" if p == 0.0 else f"{p:.2g}"


def _pct(value: float, reference: float) -> str:
    return f"{100.0 * (value - reference) / reference:+.2f}%"


def command_line(config: ReproduceConfig) -> str:
    """The ``fedrank fedps reproduce`` invocation that produces ``config``."""
    parts = ["fedrank fedps reproduce", f"--tables {','.join(config.tables)}"]
    if config.users:
        parts.append(f"--users {config.users}")
    if "3" in config.tables or "fig4" in config.tables:
        parts.append(f"--rounds {config.rounds}")
    if "4" in config.tables or "5" in config.tables:
        parts.append(f"--sweep-rounds {config.sweep_rounds}")
    if "fig4" in config.tables:
        parts.append(f"--continuous-users {config.continuous_users or 0}")
    parts.append(f"--seed {config.seed}")
    return " ".join(parts)


def write_tables(
    config: ReproduceConfig,
    results: dict[str, dict[str, Any]],
    continuous: dict[str, Any] | None = None,
) -> str:
    """Write ``tables.md`` and ``results.json`` into ``out_dir``; return the markdown."""
    runs = config.out_dir / "runs"
    lines = [
        "# FedPS on the AOL log",
        "",
        f"Command: `{command_line(config)}`.",
        "",
    ]
    any_result = next(iter(results.values()), None)
    if any_result is not None:
        d = any_result["data"]
        lines += [
            f"Data: {d['users']} users ({d['users_dropped']} dropped), {d['documents']:,} "
            f"documents, {d['vocabulary']:,} words; {d['train_queries']:,} train / "
            f"{d['valid_queries']:,} valid / {d['test_queries']:,} test queries.",
            "",
        ]
    if "3" in config.tables:
        ref = results["central"]
        ref_ap = np.load(runs / "central.npy")[:, 0]
        lines += [
            "## Tables 2-3: ranking quality and privacy",
            "",
            "Test metrics at the round of best validation MAP; change relative to the "
            "central model; p: paired t-test of per-query AP against it; KL: mean "
            "KL(real profile || server's profile), nats (larger = less disclosed).",
            "",
            "| model | MAP | MRR | P@1 | vs central | p | KL | best round | paper MAP |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for mode in TABLE3_MODES:
            r = results[mode]
            paired = mode not in ("coverquery", "groupuser", "central")
            p = _paired_p(np.load(runs / f"{mode}.npy")[:, 0], ref_ap) if paired else None
            lines.append(
                f"| {LABELS[mode]} | {r['MAP']:.4f} | {r['MRR']:.4f} | {r['P@1']:.4f} | "
                f"{_pct(r['MAP'], ref['MAP']) if mode != 'central' else '-'} | "
                f"{_p_text(p)} | {r['kl_divergence']:.3f} | "
                f"{r['best_round'] or '-'} | {PAPER_MAP.get(mode, '-')} |"
            )
        lines.append("")
    for table, values, key in (("4", K_VALUES, "K"), ("5", E_VALUES, "E")):
        if table not in config.tables:
            continue
        name = "clients per step K" if key == "K" else "local epochs E"
        lines += [
            f"## Table {table}: FedPSProxy, {name}",
            "",
            f"| {key} | best round | steps to it | wall s | MAP |",
            "|---|---|---|---|---|",
        ]
        for v in values:
            r = results[_sweep_name(v, 1) if key == "K" else _sweep_name(10, v)]
            per_round = r["steps"] / r["rounds"]
            lines.append(
                f"| {v} | {r['best_round']} / {r['rounds']} | {per_round * r['best_round']:.0f} "
                f"| {r['wall_seconds']:.0f} | {r['MAP']:.4f} |"
            )
        lines.append("")
    table6 = {}
    if "6" in config.tables:
        n_here = any_result["data"]["users"] if any_result is not None else None
        lines += [
            "## Table 6: communication time of one round",
            "",
            "T: one model exchange; d: a straggler's delay (model in "
            "`fedrank.simulation.communication`). Paper (118,067 users): flat 236134T + "
            "11551d / 23557d; proxy K=100 47240T / 44878T, K=1000 6902T / 6664T.",
            "",
            "| users | delay ratio | K | FedPSFlat | FedPSProxy |",
            "|---|---|---|---|---|",
        ]
        for n in (PAPER_USERS, n_here):
            if n is None:
                continue
            rows = communication_table(n, config.seed)
            table6[str(n)] = rows
            for row in rows:
                lines.append(
                    f"| {n:,} | {row['delay_ratio']:.0%} | {row['K']} | {row['flat']} | "
                    f"{row['proxy']} |"
                )
        lines.append("")
    if continuous is not None:
        lines += [
            "## Figure 4: continuous updating (weekly stages)",
            "",
            f"{config.continuous_users or 'all'} users; MAP improvement over the original "
            "ranking of the same stage, in %.",
            "",
            "| stage | " + " | ".join(_continuous_modes(continuous)) + " |",
            "|---|" + "---|" * len(_continuous_modes(continuous)),
            *(
                f"| {row['stage']} | "
                + " | ".join(
                    f"{row['modes'][m]['MAP']:.4f} ({row['modes'][m]['MAP_improvement_pct']:+.1f}%)"
                    for m in _continuous_modes(continuous)
                )
                + " |"
                for row in continuous["stages"]
            ),
            "",
            "![Figure 4](figure4.png)",
            "",
        ]
    text = "\n".join(lines)
    (config.out_dir / "tables.md").write_text(text)
    summary = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "runs": results,
        "table6": table6,
        "continuous": continuous,
    }
    write_json(summary, config.out_dir / "results.json")
    return text


def _continuous_modes(continuous: dict[str, Any]) -> list[str]:
    return list(continuous["stages"][0]["modes"])


def reproduce(
    config: ReproduceConfig, progress: Callable[[str, int, int], None] | None = None
) -> str:
    """Run the missing jobs and write the tables (see the module docstring)."""
    start = time.perf_counter()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = run_jobs(config, planned_jobs(config), progress)
    continuous = None
    if "fig4" in config.tables:
        continuous = _continuous(config, progress)
    text = write_tables(config, results, continuous)
    if progress is not None:
        progress(f"done in {time.perf_counter() - start:.0f} s", 1, 1)
    return text


def _continuous(
    config: ReproduceConfig, progress: Callable[[str, int, int], None] | None
) -> dict[str, Any]:
    from fedrank.experiments.fedps_continuous import run_continuous

    path = config.out_dir / "continuous.json"
    if path.is_file():
        return json.loads(path.read_text())
    data = prepare_aol(config.log, users=config.continuous_users, seed=config.seed)
    result = run_continuous(
        data,
        base=FedPSSettings(mode="central", rounds=config.rounds, seed=config.seed),
        seed=config.seed,
        progress=progress,
    )
    result.plot(config.out_dir / "figure4.png")
    out = result.to_json()
    write_json(out, path)
    return out
