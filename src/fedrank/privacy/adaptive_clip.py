"""Adaptive clipping with a private quantile estimate (Andrew, Thakkar, McMahan & Ramaswamy
2021, "Differentially Private Learning with Adaptive Clipping", NeurIPS, Algorithm 1 and
Theorem 1).

A fixed clip ``C`` must be guessed before training, and the right one moves as training
goes (update norms shrink as a model converges). Andrew et al. let ``C`` follow the
``gamma``-quantile of the update norms, estimated *privately*: each user also reports the
bit ``b_i = 1[|u_i| <= C_t]``, the server releases the centered sum of the bits with
Gaussian noise,

    b~ = (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2,

and moves the clip geometrically, ``C_{t+1} = C_t exp(-eta (b~ - gamma))``: where more
than ``gamma`` of the updates fit the clip shrinks, where fewer fit it grows.

**Privacy (Theorem 1).** Adding or removing one user moves the centered sum by at most 1/2,
so the bits' release is a Gaussian mechanism of noise multiplier ``2 sigma_b``; the
updates' sum, clipped to ``C_t`` with noise ``z_u C_t``, one of multiplier ``z_u``. The
two releases of a round together are as private as a single Gaussian mechanism of
multiplier ``z = (z_u^-2 + (2 sigma_b)^-2)^(-1/2)``. So a training calibrated for ``z``
(:func:`fedrank.privacy.accounting.gaussian_noise_multiplier`) keeps its budget when the
updates get the slightly larger ``z_u = (z^-2 - (2 sigma_b)^-2)^(-1/2)``
(:meth:`AdaptiveClip.update_noise_multiplier`); this needs ``2 sigma_b > z``. Andrew et al.
take ``sigma_b`` about the expected number of updates per round over 20 (the noise on
``b~`` is then about 0.05), ``gamma = 0.5`` and ``eta = 0.2``.

As in :mod:`fedrank.privacy.gaussian`, the number ``m`` of a round's updates is treated as
public. :class:`~fedrank.strategies.dp.DPStrategy` applies it (``adaptive=``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_hyperparameter
from fedrank.privacy.clipping import geometric_bound


@dataclass(frozen=True)
class AdaptiveClip:
    """The clip's private quantile estimate (module docstring).

    Attributes:
        quantile: ``gamma`` in (0, 1): the quantile of the update norms the clip follows.
        count_noise: ``sigma_b`` (> 0): the standard deviation of the Gaussian noise on the
            centered count of updates within the clip; about the expected number of updates
            per round over 20 (Andrew et al.).
        eta: the clip's geometric learning rate (> 0; Andrew et al.: 0.2).
    """

    quantile: float
    count_noise: float
    eta: float = 0.2

    def __post_init__(self) -> None:
        check_hyperparameter(
            "clip quantile (gamma, the quantile of the update norms the clip follows)",
            self.quantile,
            high=1.0,
            high_inclusive=False,
        )
        check_hyperparameter(
            "count noise (sigma_b, the noise on the count of updates within the clip; "
            "Andrew et al.: updates per round / 20)",
            self.count_noise,
        )
        check_hyperparameter("clip eta (the clip's learning rate)", self.eta)

    def update_noise_multiplier(self, noise_multiplier: float) -> float:
        """``z_u``: the noise multiplier of the updates' sum that, with the count's noise,
        makes a round as private as one Gaussian mechanism of ``noise_multiplier``
        (Theorem 1, solved for ``z_u``).

        Raises:
            ConfigError: if ``2 sigma_b <= z``: the count alone would spend the budget.
        """
        z = check_hyperparameter("noise_multiplier", noise_multiplier)
        count_multiplier = 2.0 * self.count_noise
        if count_multiplier <= z:
            raise ConfigError(
                f"the count noise sigma_b = {self.count_noise:g} is too small for the budget's "
                f"noise multiplier z = {z:g}: the clip's quantile estimate alone would spend "
                f"the budget (it needs 2 sigma_b > z); raise the count noise (Andrew et al.: "
                f"updates per round / 20)"
            )
        return (z**-2 - count_multiplier**-2) ** -0.5

    def noisy_fraction(self, within: int, count: int, rng: np.random.Generator) -> float:
        """``b~``: the fraction of ``count`` updates whose norm was within the clip
        (``within`` of them), from their centered sum plus ``N(0, sigma_b^2)``; one normal is
        drawn from ``rng`` even for an empty round (whose fraction is ``gamma``: no move), so
        every round takes the same numbers from it."""
        if count < 0 or not 0 <= within <= count:
            raise ConfigError(f"need 0 <= within <= count, got within={within}, count={count}")
        noise = float(rng.normal(0.0, self.count_noise))
        if count == 0:
            return self.quantile
        return (within - count / 2.0 + noise) / count + 0.5

    def next_clip(
        self,
        clip: float,
        within: int,
        count: int,
        rng: np.random.Generator,
        low: float = 0.0,
        high: float = math.inf,
    ) -> float:
        """``C exp(-eta (b~ - gamma))`` clamped to ``[low, high]`` (Algorithm 1's update,
        :func:`~fedrank.privacy.clipping.geometric_bound`, with the noised fraction)."""
        b = self.noisy_fraction(within, count, rng)
        return geometric_bound(clip, b, self.quantile, self.eta, low, high)
