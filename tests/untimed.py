"""Results without their wall-clock times, for tests that compare two runs of the same
seeded work (in one process and elsewhere)."""

from __future__ import annotations


def untimed(value: object, drop: tuple[str, ...] = ()) -> object:
    """``value`` without any key naming seconds (``wall_seconds``, ``fit_seconds``, ...) and
    without the keys in ``drop``, at every depth."""
    if isinstance(value, dict):
        return {
            k: untimed(v, drop) for k, v in value.items() if "seconds" not in k and k not in drop
        }
    if isinstance(value, list):
        return [untimed(v, drop) for v in value]
    return value
