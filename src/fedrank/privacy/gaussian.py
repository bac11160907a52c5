"""The Gaussian mechanism on a sum of L2-clipped updates: central differential privacy of an
aggregate (Abadi et al. 2016, "Deep Learning with Differential Privacy", CCS, Algorithm 1;
McMahan et al. 2018, "Learning Differentially Private Recurrent Language Models", ICLR,
Algorithm 1, DP-FedAvg).

Every update ``u_i`` of a round is scaled down to L2 norm at most ``C``
(:func:`fedrank.privacy.clipping.clip_l2`); the server releases

    S~ = sum_i clip(u_i, C) + N(0, (z C)^2 I_d)

and uses ``S~ / m`` as the round's mean, ``m`` the number of updates: the unweighted mean of
the clipped updates plus ``N(0, (z C / m)^2 I_d)``. With one update per user and round,
adding or removing one user's data moves the sum by at most ``C`` in L2 norm (its
sensitivity), so ``S~`` is the Gaussian mechanism with noise multiplier ``z``: the
``dp_accounting.GaussianDpEvent(z)`` of sensitivity 1, composed over the rounds by
:mod:`fedrank.privacy.accounting`. Dividing by ``m`` is post-processing when ``m`` is public
(the count of a round's participants is not protected: see docs/privacy.md).

Why an *unweighted* mean: in the weighted mean ``sum n_i u_i / sum n_i`` one user moves the
result by up to ``n_i C / sum_j n_j``, which depends on its own (self-reported) weight and
on everyone else's, so no fixed noise level covers it; McMahan et al. cap the weights and
divide by a fixed denominator instead. Here every user weighs the same.

The noise comes from a ``numpy.random.Generator`` the caller seeds (reproducible runs). That
is right for simulation, not for a deployment: numpy's PCG64 is not a cryptographically
secure generator, and floating-point Gaussian samples leak through their low bits (Mironov
2012 showed it for the Laplace mechanism). Given a
:class:`~fedrank.privacy.discrete_gaussian.KeyStream` instead, :meth:`noisy_mean` rounds the
sum to a lattice and adds discrete Gaussian noise sampled exactly from a CSPRNG (Canonne,
Kamath & Steinke 2020; :class:`~fedrank.privacy.discrete_gaussian.LatticeGaussian`), with
the Renyi guarantee of the same multiplier.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.accounting import PrivacyGuarantee, gaussian_guarantee
from fedrank.privacy.clipping import clip_l2
from fedrank.privacy.discrete_gaussian import KeyStream, LatticeGaussian


class GaussianSumMechanism:
    """Gaussian noise of standard deviation ``noise_multiplier * clip`` on a sum of updates
    clipped to L2 norm ``clip`` (module docstring).

    Args:
        clip: ``C``, the L2 bound of every update (> 0).
        noise_multiplier: ``z``, the noise's standard deviation over ``C`` (> 0).
    """

    def __init__(self, clip: float, noise_multiplier: float) -> None:
        self.clip = check_hyperparameter("clip (the L2 bound C of every update)", clip)
        self.noise_multiplier = check_hyperparameter(
            "noise_multiplier (z: the noise's standard deviation over the clip C)",
            noise_multiplier,
        )

    def __repr__(self) -> str:
        return (
            f"GaussianSumMechanism(clip={self.clip:g}, noise_multiplier={self.noise_multiplier:g})"
        )

    @property
    def sum_std(self) -> float:
        """The noise's standard deviation on the sum, per coordinate: ``z C``."""
        return self.noise_multiplier * self.clip

    def mean_std(self, count: int, denominator: float | None = None) -> float:
        """The noise's standard deviation on the mean of ``count`` updates, per coordinate:
        ``z C / count`` (``z C`` for ``count = 0``, whose mean :meth:`noisy_mean` leaves
        at 0), or ``z C / denominator`` with a fixed denominator."""
        if count < 0:
            raise ConfigError(f"count (updates in the round) must be >= 0, got {count}")
        if denominator is not None:
            return self.sum_std / denominator
        return self.sum_std / max(int(count), 1)

    def noise(self, dim: int, rng: np.random.Generator) -> np.ndarray:
        """One draw of the sum's noise: ``N(0, (z C)^2)`` in each of ``dim`` coordinates
        (float64)."""
        return rng.normal(0.0, self.sum_std, size=int(dim))

    def noisy_mean(
        self,
        total: np.ndarray,
        count: int,
        rng: np.random.Generator | KeyStream,
        denominator: float | None = None,
    ) -> np.ndarray:
        """``(total + noise) / count`` for ``total`` the sum of ``count`` updates already
        clipped to ``clip``: their mean plus ``N(0, (z C / count)^2)`` per coordinate. An
        empty round (``count = 0``) gives zeros, no step (its count is public: nothing to
        hide); its noise is drawn all the same, so every round takes the same numbers from
        ``rng``. With a fixed ``denominator`` ``W`` (McMahan et al. 2018): ``(total +
        noise) / W`` every round, an empty one included, so the result depends on the
        noised sum only and not on ``count``. ``rng`` a
        :class:`~fedrank.privacy.discrete_gaussian.KeyStream`: the secure noise (module
        docstring) instead of numpy's normals."""
        vec = np.asarray(total, dtype=np.float64)
        if vec.ndim != 1:
            raise ConfigError(f"total must be a vector (the sum of updates), got {vec.shape}")
        if count < 0:
            raise ConfigError(f"count (updates in the round) must be >= 0, got {count}")
        if isinstance(rng, KeyStream):
            noised = LatticeGaussian(self.clip, self.noise_multiplier, vec.size).noised_sum(
                vec, rng
            )
        else:
            noised = vec + self.noise(vec.size, rng)
        if denominator is not None:
            return noised / denominator
        if count == 0:
            return np.zeros(vec.size)
        return noised / int(count)

    def privatize(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The noisy unweighted mean of ``(m, d)`` raw ``updates``: each row clipped to
        ``clip``, summed, :meth:`noisy_mean`."""
        mat = np.asarray(updates, dtype=np.float64)
        if mat.ndim != 2:
            raise ConfigError(f"updates must have shape (m, d), got {mat.shape}")
        total = clip_l2(mat, self.clip).sum(axis=0) if mat.shape[0] else np.zeros(mat.shape[1])
        return self.noisy_mean(total, mat.shape[0], rng)

    def guarantee(
        self, delta: float, rounds: int, sampling_rate: float = 1.0, accountant: str = "pld"
    ) -> PrivacyGuarantee:
        """The ``(epsilon, delta)`` of ``rounds`` rounds, each user contributing at most one
        update per round (add-or-remove adjacency;
        :func:`fedrank.privacy.accounting.gaussian_guarantee`)."""
        return gaussian_guarantee(
            self.noise_multiplier, self.clip, delta, rounds, sampling_rate, accountant
        )
