"""Which run wrote a JSON: every fedrank command's JSON told apart by its keys."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedrank.errors import FedrankError


class ReportError(FedrankError):
    """A run JSON that cannot be reported: missing, not JSON, or of no known kind."""


#: Kind name -> (what wrote it, test on the JSON's content). The first that matches wins,
#: so the more specific tests come first (the demo's JSON also holds ``config``).
KINDS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "demo": (
        "fedrank demo",
        lambda d: "server_status" in d and "loss_per_iteration" in d and "eval" in d,
    ),
    "frecency-simulate": (
        "fedrank frecency simulate",
        lambda d: "branch_loss_per_iteration" in d and "eval" in d and "paper_eval" in d,
    ),
    "foltr-train": (
        "fedrank foltr train",
        lambda d: "batch_maxrr" in d and "expected_maxrr" in d,
    ),
    "foltr-reproduce": (
        "fedrank foltr reproduce",
        lambda d: "exploration" in d and "dataset" in d,
    ),
    "fedps-run": (
        "fedrank fedps run",
        lambda d: "mode" in d and isinstance(d.get("runs"), list),
    ),
    "fedps-reproduce": (
        "fedrank fedps reproduce",
        lambda d: "summary" in d and "runs" in d and isinstance(d.get("runs"), dict),
    ),
}


def detect_kind(data: Any, source: str) -> str:
    """The kind of the run JSON ``data`` (read from ``source``, named in the error).

    Raises:
        ReportError: ``data`` is no run JSON of a command in :data:`KINDS`.
    """
    if isinstance(data, dict):
        for kind, (_, test) in KINDS.items():
            if test(data):
                return kind
    known = ", ".join(command for command, _ in KINDS.values())
    raise ReportError(f"{source}: not the JSON of a fedrank run (known: {known})")


def read_run(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        ReportError: ``path`` is missing or unreadable, not JSON, or not an object.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file; give the JSON a fedrank run wrote") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"{path}: not JSON (line {exc.lineno}: {exc.msg}); give the JSON a fedrank run wrote"
        ) from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: holds a JSON {type(data).__name__}, not a run's object")
    return data
