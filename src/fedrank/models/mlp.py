"""Two-layer neural ranker (FOLtR-ES, Section 5: "a neural network with a single hidden
layer of size 10 and a ReLU non-linearity. All parameters of the models are initialized
with zeros").

``f(x) = w2 . relu(W1 x + b1)``: as in the reference implementation, the hidden layer has a
bias and the output layer does not. The flat parameter vector is ``[W1 (hidden x
n_features, row-major), b1 (hidden), w2 (hidden)]``: 480 parameters for 46 features.
With every parameter at zero the gradient of ``f`` is zero too, so gradient methods cannot
leave the initial point; Evolution Strategies can, because they perturb every parameter.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError


class TwoLayerRanker:
    """``f(x) = w2 . relu(W1 x + b1)`` with ``hidden`` units (10)."""

    name = "two-layer"

    def __init__(self, n_features: int, hidden: int = 10) -> None:
        if n_features < 1 or hidden < 1:
            raise ConfigError(f"need n_features >= 1 and hidden >= 1, got {n_features}, {hidden}")
        self.n_features = int(n_features)
        self.hidden = int(hidden)

    def __repr__(self) -> str:
        return f"TwoLayerRanker(n_features={self.n_features}, hidden={self.hidden})"

    @property
    def dim(self) -> int:
        return self.hidden * self.n_features + 2 * self.hidden

    def init_params(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Zeros (FOLtR-ES), or with ``rng`` a random start for gradient methods, which
        cannot leave the all-zero point: ``W1 ~ N(0, 1 / n_features)``, ``w2 ~ N(0, 1 /
        hidden)``, ``b1 = 0`` (Glorot-style scaling)."""
        if rng is None:
            return np.zeros(self.dim)
        h, f = self.hidden, self.n_features
        return np.concatenate(
            [rng.normal(0.0, f**-0.5, size=h * f), np.zeros(h), rng.normal(0.0, h**-0.5, size=h)]
        )

    def unpack(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(W1, b1, w2)`` views of flat parameters ``(..., dim)``: ``(..., hidden,
        n_features)``, ``(..., hidden)``, ``(..., hidden)``."""
        p = np.asarray(params)
        if p.shape[-1] != self.dim:
            raise ConfigError(f"expected {self.dim} parameters, got {p.shape[-1]}")
        h, f = self.hidden, self.n_features
        lead = p.shape[:-1]
        return (
            p[..., : h * f].reshape(*lead, h, f),
            p[..., h * f : h * f + h],
            p[..., h * f + h :],
        )

    def score(self, params: np.ndarray, features: np.ndarray) -> np.ndarray:
        w1, b1, w2 = (a.astype(np.float32, copy=False) for a in self.unpack(params))
        hidden = np.maximum(np.asarray(features, dtype=np.float32) @ w1.T + b1, 0.0)
        return hidden @ w2

    def _hidden_rows(self, params: np.ndarray, features: np.ndarray) -> tuple[np.ndarray, ...]:
        w1, b1, w2 = (a.astype(np.float32, copy=False) for a in self.unpack(params))
        x = np.asarray(features, dtype=np.float32)
        pre = np.matmul(x, np.swapaxes(w1, 1, 2)) + b1[:, None, :]
        return x, pre, w2

    def score_rows(self, params: np.ndarray, features: np.ndarray) -> np.ndarray:
        """``(I, W)`` scores, row ``i`` under parameters ``params[i]`` (``(I, dim)``)."""
        _, pre, w2 = self._hidden_rows(params, features)
        return np.einsum("iwh,ih->iw", np.maximum(pre, 0.0), w2)

    def vjp_rows(self, params: np.ndarray, features: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """``(I, dim)``: ``sum_w weights[i, w] * d f(features[i, w]) / d params[i]``."""
        x, pre, w2 = self._hidden_rows(params, features)
        wt = np.asarray(weights, dtype=np.float32)
        active = pre > 0
        grad_w2 = np.einsum("iw,iwh->ih", wt, np.where(active, pre, 0.0))
        delta = np.where(active, wt[:, :, None] * w2[:, None, :], 0.0)  # (I, W, H)
        grad_b1 = delta.sum(axis=1)
        grad_w1 = np.matmul(np.swapaxes(delta, 1, 2), x)  # (I, H, F)
        n = grad_w1.shape[0]
        return np.concatenate([grad_w1.reshape(n, -1), grad_b1, grad_w2], axis=1, dtype=np.float64)
