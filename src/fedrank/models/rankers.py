"""The LETOR rankers by name, for configurations and the command line."""

from __future__ import annotations

from fedrank.errors import ConfigError
from fedrank.models.linear import LinearRanker
from fedrank.models.mlp import TwoLayerRanker

Ranker = LinearRanker | TwoLayerRanker

#: Names accepted by :func:`make_ranker`.
RANKER_NAMES: tuple[str, ...] = ("linear", "two-layer")


def make_ranker(name: str, n_features: int) -> Ranker:
    """``linear`` (no bias) or ``two-layer`` (hidden 10, ReLU), zero-initialized."""
    if name == "linear":
        return LinearRanker(n_features)
    if name == "two-layer":
        return TwoLayerRanker(n_features)
    raise ConfigError(f"unknown ranker {name!r}; choose one of {', '.join(RANKER_NAMES)}")
