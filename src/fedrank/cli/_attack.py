"""The simulated poisoning options shared by ``fedrank frecency simulate``, ``fedrank foltr
train`` and ``fedrank fedps run`` (:mod:`fedrank.simulation.attacks`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from fedrank.errors import ConfigError
from fedrank.simulation.attacks import DEFAULT_CANDIDATES, DEFAULT_FACTOR, Attack
from fedrank.systems.system import System

_F = TypeVar("_F", bound=Callable[..., Any])


def attack_options(
    kinds: tuple[str, ...], who: str, *, es: bool = False, note: str = ""
) -> Callable[[_F], _F]:
    """``--malicious FRACTION``, ``--attack KIND`` (one of ``kinds``), ``--attack-factor``
    and, for FOLtR-ES (``es``), ``--attack-seeds M`` and ``--server-seeds``; ``who`` says
    which clients the fraction counts, ``note`` adds to the help of ``--attack``."""

    def decorate(func: _F) -> _F:
        options = [
            click.option(
                "--malicious",
                type=float,
                default=0.0,
                show_default=True,
                help=f"Share of {who} that is malicious, in [0, 1); needs --attack.",
            ),
            click.option(
                "--attack",
                type=click.Choice(kinds),
                default=None,
                help=f"What the malicious clients send{note} (docs/service.md, Poisoning).",
            ),
            click.option(
                "--attack-factor",
                type=float,
                default=None,
                help=f"--attack scale: the multiplier [default: {DEFAULT_FACTOR:g}].",
            ),
        ]
        if es:
            options += [
                click.option(
                    "--attack-seeds",
                    type=int,
                    default=None,
                    help="--attack targeted-seed: candidate seeds each attacker tries, m "
                    f"[default: {DEFAULT_CANDIDATES:,}].",
                ),
                click.option(
                    "--server-seeds",
                    is_flag=True,
                    default=False,
                    help="Defense: the server issues every client's seed, so an attacker "
                    "cannot choose it (FOLtR-ES).",
                ),
            ]
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def attack_from_options(
    system: System,
    malicious: float,
    attack: str | None,
    attack_factor: float | None,
    attack_seeds: int | None = None,
    server_seeds: bool = False,
) -> Attack | None:
    """The :class:`~fedrank.simulation.attacks.Attack` the options ask for (``None``: no
    attack), checked against ``system``; a clean usage error for a bad combination."""
    if not (0.0 <= malicious < 1.0):
        raise click.BadParameter(
            f"the malicious fraction must lie in [0, 1), got {malicious}", param_hint="--malicious"
        )
    if attack is None:
        if malicious > 0:
            raise click.UsageError("--malicious needs --attack (what the malicious clients send)")
        for flag, value in (
            ("--attack-factor", attack_factor),
            ("--attack-seeds", attack_seeds),
            ("--server-seeds", server_seeds or None),
        ):
            if value is not None:
                raise click.UsageError(f"{flag} needs --malicious FRACTION and --attack")
        return None
    if malicious == 0:
        raise click.UsageError(f"--attack {attack} needs --malicious FRACTION > 0")
    if attack_factor is not None and attack != "scale":
        raise click.UsageError(f"--attack-factor is the scale attack's; got --attack {attack}")
    if attack_seeds is not None and attack != "targeted-seed":
        raise click.UsageError(
            f"--attack-seeds is the targeted-seed attack's; got --attack {attack}"
        )
    try:
        result = Attack(
            fraction=malicious,
            kind=attack,
            factor=DEFAULT_FACTOR if attack_factor is None else attack_factor,
            candidates=DEFAULT_CANDIDATES if attack_seeds is None else attack_seeds,
            server_seeds=server_seeds,
        )
        result.check_system(system)
    except ConfigError as err:
        raise click.UsageError(str(err)) from err
    return result


def echo_attack(summary: dict[str, Any]) -> None:
    """One line on what an attack did (nothing without one)."""
    if not summary:
        return
    a = summary["attack"]
    line = (
        f"  attack: {100 * a['fraction']:g}% malicious ({a['kind']}): "
        f"{summary['malicious_messages']:,} of {summary['messages']:,} messages malicious, "
        f"{summary['refused_messages']:,} refused"
    )
    if a.get("server_seeds"):
        line += " (server-issued seeds)"
    click.echo(line)
