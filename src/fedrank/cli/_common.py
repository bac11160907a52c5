"""Helpers shared by the ``fedrank`` commands: progress bars, JSON output, error handling."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedrank.errors import FedrankError


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    )


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _clean(obj: Any) -> Any:
    """NaN/inf are not JSON: write them as null."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise click.BadParameter(f"cannot read JSON from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a JSON object")
    return data


def write_json(data: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(data), indent=2, default=_json_default))


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
