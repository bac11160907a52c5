"""The FOLtR-ES paper's experiments, end to end (Kharitonov, WSDM 2019, Section 6).

* Figures 1-3 (Section 6.2, "we use the validation query set from Fold 1"): the linear
  ranker trained on Fold 1's validation queries with antithetic variates on / off (B = 4,
  no privatization), with B in {2, 4, 8, 16, 32} (no privatization), and with p in {0.15,
  0.25, 0.5, 1.0} (antithetic, B = 4); one panel per click model.
* Table 3 and Figures 4-5 (Section 6.3): linear and two-layer FOLtR-ES (antithetic, B = 4,
  p = 0.9, sigma = 0.01) on every fold and click model; the expected MaxRR of the final
  model on the train and test queries, averaged over folds, next to the MSE, RankingSVM
  and LambdaMART baselines, with a paired t-test (over folds) of each FOLtR-ES row against
  RankingSVM; learning curves per fold.
* Beyond the paper: FPDGD (linear) on the same budget and the same clients, as a row of the
  table and a curve in the figures.

The paper used MQ2007 and MQ2008; only MQ2008 is available offline here, and the exploration
runs use MQ2008's Fold 1 validation queries. Every number comes from this module's output
(``results.json``); nothing is hard-coded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from fedrank.core.json_io import write_json
from fedrank.core.validation import Interval, Rule, Validated
from fedrank.data.letor.folds import load_folds
from fedrank.data.letor.split import LetorFold
from fedrank.errors import ConfigError
from fedrank.experiments.executors import check_executor_options, job_executor
from fedrank.experiments.foltr.baselines import run_baselines
from fedrank.experiments.foltr.plots import plot_curves
from fedrank.experiments.foltr.run import FoltrConfig, FoltrResult, run_foltr

CLICK_MODELS: tuple[str, ...] = ("navigational", "informational", "perfect")
BASELINE_ROWS = {"mse": "MSE", "ranking_svm": "RankingSVM", "lambdamart": "LambdaMART"}
TRAINED_ROWS = {
    ("es", "linear"): "FOLtR-ES Linear",
    ("es", "two-layer"): "FOLtR-ES Two-Layer",
    ("fpdgd", "linear"): "FPDGD Linear",
}


@dataclass(frozen=True)
class ReproduceConfig(Validated):
    """Budget and scope of the reproduction.

    Attributes:
        interactions: interactions per training run (2,000,000).
        exploration_interactions: per run of Figures 1-3 (1,000,000).
        folds: folds used for Table 3 (all five).
        fpdgd: also train FPDGD (linear).
        seed: seed of every run (each run derives its own from it).
    """

    interactions: int = 2_000_000
    exploration_interactions: int = 1_000_000
    folds: tuple[int, ...] = (1, 2, 3, 4, 5)
    fpdgd: bool = True
    seed: int = 0

    ACCEPTS = {
        "interactions": Interval(Integral, 1, None),
        "exploration_interactions": Interval(Integral, 1, None),
        "folds": tuple,
        "fpdgd": bool,
        "seed": Interval(Integral, 0, None),
    }
    RULES = (
        Rule(
            lambda c: bool(c.folds) and len(set(c.folds)) == len(c.folds) and min(c.folds) >= 1,
            "folds must be distinct fold numbers >= 1, got {folds}",
        ),
    )


def _exploration_runs(config: ReproduceConfig) -> list[tuple[str, str, FoltrConfig]]:
    """``(figure, label, run config)`` of Figures 1-3, per click model."""
    runs = []
    for model in CLICK_MODELS:
        base = FoltrConfig(
            click_model=model, interactions=config.exploration_interactions, seed=config.seed
        )
        for anti in (True, False):
            label = "antithetic" if anti else "plain"
            runs.append(("fig1_antithetic", label, replace(base, antithetic=anti, p=None)))
        for b in (2, 4, 8, 16, 32):
            runs.append(("fig2_batch", f"B={b}", replace(base, batch=b, p=None)))
        for p in (0.15, 0.25, 0.5, 1.0):
            runs.append(("fig3_privacy", f"p={p}", replace(base, p=None if p == 1.0 else p)))
    return runs


#: Iterations at the end of a Figure 3 run whose batch MaxRR is averaged for its table.
FIG3_TAIL = 10


def fig3_markdown(rows: dict[str, dict[str, Any]], name: str) -> str:
    """Figure 3 as a privacy-utility table: each ``p``'s randomized-response guarantee per
    interaction, per message and per client over the run (basic composition; a client slot
    in every iteration), beside the mean batch MaxRR of its last iterations per click
    model."""
    models = sorted({m for row in rows.values() for m in row["final_batch_maxrr"]})
    lines = [
        f"Figure 3 with its privacy ({name}): epsilon of randomized response (delta 0) and the "
        f"mean batch MaxRR of the last {FIG3_TAIL} iterations.",
        "",
        "| p | per interaction | per message | per client, all iterations | "
        + " | ".join(models)
        + " |",
        "|---|---|---|---|" + "---|" * len(models),
    ]
    for label, row in rows.items():
        privacy = row["privacy"]
        per_value = privacy["per_interaction"]
        lines.append(
            f"| {label.removeprefix('p=')} | "
            + ("-" if per_value is None else f"{per_value:.4g}")
            + f" | {_epsilon_cell(privacy['per_message'])} | "
            + f"{_epsilon_cell(privacy['per_user'], rounds=True)} | "
            + " | ".join(f"{row['final_batch_maxrr'][m]:.4f}" for m in models)
            + " |"
        )
    return "\n".join(lines) + "\n"


def _epsilon_cell(value: dict[str, Any] | str, rounds: bool = False) -> str:
    """A guarantee's epsilon (and its rounds), or why there is none."""
    if isinstance(value, str):
        return "no guarantee"
    return f"{value['epsilon']:.4g}" + (f" ({value['rounds']} rounds)" if rounds else "")


def _table_runs(config: ReproduceConfig) -> list[tuple[int, str, FoltrConfig]]:
    """``(fold, row, run config)`` of Table 3."""
    runs = []
    for fold in config.folds:
        for model in CLICK_MODELS:
            for (algorithm, ranker), row in TRAINED_ROWS.items():
                if algorithm != "es" and not config.fpdgd:
                    continue
                runs.append(
                    (
                        fold,
                        row,
                        FoltrConfig(
                            click_model=model,
                            ranker=ranker,
                            algorithm=algorithm,  # type: ignore[arg-type]
                            interactions=config.interactions,
                            seed=config.seed + fold,
                        ),
                    )
                )
    return runs


def _summary(result: FoltrResult) -> dict[str, Any]:
    report = result.to_json()
    return {k: report[k] for k in ("expected_maxrr", "ndcg10", "batch_maxrr", "wall_seconds")}


def table_3(
    per_fold: dict[str, dict[str, dict[str, list[float]]]],
) -> dict[str, dict[str, dict[str, dict[str, float | None]]]]:
    """Means over folds and paired t-tests against RankingSVM.

    Args:
        per_fold: ``{row: {click_model: {split: [value per fold]}}}``.

    Returns:
        ``{split: {row: {click_model: {"mean": m, "pvalue_vs_ranking_svm": p or None}}}}``.
    """
    table: dict[str, dict[str, dict[str, dict[str, float | None]]]] = {}
    svm = per_fold.get("RankingSVM", {})
    for split in ("train", "test"):
        table[split] = {}
        for row, models in per_fold.items():
            table[split][row] = {}
            for model, splits in models.items():
                values = splits[split]
                reference = svm.get(model, {}).get(split)
                pvalue = None
                if row != "RankingSVM" and reference and len(values) == len(reference) > 1:
                    diff = np.subtract(values, reference)
                    if np.any(diff != 0):
                        pvalue = float(stats.ttest_rel(values, reference).pvalue)
                table[split][row][model] = {
                    "mean": float(np.mean(values)),
                    "pvalue_vs_ranking_svm": pvalue,
                }
    return table


def table_3_markdown(table: dict[str, Any], dataset: str) -> str:
    """Table 3 as markdown; ``*`` marks a paired t-test difference from RankingSVM at
    p < 0.05 (the paper's bold)."""
    lines = [
        "| | " + " | ".join(m.capitalize() for m in CLICK_MODELS) + " |",
        "|---|" + "---|" * len(CLICK_MODELS),
    ]
    for split in ("train", "test"):
        lines.append(f"| *{dataset}, {split}* |" + " |" * len(CLICK_MODELS))
        for row, models in table[split].items():
            cells = []
            for model in CLICK_MODELS:
                cell = models[model]
                mark = "*" if (cell["pvalue_vs_ranking_svm"] or 1.0) < 0.05 else ""
                cells.append(f"{cell['mean']:.4f}{mark}")
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _train(job: tuple[FoltrConfig, LetorFold]) -> FoltrResult:
    return run_foltr(*job)


def _baselines(job: tuple[LetorFold, int]) -> dict[str, Any]:
    return run_baselines(job[0], CLICK_MODELS, seed=job[1])


def reproduce(
    data_dir: Path,
    out_dir: Path,
    config: ReproduceConfig = ReproduceConfig(),  # noqa: B008 (frozen, immutable)
    progress: Callable[[int, int], None] | None = None,
    *,
    jobs: int = 1,
    dask_workers: int | None = None,
    dask_scheduler: str | None = None,
) -> dict[str, Any]:
    """Run everything, write ``results.json``, ``table3.md`` and the PNG figures to
    ``out_dir``, and return the results. Every run is seeded on its own, so the grid gives
    the same results in this process (``jobs = 1``), on ``jobs`` local processes, or on a
    Dask cluster (``dask_workers`` local workers or the one at ``dask_scheduler``,
    :func:`fedrank.experiments.executors.job_executor`); the folds travel with the runs."""
    check_executor_options(jobs, dask_workers, dask_scheduler)
    folds: Sequence[LetorFold] = load_folds(data_dir)
    if max(config.folds) > len(folds):
        raise ConfigError(
            f"{data_dir} has {len(folds)} fold(s); asked for fold {max(config.folds)}"
        )
    exploration = _exploration_runs(config)
    table_runs = _table_runs(config)
    total = len(exploration) + len(table_runs) + len(config.folds)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    with contextlib.ExitStack() as stack:
        pool: Executor | None = None
        if jobs > 1 or dask_workers is not None or dask_scheduler is not None:
            pool = stack.enter_context(job_executor(jobs, dask_workers, dask_scheduler))
        return _reproduce(folds, out_dir, config, exploration, table_runs, pool, tick)


def _in_order(pool: Executor | None, func: Callable[[Any], Any], jobs: list[Any]) -> Iterator[Any]:
    """``func`` of every job, in order, in this process or on ``pool``."""
    return map(func, jobs) if pool is None else pool.map(func, jobs)


def _reproduce(
    folds: Sequence[LetorFold],
    out_dir: Path,
    config: ReproduceConfig,
    exploration: list[tuple[str, str, FoltrConfig]],
    table_runs: list[tuple[int, str, FoltrConfig]],
    pool: Executor | None,
    tick: Callable[[], None],
) -> dict[str, Any]:
    """:func:`reproduce` once the runs are planned and their executor is chosen."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "dataset": folds[0].name.rsplit(" ", 1)[0],
        "config": config.__dict__,
    }

    # Figures 1-3: Fold 1's validation queries, as the paper's exploratory experiments.
    fold1 = folds[0]
    if fold1.vali is None:
        raise ConfigError(
            f"{fold1.name} has no validation split, which the exploration runs (Figures 1-3) "
            "train on; use a dataset with five folds (MQ2007, MQ2008, OHSUMED, MSLR)"
        )
    explore_fold = LetorFold(fold1.vali, None, fold1.test, f"{fold1.name} vali")
    figures: dict[str, dict[str, dict[str, list[float]]]] = {}
    scale: dict[str, dict[str, int]] = {}
    fig3: dict[str, dict[str, Any]] = {}
    trained = _in_order(pool, _train, [(run, explore_fold) for _, _, run in exploration])
    for (figure, label, run), result in zip(exploration, trained, strict=True):
        figures.setdefault(figure, {}).setdefault(run.click_model, {})[label] = result.batch_maxrr
        scale.setdefault(figure, {})[label] = run.clients * run.batch
        if figure == "fig3_privacy":
            fig3.setdefault(label, {"privacy": result.privacy_report(), "final_batch_maxrr": {}})
            tail = result.batch_maxrr[-FIG3_TAIL:]
            fig3[label]["final_batch_maxrr"][run.click_model] = float(np.mean(tail))
        tick()
    results["exploration"] = figures
    results["fig3_privacy_utility"] = fig3
    (out_dir / "fig3_privacy.md").write_text(fig3_markdown(fig3, explore_fold.name))
    paths = []
    titles = {
        "fig1_antithetic": "Fig. 1: antithetic variates (B=4, no privatization)",
        "fig2_batch": "Fig. 2: interactions per message B (no privatization)",
        "fig3_privacy": "Fig. 3: privatization p (antithetic, B=4)",
    }
    for figure, panels in figures.items():
        paths.append(
            plot_curves(
                panels,
                scale[figure],
                out_dir / f"{figure}.png",
                f"{titles[figure]}, {explore_fold.name}",
            )
        )

    # Table 3 and Figures 4-5.
    per_fold: dict[str, dict[str, dict[str, list[float]]]] = {}
    curves: dict[str, dict[str, dict[str, list[float]]]] = {}
    baselines_json = {}
    bases = _in_order(pool, _baselines, [(folds[k - 1], config.seed) for k in config.folds])
    for k, base in zip(config.folds, bases, strict=True):
        baselines_json[f"Fold{k}"] = base
        for key, row in BASELINE_ROWS.items():
            for model in CLICK_MODELS:
                for split in ("train", "test"):
                    per_fold.setdefault(row, {}).setdefault(model, {}).setdefault(split, []).append(
                        base[key]["expected_maxrr"][model][split]
                    )
        tick()
    runs_json = []
    trained = _in_order(pool, _train, [(run, folds[k - 1]) for k, _, run in table_runs])
    for (k, row, run), result in zip(table_runs, trained, strict=True):
        summary = _summary(result)
        runs_json.append({"fold": k, "row": row, "click_model": run.click_model, **summary})
        for split in ("train", "test"):
            per_fold.setdefault(row, {}).setdefault(run.click_model, {}).setdefault(
                split, []
            ).append(result.expected_maxrr[split])
        curves.setdefault(f"Fold{k}", {}).setdefault(run.click_model, {})[row] = result.batch_maxrr
        tick()
    table = table_3(per_fold)
    results.update(baselines=baselines_json, runs=runs_json, per_fold=per_fold, table3=table)
    markdown = table_3_markdown(table, results["dataset"])
    (out_dir / "table3.md").write_text(
        "Expected MaxRR of the final models, mean over folds "
        f"({', '.join(f'Fold{k}' for k in config.folds)}); * = paired t-test against "
        "RankingSVM, p < 0.05.\n\n" + markdown
    )
    per_iteration = FoltrConfig().clients * FoltrConfig().batch
    for model in CLICK_MODELS:
        panels = {name: runs[model] for name, runs in curves.items()}
        references = {
            f"Fold{k}": {row: per_fold[row][model]["train"][i] for row in ("MSE", "RankingSVM")}
            for i, k in enumerate(config.folds)
        }
        paths.append(
            plot_curves(
                panels,
                per_iteration,
                out_dir / f"fig4_folds_{model}.png",
                f"Mean batch MaxRR per fold, {model} users ({results['dataset']})",
                references=references,
            )
        )
    results["figures"] = [str(p) for p in paths]
    write_json(results, out_dir / "results.json")
    return results
