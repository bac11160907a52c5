"""Helpers shared by the ``fedrank`` commands: progress bars, JSON output, error handling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedrank.core.json_io import write_json
from fedrank.errors import FedrankError

__all__ = ["FedrankGroup", "progress_bar", "read_json", "write_json"]


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
