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

from abc import abstractmethod

import numpy as np
from scipy import special

from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.batch import BatchPrivatizer

#: Half the spacing of ``Generator.random``'s outputs (multiples of ``2**-53`` in [0, 1)).
_HALF_ULP = 2.0**-54


def _both_tails(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For uniforms ``u`` on the grid of ``Generator.random``, the point ``v = u + 2**-54``
    (strictly inside (0, 1)) as ``(v, 1 - v, v < 1/2)``, each exact where it is used: ``v``
    in the lower half, ``1 - v`` in the upper half (so quantiles keep their tails)."""
    low = u < 0.5
    v = np.where(low, u + _HALF_ULP, 0.25)
    tail = np.where(low, 0.25, (1.0 - u) - _HALF_ULP)
    return v, tail, low


def clip_l1(updates: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row of ``(C, d)`` down to L1 norm at most ``clip`` (float64 copy)."""
    mat = np.asarray(updates, dtype=np.float64)
    if not np.all(np.isfinite(mat)):
        raise DataFormatError("updates must be finite before clipping")
    norm = np.abs(mat).sum(axis=1, keepdims=True)
    return mat * np.minimum(1.0, clip / np.maximum(norm, np.finfo(np.float64).tiny))


class _LaplaceBase(BatchPrivatizer):
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

    #: Uniforms each noised coordinate takes (:meth:`noise_from_uniforms`).
    uniforms_per_entry: int = 1

    @abstractmethod
    def noise_from_uniforms(self, u: np.ndarray) -> np.ndarray:
        """``(C, d)`` noise from ``(C, uniforms_per_entry, d)`` uniforms in ``[0, 1)``, by
        inverse CDFs: the noise is a pure function of the uniforms, so a client whose
        uniforms are its own (:class:`~fedrank.core.client_random.ClientRandom`) adds the
        same noise wherever it runs."""

    def uniform_shape(self, shape: tuple[int, int]) -> tuple[int, int, int]:
        """The uniforms :meth:`privatize_uniforms` needs for ``(C, d)`` updates."""
        return (shape[0], self.uniforms_per_entry, shape[1])

    def privatize_batch(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clip and noise a ``(C, d)`` matrix of updates (the input's float dtype, float64
        for integers). Row ``i`` equals ``privatize`` of row ``i`` when the rows are
        privatized in order with the same generator."""
        mat = np.asarray(updates)
        if mat.ndim != 2:
            raise ConfigError(f"expected updates of shape (C, d), got shape {mat.shape}")
        return self.privatize_uniforms(mat, rng.random(self.uniform_shape(mat.shape)))

    def privatize_uniforms(self, updates: np.ndarray, u: np.ndarray) -> np.ndarray:
        """:meth:`privatize_batch` with the noise's uniforms given (:meth:`uniform_shape`)."""
        mat = np.asarray(updates)
        if mat.ndim != 2 or np.shape(u) != self.uniform_shape(mat.shape):
            raise ConfigError(
                f"expected updates of shape (C, d) and uniforms of shape (C, "
                f"{self.uniforms_per_entry}, d), got {mat.shape} and {np.shape(u)}"
            )
        dtype = mat.dtype if mat.dtype.kind == "f" else np.dtype(np.float64)
        noise = self.noise_from_uniforms(np.asarray(u, dtype=np.float64))
        return (clip_l1(mat, self.clip) + noise).astype(dtype, copy=False)


class LocalLaplace(_LaplaceBase):
    """``epsilon``-LDP per message: L1 clip to ``clip``, then ``Laplace(2 clip / epsilon)``
    on every coordinate (a :class:`~fedrank.core.protocols.Privatizer`)."""

    def __repr__(self) -> str:
        return f"LocalLaplace(clip={self.clip}, epsilon={self.epsilon_})"

    def noise_from_uniforms(self, u: np.ndarray) -> np.ndarray:
        v, tail, low = _both_tails(u[:, 0])
        return self.scale * np.where(low, np.log(2.0 * v), -np.log(2.0 * tail))


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

    uniforms_per_entry = 2

    def noise_from_uniforms(self, u: np.ndarray) -> np.ndarray:
        # Two Gamma(1/K, b) quantiles per coordinate, the upper half from its own tail.
        a = 1.0 / self.n_clients
        v, tail, low = _both_tails(u)
        g = np.where(low, special.gammaincinv(a, v), special.gammainccinv(a, tail)) * self.scale
        return g[:, 0] - g[:, 1]
