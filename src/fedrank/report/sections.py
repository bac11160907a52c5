"""The sections of each kind of run's report: ``SECTIONS[kind](data) -> (title, blocks)``.

Every figure drawn is also printed as a table of its numbers, so a reader (and a test) can
read the values; paper figures appear only where the project records them
(``PAPER_EVAL`` of :mod:`fedrank.experiments.frecency.study`, ``PAPER_MAP`` of
:mod:`fedrank.experiments.fedps.reproduce_tables`).
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

import numpy as np

from fedrank.report.figures import curves, interval_dots, mean_ci95
from fedrank.report.page import fmt, para, pvalue, table

Blocks = list[tuple[str, str]]
BRANCH_ORDER = ("treatment", "control", "control-no-decay")
#: At most this many rows in a per-iteration table (longer runs show every k-th).
MAX_ROWS = 50


def _config_table(config: dict[str, Any]) -> str:
    rows = [(escape(k), escape(str(v))) for k, v in config.items() if not isinstance(v, dict)]
    return table(["setting", "value"], rows)


def _ci_text(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"


def _weights_block(start: dict, final: dict, hidden: dict | None = None) -> str:
    rows = []
    for name, value in final.items():
        if start and abs(value - start.get(name, value)) <= 1e-9:
            continue
        rows.append((escape(name), start.get(name), (hidden or {}).get(name), value))
    if not rows:
        return para("No weight changed.")
    header = ["weight", "start", "hidden (users' preference)", "final"]
    return table(header if hidden else [h for h in header if not h.startswith("hidden")],
                 [r if hidden else (r[0], r[1], r[3]) for r in rows])  # fmt: skip


def demo(d: dict[str, Any]) -> tuple[str, Blocks]:
    """``fedrank demo``'s results.json: the paired effect first, then the branches."""
    cfg, paired = d["config"], d.get("paired") or {}
    blocks: Blocks = []
    wall = d.get("wall_seconds")
    blocks.append((
        "",
        para(
            f"{cfg['users']} simulated users as HTTP clients of a fedrank server on loopback, "
            f"{cfg['iterations']} iterations, seed {cfg['seed']}; {d['requests']:,} requests; "
            f"the study took {d['seconds']:.1f} s"
            + (f", the whole command {wall:.1f} s" if wall is not None else "")
            + (f". Command: {d['command']}" if d.get("command") else "")
            + "."
        ),
    ))  # fmt: skip
    if paired.get("diff_ci95"):
        low, high = paired["diff_ci95"]
        verdict = "shows" if (paired["t_pvalue"] or 1.0) < 0.05 else "does not show"
        blocks.append((
            "The result: characters typed, trained vs control weights",
            para(
                f"Design: {paired['design']}. n = {paired['n_users']} users. Trained weights "
                f"{paired['trained_mean']:.4f} characters per search, control weights (the "
                f"trivial baseline: no training) {paired['control_mean']:.4f}; difference "
                f"{paired['diff']:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}]; paired t-test "
                f"p = {paired['t_pvalue']:.3g}, Wilcoxon signed-rank p = "
                f"{paired['wilcoxon_pvalue']:.3g}. The run {verdict} an effect at the 5% level.",
                "finding" if verdict == "shows" else "caution",
            )
            + interval_dots(
                ["trained - control (paired)"], [paired["diff"]], [(low, high)],
                title="Effect of training on characters typed (same users, same searches)",
                xlabel="difference in mean characters typed per search (negative: fewer)",
                notes=[f"n = {paired['n_users']}, p = {paired['t_pvalue']:.2g}"], zero_line=True,
            )
            + table(
                ["weights", "users", "mean characters typed"],
                [("trained", paired["n_users"], paired["trained_mean"]),
                 ("control (baseline)", paired["n_users"], paired["control_mean"]),
                 ("difference (95% CI)", paired["n_users"],
                  f"{paired['diff']:+.4f} {_ci_text(paired['diff_ci95'])}")],
            ),
        ))  # fmt: skip
    loss = d["loss_per_iteration"]
    blocks.append((
        "Loss reported per iteration (server summary)",
        curves({b: loss[b] for b in BRANCH_ORDER if b in loss}, title="Mean reported loss",
               xlabel="iteration", ylabel="mean reported loss",
               muted=("control", "control-no-decay"))
        + table(["iteration", *[b for b in BRANCH_ORDER if b in loss]],
                [(i + 1, *[loss[b][i] for b in BRANCH_ORDER if b in loss])
                 for i in range(len(loss.get("treatment", [])))]),
    ))  # fmt: skip
    ev = d["eval"]
    rows = [(b, ev[b]["users"], ev[b]["chars_typed_mean"], ev[b]["selected_rank_mean"],
             ev[b]["loss_mean"]) for b in BRANCH_ORDER if b in ev]  # fmt: skip
    tests = [(t["metric"], t["a"], t["b"], t.get("mean_a"), t.get("mean_b"), pvalue(t["pvalue"]))
             for t in d.get("tests", [])]  # fmt: skip
    blocks.append((
        "Between branches (independent users, as the paper compared them)",
        table(["branch", "users", "chars typed", "selected rank", "loss"], rows)
        + para(f"Mann-Whitney U, two-sided, Bonferroni alpha {fmt(d.get('bonferroni_alpha'))}; "
               "the branches hold different users, so their differences carry the users' "
               "variance the paired comparison removes.")
        + table(["metric", "a", "b", "mean a", "mean b", "p"], tests),
    ))  # fmt: skip
    start = (d.get("served_weights_per_iteration") or [{}])[0]
    blocks.append((
        "Learned weights (changed ones)",
        _weights_block(start, d.get("final_weights", {}), d.get("hidden_weights")),
    ))  # fmt: skip
    return "fedrank demo: federated frecency through the real service", blocks


def frecency_simulate(d: dict[str, Any]) -> tuple[str, Blocks]:
    """``fedrank frecency simulate --json``: loss curves, evaluation beside the paper's
    Figure 5, the tests with their intervals."""
    cfg = d["config"]
    loss = d["branch_loss_per_iteration"]
    ev, paper = d["eval"], d.get("paper_eval", {})
    names = [b for b in BRANCH_ORDER if b in ev]
    blocks: Blocks = [("", para(
        f"Model {cfg.get('model')}, {cfg.get('iterations')} iterations, "
        f"{sum(ev[b]['n_users'] for b in names)} users with searches, seed {cfg.get('seed')}."
    ))]  # fmt: skip
    blocks.append((
        "Loss per iteration",
        curves({b: loss[b] for b in BRANCH_ORDER if b in loss}, title="Mean loss per branch",
               xlabel="iteration", ylabel="mean loss", muted=("control", "control-no-decay"))
        + table(["iteration", *loss], [(i + 1, *[loss[b][i] for b in loss])
                                       for i in range(len(next(iter(loss.values()))))]),
    ))  # fmt: skip
    chars = [t for t in d.get("all_tests", []) if t["metric"] == "chars_typed"]
    blocks.append((
        "Evaluation phase: characters typed, beside the paper (Figure 5)",
        interval_dots(
            names, [ev[b]["chars_typed_mean"] for b in names], [None] * len(names),
            title="Mean characters typed per search", xlabel="characters typed",
            notes=[f"n = {ev[b]['n_users']} users" for b in names],
            paper=[paper.get(b, {}).get("chars_typed_mean") for b in names],
        )
        + table(["branch", "users", "searches", "chars typed", "paper", "selected rank", "paper"],
                [(b, ev[b]["n_users"], ev[b]["n"], ev[b]["chars_typed_mean"],
                  paper.get(b, {}).get("chars_typed_mean"), ev[b]["selected_rank_mean"],
                  paper.get(b, {}).get("selected_rank_mean")) for b in names]),
    ))  # fmt: skip
    if chars:
        blocks.append((
            "Differences between branches, 95% CI",
            interval_dots(
                [f"{t['a']} - {t['b']}" for t in chars], [t["diff"] for t in chars],
                [tuple(t["diff_ci95"]) for t in chars],
                title="Difference of per-user mean characters typed", xlabel="difference",
                notes=[f"n = {t['n_users_a']}/{t['n_users_b']}, p = {t['pvalue']:.2g}"
                       for t in chars], zero_line=True,
            ),
        ))  # fmt: skip
    tests = [(t["metric"], t["a"], t["b"], f"{t['n_users_a']} / {t['n_users_b']}", t["diff"],
              _ci_text(t["diff_ci95"]), pvalue(t["pvalue"]), t["significant"])
             for t in d.get("all_tests", [])]  # fmt: skip
    blocks.append((
        "Tests (Mann-Whitney U on per-user means)",
        para(f"Bonferroni alpha {fmt(d.get('bonferroni_alpha'))}.")
        + table(["metric", "a", "b", "users a / b", "diff", "95% CI", "p", "significant"], tests),
    ))  # fmt: skip
    start = (d.get("weights_per_iteration") or [{}])[0]
    blocks.append(("Learned weights (changed ones)", _weights_block(start, d["final_weights"])))
    return "Federated frecency study (simulation)", blocks


def foltr_train(d: dict[str, Any]) -> tuple[str, Blocks]:
    """``fedrank foltr train --json``: the batch MaxRR curve and the final figures."""
    cfg = d["config"]
    data = d.get("data", {})
    blocks: Blocks = [("", para(
        f"{cfg.get('algorithm')} on {data.get('name')}, {cfg.get('click_model')} users, "
        f"{cfg.get('ranker')} ranker, {d['iterations']} iterations ({d['interactions']:,} "
        f"interactions), seed {cfg.get('seed')}, privacy: {d['privacy'].get('mechanism')}."
    ))]  # fmt: skip
    maxrr = d["batch_maxrr"]
    stride = max(1, -(-len(maxrr) // MAX_ROWS))
    shown = sorted({*range(0, len(maxrr), stride), len(maxrr) - 1}) if maxrr else []
    blocks.append((
        "Batch MaxRR per iteration",
        curves({"batch MaxRR": maxrr}, title="Mean MaxRR of each iteration's batch",
               xlabel="iteration", ylabel="batch MaxRR")
        + (para(f"Every {stride}th iteration and the last:", "meta") if stride > 1 else "")
        + table(["iteration", "batch MaxRR"], [(i + 1, maxrr[i]) for i in shown]),
    ))  # fmt: skip
    blocks.append((
        "Final model",
        table(["split", "expected MaxRR", "nDCG@10"],
              [(s, d["expected_maxrr"][s], d["ndcg10"][s]) for s in d["expected_maxrr"]])
        + para(f"epsilon: {fmt(d.get('epsilon'))}"),
    ))  # fmt: skip
    blocks.append(("Settings", _config_table(cfg)))
    return "FOLtR training run", blocks


def _per_seed_bars(d: dict[str, Any], paper: float | None) -> str:
    names = [m for m in ("MAP", "MRR", "P@1") if f"{m}_per_seed" in d]
    means, cis, notes = [], [], []
    for m in names:
        mean, half = mean_ci95(np.asarray([d[f"{m}_per_seed"]], dtype=float).T)
        means.append(float(mean[0]))
        n = len(d[f"{m}_per_seed"])
        cis.append((float(mean[0] - half[0]), float(mean[0] + half[0])) if n > 1 else None)
        notes.append(f"{n} seed{'s' if n > 1 else ''}")
    seeds = len(d.get("MAP_per_seed", []))
    title = f"Test metrics (mean over {seeds} seeds, 95% CI)" if seeds > 1 else "Test metrics"
    return interval_dots(names, means, cis, title=title,
                         xlabel="value", notes=notes,
                         paper=[paper if m == "MAP" else None for m in names])  # fmt: skip


def fedps_run(d: dict[str, Any]) -> tuple[str, Blocks]:
    """``fedrank fedps run --json``: test metrics over seeds beside the paper's MAP, and the
    validation curves of every seed."""
    from fedrank.experiments.fedps.reproduce_tables import PAPER_MAP

    mode = d["mode"]
    paper = PAPER_MAP.get(mode)
    runs = d["runs"]
    data = runs[0].get("data", {}) if runs else {}
    blocks: Blocks = [("", para(
        f"Mode {mode}, {data.get('users')} users, {data.get('test_queries')} test queries, "
        f"seeds {d.get('seeds')}, data seed {d.get('data_seed')}."
    ))]  # fmt: skip
    blocks.append((
        "Test metrics",
        _per_seed_bars(d, paper)
        + table(["metric", "mean", "sd", "per seed", "paper (Table 3)"],
                [(m, d[f"{m}_mean"], d[f"{m}_sd"], ", ".join(f"{v:.4f}" for v in
                  d[f"{m}_per_seed"]), paper if m == "MAP" else None)
                 for m in ("MAP", "MRR", "P@1") if f"{m}_mean" in d])
        + para(f"KL divergence (server's profile): {fmt(d.get('kl_divergence'))}"),
    ))  # fmt: skip
    curve_rows = [[p.get("valid_MAP") for p in r.get("curve", [])] for r in runs]
    if curve_rows and all(curve_rows) and len({len(c) for c in curve_rows}) == 1:
        blocks.append((
            "Validation MAP per evaluation",
            curves({"valid MAP": curve_rows if len(curve_rows) > 1 else curve_rows[0]},
                   title="Validation MAP during training", xlabel="evaluation",
                   ylabel="validation MAP"),
        ))  # fmt: skip
    return f"FedPS run ({mode})", blocks


def foltr_reproduce(d: dict[str, Any]) -> tuple[str, Blocks]:
    """``fedrank foltr reproduce``'s results.json: the exploration curves (Figures 1-3) and
    Table 3's rows as means over folds with 95% intervals."""
    blocks: Blocks = [("", para(f"Dataset {d['dataset']}."))]
    for figure, panels in d.get("exploration", {}).items():
        for model, series in panels.items():
            blocks.append((
                f"{figure}: {model} users",
                curves(series, title=f"{figure}, {model}", xlabel="iteration",
                       ylabel="batch MaxRR"),
            ))  # fmt: skip
    per_fold = d.get("per_fold", {})
    if per_fold:
        rows, labels, means, cis, notes = [], [], [], [], []
        for row, models in per_fold.items():
            for model, splits in models.items():
                test = np.asarray(splits.get("test", []), dtype=float)
                if not test.size:
                    continue
                mean, half = mean_ci95(test[:, None])
                labels.append(f"{row}, {model}")
                means.append(float(mean[0]))
                cis.append((float(mean[0] - half[0]), float(mean[0] + half[0])))
                notes.append(f"{test.size} folds")
                rows.append((escape(row), escape(model), test.size, float(mean[0]),
                             _ci_text(list(cis[-1]))))  # fmt: skip
        blocks.append((
            "Table 3: test expected MaxRR, mean over folds",
            interval_dots(labels, means, cis, title="Test expected MaxRR (95% CI over folds)",
                          xlabel="expected MaxRR", notes=notes)
            + table(["row", "click model", "folds", "mean", "95% CI"], rows),
        ))  # fmt: skip
    blocks.append(("Settings", _config_table(d.get("config", {}))))
    return f"FOLtR reproduction ({d['dataset']})", blocks


def fedps_reproduce(d: dict[str, Any]) -> tuple[str, Blocks]:
    """``fedrank fedps reproduce``'s results.json: every table row with its MAP beside the
    paper's and its test against the central model."""
    from fedrank.experiments.fedps.reproduce_tables import LABELS, PAPER_MAP

    blocks: Blocks = []
    for name, section in d.get("summary", {}).items():
        rows = section.get("rows") if isinstance(section, dict) else None
        if not isinstance(rows, dict) or not all(isinstance(r, dict) and "MAP" in r
                                                 for r in rows.values()):  # fmt: skip
            continue
        modes = list(rows)
        table_rows = []
        for m in modes:
            t = rows[m].get("test_vs_central") or {}
            ci = [t["ci95_low"], t["ci95_high"]] if "ci95_low" in t else None
            table_rows.append((escape(LABELS.get(m, m)), rows[m]["MAP"], PAPER_MAP.get(m),
                               t.get("diff"), _ci_text(ci), pvalue(t.get("p"))))  # fmt: skip
        blocks.append((
            f"{name}: MAP beside the paper's",
            interval_dots([LABELS.get(m, m) for m in modes], [rows[m]["MAP"] for m in modes],
                          [None] * len(modes), title="Test MAP", xlabel="MAP",
                          paper=[PAPER_MAP.get(m) for m in modes])
            + table(["model", "MAP", "paper MAP", "vs central", "95% CI", "p"], table_rows),
        ))  # fmt: skip
    if not blocks:
        blocks.append(("", para("The summary holds no finished table rows yet.", "caution")))
    blocks.append(("Settings", _config_table(d.get("config", {}))))
    return "FedPS reproduction", blocks


SECTIONS: dict[str, Callable[[dict[str, Any]], tuple[str, Blocks]]] = {
    "demo": demo,
    "frecency-simulate": frecency_simulate,
    "foltr-train": foltr_train,
    "foltr-reproduce": foltr_reproduce,
    "fedps-run": fedps_run,
    "fedps-reproduce": fedps_reproduce,
}
