"""The 22 tunable weights of classic Firefox frecency (paper Section 4, blog "Optimizing
Frecency"), named as Firefox's ``places.frecency.*`` preferences, with their defaults.

Parameters travel as flat float64 vectors in :data:`CLASSIC_WEIGHT_NAMES` order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedrank.errors import ConfigError

#: Preference prefix shared by every classic frecency weight.
PREF_PREFIX = "places.frecency."

#: (name, Firefox default) in parameter-vector order.
CLASSIC_DEFAULTS: tuple[tuple[str, float], ...] = (
    ("firstBucketCutoff", 4.0),
    ("secondBucketCutoff", 14.0),
    ("thirdBucketCutoff", 31.0),
    ("fourthBucketCutoff", 90.0),
    ("firstBucketWeight", 100.0),
    ("secondBucketWeight", 70.0),
    ("thirdBucketWeight", 50.0),
    ("fourthBucketWeight", 30.0),
    ("defaultBucketWeight", 10.0),
    ("embedVisitBonus", 0.0),
    ("framedLinkVisitBonus", 0.0),
    ("linkVisitBonus", 100.0),
    ("typedVisitBonus", 2000.0),
    ("bookmarkVisitBonus", 75.0),
    ("downloadVisitBonus", 0.0),
    ("permRedirectVisitBonus", 0.0),
    ("tempRedirectVisitBonus", 0.0),
    ("redirectSourceVisitBonus", 25.0),
    ("defaultVisitBonus", 0.0),
    ("reloadVisitBonus", 0.0),
    ("unvisitedBookmarkBonus", 140.0),
    ("unvisitedTypedBonus", 200.0),
)

CLASSIC_WEIGHT_NAMES: tuple[str, ...] = tuple(name for name, _ in CLASSIC_DEFAULTS)
N_CLASSIC_WEIGHTS = len(CLASSIC_WEIGHT_NAMES)
CLASSIC_INDEX: dict[str, int] = {name: i for i, name in enumerate(CLASSIC_WEIGHT_NAMES)}

#: Index ranges of the weight groups.
CUTOFF_SLICE = slice(0, 4)
BUCKET_WEIGHT_SLICE = slice(4, 9)
VISIT_BONUS_SLICE = slice(9, 20)


def classic_defaults() -> np.ndarray:
    """Firefox's default classic weights as a float64 vector (a fresh copy)."""
    return np.array([value for _, value in CLASSIC_DEFAULTS], dtype=np.float64)


def weights_to_dict(params: np.ndarray) -> dict[str, float]:
    """``{name: value}`` for a classic parameter vector."""
    vec = np.asarray(params, dtype=np.float64)
    if vec.shape != (N_CLASSIC_WEIGHTS,):
        raise ConfigError(
            f"a classic frecency parameter vector has {N_CLASSIC_WEIGHTS} entries, got shape "
            f"{vec.shape}"
        )
    return {name: float(v) for name, v in zip(CLASSIC_WEIGHT_NAMES, vec, strict=True)}


def weights_from_dict(values: Mapping[str, float], base: np.ndarray | None = None) -> np.ndarray:
    """A parameter vector from ``{name: value}``; names may carry the ``places.frecency.``
    prefix. Missing names keep ``base`` (default: Firefox defaults); unknown names raise."""
    vec = classic_defaults() if base is None else np.array(base, dtype=np.float64)
    for key, value in values.items():
        name = key.removeprefix(PREF_PREFIX)
        if name not in CLASSIC_INDEX:
            raise ConfigError(
                f"unknown frecency weight {key!r}; valid names are "
                f"{', '.join(CLASSIC_WEIGHT_NAMES)} (optionally prefixed {PREF_PREFIX!r})"
            )
        vec[CLASSIC_INDEX[name]] = float(value)
    return vec
