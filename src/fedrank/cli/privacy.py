"""``fedrank privacy ...``: what each system guarantees, per message, per round and per user
over a training run (docs/privacy.md); and the central-DP options of ``fedrank frecency
simulate`` (``--dp-epsilon``, ``--dp-delta``, ``--dp-clip``).

The accounting (:mod:`fedrank.privacy.accounting`) imports ``dp_accounting``, which takes
about a second to load, so it is imported only by the commands that use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fedrank.cli._common import read_json, write_json
from fedrank.errors import ConfigError

if TYPE_CHECKING:
    from fedrank.server.config import ServerConfig
    from fedrank.strategies.dp import DPConfig

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``--dp-clip``'s default: about the 90th percentile of the classic model's update norms
#: (log scale) in the shifted preset, where over half the updates are exactly 0 and the
#: 75th percentile is 0.01-0.02 (docs/privacy.md, "Choosing the clip").
DEFAULT_DP_CLIP = 0.05
#: ``--dp-delta``'s default: below one over the largest simulated population (50,000).
DEFAULT_DP_DELTA = 1e-6


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
            default=DEFAULT_DP_DELTA,
            show_default=True,
            help="--dp-epsilon: delta, well below 1 / users.",
        ),
        click.option(
            "--dp-clip",
            type=float,
            default=DEFAULT_DP_CLIP,
            show_default=True,
            help="--dp-epsilon: the L2 bound C of every update (classic model, log scale: "
            "about the 90th percentile of update norms).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def dp_from_options(epsilon: float | None, delta: float, clip: float) -> DPConfig | None:
    """The budget of ``--dp-epsilon/--dp-delta/--dp-clip`` (``None`` without
    ``--dp-epsilon``)."""
    if epsilon is None:
        return None
    from fedrank.strategies.dp import DPConfig

    return DPConfig(epsilon=epsilon, delta=delta, clip=clip)


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


# ---------------------------------------------------------------------- the report


@dataclass
class SystemPrivacy:
    """One system's guarantees. Each of ``per_message``, ``per_round``, ``per_user`` is a
    ``{"epsilon", "delta", "rounds"}`` dict, or a string saying why it is not available."""

    system: str
    mechanism: str
    parameters: dict[str, Any]
    per_message: dict[str, Any] | str
    per_round: dict[str, Any] | str
    per_user: dict[str, Any] | str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "mechanism": self.mechanism,
            "parameters": self.parameters,
            "per_message": self.per_message,
            "per_round": self.per_round,
            "per_user": self.per_user,
            "notes": self.notes,
        }


def _figure(epsilon: float, delta: float, rounds: int) -> dict[str, Any]:
    return {
        "epsilon": epsilon if math.isfinite(epsilon) else None,
        "delta": delta,
        "rounds": rounds,
    }


_CENTRAL_MESSAGE = (
    "none: central DP protects the aggregate, not the message; the server sees every "
    "clipped update (secure aggregation, src/fedrank/secagg, would hide it: not wired in)"
)
_NO_MECHANISM = "none: no privacy mechanism"


def _no_privacy(system: str, parameters: dict[str, Any], why: str) -> SystemPrivacy:
    return SystemPrivacy(system, "none", parameters, why, _NO_MECHANISM, _NO_MECHANISM)


def frecency_privacy(config: dict[str, Any], privacy: dict[str, Any] | None) -> SystemPrivacy:
    """Federated frecency: the central Gaussian mechanism of a run's ``privacy`` block, or
    no guarantee (full gradients; sign messages are a deterministic compression)."""
    message = config.get("message", "full")
    if not privacy:
        why = (
            "none: sign messages are a deterministic compression (2 bits per weight), "
            "not differential privacy"
            if message == "sign"
            else "none: the full gradient is sent as computed"
        )
        return _no_privacy("frecency", {"message": message}, why)
    from fedrank.privacy.accounting import gaussian_epsilon

    z, delta, rounds = privacy["noise_multiplier"], privacy["delta"], privacy["rounds"]
    accountant = privacy.get("accountant", "pld")
    one = gaussian_epsilon(z, delta, 1, privacy.get("sampling_rate", 1.0), accountant)
    notes = [
        f"adjacency: {privacy.get('adjacency', 'add-or-remove one user')}; the number of "
        "updates per iteration is not protected",
        "sampling_rate 1.0: every user is counted in every iteration (users report when "
        "they search, not by a random sample the server draws), so no amplification by "
        "subsampling is claimed",
    ]
    if "epsilon_replace_one" in privacy:
        notes.append(
            f"replace-one adjacency (same participants): epsilon "
            f"{privacy['epsilon_replace_one']:.3f} over {rounds} iterations"
        )
    for other in ("rdp", "pld"):
        if f"epsilon_{other}" in privacy:
            notes.append(f"{other} accountant: epsilon {privacy[f'epsilon_{other}']:.3f}")
    return SystemPrivacy(
        "frecency",
        "gaussian (central)",
        {
            "noise_multiplier": z,
            "clip": privacy["clip"],
            "delta": delta,
            "accountant": accountant,
            "message": message,
        },
        _CENTRAL_MESSAGE,
        _figure(one, delta, 1),
        _figure(privacy["epsilon"], delta, rounds),
        notes,
    )


def foltr_es_privacy(p: float | None, batch: int, rounds: int | None) -> SystemPrivacy:
    """FOLtR-ES: randomized response over MaxRR's ``n = 11`` values, ``B = batch`` values per
    message, one message per round a client takes part in (``rounds``: the rounds of the
    training, if known)."""
    from fedrank.privacy.accounting import (
        randomized_response_epsilon,
        randomized_response_message_epsilon,
    )
    from fedrank.strategies.foltr_es import MAXRR_VALUES

    n = MAXRR_VALUES
    parameters = {"p": p, "n": n, "B": batch}
    if p is None or p >= 1.0:
        return _no_privacy(
            "foltr-es", parameters, "none: p = 1, the true metric is sent (epsilon infinite)"
        )
    per_value = randomized_response_epsilon(p, n)
    per_message = randomized_response_message_epsilon(p, n, batch)
    notes = [
        f"each interaction value: epsilon = ln(p (n - 1) / (1 - p)) = {per_value:.4f} "
        "(FOLtR-ES Eq. 10), local DP: holds against the server",
        f"a message of B = {batch} values: B x epsilon by basic composition (an upper bound)",
    ]
    if rounds is None:
        per_user: dict[str, Any] | str = (
            f"k x {per_message:.4f} for a user who takes part in k rounds (give --rounds; the "
            "server does not cap k: per-user budget refusal is not built)"
        )
    else:
        per_user = _figure(rounds * per_message, 0.0, rounds)
        notes.append(
            f"per user: a user in all {rounds} rounds (the simulator draws every client's "
            "queries afresh each iteration, so its client slots are not persistent users; "
            "a real user who takes part in k rounds has k x the per-message epsilon)"
        )
    return SystemPrivacy(
        "foltr-es",
        "randomized response (local)",
        parameters,
        _figure(per_message, 0.0, 1),
        _figure(per_message, 0.0, 1),
        per_user,
        notes,
    )


def fpdgd_privacy(config: dict[str, Any], rounds: int) -> SystemPrivacy:
    """FPDGD's optional Laplace mechanism (:mod:`fedrank.privacy.laplace`)."""
    mode, eps = config.get("dp", "none"), float(config.get("dp_epsilon", 0.0))
    parameters = {"dp": mode, "dp_epsilon": eps, "dp_clip": config.get("dp_clip")}
    if mode == "none":
        return _no_privacy("fpdgd", parameters, "none: the model delta is sent as computed")
    if mode == "local":
        return SystemPrivacy(
            "fpdgd",
            "laplace (local)",
            parameters,
            _figure(eps, 0.0, 1),
            _figure(eps, 0.0, 1),
            _figure(rounds * eps, 0.0, rounds),
            ["per user: basic composition over the rounds, a client in every round"],
        )
    return SystemPrivacy(
        "fpdgd",
        "laplace (distributed, FPDGD)",
        parameters,
        "none: one message carries only a 1/K share of the noise",
        _figure(eps, 0.0, 1),
        _figure(rounds * eps, 0.0, rounds),
        [
            "holds only if all K clients add their share and nobody sees single messages "
            "(secure aggregation)",
            "per user: basic composition over the rounds, a client in every round",
        ],
    )


def report_run(data: dict[str, Any]) -> list[SystemPrivacy]:
    """The guarantees of a run's JSON: ``fedrank frecency simulate --json`` or ``fedrank
    foltr train --json``."""
    config = data.get("config")
    if not isinstance(config, dict):
        raise ConfigError(
            "the run JSON has no config object: give the JSON of `fedrank frecency simulate "
            "--json` or `fedrank foltr train --json`"
        )
    if "loss_per_iteration" in data and "preset" in config:
        return [frecency_privacy(config, data.get("privacy"))]
    if "algorithm" in config and "batch_maxrr" in data:
        rounds = int(data.get("iterations", len(data["batch_maxrr"])))
        if config["algorithm"] == "fpdgd":
            return [fpdgd_privacy(config, rounds)]
        return [foltr_es_privacy(config.get("p"), int(config.get("batch", 4)), rounds)]
    raise ConfigError(
        "not a run JSON this report knows: give the JSON of `fedrank frecency simulate "
        "--json` or `fedrank foltr train --json` (FedPS runs have no privacy mechanism)"
    )


def report_config(config: ServerConfig, rounds: int | None) -> list[SystemPrivacy]:
    """The guarantees of a server configured by ``config`` (its workload)."""
    workload = config.workload
    notes = ["central DP (fedrank.strategies.dp) is not wired into the server yet"]
    if workload == "foltr-es":
        out = foltr_es_privacy(config.foltr_es.p, config.foltr_es.batch, rounds)
    elif workload == "frecency":
        fc = config.frecency
        out = frecency_privacy({"message": fc.message}, None)
        if fc.norm_bound:
            notes.append(f"norm_bound {fc.norm_bound:g} clips updates; clipping alone is not DP")
    else:
        out = _no_privacy(
            "fedavg", {"dim": config.fedavg.dim}, "none: the model delta is sent as computed"
        )
    out.notes.extend(notes)
    return [out]


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


@click.group()
def privacy() -> None:
    """Privacy guarantees of the three systems (docs/privacy.md)."""


@privacy.command("report")
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
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
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
