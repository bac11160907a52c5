"""The report of ``fedrank fedps reproduce`` (:mod:`fedrank.experiments.fedps.reproduce`):
``tables.md`` and ``results.json`` assembled from the finished runs (:func:`write_tables`),
each table beside the paper's figures, with the tests of every difference
(:func:`fedrank.experiments.stats.seed_user_test`), and Table 6's communication times,
which need no training (:func:`communication_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.aggregators.hierarchy import Topology
from fedrank.core.json_io import write_json
from fedrank.errors import ConfigError
from fedrank.experiments.fedps.client_sampling import flat_schedule, proxy_schedule
from fedrank.experiments.fedps.communication import flat_round_time, proxy_round_time
from fedrank.experiments.fedps.reproduce_grid import (
    ABLATION_ROWS,
    ALL_SEED_ROWS,
    E_VALUES,
    K_VALUES,
    TRAINED_ROWS,
    ReproduceConfig,
    best_valid,
    central_name,
    command_line,
    lr_name,
    planned_jobs,
    row_seeds,
    seeded_name,
    sweep_name,
)
from fedrank.experiments.fedps.settings import RULE_MODES
from fedrank.experiments.stats import seed_user_test
from fedrank.privacy import kl_settings

DELAY_RATIOS: tuple[float, ...] = (0.1, 0.2)

PAPER_USERS = 118_067

#: The paper's Table 3 (AOL, MAP), for the report's side-by-side.
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
    "original": "BM25 order (Original rank)",
    "ascending": "ascending BM25",
    "popularity": "global popularity",
    "user_prior": "user's prior clicks",
    "pclick": "P-Click",
    "rule": "rule: clicked before > BM25 = 0 > popularity",
    "gbdt": "LightGBM, hand features (no text)",
    "knrm": "K-NRM",
    "central": "PEPS-style, central (tuned)",
    "central_compact": "... the first, compact model",
    "central_no_dropout": "... without text dropout",
    "central_frozen": "... global embeddings frozen (upload case 3)",
    "groupuser": "GroupUser",
    "coverquery": "CoverQuery",
    "flat": "FedPSFlat (Algorithm 1)",
    "proxy": "FedPSProxy (Algorithm 1)",
    "flat_eta3": "FedPSFlat, eta_s = 3",
}


def communication_table(
    n_clients: int, seed: int = 0, k_values: Sequence[int] = (100, 1000)
) -> list[dict[str, Any]]:
    """Table 6: one round's communication time, flat vs proxy, per K and delay ratio (the
    paper's topology: 100 clients per proxy, 1,000 proxies per group server). Each response
    is late with probability ``ratio``, drawn per step."""
    rows = []
    for ratio in DELAY_RATIOS:
        rng = np.random.default_rng(seed)
        topology = Topology.build(n_clients, rng)
        for k in k_values:
            flat_steps = flat_schedule(n_clients, k, rng)
            flat = flat_round_time(flat_steps, [rng.random(s.size) < ratio for s in flat_steps])
            steps = proxy_schedule(topology, k, rng)
            late = [rng.random(s.size) < ratio for s in steps]
            proxy = proxy_round_time(steps, late, topology)
            rows.append({"delay_ratio": ratio, "K": k, "flat": str(flat), "proxy": str(proxy)})
    return rows


def _load(runs: Path, name: str) -> dict[str, np.ndarray]:
    with np.load(runs / f"{name}.npz") as f:
        order = np.argsort(f["event_ids"], kind="stable")
        return {k: f[k][order] for k in ("per_query", "event_ids", "users")}


def _stack(runs: Path, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(event_ids, users, (S, Q) AP)`` of seeded runs, aligned on the query events."""
    loaded = [_load(runs, n) for n in names]
    events = loaded[0]["event_ids"]
    for x in loaded[1:]:
        if not np.array_equal(x["event_ids"], events):
            raise ConfigError(f"runs {list(names)} were tested on different queries")
    return events, loaded[0]["users"], np.stack([x["per_query"][:, 0] for x in loaded])


def _p_text(p: float | None) -> str:
    if p is None or not np.isfinite(p):
        return "-"
    return "< 1e-300" if p == 0.0 else f"{p:.2g}"


def _pct(value: float, reference: float) -> str:
    return f"{100.0 * (value - reference) / reference:+.2f}%"


def _seed_stats(results: dict[str, dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in ("MAP", "MRR", "P@1"):
        values = np.array([results[n][m] for n in names])
        out[m] = float(values.mean())
        out[f"{m}_sd"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
        out[f"{m}_per_seed"] = values.tolist()
    out["best_round"] = [results[n]["best_round"] for n in names]
    out["kl"] = {
        key: float(np.mean([results[n]["kl"][key] for n in names]))
        for key in results[names[0]]["kl"]
    }
    out["wall_seconds"] = float(np.mean([results[n]["wall_seconds"] for n in names]))
    return out


def _table3(
    config: ReproduceConfig, results: dict[str, dict[str, Any]], tuned_lr: float
) -> tuple[list[str], dict[str, Any]]:
    runs = config.out_dir / "runs"
    seeds = config.seeds
    rows: dict[str, list[str]] = {m: [m] for m in RULE_MODES}
    central = [central_name(tuned_lr, s) for s in seeds]
    rows["central"] = central
    for mode in (*ABLATION_ROWS, *TRAINED_ROWS, "flat_eta3"):
        rows[mode] = [seeded_name(mode, s) for s in row_seeds(config, mode)]
    if any(n not in results for n in central):
        raise ConfigError(
            f"the central runs {[n for n in central if n not in results]} are not finished; "
            "every Table 3 test compares with them (run without --finished-only)"
        )
    _, users, ref = _stack(runs, central)
    gbdt = rows["gbdt"]
    gbdt_values = _stack(runs, gbdt)[2] if all(n in results for n in gbdt) else None
    summary: dict[str, Any] = {"tuned_learning_rate": tuned_lr, "rows": {}}
    lines = [
        "## Tables 2-3: ranking quality and privacy",
        "",
        f"Training seeds {', '.join(map(str, seeds))} for {', '.join(ALL_SEED_ROWS)}; the "
        f"other trained rows use seed {seeds[0]} only (column 'seeds'; their test then "
        "treats that one run as fixed). MAP, MRR, P@1: mean "
        "(sd over seeds) of the test metrics at the evaluation with the best validation MAP. "
        "p: two-sided test of the MAP difference to the tuned central model, covering "
        "training randomness (paired over seeds) and user sampling (clustered by user), "
        "`fedrank.experiments.stats.seed_user_test`; 95% CI of the difference. 'vs "
        "LightGBM': the same test against the LightGBM on the hand features. KL: mean "
        "KL(real profile || server's profile), nats, larger = less disclosed; 'server' = the "
        "paper's setting (training server separate from the search engine), 'engine+server' "
        "= one party.",
        "",
        "| model | seeds | MAP | MRR | P@1 | vs central | 95% CI | p | vs LightGBM [95% CI], p "
        "| KL server | KL engine+server | best round | paper MAP |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    central_stats = _seed_stats(results, central)
    paper_key = kl_settings.PAPER_SETTING.key()
    current_key = kl_settings.CURRENT_SETTING.key()
    unfinished: dict[str, list[str]] = {}
    for mode in (*RULE_MODES, "central", *ABLATION_ROWS, *TRAINED_ROWS, "flat_eta3"):
        names = rows[mode]
        if any(n not in results for n in names):  # only with finished_only
            unfinished[mode] = [n for n in names if n not in results]
            continue
        st = _seed_stats(results, names)
        test: dict[str, Any] | None = None
        _, _, values = _stack(runs, names)
        values = np.repeat(values, len(seeds), axis=0) if values.shape[0] == 1 else values
        if mode != "central":
            test = seed_user_test(values, ref, users)
        vs_gbdt = None
        if gbdt_values is not None and mode != "gbdt":
            vs_gbdt = seed_user_test(values, gbdt_values, users)
        gbdt_text = (
            "-"
            if vs_gbdt is None
            else f"{vs_gbdt['diff']:+.4f} [{vs_gbdt['ci95_low']:+.4f}, "
            f"{vs_gbdt['ci95_high']:+.4f}], {_p_text(vs_gbdt['p'])}"
        )

        def sd(m: str, st: dict[str, Any] = st, n: int = len(names)) -> str:
            return f" ({st[f'{m}_sd']:.4f})" if n > 1 else ""

        ci = "-" if test is None else f"[{test['ci95_low']:+.4f}, {test['ci95_high']:+.4f}]"
        best = [b for b in st["best_round"] if b]
        lines.append(
            f"| {LABELS[mode]} | {'-' if mode in RULE_MODES else len(names)} | "
            f"{st['MAP']:.4f}{sd('MAP')} | {st['MRR']:.4f}{sd('MRR')} | "
            f"{st['P@1']:.4f}{sd('P@1')} | "
            f"{'-' if mode == 'central' else _pct(st['MAP'], central_stats['MAP'])} | {ci} | "
            f"{_p_text(None if test is None else test['p'])} | {gbdt_text} | "
            f"{st['kl'][paper_key]:.3f} | "
            f"{st['kl'][current_key]:.3f} | "
            f"{', '.join(f'{b:g}' for b in best) if best else '-'} | "
            f"{PAPER_MAP.get(mode, '-')} |"
        )
        summary["rows"][mode] = {
            **st,
            "test_vs_central": test,
            "test_vs_gbdt": vs_gbdt,
            "runs": names,
        }
    lines.append("")
    if unfinished:
        summary["unfinished"] = unfinished
        lines += [
            "Not finished yet (runs missing): "
            + "; ".join(f"{LABELS[m]} ({', '.join(n)})" for m, n in unfinished.items())
            + ".",
            "",
        ]
    tuning = [
        f"Central learning rate (seed {seeds[0]}; the best validation MAP is used for "
        "central, K-NRM, GroupUser and CoverQuery):",
        "",
        "| learning rate | valid MAP | test MAP | best round |",
        "|---|---|---|---|",
    ]
    for lr in config.learning_rates:
        r = results[central_name(lr, seeds[0])]
        mark = " (chosen)" if lr == tuned_lr else ""
        tuning.append(
            f"| {lr_name(lr)}{mark} | {best_valid(r):.4f} | {r['MAP']:.4f} | {r['best_round']:g} |"
        )
    return lines + tuning + [""], summary


def _query_kind_lines(
    config: ReproduceConfig, table3: dict[str, Any], refinding: tuple[np.ndarray, np.ndarray]
) -> tuple[list[str], dict[str, Any]]:
    """Table 3's rows on re-finding queries (the user clicked the relevant document before)
    and on new-document queries, and the central model against the hand-feature GBDT on
    each kind (``seed_user_test``, paired over seeds)."""
    runs = config.out_dir / "runs"
    events, users, central = _stack(runs, table3["rows"]["central"]["runs"])
    order = np.argsort(refinding[0])
    known = refinding[0][order]
    at = np.minimum(np.searchsorted(known, events), max(known.size - 1, 0))
    if known.size == 0 or not np.array_equal(known[at], events):
        raise ConfigError(
            "the test queries of the runs are not those of the prepared data's test lists: "
            "the runs were made on other data; rerun them (delete the runs folder)"
        )
    seen = refinding[1][order][at]
    lines = [
        "## Table 3 by query kind: re-finding vs new documents",
        "",
        f"Re-finding: the user clicked the relevant document before ({seen.mean():.1%} of the "
        f"{seen.size:,} test queries); new: the relevant document is new to the user. MAP, "
        "mean over the row's seeds.",
        "",
        "| model | re-finding MAP | new-document MAP |",
        "|---|---|---|",
    ]
    out: dict[str, Any] = {"refinding_share": float(seen.mean()), "rows": {}}
    stacked: dict[str, np.ndarray] = {}
    for mode, row in table3["rows"].items():
        row_events, _, values = _stack(runs, row["runs"])
        if not np.array_equal(row_events, events):
            raise ConfigError(f"run {row['runs'][0]} was tested on other queries than central")
        stacked[mode] = values
        by_kind = {
            kind: float(np.nanmean(values[:, mask].mean(axis=0)))
            for kind, mask in (("refinding", seen), ("new", ~seen))
        }
        out["rows"][mode] = by_kind
        lines.append(f"| {LABELS[mode]} | {by_kind['refinding']:.4f} | {by_kind['new']:.4f} |")
    lines.append("")
    if "gbdt" in stacked and stacked["gbdt"].shape == central.shape:
        for kind, mask in (("re-finding", seen), ("new-document", ~seen)):
            test = seed_user_test(central[:, mask], stacked["gbdt"][:, mask], users[mask])
            out[f"central_vs_gbdt_{kind}"] = test
            lines.append(
                f"Central minus GBDT on {kind} queries: {test['diff']:+.4f} "
                f"[{test['ci95_low']:+.4f}, {test['ci95_high']:+.4f}], p = {_p_text(test['p'])}."
            )
        lines.append("")
    return lines, out


def _kl_lines(summary: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Table 2's methods under every KL setting: values, order, reversals vs the paper."""
    methods = ("groupuser", "coverquery", "flat", "proxy")
    if any(m not in summary["rows"] for m in methods):
        return [
            "Table 2 in detail: waits for GroupUser, CoverQuery, FedPSFlat, FedPSProxy.",
            "",
        ], {}
    grids = {m: summary["rows"][m]["kl"] for m in methods}
    rows = kl_settings.order_sensitivity(grids)
    paper = kl_settings.PAPER_TABLE2_AOL
    lines = [
        "## Table 2 in detail: the KL measure under each modelling choice",
        "",
        f"Paper (AOL): GroupUser {paper['groupuser']}, CoverQuery {paper['coverquery']}, "
        f"FedPSFlat {paper['flat']}, FedPSProxy {paper['proxy']}. Each row: a setting "
        "(observer | smoothing | weighting of revealed words | negatives' words included), "
        "the mean KL of each method (mean over seeds), the order, and the pairs whose order "
        "is the reverse of the paper's.",
        "",
        "| setting | GroupUser | CoverQuery | FedPSFlat | FedPSProxy | order | reversed vs paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        key = row["setting"]
        reversed_pairs = ", ".join(f"{a} < {b}" for a, b in row["reversals"]) or "none"
        lines.append(
            f"| {key} | "
            + " | ".join(f"{grids[m][key]:.3f}" for m in methods)
            + f" | {' > '.join(row['order'])} | {reversed_pairs} |"
        )
    return lines + [""], {"grids": grids, "order_sensitivity": rows}


def _hierarchy_lines(
    config: ReproduceConfig, results: dict[str, dict[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    runs = config.out_dir / "runs"
    lines = [
        "## Hierarchy: FedPSFlat vs FedPSProxy with K = 100",
        "",
        "Ten proxies of ten clients per step under two group servers; the share of responses "
        "later than T_max sets T_max. p: FedPSProxy minus FedPSFlat, `seed_user_test`.",
        "",
        "| late responses | FedPSFlat MAP | FedPSProxy MAP | proxy - flat | 95% CI | p | "
        "flat: updates dropped | flat: share of training queries dropped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    out: dict[str, Any] = {}
    for ratio in config.hierarchy_late:
        tag = f"late{round(ratio * 100)}"
        seeds = config.seeds[: config.hierarchy_seeds]
        flat = [seeded_name(f"K100_flat_{tag}", s) for s in seeds]
        proxy = [seeded_name(f"K100_proxy_{tag}", s) for s in seeds]
        _, users, a = _stack(runs, proxy)
        _, _, b = _stack(runs, flat)
        test = seed_user_test(a, b, users)
        fs, ps = _seed_stats(results, flat), _seed_stats(results, proxy)
        dropped = np.mean([results[n]["communication"]["late_share"] for n in flat])
        weight = np.mean([results[n]["communication"]["late_weight_share"] for n in flat])
        lines.append(
            f"| {ratio:.0%} | {fs['MAP']:.4f} ({fs['MAP_sd']:.4f}) | {ps['MAP']:.4f} "
            f"({ps['MAP_sd']:.4f}) | {test['diff']:+.4f} | [{test['ci95_low']:+.4f}, "
            f"{test['ci95_high']:+.4f}] | {_p_text(test['p'])} | {dropped:.1%} | {weight:.1%} |"
        )
        out[tag] = {"flat": fs, "proxy": ps, "test": test}
    return lines + [""], out


def _finished(
    lines: list[str], what: str, names: list[str], results: dict[str, dict[str, Any]]
) -> bool:
    """Whether every run of ``names`` is finished; if not (only with ``finished_only``),
    say so in ``lines``."""
    missing = [n for n in names if n not in results]
    if missing:
        lines += [f"{what}: not finished yet (runs missing: {', '.join(missing)}).", ""]
    return not missing


def write_tables(
    config: ReproduceConfig,
    results: dict[str, dict[str, Any]],
    tuned_lr: float | None,
    diagnostics: dict[str, Any] | None = None,
    continuous: dict[str, Any] | None = None,
    refinding: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """Write ``tables.md`` and ``results.json`` into ``out_dir``; return the markdown.
    ``refinding``: :func:`~fedrank.experiments.fedps.lists.refinding_queries` of the test
    split, for Table 3's breakdown by query kind."""
    lines = ["# FedPS on the AOL log", "", f"Command: `{command_line(config)}`.", ""]
    summary: dict[str, Any] = {}
    any_result = next(iter(results.values()), None)
    if any_result is not None:
        d = any_result["data"]
        lines += [
            f"Data (data seed {config.data_seed}): {d['users']} users ({d['users_dropped']} "
            f"dropped), {d['documents']:,} documents indexed ({d['past_documents']:,} clicked "
            f"in the past), {d['vocabulary']:,} words; {d['train_queries']:,} train / "
            f"{d['valid_queries']:,} valid / {d['test_queries']:,} test queries with a list.",
            "",
        ]
    versions = _code_versions({**results, **({"continuous": continuous} if continuous else {})})
    lines += _code_lines(versions)
    summary["code_versions"] = versions
    if diagnostics is not None:
        lines += _diagnostic_lines(diagnostics)
        summary["lists"] = diagnostics
    if "3" in config.tables:
        assert tuned_lr is not None
        table, summary["table3"] = _table3(config, results, tuned_lr)
        kl_lines, summary["kl"] = _kl_lines(summary["table3"])
        lines += table
        if refinding is not None:
            kinds, summary["query_kinds"] = _query_kind_lines(config, summary["table3"], refinding)
            lines += kinds
        lines += kl_lines
    planned = planned_jobs(config, tuned_lr)
    hierarchy = [n for n in planned if n.startswith("K100_")]
    if "hierarchy" in config.tables and _finished(lines, "The hierarchy", hierarchy, results):
        table, summary["hierarchy"] = _hierarchy_lines(config, results)
        lines += table
    for table_id, values, key in (("4", K_VALUES, "K"), ("5", E_VALUES, "E")):
        names = [sweep_name(v, 1) if key == "K" else sweep_name(10, v) for v in values]
        if table_id not in config.tables or not _finished(
            lines, f"Table {table_id}", names, results
        ):
            continue
        name = "clients per step K" if key == "K" else "local epochs E"
        lines += [
            f"## Table {table_id}: FedPSProxy, {name} ({config.sweep_users or 'all'} users, "
            f"seed {config.seeds[0]})",
            "",
            f"| {key} | best round | steps to it | wall s | MAP |",
            "|---|---|---|---|---|",
        ]
        for v in values:
            r = results[sweep_name(v, 1) if key == "K" else sweep_name(10, v)]
            lines.append(
                f"| {v} | {r['best_round']:g} | {r['steps_to_best']} | "
                f"{r['wall_seconds']:.0f} | {r['MAP']:.4f} |"
            )
        lines.append("")
    if "6" in config.tables:
        n_here = any_result["data"]["users"] if any_result is not None else None
        lines += [
            "## Table 6: communication time of one round",
            "",
            "T: one model exchange; d: a late response's delay (model in "
            "`fedrank.experiments.fedps.communication`). Paper (118,067 users): flat 236134T + "
            "11551d / 23557d; proxy K=100 47240T / 44878T, K=1000 6902T / 6664T.",
            "",
            "| users | delay ratio | K | FedPSFlat | FedPSProxy |",
            "|---|---|---|---|---|",
        ]
        table6 = {}
        for n in (PAPER_USERS, n_here):
            if n is None:
                continue
            rows = communication_table(n, config.data_seed)
            table6[str(n)] = rows
            lines += [
                f"| {n:,} | {row['delay_ratio']:.0%} | {row['K']} | {row['flat']} | "
                f"{row['proxy']} |"
                for row in rows
            ]
        lines.append("")
        summary["table6"] = table6
    if "fig4" in config.tables and continuous is None:
        lines += ["Figure 4: not finished yet (no continuous.json).", ""]
    if continuous is not None:
        modes = list(continuous["stages"][0]["modes"])
        lines += [
            "## Figure 4: continuous updating (weekly stages)",
            "",
            f"{config.continuous_users or 'all'} users, seed {config.seeds[0]}; every stage's "
            "data fitted on that stage's past only; MAP (improvement over the original "
            "ranking of the same stage).",
            "",
            "| stage | " + " | ".join(modes) + " |",
            "|---|" + "---|" * len(modes),
            *(
                f"| {row['stage']} | "
                + " | ".join(
                    f"{row['modes'][m]['MAP']:.4f} ({row['modes'][m]['MAP_improvement_pct']:+.1f}%)"
                    for m in modes
                )
                + " |"
                for row in continuous["stages"]
            ),
            "",
            "![Figure 4](figure4.png)",
            "",
        ]
        summary["continuous"] = continuous
    text = "\n".join(lines)
    (config.out_dir / "tables.md").write_text(text)
    write_json(
        {
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
            "summary": summary,
            "runs": results,
        },
        config.out_dir / "results.json",
    )
    return text


def _code_versions(results: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """The runs of each code version (:func:`~fedrank.core.provenance.code_version` recorded
    in a run's ``code``; ``"not recorded"`` for runs written before it was), the version
    with the most runs first."""
    versions: dict[str, list[str]] = {}
    for name, doc in results.items():
        versions.setdefault(str(doc.get("code", "not recorded")), []).append(name)
    return dict(sorted(versions.items(), key=lambda item: -len(item[1])))


def _code_lines(versions: dict[str, list[str]]) -> list[str]:
    """Which code the runs come from; when more than one version, every run of the
    minority versions is named."""
    if not versions:
        return []
    if len(versions) == 1:
        ((version, names),) = versions.items()
        return [f"Code version: `{version}` (all {len(names)} runs).", ""]
    counts = "; ".join(f"`{v}`: {len(n)} runs" for v, n in versions.items())
    named = "; ".join(f"`{v}`: {', '.join(sorted(n))}" for v, n in list(versions.items())[1:])
    return [
        f"**The runs come from {len(versions)} code versions** (the tables may mix them): "
        f"{counts}. Runs not from the first: {named}.",
        "",
    ]


def _diagnostic_lines(diagnostics: dict[str, Any]) -> list[str]:
    lines = [
        "## The candidate lists: relevant vs irrelevant candidates",
        "",
        "Share (or mean) among relevant / irrelevant candidates. no match: no query word in "
        "the engine's text (BM25 = 0) or in the model's text; popular: clicked by anyone in "
        "the background period; user clicked: the user clicked it before.",
        "",
        "| split | queries | listed / clicked | no match (engine) | no match (model) | popular "
        "| log popularity | user clicked | BM25 rank |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for split, d in diagnostics.items():
        cells = [
            f"{d[k]['relevant']:.3f} / {d[k]['irrelevant']:.3f}"
            for k in (
                "no_match_engine",
                "no_match_model",
                "popular",
                "log_popularity",
                "user_clicked",
            )
        ]
        rank = f"{d['bm25_rank']['relevant']:.1f} / {d['bm25_rank']['irrelevant']:.1f}"
        lines.append(
            f"| {split} | {d['queries']:,} | {d['listed_share']:.1%} | "
            + " | ".join(cells)
            + f" | {rank} |"
        )
    return lines + [""]
