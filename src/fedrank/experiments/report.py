"""A short markdown report of a frecency study run (what `fedrank demo` writes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrank.experiments.frecency_presets import hidden_weights
from fedrank.experiments.frecency_study import StudyResult
from fedrank.simulation.frecency_world import page_scorer


def _mean(values: list[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def loss_reduction(result: StudyResult, window: int = 5) -> float:
    """Relative drop of the treatment loss: 1 - mean(last ``window``) / mean(first ``window``)."""
    losses = result.loss_per_iteration
    first, last = _mean(losses[:window]), _mean(losses[-window:])
    return 1.0 - last / first if first > 0 else float("nan")


def _pvalue(p: float) -> str:
    """A p-value for people: scipy's normal approximation underflows to 0 below ~1e-308."""
    return f"{p:.3g}" if p > 0 else "< 1e-300"


def write_report(result: StudyResult, path: Path, command: str, plots: list[Path]) -> Path:
    """Write the markdown report of ``result`` to ``path``."""
    cfg = result.config
    losses = result.loss_per_iteration
    reports = [float(r) for r in result.reports_per_iteration]
    lines = [
        "# Federated frecency study (simulation)",
        "",
        f"Produced by `{command}`.",
        "",
        f"Model `{cfg.model}` frecency, preset `{cfg.preset}`, {cfg.n_users} users (treatment "
        f"/ control / control-no-decay = 60/20/20), {cfg.iterations} iterations, {cfg.message} "
        f"messages, {cfg.optimizer}, seed {cfg.seed}.",
        "",
        "## Optimization",
        "",
        f"- treatment loss, mean of the first 5 iterations: {_mean(losses[:5]):.4f}",
        f"- treatment loss, mean of the last 5 iterations: {_mean(losses[-5:]):.4f}",
        f"- relative reduction: {100 * loss_reduction(result):.1f}%",
        f"- safeguards held in every iteration: {result.constraints_held}",
        f"- reports per iteration (mean): {_mean(reports):.0f}",
        "",
        "## Evaluation phase",
        "",
        "| branch | searches | mean characters typed | mean rank selected | mean loss |",
        "|---|---|---|---|---|",
    ]
    for name, ev in result.eval.items():
        lines.append(
            f"| {name} | {ev['n']} | {ev['chars_typed_mean']:.4f} | "
            f"{ev['selected_rank_mean']:.4f} | {ev['loss_mean']:.4f} |"
        )
    if result.oracle:
        ev = result.oracle
        lines.append(
            f"| *(treatment users, hidden weights: the best possible)* | {ev['n']} | "
            f"{ev['chars_typed_mean']:.4f} | {ev['selected_rank_mean']:.4f} | |"
        )
    lines += [
        "",
        f"Two-sided Mann-Whitney U tests, Bonferroni level alpha = 0.05/{len(result.all_tests)}"
        f" = {result.bonferroni_alpha:.5f}:",
        "",
        "| metric | a | b | mean a | mean b | p-value | significant |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result.all_tests:
        lines.append(
            f"| {row['metric']} | {row['a']} | {row['b']} | {row['mean_a']:.3f} | "
            f"{row['mean_b']:.3f} | {_pvalue(row['pvalue'])} | {row['significant']} |"
        )
    lines += [
        "",
        "## Learned weights (changed ones)",
        "",
        "| weight | start (Firefox default) | hidden (users' true preference) | final |",
        "|---|---|---|---|",
    ]
    start = result.weights_per_iteration[0] if result.weights_per_iteration else {}
    scorer = page_scorer(cfg.model)
    hidden = scorer.to_dict(hidden_weights(cfg.preset, cfg.model))
    for name in scorer.names:
        if start and abs(result.final_weights[name] - start[name]) > 1e-9:
            lines.append(
                f"| {name} | {start[name]:g} | {hidden[name]:g} | "
                f"{result.final_weights[name]:.2f} |"
            )
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    path.write_text("\n".join(lines))
    return path
