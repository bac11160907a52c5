"""``fedrank privacy ...``: what each system guarantees, per message, per round and per user
over a training run (docs/privacy.md); and the central-DP options of ``fedrank frecency
simulate`` (``--dp-epsilon``, ``--dp-delta``, ``--dp-clip``).

The accounting (:mod:`fedrank.privacy.accounting`) imports ``dp_accounting``, which takes
about a second to load, so it is imported only by the commands that use it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fedrank.cli._common import json_option, read_json, seed_option, write_json
from fedrank.privacy.report import SystemPrivacy, report_run

if TYPE_CHECKING:
    from fedrank.federation.privacy import PrivacyConfig

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``--dp-clip``'s default: about the 90th percentile of the classic model's update norms
#: (log scale) in the shifted preset, where over half the updates are exactly 0 and the
#: 75th percentile is 0.01-0.02 (docs/privacy.md, "Choosing the clip").
DEFAULT_DP_CLIP = 0.05
#: ``--dp-delta``'s default: below one over the largest simulated population (100,000).
DEFAULT_DP_DELTA = 1e-6
#: ``--dp-threshold``'s default: half the treatment users.
DEFAULT_DP_THRESHOLD = 0.5


# ---------------------------------------------------------------------- simulate's options


def dp_options(func: _F) -> _F:
    """``--dp-epsilon E`` (central DP on; the per-user budget over the iterations),
    ``--dp-delta D`` and ``--dp-clip C``."""
    options = [
        click.option(
            "--dp-epsilon",
            type=float,
            default=None,
            help="Central differential privacy: the server clips every update to --dp-clip, "
            "averages them unweighted and adds Gaussian noise calibrated so that each user's "
            "(epsilon, delta) over all iterations is at most this (docs/privacy.md). "
            "Default: off.",
        ),
        click.option(
            "--dp-delta",
            type=float,
            default=None,
            help=f"--dp-epsilon: delta, well below 1 / users. Default: {DEFAULT_DP_DELTA:g}.",
        ),
        click.option(
            "--dp-clip",
            type=float,
            default=None,
            help="--dp-epsilon: the L2 bound C of every update (classic model, log scale: "
            "about the 90th percentile of update norms); with --dp-clip-quantile, the first "
            f"iteration's. Default: {DEFAULT_DP_CLIP:g}.",
        ),
        click.option(
            "--dp-clip-quantile",
            type=float,
            default=None,
            help="--dp-epsilon: an adaptive clip that follows this quantile of the update "
            "norms, estimated privately from a noised count (Andrew et al. 2021). Frecency: "
            "above the share of zero updates (over half), e.g. 0.9. Default: a fixed clip.",
        ),
        click.option(
            "--dp-count-noise",
            type=float,
            default=None,
            help="--dp-clip-quantile: the standard deviation of the noise on the count of "
            "updates within the clip (default: the treatment users / 20, Andrew et al.'s "
            "choice).",
        ),
        click.option(
            "--dp-mode",
            type=click.Choice(["central", "distributed"]),
            default="central",
            show_default=True,
            help="--dp-epsilon: central (the server adds Gaussian noise) or distributed (the "
            "clients add Skellam noise under secure aggregation, as [privacy] mode = "
            "'distributed' in the service; Renyi DP accounting).",
        ),
        click.option(
            "--dp-threshold",
            type=float,
            default=None,
            help="--dp-mode distributed: the share of the treatment users whose noise an "
            "iteration's sum must hold (secure aggregation's threshold; fewer reports: the "
            f"iteration is aborted). Default: {DEFAULT_DP_THRESHOLD:g}.",
        ),
        click.option(
            "--dp-denominator",
            type=float,
            default=None,
            help="--dp-epsilon: divide each iteration's noised sum by this fixed number "
            "(about the treatment users) instead of the iteration's count, so that the model "
            "hides who took part (McMahan et al. 2018). Rprop steps on signs only, so it "
            "changes nothing there; it matters with --optimizer sgd or adam.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def dp_from_options(
    epsilon: float | None,
    delta: float | None = None,
    clip: float | None = None,
    clip_quantile: float | None = None,
    count_noise: float | None = None,
    denominator: float | None = None,
    mode: str = "central",
    threshold: float | None = None,
) -> PrivacyConfig | None:
    """The budget of ``--dp-epsilon/--dp-delta/--dp-clip``, the adaptive clip of
    ``--dp-clip-quantile/--dp-count-noise`` and the fixed ``--dp-denominator`` (``None``
    without ``--dp-epsilon``; any of the others without it is an error, so that no one
    believes a run private that is not)."""
    if epsilon is None:
        given = {
            "--dp-delta": delta, "--dp-clip": clip, "--dp-clip-quantile": clip_quantile,
            "--dp-count-noise": count_noise, "--dp-denominator": denominator,
            "--dp-threshold": threshold,
        }  # fmt: skip
        stray = [name for name, value in given.items() if value is not None]
        if stray:
            raise click.UsageError(
                f"{', '.join(stray)} set the differential privacy of --dp-epsilon, which is "
                "not given: give --dp-epsilon too (or drop them)"
            )
        if mode != "central":
            raise click.UsageError("--dp-mode distributed needs --dp-epsilon")
        return None
    if count_noise is not None and clip_quantile is None:
        raise click.UsageError(
            "--dp-count-noise belongs to the adaptive clip: give --dp-clip-quantile"
        )
    from fedrank.federation.privacy import PrivacyConfig

    return PrivacyConfig(
        epsilon=epsilon,
        delta=DEFAULT_DP_DELTA if delta is None else delta,
        clip=DEFAULT_DP_CLIP if clip is None else clip,
        clip_quantile=clip_quantile,
        count_noise=count_noise,
        denominator=denominator,
        mode=mode,
        threshold=DEFAULT_DP_THRESHOLD if threshold is None else threshold,
        accountant="rdp" if mode == "distributed" else "pld",
    )


def echo_privacy(privacy: dict[str, Any]) -> None:
    """One line on a run's central-DP guarantee (nothing without one)."""
    if not privacy:
        return
    click.echo(
        f"privacy: epsilon {privacy['epsilon']:.3f} (budget {privacy['target_epsilon']:g}) at "
        f"delta {privacy['delta']:g} per user over {privacy['rounds']} iterations "
        f"({privacy['accountant']}); noise multiplier {privacy['noise_multiplier']:.3f}, "
        f"clip {privacy['clip']:g}"
    )
    clips = privacy.get("clip_per_iteration")
    if clips:
        click.echo(
            f"adaptive clip (quantile {privacy['clip_quantile']:g}, count noise "
            f"{privacy['count_noise']:g}): {clips[0]:.4g} -> {clips[-1]:.4g}, the updates' "
            f"noise multiplier {privacy['update_noise_multiplier']:.3f}"
        )


# ---------------------------------------------------------------------- the report


def _show(value: dict[str, Any] | str) -> str:
    if isinstance(value, str):
        return value
    eps = "inf" if value["epsilon"] is None else f"{value['epsilon']:.5g}"
    delta = f", delta {value['delta']:g}" if value["delta"] else " (pure)"
    return f"epsilon {eps}{delta} over {value['rounds']} round(s)"


def echo_report(rows: list[SystemPrivacy]) -> None:
    for row in rows:
        params = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in row.parameters.items()
        )
        click.echo(f"{row.system}: {row.mechanism} ({params})")
        click.echo(f"  per message:          {_show(row.per_message)}")
        click.echo(f"  per round:            {_show(row.per_round)}")
        click.echo(f"  per user (training):  {_show(row.per_user)}")
        for note in row.notes:
            click.echo(f"  note: {note}")


@click.group(short_help="Privacy guarantees of the three systems.")
def privacy() -> None:
    """Privacy guarantees of the three systems (docs/privacy.md)."""


@privacy.command("report", short_help="Each system's privacy guarantee.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A server configuration (TOML, as `fedrank serve --config`).",
)
@click.option(
    "--run",
    "run_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A run's JSON (`fedrank frecency simulate --json`, `fedrank foltr train --json`).",
)
@click.option(
    "--rounds",
    type=int,
    default=None,
    help="--config: rounds a user takes part in, for the per-user figures.",
)
@json_option
def privacy_report(
    config_path: Path | None, run_path: Path | None, rounds: int | None, json_path: Path | None
) -> None:
    """Print each system's guarantee per message, per round and per user over the training,
    for a server configuration or a run's JSON."""
    if (config_path is None) == (run_path is None):
        raise click.UsageError("give exactly one of --config FILE and --run results.json")
    if rounds is not None and rounds < 1:
        raise click.BadParameter(f"must be >= 1, got {rounds}", param_hint="--rounds")
    if config_path is not None:
        from fedrank.server.config import load_config
        from fedrank.server.privacy import report_config

        rows = report_config(load_config(config_path), rounds)
    else:
        assert run_path is not None
        if rounds is not None:
            raise click.UsageError("--rounds applies to --config; a run knows its rounds")
        rows = report_run(read_json(run_path))
    echo_report(rows)
    if json_path:
        write_json({"systems": [r.to_json() for r in rows]}, json_path)
        click.echo(f"wrote {json_path}")


@privacy.command("audit", short_help="Empirical audit of the Gaussian mechanism.")
@click.option("--noise-multiplier", type=float, required=True, help="z of the audited mechanism.")
@click.option("--clip", type=float, default=1.0, show_default=True, help="C of every update.")
@click.option("--rounds", type=int, default=1, show_default=True, help="Rounds with the canary.")
@click.option("--trials", type=int, default=20_000, show_default=True, help="Runs per world.")
@click.option(
    "--delta",
    type=float,
    default=1e-5,
    show_default=True,
    help="Delta of the (epsilon, delta) guarantee audited.",
)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="1 - confidence.")
@seed_option
@json_option
def privacy_audit(
    noise_multiplier: float,
    clip: float,
    rounds: int,
    trials: int,
    delta: float,
    alpha: float,
    seed: int,
    json_path: Path | None,
) -> None:
    """Empirical audit of the central Gaussian mechanism: a lower bound on epsilon from a
    canary's membership test over many runs of DPStrategy's own code, beside the
    accountant's upper bound (docs/privacy.md, "Empirical audit")."""
    from fedrank.experiments.dp_audit import audit_gaussian
    from fedrank.privacy.accounting import gaussian_epsilon
    from fedrank.strategies.dp import DPStrategy
    from fedrank.systems.fedavg.config import FedAvgConfig
    from fedrank.systems.fedavg.strategy import FedAvgStrategy

    strategy = DPStrategy(FedAvgStrategy(FedAvgConfig(dim=4)), noise_multiplier, clip, seed)
    result = audit_gaussian(
        strategy, trials=trials, rounds=rounds, delta=delta, alpha=alpha, seed=seed
    )
    upper = gaussian_epsilon(noise_multiplier, delta, rounds)
    click.echo(
        f"audit of z = {noise_multiplier:g} over {rounds} round(s), {trials} trials per world: "
        f"epsilon >= {result.epsilon_lower:.3f} (confidence {1 - alpha:g}); accountant (PLD): "
        f"epsilon <= {upper:.3f} at delta {delta:g}"
    )
    if json_path:
        write_json({**result.to_json(), "epsilon_upper": upper}, json_path)
        click.echo(f"wrote {json_path}")
