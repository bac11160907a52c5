"""``fedrank frecency ...``: federated tuning of Firefox's frecency (the Mozilla study)."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import click
import numpy as np

from fedrank.cli._attack import attack_from_options, attack_options, echo_attack
from fedrank.cli._common import (
    FedrankGroup,
    dask_options,
    invocation,
    json_option,
    progress_bar,
    read_json,
    seed_option,
    write_json,
)
from fedrank.cli._study_options import study_options
from fedrank.cli.privacy import dp_from_options, dp_options, echo_privacy
from fedrank.core.arrays import unique_values
from fedrank.simulation.attacks import VECTOR_ATTACKS


@click.group(cls=FedrankGroup)
def frecency() -> None:
    """Federated tuning of Firefox's frecency (Mozilla study)."""


@frecency.command("score", short_help="Score every page of a places.sqlite.")
@click.option(
    "--places",
    "places",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="A Firefox profile's places.sqlite.",
)
@click.option(
    "--algorithm",
    type=click.Choice(["classic", "modern"]),
    default="modern",
    show_default=True,
    help="Frecency algorithm: classic (Firefox 62-68) or modern (Firefox 128+).",
)
@click.option(
    "--now",
    "now",
    default=None,
    help="Classic only: score as of this time, PRTime microseconds or an ISO 8601 date/time "
    "(UTC unless it names a zone); default: the newest visit or bookmark in the file.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write {'pages': [{place_id, url, frecency, firefox_frecency}, ...]} here.",
)
def frecency_score(places: Path, algorithm: str, now: str | None, json_path: Path | None) -> None:
    """Score every page of a places.sqlite with fedrank's frecency: classic = what Firefox
    62-68 (the Mozilla study's) computes for the file, modern = Firefox 128+."""
    from fedrank.data.places import score_places

    if now is not None and algorithm != "classic":
        raise click.BadParameter("--now applies to the classic algorithm only", param_hint="--now")
    result = score_places(places, algorithm, now_us=None if now is None else _parse_now(now))
    pages = result["pages"]
    same = sum(p["frecency"] == p["firefox_frecency"] for p in pages)
    if algorithm == "classic":
        click.echo(
            f"{len(pages)} pages scored with Firefox 62-68's classic frecency at now = "
            f"{result['now_us']} us (the file stores the frecency of the Firefox that wrote it)"
        )
    else:
        click.echo(
            f"{len(pages)} pages scored with the {algorithm} algorithm; "
            f"{same} equal Firefox's stored frecency"
        )
    if json_path:
        write_json(result, json_path)
        click.echo(f"wrote {json_path}")


def _parse_now(text: str) -> int:
    """``--now``: PRTime microseconds, or an ISO 8601 date/time (UTC if no zone)."""
    from datetime import datetime

    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as err:
        raise click.BadParameter(
            f"{text!r} is neither microseconds since 1970 (PRTime, e.g. 1764000000000000) nor "
            "an ISO 8601 date/time (e.g. 2026-11-25T12:00:00)",
            param_hint="--now",
        ) from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def _run_study(
    config: Any,
    dask_workers: int | None = None,
    dask_scheduler: str | None = None,
    attack: Any = None,
    dp: Any = None,
) -> Any:
    import contextlib

    from fedrank.experiments.executors import check_executor_options, dask_client
    from fedrank.experiments.frecency.study import run_study

    on_dask = dask_workers is not None or dask_scheduler is not None
    check_executor_options(1, dask_workers, dask_scheduler)
    with contextlib.ExitStack() as stack, progress_bar() as bar:
        dask = stack.enter_context(dask_client(dask_workers, dask_scheduler)) if on_dask else None
        task = bar.add_task("optimization iterations", total=config.iterations)
        return run_study(
            config,
            progress=lambda done, total: bar.update(task, completed=done),
            dask=dask,
            attack=attack,
            dp=dp,
        )


def _summarize(result: Any) -> None:
    from fedrank.experiments.frecency.report import comparison_window, loss_reduction
    from fedrank.experiments.frecency.study import PAPER_EVAL

    n = len(result.loss_per_iteration)
    k = comparison_window(n)
    reduction = (
        f"treatment loss reduction (mean of the last {k} vs the first {k} of {n} iterations): "
        f"{100 * loss_reduction(result):.1f}%; "
        if k
        else "one iteration, no loss reduction to report; "
    )
    click.echo(f"{reduction}constraints held: {result.constraints_held}")
    for name, ev in result.eval.items():
        paper = PAPER_EVAL[name]
        click.echo(
            f"  {name:17s} chars typed {ev['chars_typed_mean']:.3f} (paper "
            f"{paper['chars_typed_mean']:.2f})  rank {ev['selected_rank_mean']:.3f} (paper "
            f"{paper['selected_rank_mean']:.3f})  ({ev['n_users']} users, {ev['n']} searches)"
        )
    if result.oracle:
        ev = result.oracle
        click.echo(
            f"  {'(hidden weights)':17s} chars typed {ev['chars_typed_mean']:.3f}  "
            f"rank {ev['selected_rank_mean']:.3f}  (treatment users' searches ranked by the "
            "hidden weights: the best any model can do)"
        )
    for key, test in result.tests.items():
        p = test["pvalue"]
        shown = f"{p:.3g}" if p > 0 else "< 1e-300"
        low, high = test["diff_ci95"]
        click.echo(
            f"  {key}: diff {test['diff']:+.3f} [{low:+.3f}, {high:+.3f}], p = {shown} "
            f"(per-user means, {test['n_users_a']} vs {test['n_users_b']} users; alpha "
            f"{result.bonferroni_alpha:.5f}; pooled searches p = {test['pooled_pvalue']:.3g})"
        )


@frecency.command("simulate", short_help="Simulate the federated frecency study.")
@study_options
@click.option(
    "--stability/--no-stability",
    default=False,
    help="Also run the Fig. 7 update-stability analysis each iteration.",
)
@attack_options(
    VECTOR_ATTACKS,
    "the treatment users (a fixed set for the whole study)",
)
@dp_options
@dask_options(
    "the clients' messages (the simulated users' searches stay in this process)",
    "; same result as one process",
)
def frecency_simulate(
    json_path: Path | None,
    out_dir: Path | None,
    stability: bool,
    dask_workers: int | None,
    dask_scheduler: str | None,
    malicious: float,
    attack: str | None,
    attack_factor: float | None,
    dp_epsilon: float | None,
    dp_delta: float | None,
    dp_clip: float | None,
    dp_clip_quantile: float | None,
    dp_count_noise: float | None,
    dp_denominator: float | None,
    dp_mode: str,
    dp_threshold: float | None,
    **settings: Any,
) -> None:
    """Simulate the federated frecency study (optimization + evaluation phases); with
    --out, also write the plots and a markdown report; with --malicious and --attack, a
    share of the treatment users poisons its updates."""
    from fedrank.experiments.frecency.plots import plot_study
    from fedrank.experiments.frecency.report import write_report
    from fedrank.experiments.frecency.study import FrecencyStudyConfig
    from fedrank.systems.frecency import SYSTEM as FRECENCY

    if settings["world"] == "aol" and settings["n_users"] == 0:
        settings["n_users"] = None  # every user of the log
    config = FrecencyStudyConfig(track_stability=stability, **settings)
    poison = attack_from_options(FRECENCY, malicious, attack, attack_factor)
    dp = dp_from_options(
        dp_epsilon,
        dp_delta,
        dp_clip,
        dp_clip_quantile,
        dp_count_noise,
        dp_denominator,
        dp_mode,
        dp_threshold,
    )
    result = _run_study(config, dask_workers, dask_scheduler, poison, dp)
    _summarize(result)
    echo_attack(result.attack)
    echo_privacy(result.privacy)
    if stability:
        few = [r["n_reports"] for r in result.stability if r["n_reports"] < 10_000]
        if few:
            click.echo(
                f"note: {len(few)} of {len(result.stability)} iterations had fewer than 10,000 "
                f"reports (as few as {min(few)}); the paper's Figure 7 iterations had about "
                "15,000: raise --users (about 17,000 at one search per user and iteration)"
            )
    if json_path:
        write_json(result.to_json(), json_path)
        click.echo(f"wrote {json_path}")
    if out_dir:
        plots = plot_study(result, out_dir)
        report = write_report(result, out_dir / "report.md", invocation(), plots)
        for path in [*plots, report]:
            click.echo(f"wrote {path}")


@frecency.command("messages", short_help="Sign-only vs full-precision messages.")
@click.option(
    "--preset",
    type=click.Choice(["paper", "shifted"]),
    default="shifted",
    show_default=True,
    help="The simulated users' hidden preference (synthetic world).",
)
@click.option(
    "--model",
    type=click.Choice(["classic", "modern"]),
    default="classic",
    show_default=True,
    help="Frecency algorithm: classic (Firefox 62-68) or modern (Firefox 128+).",
)
@click.option(
    "--users",
    "n_users",
    type=int,
    default=3000,
    show_default=True,
    help="Simulated users enrolled in the study.",
)
@click.option(
    "--iterations",
    type=int,
    default=40,
    show_default=True,
    help="Optimization iterations (server model updates).",
)
@click.option(
    "--seeds",
    default="0,1,2",
    show_default=True,
    help="Comma-separated seeds; each runs a full and a sign-only study.",
)
@json_option
def frecency_messages(
    preset: str, model: str, n_users: int, iterations: int, seeds: str, json_path: Path | None
) -> None:
    """Sign-only vs full-precision messages: final loss, paired by seed."""
    from fedrank.experiments.frecency.study import FrecencyStudyConfig, compare_messages

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"--seeds must be comma-separated integers: {exc}") from exc
    config = FrecencyStudyConfig(preset=preset, model=model, n_users=n_users, iterations=iterations)
    with progress_bar() as bar:
        task = bar.add_task("studies", total=2 * len(seed_list))
        res = compare_messages(
            config, seed_list, progress=lambda done, total: bar.update(task, completed=done)
        )
    for row in res["per_seed"]:
        click.echo(
            f"  seed {row['seed']}: final loss full {row['full']['final_loss']:.4f}  "
            f"sign {row['sign']['final_loss']:.4f}  (ratio {row['ratio']:.2f})"
        )
    click.echo(
        f"mean final loss: full {res['full_final_loss_mean']:.4f}, sign "
        f"{res['sign_final_loss_mean']:.4f}; sign/full = {res['ratio']:.3f}"
    )
    if json_path:
        write_json(res, json_path)
        click.echo(f"wrote {json_path}")


@frecency.command("power", short_help="Power analysis of the study.")
@click.option(
    "--part",
    type=click.Choice(["effect", "training", "both"]),
    default="both",
    show_default=True,
    help="effect: users per branch to detect the effect on the selected rank (MWU on "
    "per-user means, users resampled); training: users needed to train (whole studies).",
)
@click.option(
    "--preset",
    type=click.Choice(["paper", "shifted"]),
    default="shifted",
    show_default=True,
    help="The simulated users' hidden preference.",
)
@click.option(
    "--weights",
    "weights_path",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Treatment model for the effect: final_weights of a `simulate --json` file "
    "(default: the preset's hidden weights, the largest effect a model can have).",
)
@click.option(
    "--effect",
    type=float,
    default=None,
    help="Instead of a model: a shift of every control user's mean.",
)
@click.option(
    "--metric",
    type=click.Choice(["selected_rank", "chars_typed"]),
    default="selected_rank",
    show_default=True,
    help="The paper analysed the rank (no prior data on characters typed).",
)
@click.option(
    "--power",
    "target_power",
    type=float,
    default=0.8,
    show_default=True,
    help="Target statistical power.",
)
@click.option(
    "--alpha",
    type=float,
    default=0.05 / 6,
    show_default=True,
    help="Significance level of the test.",
)
@click.option(
    "--repetitions", type=int, default=200, show_default=True, help="Resamples per user count."
)
@click.option(
    "--users",
    "n_users",
    type=int,
    default=2000,
    show_default=True,
    help="Users of the effect pilot (half per model).",
)
@click.option(
    "--iterations",
    type=int,
    default=40,
    show_default=True,
    help="Optimization iterations (server model updates).",
)
@click.option(
    "--target-reduction",
    type=float,
    default=0.2,
    show_default=True,
    help="Training: the treatment loss must fall by this share.",
)
@click.option("--studies", type=int, default=5, show_default=True, help="Training: studies per n.")
@seed_option
@json_option
def frecency_power(
    part: str,
    preset: str,
    weights_path: Path | None,
    effect: float | None,
    metric: str,
    target_power: float,
    alpha: float,
    repetitions: int,
    n_users: int,
    iterations: int,
    target_reduction: float,
    studies: int,
    seed: int,
    json_path: Path | None,
) -> None:
    """Power analysis of the study (paper Sec. 6.2), at the level of users: how many users
    train a model, and how many per branch show its effect."""
    from fedrank.experiments.frecency.power import effect_power, training_power
    from fedrank.experiments.frecency.presets import hidden_weights
    from fedrank.experiments.frecency.study import FrecencyStudyConfig
    from fedrank.models.frecency.weights import weights_from_dict

    out: dict[str, Any] = {}
    base = FrecencyStudyConfig(preset=preset, n_users=n_users, iterations=iterations, seed=seed)
    if part in ("effect", "both"):
        if weights_path is not None:
            data = read_json(weights_path)
            if not isinstance(data.get("final_weights"), dict):
                raise click.BadParameter(
                    f"{weights_path} has no 'final_weights' object: pass the JSON that "
                    "`fedrank frecency simulate --json FILE` writes"
                )
            theta = weights_from_dict(data["final_weights"])
        else:
            theta = hidden_weights(preset)
        res = effect_power(
            base, theta, metric=metric, alpha=alpha, power=target_power,
            repetitions=repetitions, effect=effect, rng=np.random.default_rng(seed),
        )  # fmt: skip
        res["treatment"] = (
            f"control users shifted by {effect:g}" if effect is not None
            else str(weights_path or f"hidden weights of {preset}")
        )  # fmt: skip
        out["effect"] = res
        click.echo(
            f"{metric}: control {res['control_mean']:.4f}, treatment {res['treatment_mean']:.4f}"
            f" ({res['treatment']}; per-user means of {res['pilot_users']} pilot users)"
        )
        if res["n"] is not None:
            click.echo(
                f"{res['n']} users per branch reach power {res['power']:.2f} at alpha {alpha:.5f}"
            )
        else:
            click.echo(f"power {target_power} not reached within the user limit")
    if part in ("training", "both"):
        with progress_bar() as bar:
            task = bar.add_task("studies", total=None)
            res = training_power(
                base, target_reduction=target_reduction, probability=target_power,
                repetitions=studies,
                progress=lambda n, share: bar.update(task, description=f"n={n}: {share:.2f}"),
            )  # fmt: skip
        out["training"] = res
        if res["n"] is not None:
            click.echo(
                f"{res['n']} users (60% treatment) cut the treatment loss by "
                f"{target_reduction:.0%} in {iterations} iterations in "
                f"{res['power']:.0%} of {studies} studies"
            )
        else:
            click.echo("the training target was not reached within the user limit")
    if json_path:
        write_json(out, json_path)
        click.echo(f"wrote {json_path}")


@frecency.command("world", short_help="The synthetic world's shapes beside AOL's.")
@click.option(
    "--users",
    "n_users",
    type=int,
    default=1000,
    show_default=True,
    help="Simulated users enrolled in the study.",
)
@click.option(
    "--history-days",
    type=float,
    default=61.0,
    show_default=True,
    help="Days of synthetic history before the study.",
)
@seed_option
@click.option(
    "--aol-log",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="The AOL click log (default: the shared 1,000-user sample).",
)
@json_option
def frecency_world(
    n_users: int, history_days: float, seed: int, aol_log: str | None, json_path: Path | None
) -> None:
    """The shapes of the synthetic world's history beside the AOL log's history period
    (March-April 2006): how much users browse, how often they revisit, how bursty."""
    from fedrank.data.aol_browsing import aol_world
    from fedrank.data.synthetic_history import BrowsingConfig, generate_world
    from fedrank.experiments.fedps.data import default_log_path
    from fedrank.experiments.frecency.report import SHAPE_LABELS

    log = Path(aol_log) if aol_log else default_log_path()
    if not log.is_file():
        raise click.BadParameter(f"AOL log {log} not found", param_hint="--aol-log")
    synthetic = generate_world(
        n_users, np.random.default_rng(seed), BrowsingConfig(history_days=history_days)
    )
    real = aol_world(log)
    rows = {
        key: {"synthetic": synthetic.stats[key], "aol": real.stats[key]} for key in SHAPE_LABELS
    }
    click.echo(f"{'shape':52s} {'synthetic':>10s} {'AOL':>10s}")
    for key, label in SHAPE_LABELS.items():
        click.echo(f"{label:52s} {rows[key]['synthetic']:10.3f} {rows[key]['aol']:10.3f}")
    pages = synthetic.pages
    extra = {
        "synthetic_pages_per_user": float(np.mean(np.diff(pages.user_offsets))),
        "synthetic_pages_per_host": float(pages.n_pages / unique_values(pages.host).size),
    }
    click.echo(
        f"synthetic: {extra['synthetic_pages_per_host']:.2f} pages per host, "
        f"{extra['synthetic_pages_per_user']:.0f} pages per user"
    )
    if json_path:
        write_json({"shapes": rows, **extra, "users": n_users, "seed": seed,
                    "history_days": history_days}, json_path)  # fmt: skip
        click.echo(f"wrote {json_path}")


@frecency.command("calibrate", short_help="Fit the typing model to the paper.")
@click.option(
    "--users",
    "n_users",
    type=int,
    default=1000,
    show_default=True,
    help="Simulated users enrolled in the study.",
)
@click.option(
    "--iterations",
    type=int,
    default=40,
    show_default=True,
    help="Optimization iterations (server model updates).",
)
@seed_option
@click.option(
    "--max-evaluations",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Most simulated studies the fit may run.",
)
@json_option
def frecency_calibrate(
    n_users: int, iterations: int, seed: int, max_evaluations: int, json_path: Path | None
) -> None:
    """Fit the typing model (blind characters, reading depth) so that the control branch of
    the default synthetic world types and selects like the paper's (4.26 characters, rank
    0.354); the study then holds it fixed for every branch."""
    from fedrank.experiments.frecency.calibration import calibrate_typing
    from fedrank.experiments.frecency.study import FrecencyStudyConfig

    config = FrecencyStudyConfig(n_users=n_users, iterations=iterations, seed=seed)
    with progress_bar() as bar:
        task = bar.add_task("candidate typing models", total=None)
        res = calibrate_typing(
            config,
            max_evaluations=max_evaluations,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    click.echo(
        f"blind_chars {res.typing.blind_chars:.3f}, scan_continue {res.typing.scan_continue:.3f}:"
        f" control types {res.chars_typed:.3f} (paper {res.target[0]}) and selects rank "
        f"{res.selected_rank:.3f} (paper {res.target[1]})"
    )
    if json_path:
        write_json(res.to_json(), json_path)
        click.echo(f"wrote {json_path}")


@frecency.command("policies", short_help="Compare iteration-length policies.")
@click.option(
    "--preset",
    type=click.Choice(["paper", "shifted"]),
    default="shifted",
    show_default=True,
    help="The simulated users' hidden preference (synthetic world).",
)
@click.option(
    "--users",
    "n_users",
    type=int,
    default=2000,
    show_default=True,
    help="Simulated users enrolled in the study.",
)
@click.option(
    "--target-fraction",
    type=float,
    default=0.5,
    show_default=True,
    help="Target validation loss as a fraction of the initial loss.",
)
@seed_option
@json_option
def frecency_policies(
    preset: str, n_users: int, target_fraction: float, seed: int, json_path: Path | None
) -> None:
    """Compare iteration-length policies: reports needed to reach the same loss."""
    from fedrank.experiments.frecency.policies import (
        FixedTime,
        MinUpdates,
        SignStable,
        StreamConfig,
        run_policy,
    )

    config = StreamConfig(preset=preset, n_users=n_users, target_fraction=target_fraction)
    policies = [FixedTime(30.0), MinUpdates(500), SignStable(3, 100)]
    rows = []
    with progress_bar() as bar:
        task = bar.add_task("policies", total=len(policies))
        for policy in policies:
            rows.append(run_policy(policy, config, seed))
            bar.update(task, advance=1)
    for row in rows:
        click.echo(
            f"  {row['policy']:32s} reached={row['reached']}  reports={row['reports']}  "
            f"iterations={row['iterations']}  hours={row['hours']:.1f}"
        )
    if json_path:
        write_json({"config": config.__dict__, "policies": rows}, json_path)
        click.echo(f"wrote {json_path}")
