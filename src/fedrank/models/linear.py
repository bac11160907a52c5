"""Linear ranker without bias (FOLtR-ES, Section 5: "a linear ranker without the bias
term ... initialized with zeros"): ``f(x) = w . x``."""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError


class LinearRanker:
    """``f(x) = w . x``; parameters are the ``n_features`` weights.

    All scoring is float32, as the reference implementation's (PyTorch float32) models.
    """

    name = "linear"

    def __init__(self, n_features: int) -> None:
        if n_features < 1:
            raise ConfigError(f"n_features must be >= 1, got {n_features}")
        self.n_features = int(n_features)

    def __repr__(self) -> str:
        return f"LinearRanker(n_features={self.n_features})"

    @property
    def dim(self) -> int:
        return self.n_features

    def init_params(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Zeros (float64: the server keeps parameters and optimizer state in float64). A
        linear model needs no random start, so ``rng`` is accepted and unused."""
        return np.zeros(self.dim)

    def score(self, params: np.ndarray, features: np.ndarray) -> np.ndarray:
        """Scores ``(...)`` of documents ``(..., n_features)`` under one parameter vector."""
        return np.asarray(features, dtype=np.float32) @ np.asarray(params, dtype=np.float32)

    def score_rows(self, params: np.ndarray, features: np.ndarray) -> np.ndarray:
        """``(I, W)`` scores of ``features`` ``(I, W, n_features)``, row ``i`` under its own
        parameters ``params[i]`` (``(I, dim)``)."""
        return np.einsum(
            "iwf,if->iw",
            np.asarray(features, dtype=np.float32),
            np.asarray(params, dtype=np.float32),
        )

    def vjp_rows(self, params: np.ndarray, features: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """``(I, dim)``: ``sum_w weights[i, w] * d f(features[i, w]) / d params[i]``."""
        return np.einsum(
            "iwf,iw->if",
            np.asarray(features, dtype=np.float64),
            np.asarray(weights, dtype=np.float64),
        )
