"""A short markdown report of a frecency study run (what `fedrank demo` writes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.experiments.frecency.study import StudyResult
from fedrank.models.frecency.scorer import page_scorer


def _mean(values: list[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def comparison_window(iterations: int, window: int = 5) -> int:
    """How many iterations at each end :func:`loss_reduction` compares: ``window``, or fewer
    so that the first and the last windows never share an iteration (0: fewer than two
    iterations, nothing to compare)."""
    return min(window, iterations // 2)


def loss_reduction(result: StudyResult, window: int = 5) -> float:
    """Relative drop of the treatment loss: 1 - mean(last k) / mean(first k), with k =
    :func:`comparison_window` (at most ``window``, the two windows disjoint); NaN when there
    are fewer than two iterations."""
    losses = result.loss_per_iteration
    k = comparison_window(len(losses), window)
    if k == 0:
        return float("nan")
    first, last = _mean(losses[:k]), _mean(losses[-k:])
    return 1.0 - last / first if first > 0 else float("nan")


def _pvalue(p: float) -> str:
    """A p-value for people: scipy's normal approximation underflows to 0 below ~1e-308."""
    return f"{p:.3g}" if p > 0 else "< 1e-300"


#: The AOL log's shapes (the whole shared sample, ``fedrank.data.browsing.browsing_shapes``
#: over every click; ``docs/frecency.md``).
SHAPE_LABELS = {
    "clicks_per_user": "clicks per user",
    "hosts_per_user": "hosts per user",
    "once_share": "(user, host) pairs clicked once",
    "revisit_rate": "clicks that revisit a host",
    "top10_share": "clicks on the user's 10 most clicked hosts",
    "gap_median_minutes": "median gap between clicks (minutes)",
    "gap_30min_share": "gaps under 30 minutes",
    "revisit_within_day": "revisits within a day of the last click on the host",
}


def write_report(result: StudyResult, path: Path, command: str, plots: list[Path]) -> Path:
    """Write the markdown report of ``result`` to ``path``."""
    from fedrank.experiments.frecency.study import PAPER_EVAL

    cfg = result.config.resolved()
    losses = result.loss_per_iteration
    reports = [float(r) for r in result.reports_per_iteration]
    paper_losses = result.paper_loss_per_iteration.get("treatment", [])
    k = comparison_window(len(losses))
    if k:
        loss_lines = [
            f"- treatment loss ({cfg.score_scale}, margin {cfg.delta:g}), mean of the first "
            f"{k} iterations: {_mean(losses[:k]):.4f}; of the last {k}: "
            f"{_mean(losses[-k:]):.4f} ({100 * loss_reduction(result):.1f}% lower)",
            f"- the paper's loss (raw frecency, margin 0), treatment: first {k} "
            f"{_mean(paper_losses[:k]):.1f}, last {k} {_mean(paper_losses[-k:]):.1f}",
        ]
    else:
        loss_lines = [f"- one iteration: treatment loss {_mean(losses):.4f} (nothing to compare)"]
    lines = [
        "# Federated frecency study (simulation)",
        "",
        f"Produced by `{command}`.",
        "",
        f"Model `{cfg.model}` frecency, world `{cfg.world}`, setting `{cfg.setting}`, "
        f"{'preset `' + cfg.preset + '`, ' if cfg.world == 'synthetic' else ''}"
        f"{sum(e['n_users'] for e in result.eval.values())} users with history searches "
        f"(treatment / control / control-no-decay = 60/20/20), {cfg.iterations} iterations, "
        f"{cfg.message} messages, {cfg.optimizer}, seed {cfg.seed}; typing model "
        f"blind_chars {cfg.blind_chars:g}, scan_continue {cfg.scan_continue:g}.",
        "",
        "## The world",
        "",
        "| shape (history before the study) | this world |",
        "|---|---|",
        *(
            f"| {label} | {result.world_stats[key]:.3f} |"
            for key, label in SHAPE_LABELS.items()
            if key in result.world_stats
        ),
        "",
        "## Optimization",
        "",
        *loss_lines,
        f"- safeguards held in every iteration: {result.constraints_held}",
        f"- reports per iteration (mean): {_mean(reports):.0f}",
        "",
        "## Evaluation phase, beside the paper (Figure 5)",
        "",
        "| branch | users | searches | chars typed | paper | rank selected | paper | loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, ev in result.eval.items():
        paper = PAPER_EVAL[name]
        lines.append(
            f"| {name} | {ev['n_users']} | {ev['n']} | {ev['chars_typed_mean']:.4f} | "
            f"{paper['chars_typed_mean']} | {ev['selected_rank_mean']:.4f} | "
            f"{paper['selected_rank_mean']} | {ev['loss_mean']:.4f} |"
        )
    if result.oracle:
        ev = result.oracle
        lines.append(
            f"| *(treatment users ranked by the hidden weights: the best possible)* | | "
            f"{ev['n']} | {ev['chars_typed_mean']:.4f} | | {ev['selected_rank_mean']:.4f} | | |"
        )
    icc = result.intra_user_correlation
    lines += [
        "",
        "Two-sided Mann-Whitney U tests on per-user means (users are the unit: the "
        f"intra-user correlation is {icc.get('chars_typed', float('nan')):.3f} for characters "
        f"and {icc.get('selected_rank', float('nan')):.3f} for the rank), Bonferroni level "
        f"0.05/{len(result.all_tests)} = {result.bonferroni_alpha:.5f}; difference of the "
        "per-user means with a 95% bootstrap interval over users; the pooled per-search "
        "p-value is secondary:",
        "",
        "| metric | a | b | users a / b | diff | 95% CI | p (users) | significant | p (pooled) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result.all_tests:
        low, high = row["diff_ci95"]
        lines.append(
            f"| {row['metric']} | {row['a']} | {row['b']} | {row['n_users_a']} / "
            f"{row['n_users_b']} | {row['diff']:+.4f} | [{low:+.4f}, {high:+.4f}] | "
            f"{_pvalue(row['pvalue'])} | {row['significant']} | {_pvalue(row['pooled_pvalue'])} |"
        )
    lines += [
        "",
        "## Learned weights (changed ones)",
        "",
        "| weight | start (Firefox default) | hidden (users' preference) | final | published |",
        "|---|---|---|---|---|",
    ]
    start = result.weights_per_iteration[0] if result.weights_per_iteration else {}
    scorer = page_scorer(cfg.model)
    # Real worlds (AOL) have no hidden preference: their users' searches are the log's.
    hidden = (
        scorer.to_dict(hidden_weights(cfg.preset, cfg.model)) if cfg.world == "synthetic" else {}
    )
    published = result.published_weights or result.final_weights
    for name in scorer.names:
        if start and abs(result.final_weights[name] - start[name]) > 1e-9:
            wanted = f"{hidden[name]:g}" if hidden else "none (real log)"
            lines.append(
                f"| {name} | {start[name]:g} | {wanted} "
                f"| {result.final_weights[name]:.2f} | {published[name]:g} |"
            )
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    path.write_text("\n".join(lines))
    return path
