"""Helpers shared by the ``fedrank`` commands: progress bars, JSON output, error handling."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedrank.core.json_io import write_json
from fedrank.errors import FedrankError

__all__ = ["FedrankGroup", "dask_options", "progress_bar", "read_json", "write_json"]


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
    message and exit code 1 (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FedrankError as err:
            raise click.ClickException(str(err)) from err
        except OSError as err:
            raise click.ClickException(f"{err.strerror or err}: {err.filename or ''}") from err


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
