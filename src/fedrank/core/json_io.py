"""Writing results as JSON: numpy scalars and arrays become numbers and lists, and NaN or
infinity (which JSON lacks) become ``null``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def clean(obj: Any) -> Any:
    """NaN/inf are not JSON: write them as null."""
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def as_json_value(data: Any) -> Any:
    """``data`` as :func:`write_json` writes it and ``json.loads`` reads it back (for
    comparing a value with one read from a written file)."""
    return json.loads(json.dumps(clean(data), default=_json_default))


def write_json(data: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean(data), indent=2, default=_json_default))
