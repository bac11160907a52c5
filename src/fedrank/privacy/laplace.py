"""Laplace-mechanism privatizers for model updates (the optional DP of FPDGD).

Both clip the update to an L1 ball of radius ``clip`` first, so that replacing one client's
data moves its update by at most ``2 * clip`` in L1 norm (the sensitivity), and add noise
of scale ``b = 2 * clip / epsilon`` (Dwork and Roth 2014, Theorem 3.6):

* :class:`LocalLaplace` adds ``Laplace(b)`` to every coordinate of every message: each
  message on its own is ``epsilon``-locally differentially private, whatever the server
  does. Strong, and very noisy.
* :class:`DistributedLaplace` is the mechanism of FPDGD (Wang et al., ICTIR 2021): each of
  the ``K`` clients of an iteration adds ``Gamma(1/K, b) - Gamma(1/K, b)`` per coordinate.
  The Laplace distribution is infinitely divisible, so the *sum* of the ``K`` shares is
  exactly ``Laplace(b)``: the aggregate (and the model computed from it) is
  ``epsilon``-differentially private with respect to any one client's data. This holds only
  if all ``K`` clients add their share and nobody sees the individual messages (secure
  aggregation): one message alone carries only a ``1/K`` share of the noise, and with fewer
  than ``K`` participants the guarantee weakens. ``epsilon()`` states the aggregate's
  guarantee under those assumptions.

FPDGD's published code clips the *L2* norm of the model weights to the sensitivity ``S``
and uses scale ``S / epsilon``; an L2 bound does not bound the L1 change that the Laplace
mechanism needs (it can be up to ``2 S sqrt(d)``), so the stated epsilon understates the
privacy loss there. Here the clip is in L1 and the scale includes the factor 2.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace

import numpy as np

from fedrank.core.message import Message
from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim.serialization import check_hyperparameter


def clip_l1(updates: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row of ``(C, d)`` down to L1 norm at most ``clip`` (float64 copy)."""
    mat = np.asarray(updates, dtype=np.float64)
    if not np.all(np.isfinite(mat)):
        raise DataFormatError("updates must be finite before clipping")
    norm = np.abs(mat).sum(axis=1, keepdims=True)
    return mat * np.minimum(1.0, clip / np.maximum(norm, np.finfo(np.float64).tiny))


class _LaplaceBase(ABC):
    """L1 clipping plus noise of scale ``2 clip / epsilon``; subclasses draw the noise."""

    def __init__(self, clip: float, epsilon: float) -> None:
        self.clip = check_hyperparameter("clip", clip, low=0.0)
        self.epsilon_ = check_hyperparameter("epsilon", epsilon, low=0.0)

    #: The :mod:`fedrank.core.codec` encoding that carries the output exactly.
    encoding = "float64"

    @property
    def scale(self) -> float:
        """The Laplace scale ``b = 2 clip / epsilon``."""
        return 2.0 * self.clip / self.epsilon_

    def epsilon(self) -> float:
        return self.epsilon_

    @abstractmethod
    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Noise of the given shape."""

    def privatize_batch(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clip and noise a ``(C, d)`` matrix of updates (the input's float dtype, float64
        for integers). Row ``i`` equals ``privatize`` of row ``i`` when the rows are
        privatized in order with the same generator."""
        mat = np.asarray(updates)
        if mat.ndim != 2:
            raise ConfigError(f"expected updates of shape (C, d), got shape {mat.shape}")
        dtype = mat.dtype if mat.dtype.kind == "f" else np.dtype(np.float64)
        return (clip_l1(mat, self.clip) + self._noise(mat.shape, rng)).astype(dtype, copy=False)

    def privatize(self, message: Message, rng: np.random.Generator) -> Message:
        """A copy of ``message`` with its update clipped and noised."""
        update = np.asarray(message.update)
        if update.ndim != 1:
            raise ConfigError(f"expected a 1-D update vector, got shape {update.shape}")
        out = self.privatize_batch(update[None, :], rng)[0]
        return replace(message, update=out, metrics=dict(message.metrics))


class LocalLaplace(_LaplaceBase):
    """``epsilon``-LDP per message: L1 clip to ``clip``, then ``Laplace(2 clip / epsilon)``
    on every coordinate (a :class:`~fedrank.core.protocols.Privatizer`)."""

    def __repr__(self) -> str:
        return f"LocalLaplace(clip={self.clip}, epsilon={self.epsilon_})"

    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.laplace(0.0, self.scale, size=shape)


class DistributedLaplace(_LaplaceBase):
    """FPDGD's distributed Laplace noise: ``epsilon``-DP of the sum of ``n_clients``
    clipped updates (see the module docstring for the assumptions).

    Args:
        clip: L1 radius each update is clipped to.
        epsilon: the aggregate's privacy parameter.
        n_clients: ``K``, the clients whose shares add up to one Laplace draw.
    """

    def __init__(self, clip: float, epsilon: float, n_clients: int) -> None:
        super().__init__(clip, epsilon)
        if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
            raise ConfigError(f"n_clients must be a positive integer, got {n_clients!r}")
        self.n_clients = n_clients

    def __repr__(self) -> str:
        return (
            f"DistributedLaplace(clip={self.clip}, epsilon={self.epsilon_}, "
            f"n_clients={self.n_clients})"
        )

    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        # Both gammas of a row in one call: a row's draws are contiguous in the stream.
        g = rng.gamma(1.0 / self.n_clients, self.scale, size=(shape[0], 2, *shape[1:]))
        return g[:, 0] - g[:, 1]
