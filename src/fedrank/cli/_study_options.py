"""The options of ``fedrank frecency simulate`` (the study's settings), in one decorator;
their defaults are :class:`~fedrank.experiments.frecency.study.FrecencyStudyConfig`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def study_options(func: Any) -> Any:
    """Options of ``frecency simulate``; their defaults are FrecencyStudyConfig's."""
    from fedrank.experiments.frecency.presets import PRESETS
    from fedrank.experiments.frecency.study import WORLDS, FrecencyStudyConfig
    from fedrank.losses.pointwise_svm import SCORE_SCALES
    from fedrank.models.frecency.scorer import MODELS, PAGE_SCORERS
    from fedrank.systems.frecency.config import AGGREGATORS, RPROP_SETTINGS, SETTINGS

    d = FrecencyStudyConfig()
    r = d.resolved()

    def per_model(setting: str) -> str:
        values = {
            name: scorer.default_score_scale if setting == "scale" else scorer.default_delta()
            for name, scorer in PAGE_SCORERS.items()
        }
        return "the model's: " + ", ".join(f"{name} {value}" for name, value in values.items())

    def per_setting(name: str) -> str:
        return "the setting's: " + ", ".join(f"{s} {v[name]:g}" for s, v in RPROP_SETTINGS.items())

    options = [
        click.option(
            "--model",
            type=click.Choice(MODELS),
            default=d.model,
            show_default=True,
            help="Frecency algorithm tuned: classic (22 weights, the paper's) or modern "
            "(Firefox 128+: 4 class weights and halfLifeDays).",
        ),
        click.option(
            "--world",
            type=click.Choice(WORLDS),
            default=d.world,
            show_default=True,
            help="The users: synthetic (calibrated to real browsing) or aol (the real AOL "
            "click log; its revisits are the searches).",
        ),
        click.option(
            "--setting",
            type=click.Choice(SETTINGS),
            default=d.setting,
            show_default=True,
            help="Optimizer and safeguards: the paper's text, or what the study's deployed "
            "server did (Rprop 2.0/0.6, steps 1-3, shifted non-negativity, integer weights).",
        ),
        click.option(
            "--preset",
            type=click.Choice(PRESETS),
            default=d.preset,
            show_default=True,
            help="The simulated users' hidden preference (synthetic world), not a model "
            "setting: what the learner should discover.",
        ),
        click.option(
            "--users",
            "n_users",
            type=int,
            default=d.n_users,
            show_default=True,
            help="Users enrolled (the AOL world draws them from the log; 0: all its users).",
        ),
        click.option(
            "--iterations",
            type=int,
            default=d.iterations,
            show_default=True,
            help="Optimization iterations (server model updates).",
        ),
        click.option(
            "--seed",
            type=int,
            default=d.seed,
            show_default=True,
            help="Random seed (the same seed gives the same results).",
        ),
        click.option(
            "--message",
            type=click.Choice(["full", "sign"]),
            default=d.message,
            show_default=True,
            help="Full float updates or signs only.",
        ),
        click.option(
            "--sign-epsilon",
            type=float,
            default=None,
            help="With --message sign: randomized response on every sign on the device, "
            "epsilon-LDP per weight (a message of d weights: d x epsilon). Default: plain signs.",
        ),
        click.option(
            "--optimizer",
            type=click.Choice(["rprop", "sgd", "adam"]),
            default=d.optimizer,
            show_default=True,
            help="Server optimizer applied to the aggregate.",
        ),
        click.option(
            "--eta-plus",
            type=float,
            default=None,
            show_default=per_setting("eta_plus"),
            help="Rprop: step growth factor when a gradient keeps its sign.",
        ),
        click.option(
            "--eta-minus",
            type=float,
            default=None,
            show_default=per_setting("eta_minus"),
            help="Rprop: step shrink factor when a gradient changes sign.",
        ),
        click.option(
            "--step-init",
            type=float,
            default=None,
            show_default=per_setting("step_init"),
            help="Rprop: initial step size of every weight.",
        ),
        click.option(
            "--step-min",
            type=float,
            default=None,
            show_default=per_setting("step_min"),
            help="Rprop: smallest step size.",
        ),
        click.option(
            "--step-max",
            type=float,
            default=None,
            show_default=per_setting("step_max"),
            help="Rprop: largest step size.",
        ),
        click.option(
            "--delta",
            type=float,
            default=d.delta,
            show_default=per_model("delta"),
            help="SVM margin Delta (on the --score-scale; raw modern scores are days). The "
            "paper's loss (raw, Delta 0) is always reported beside it.",
        ),
        click.option(
            "--score-scale",
            type=click.Choice(SCORE_SCALES),
            default=d.score_scale,
            show_default=per_model("scale"),
            help="Loss on log frecency or raw frecency (the paper's).",
        ),
        click.option(
            "--significance-z",
            type=float,
            default=None,
            show_default="1 under --setting paper, 0 (the plain mean) under mozilla-deployed",
            help="Per-weight significance gate of the aggregate, in standard errors.",
        ),
        click.option(
            "--aggregator",
            type=click.Choice(AGGREGATORS),
            default=d.aggregator,
            show_default=True,
            help="Defense: the coordinate-wise median or trimmed mean (Yin et al. 2018) of "
            "full gradients instead of the paper's gated mean.",
        ),
        click.option(
            "--trim",
            type=float,
            default=d.trim,
            show_default=True,
            help="--aggregator trimmed-mean: the fraction dropped from each end.",
        ),
        click.option(
            "--norm-bound",
            type=float,
            default=d.norm_bound,
            show_default=True,
            help="Defense: scale every full gradient down to this L2 norm (0: none); with "
            "--norm-quantile, the first iteration's bound.",
        ),
        click.option(
            "--norm-quantile",
            type=float,
            default=d.norm_quantile,
            help="Defense: adapt the norm bound every iteration toward this quantile of the "
            "gradient norms, in (0, 1) (Andrew et al. 2021; needs --norm-bound > 0).",
        ),
        click.option(
            "--eps", type=float, default=d.eps, show_default=True, help="Finite-difference epsilon."
        ),
        click.option(
            "--blind-chars",
            type=float,
            default=None,
            show_default=f"calibrated: {r.blind_chars:g}",
            help="Mean characters typed (after the first) before looking at the suggestions.",
        ),
        click.option(
            "--scan-continue",
            type=float,
            default=None,
            show_default=f"calibrated: {r.scan_continue:g}",
            help="Probability of reading one more suggestion.",
        ),
        click.option(
            "--searches-per-iteration",
            type=float,
            default=d.searches_per_iteration,
            show_default=True,
            help="Mean (Poisson) searches per user per iteration (synthetic world).",
        ),
        click.option(
            "--eval-searches",
            "eval_searches_per_user",
            type=int,
            default=d.eval_searches_per_user,
            show_default=True,
            help="Searches per user in the evaluation phase (synthetic world).",
        ),
        click.option(
            "--history-days",
            type=float,
            default=d.history_days,
            show_default=True,
            help="Days of synthetic history before the study.",
        ),
        click.option(
            "--aol-log",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="The AOL click log (--world aol; default: the shared 1,000-user sample).",
        ),
        click.option(
            "--json",
            "json_path",
            type=click.Path(path_type=Path),
            default=None,
            help="Also write the results as JSON to this file.",
        ),
        click.option(
            "--out",
            "out_dir",
            type=click.Path(path_type=Path),
            default=None,
            help="Directory for the PNG plots and the markdown report.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func
