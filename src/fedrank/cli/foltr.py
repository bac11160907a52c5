"""``fedrank foltr ...``: federated online learning to rank on LETOR data (FOLtR-ES, FPDGD)."""

from __future__ import annotations

from pathlib import Path

import click

from fedrank.cli._attack import attack_from_options, attack_options, echo_attack
from fedrank.cli._common import (
    FedrankGroup,
    dask_options,
    json_option,
    progress_bar,
    seed_option,
    write_json,
)
from fedrank.simulation.attacks import ES_ATTACKS


def _data_option(func):  # noqa: ANN001, ANN202 (click decorator)
    return click.option(
        "--data",
        "data_dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        required=True,
        help="A LETOR dataset directory: S1.txt..S5.txt (MQ2007/MQ2008), Fold1..Fold5/ "
        "(MSLR), Fold1_test.txt.. (OHSUMED) or rank.train/rank.test (LightGBM).",
    )(func)


def _parse_list(text: str, kind: type, name: str) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{name} must be a comma-separated list: {exc}") from exc


@click.group(cls=FedrankGroup, short_help="Federated online LTR: FOLtR-ES and FPDGD.")
def foltr() -> None:
    """Federated online learning to rank: FOLtR-ES (Kharitonov 2019) and FPDGD."""


@foltr.command("train", short_help="Train a ranker from simulated clicks.")
@_data_option
@click.option("--fold", type=int, default=1, show_default=True, help="Fold (1-based).")
@click.option(
    "--click-model",
    type=click.Choice(["perfect", "navigational", "informational", "position-based"]),
    default="navigational",
    show_default=True,
    help="Simulated users' click model.",
)
@click.option(
    "--ranker",
    type=click.Choice(["linear", "two-layer"]),
    default="linear",
    show_default=True,
    help="Ranker trained: linear or a two-layer network.",
)
@click.option(
    "--algorithm",
    type=click.Choice(["es", "fpdgd"]),
    default="es",
    show_default=True,
    help="FOLtR-ES, or FPDGD (federated PDGD, Wang et al. 2021).",
)
@click.option("--clients", type=int, default=2000, show_default=True, help="N per iteration.")
@click.option("--batch", type=int, default=4, show_default=True, help="B: interactions/message.")
@click.option(
    "--p",
    type=float,
    default=0.9,
    show_default=True,
    help="ES randomized-response truth probability, in (1/11, 1]; 1 sends true values.",
)
@click.option(
    "--sigma",
    type=float,
    default=0.01,
    show_default=True,
    help="Standard deviation of the ES perturbation.",
)
@click.option(
    "--antithetic/--no-antithetic",
    default=True,
    show_default=True,
    help="Antithetic sampling: each perturbation also tried with its sign flipped.",
)
@click.option(
    "--learning-rate",
    type=float,
    default=None,
    help="ES: the server's Adam lr (default 1e-3); FPDGD: the local lr (default 0.1).",
)
@click.option(
    "--interactions",
    type=int,
    default=2_000_000,
    show_default=True,
    help="Simulated user interactions (queries) in all.",
)
@click.option(
    "--dp",
    type=click.Choice(["none", "local", "distributed", "central"]),
    default="none",
    show_default=True,
    help="FPDGD only: Laplace noise on model deltas (per message, or shares of one draw), or "
    "central DP (the server's Gaussian noise on the mean of L2-clipped deltas, each client's "
    "epsilon accounted over the training).",
)
@click.option(
    "--dp-epsilon",
    type=float,
    default=4.5,
    show_default=True,
    help="Laplace: epsilon per round; central: each client's budget over the training.",
)
@click.option("--dp-delta", type=float, default=1e-6, show_default=True, help="central: delta.")
@click.option(
    "--dp-clip",
    type=float,
    default=1.0,
    show_default=True,
    help="L1 clip of deltas (Laplace); their L2 bound (central).",
)
@seed_option
@click.option(
    "--difference-bound",
    type=float,
    default=0.0,
    show_default=True,
    help="FOLtR-ES: clip every report's antithetic difference f+ - f- to [-B, B] (a bound "
    "on what one report, or one lying client, moves; docs/service.md); 0: off.",
)
@attack_options(
    ES_ATTACKS, "each iteration's clients", es=True, note="; FPDGD: sign-flip, scale, random"
)
@dask_options("the clients (FOLtR-ES or FPDGD)", "; same result as one process")
@json_option
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the learning curve as a PNG to this file.",
)
def foltr_train(
    data_dir: Path,
    fold: int,
    json_path: Path | None,
    plot_path: Path | None,
    p: float,
    dask_workers: int | None,
    dask_scheduler: str | None,
    malicious: float,
    attack: str | None,
    attack_factor: float | None,
    attack_seeds: int | None,
    server_seeds: bool,
    **settings: object,
) -> None:
    """Train a ranker from simulated users' clicks and report how it did (with
    --malicious and --attack, while a share of the clients poisons its messages)."""
    import contextlib

    from fedrank.data.letor.folds import load_fold
    from fedrank.experiments.executors import check_executor_options, dask_client
    from fedrank.experiments.foltr.plots import plot_curves
    from fedrank.experiments.foltr.run import SYSTEM_OF, FoltrConfig, run_foltr
    from fedrank.federation.registry import system

    config = FoltrConfig(p=None if p == 1.0 else p, **settings)  # type: ignore[arg-type]
    poison = attack_from_options(
        system(SYSTEM_OF[config.algorithm]),
        malicious,
        attack,
        attack_factor,
        attack_seeds,
        server_seeds,
    )
    on_dask = dask_workers is not None or dask_scheduler is not None
    check_executor_options(1, dask_workers, dask_scheduler)
    data = load_fold(data_dir, fold)
    with contextlib.ExitStack() as stack, progress_bar() as bar:
        dask = stack.enter_context(dask_client(dask_workers, dask_scheduler)) if on_dask else None
        task = bar.add_task(f"{config.algorithm} iterations", total=config.iterations)
        result = run_foltr(
            config,
            data,
            progress=lambda done, total: bar.update(task, completed=done),
            dask=dask,
            attack=poison,
        )
    report = result.to_json()
    curve = report["batch_maxrr"]
    click.echo(
        f"{data.name}, {config.algorithm} {config.ranker}, {config.click_model} users: "
        f"{report['interactions']:,} interactions in {report['wall_seconds']:.1f} s "
        f"({report['interactions_per_second']:,.0f}/s)"
    )
    click.echo(f"  batch MaxRR: first {curve[0]:.4f}, last {curve[-1]:.4f}")
    for split in ("train", "test"):
        click.echo(
            f"  {split:5s} expected MaxRR {report['expected_maxrr'][split]:.4f}  "
            f"nDCG@10 {report['ndcg10'][split]:.4f}"
        )
    if config.dp == "central":
        privacy = report["privacy"]
        click.echo(
            f"  central DP: epsilon {privacy['epsilon']:.4g} per client over "
            f"{privacy['rounds']} iterations at delta {privacy['delta']:g} (noise multiplier "
            f"{privacy['noise_multiplier']:.4g}, L2 clip {privacy['clip']:g})"
        )
    elif report["epsilon"] is not None:
        click.echo(f"  epsilon {report['epsilon']:.3f}")
    echo_attack(report.get("attack", {}))
    if json_path:
        write_json(report, json_path)
        click.echo(f"wrote {json_path}")
    if plot_path:
        per_iteration = config.clients * config.batch
        plot_curves(
            {config.click_model: {f"{config.algorithm} {config.ranker}": curve}},
            per_iteration,
            plot_path,
            title=data.name,
        )
        click.echo(f"wrote {plot_path}")


@foltr.command("eps-table", short_help="Epsilon of MaxRR under randomized response.")
@click.option(
    "--list-length",
    type=int,
    default=5,
    show_default=True,
    help="Length of the ranked list clicks are made on.",
)
@click.option(
    "--ps",
    default="0.25,0.5,0.75,0.9,0.95,0.99",
    show_default=True,
    help="Randomized-response probabilities p to tabulate, comma-separated.",
)
@click.option(
    "--click-models",
    default="perfect,navigational,informational",
    show_default=True,
    help="Click models to tabulate, comma-separated.",
)
@json_option
def foltr_eps_table(list_length: int, ps: str, click_models: str, json_path: Path | None) -> None:
    """The privacy loss epsilon of MaxRR under randomized response: Eq. (10) and the
    empirical maximum of Eq. (9) over all label placements (paper Table 2)."""
    from fedrank.models.click_models import click_model
    from fedrank.privacy.empirical_epsilon import epsilon_table

    p_list = _parse_list(ps, float, "--ps")
    names = _parse_list(click_models, str, "--click-models")
    table = epsilon_table({n: click_model(n) for n in names}, list_length, p_list)
    width = max(len(k) for k in table) + 2
    click.echo(f"{'p':{width}s}" + "".join(f"{p:>8g}" for p in p_list))
    for name, row in table.items():
        click.echo(f"{name:{width}s}" + "".join(f"{v:8.3f}" for v in row))
    if json_path:
        write_json(table, json_path)
        click.echo(f"wrote {json_path}")


@foltr.command("baselines", short_help="Baselines trained on relevance labels.")
@_data_option
@click.option("--fold", type=int, default=1, show_default=True, help="Fold (1-based).")
@click.option(
    "--click-models",
    default="perfect,navigational,informational",
    show_default=True,
    help="Click models to tabulate, comma-separated.",
)
@seed_option
@json_option
def foltr_baselines(
    data_dir: Path, fold: int, click_models: str, seed: int, json_path: Path | None
) -> None:
    """Baselines trained on relevance labels: MSE, RankingSVM (C = 1000) and LambdaMART,
    scored by expected MaxRR per click model and nDCG@10 on train and test."""
    from fedrank.data.letor.folds import load_fold
    from fedrank.experiments.foltr.baselines import run_baselines

    data = load_fold(data_dir, fold)
    names = _parse_list(click_models, str, "--click-models")
    report = run_baselines(data, names, seed=seed)
    click.echo(f"{data.name}: expected MaxRR train / test (nDCG@10 train / test)")
    for name, result in report.items():
        if name == "data":
            continue
        cells = "  ".join(
            f"{m} {v['train']:.4f} / {v['test']:.4f}" for m, v in result["expected_maxrr"].items()
        )
        ndcg = result["ndcg10"]
        click.echo(f"  {name:12s} {cells}  (nDCG {ndcg['train']:.4f} / {ndcg['test']:.4f})")
    if json_path:
        write_json(report, json_path)
        click.echo(f"wrote {json_path}")


@foltr.command("reproduce", short_help="The FOLtR-ES paper's figures and Table 3.")
@_data_option
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/foltr-reproduce"),
    show_default=True,
    help="Directory the figures and tables are written to.",
)
@click.option(
    "--interactions",
    type=int,
    default=2_000_000,
    show_default=True,
    help="Simulated user interactions (queries) in all.",
)
@click.option(
    "--exploration-interactions",
    type=int,
    default=1_000_000,
    show_default=True,
    help="Per run of the Figure 1-3 grid (antithetic, B, p).",
)
@click.option(
    "--folds", default="1,2,3,4,5", show_default=True, help="Cross-validation folds to run."
)
@click.option("--fpdgd/--no-fpdgd", default=True, show_default=True, help="Also train FPDGD.")
@seed_option
@click.option("--jobs", type=int, default=1, show_default=True, help="local worker processes")
@dask_options("the grid's runs")
def foltr_reproduce(
    data_dir: Path,
    out_dir: Path,
    interactions: int,
    exploration_interactions: int,
    folds: str,
    fpdgd: bool,
    seed: int,
    jobs: int,
    dask_workers: int | None,
    dask_scheduler: str | None,
) -> None:
    """The paper's grid: Figures 1-3 (antithetic, B, p), and Table 3 with Figures 4-5
    (every fold x click model x ranker, with the baselines and a paired t-test)."""
    from fedrank.experiments.foltr.reproduce import ReproduceConfig, reproduce

    config = ReproduceConfig(
        interactions=interactions,
        exploration_interactions=exploration_interactions,
        folds=tuple(_parse_list(folds, int, "--folds")),
        fpdgd=fpdgd,
        seed=seed,
    )
    with progress_bar() as bar:
        task = bar.add_task("runs", total=None)
        results = reproduce(
            data_dir,
            out_dir,
            config,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            jobs=jobs,
            dask_workers=dask_workers,
            dask_scheduler=dask_scheduler,
        )
    click.echo((out_dir / "table3.md").read_text())
    for path in results["figures"]:
        click.echo(f"wrote {path}")
    click.echo(f"wrote {out_dir / 'table3.md'} and {out_dir / 'results.json'}")
