"""Helpers shared by the ``fedrank`` commands: progress bars, JSON output, error handling."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedrank.core.json_io import write_json
from fedrank.errors import ConfigError, FedrankError

__all__ = [
    "EXIT_CODES",
    "FedrankGroup",
    "dask_options",
    "json_option",
    "name_options_in_errors",
    "progress_bar",
    "read_json",
    "seed_option",
    "write_json",
]

#: The one rule for exit codes, shown in ``fedrank --help``: click's own for usage errors.
EXIT_CODES = (
    "Exit codes: 0 success; 2 a usage error (an unknown option, a value an option does not "
    "accept, options that disagree, an invalid server.toml): fix the command; 1 a failure "
    "while running (a file that cannot be read or written, bad data, a server that cannot "
    "be reached)."
)


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    )


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise click.BadParameter(f"cannot read JSON from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a JSON object")
    return data


class FedrankGroup(click.Group):
    """Turns fedrank's own errors, and files that cannot be read or written, into a one-line
    message (no traceback) and the exit code of :data:`EXIT_CODES`: 2 for an invalid setting
    (:class:`~fedrank.errors.ConfigError`), 1 for any other failure."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as err:
            raise click.UsageError(str(err)) from err
        except FedrankError as err:
            raise click.ClickException(str(err)) from err
        except OSError as err:
            raise click.ClickException(f"{err.strerror or err}: {err.filename or ''}") from err


def _option_for(command: click.Command, field: str) -> click.Option | None:
    """The option of ``command`` that sets the configuration field ``field``: the one whose
    parameter name is the field's, or the field without its ``n_`` prefix."""
    for param in command.params:
        if isinstance(param, click.Option) and param.name in (field, field.removeprefix("n_")):
            return param
    return None


def _naming_options(command: click.Command) -> None:
    """Wrap ``command``'s callback so that a :class:`~fedrank.errors.ConfigError` about a
    field one of its options set names that option as the user typed it (``--users must be
    in 3..100000 (an integer), got -5``), as a usage error."""
    callback = command.callback
    if callback is None or getattr(callback, "_names_options", False):
        return

    def named(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except ConfigError as err:
            if err.field is None or err.requirement is None:
                raise
            option = _option_for(command, err.field)
            if option is None or option.name is None:
                raise
            given = click.get_current_context().params.get(option.name)
            if given is None or given != err.value:
                raise  # the failing value is not the one the user typed
            flag = max(option.opts, key=len)
            raise click.UsageError(f"{flag} {err.requirement}") from err

    named._names_options = True  # type: ignore[attr-defined]
    command.callback = named


def name_options_in_errors(command: click.Command) -> None:
    """Apply :func:`_naming_options` to ``command`` and every command under it: the one
    place where an invalid numeric option's message gets the option's name."""
    _naming_options(command)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            name_options_in_errors(sub)


def invocation() -> str:
    """The running command as a user would type it: ``fedrank``, the subcommand names, and
    every option whose value differs from its default (for reports that name the command
    that produced them)."""
    ctx = click.get_current_context()
    names: list[str] = []
    node: click.Context | None = ctx
    while node is not None and node.parent is not None:
        names.append(node.info_name or "")
        node = node.parent
    parts = ["fedrank", *reversed(names)]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = ctx.params.get(param.name)
        if value == param.default or value is None:
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            parts.append(flag if value else max(param.secondary_opts, key=len, default=""))
        else:
            parts.append(f"{flag} {value}")
    return " ".join(p for p in parts if p)


_F = TypeVar("_F", bound=Callable[..., Any])


def dask_options(what: str, note: str = "") -> Callable[[_F], _F]:
    """``--dask-workers N`` (a local cluster) and ``--dask-scheduler tcp://HOST:PORT`` (an
    existing one), the same on every command that runs on Dask; ``what`` says what runs
    there, ``note`` adds to both helps."""

    def decorate(func: _F) -> _F:
        func = click.option(
            "--dask-scheduler",
            default=None,
            help=f"run {what} on the Dask cluster at this address (tcp://HOST:PORT){note}",
        )(func)
        return click.option(
            "--dask-workers",
            type=int,
            default=None,
            help=f"run {what} on a local Dask cluster of this many workers{note}",
        )(func)

    return decorate


#: ``--json PATH``: the results also written as JSON (the same option on every command).
json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the results as JSON to this file.",
)
#: ``--seed N`` (default 0): every stochastic path of the command draws from it.
seed_option = click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Random seed (the same seed gives the same results).",
)
