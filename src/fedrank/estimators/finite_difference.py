"""Finite-difference gradient estimates of a black-box objective (Mozilla paper, Section 5.4).

Firefox's frecency is C++ code that the study could not change, so the gradient of the loss
with respect to the weights is approximated by evaluating the loss with each weight moved by
``eps``. The central scheme (the paper's choice, for numerical stability)

    g_i ~ (E(theta + eps e_i) - E(theta - eps e_i)) / (2 eps)

needs ``2 d`` evaluations (44 for the 22 frecency weights); the forward scheme
``(E(theta + eps e_i) - E(theta)) / eps`` needs ``d``. All evaluations are one vectorized call
of the objective on a ``(P, d)`` matrix of parameter vectors, so a scorer can evaluate every
perturbation of every search in one numpy pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from fedrank.core.message import Message
from fedrank.errors import ConfigError

#: ``objective(param_rows (P, d)) -> losses (P, S)``: the loss of every unit of local data
#: (for example every search) under every parameter vector.
BatchObjective = Callable[[np.ndarray], np.ndarray]

Scheme = Literal["central", "forward"]


class FiniteDifferenceEstimator:
    """Per-weight finite differences of a vectorized black-box objective.

    Args:
        eps: the perturbation ``epsilon`` (> 0), in the units of the weights.
        scheme: ``"central"`` (default, paper Sec. 5.4) or ``"forward"``.
    """

    def __init__(self, eps: float = 1.0, scheme: Scheme = "central") -> None:
        if not (np.isfinite(eps) and eps > 0):
            raise ConfigError(f"eps must be a finite number > 0, got {eps}")
        if scheme not in ("central", "forward"):
            raise ConfigError(f"scheme must be 'central' or 'forward', got {scheme!r}")
        self.eps = float(eps)
        self.scheme: Scheme = scheme

    def n_evaluations(self, dim: int) -> int:
        """Parameter vectors evaluated per estimate: the base point plus the perturbations."""
        return 1 + (2 * dim if self.scheme == "central" else dim)

    def parameter_rows(self, params: np.ndarray) -> np.ndarray:
        """``(P, d)``: ``theta`` first, then ``theta + eps e_i`` (and ``theta - eps e_i``)."""
        theta = np.asarray(params, dtype=np.float64)
        if theta.ndim != 1:
            raise ConfigError(f"params must be a 1-D vector, got shape {theta.shape}")
        shift = self.eps * np.eye(theta.size)
        parts = [theta[None, :], theta + shift]
        if self.scheme == "central":
            parts.append(theta - shift)
        return np.concatenate(parts, axis=0)

    def gradients(self, losses: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Turn the objective's ``(P, S)`` losses into ``(S, d)`` gradients and ``(S,)`` losses
        at ``theta``."""
        losses = np.asarray(losses, dtype=np.float64)
        if losses.shape[0] != self.n_evaluations(dim):
            raise ConfigError(
                f"expected {self.n_evaluations(dim)} rows of losses (one per parameter row), "
                f"got {losses.shape[0]}"
            )
        base = losses[0]
        plus = losses[1 : 1 + dim]
        if self.scheme == "central":
            minus = losses[1 + dim : 1 + 2 * dim]
            grad = (plus - minus) / (2.0 * self.eps)
        else:
            grad = (plus - base[None, :]) / self.eps
        return grad.T.copy(), base

    def estimate_units(
        self, params: np.ndarray, objective: BatchObjective
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gradient ``(S, d)`` and loss ``(S,)`` of every unit of local data."""
        rows = self.parameter_rows(params)
        return self.gradients(objective(rows), rows.shape[1])

    def estimate(
        self,
        params: np.ndarray,
        objective: BatchObjective,
        rng: np.random.Generator | None = None,
        model_version: int = 0,
    ) -> Message:
        """One client's message: the mean gradient over its ``n`` units, with ``n`` and its
        mean loss. (Finite differences are deterministic; ``rng`` is accepted for the
        :class:`~fedrank.core.protocols.Estimator` protocol.)"""
        grads, loss = self.estimate_units(params, objective)
        n = int(loss.shape[0])
        if n == 0:
            raise ConfigError("a client with no searches has nothing to report; skip it")
        return Message(
            update=grads.mean(axis=0),
            n=n,
            model_version=model_version,
            metrics={"loss": float(loss.mean())},
        )

    def estimate_clients(
        self,
        params: np.ndarray,
        objective: BatchObjective,
        client_of_unit: np.ndarray,
        n_clients: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Messages of many clients at once (the vectorized simulator's path).

        Returns ``(updates (C, d), n (C,), mean_loss (C,))``: each client's mean gradient
        over its own units, exactly as :meth:`estimate` would give it. Clients without units
        get ``n = 0`` and a zero update; callers drop them.
        """
        grads, loss = self.estimate_units(params, objective)
        client = np.asarray(client_of_unit, dtype=np.int64)
        n = np.bincount(client, minlength=n_clients).astype(np.int64)
        sums = np.zeros((n_clients, grads.shape[1]))
        np.add.at(sums, client, grads)
        loss_sum = np.bincount(client, weights=loss, minlength=n_clients)
        denom = np.maximum(n, 1)
        return sums / denom[:, None], n, loss_sum / denom
