"""Secure central-DP noise: the discrete Gaussian on a lattice, sampled exactly from a
cryptographically secure keystream (Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy", NeurIPS 2020; docs/privacy.md, "Noise source").

Why: floating-point Gaussian samples from numpy's PCG64 are neither unpredictable (PCG64 is
not a CSPRNG) nor safe in their low bits (Mironov 2012 showed for the Laplace mechanism that
the set of floats a textbook sampler can output depends on the value noised). Here every
random bit comes from ChaCha20 (RFC 8439, ``cryptography``), keyed by HMAC-SHA256 of a
secret and a label (the server's: its store's noise secret and the iteration, so a restart
or a recovery draws the same noise again), and every sample is an integer drawn with exact
rational arithmetic: no floating point between the key and the integer.

**Sampling** (CKS 2020): :func:`bernoulli_exp` is their Algorithm 1 (``Bernoulli(exp(-g))``
for rational ``g >= 0`` from Bernoulli trials of rational probability),
:meth:`KeyStream.discrete_laplace` their Algorithm 2 (the discrete Laplace of scale
``t``), and :meth:`KeyStream.discrete_gaussian` their Algorithm 3 (the discrete Gaussian
``N_Z(0, sigma^2)`` for rational ``sigma^2``, by rejection from the discrete Laplace of scale
``floor(sigma) + 1``).

**The lattice.** The server's sum ``S`` of updates clipped to L2 norm ``C`` is a float
vector; it is rounded to the lattice ``g Z^d`` and integer noise is added there:

    S~ = g (round(S / g) + N_Z(0, sigma_Z^2)^d).

Adding or removing one update ``u`` (``|u|_2 <= C``) moves ``round(S / g)`` by a vector
``v`` with ``|v_i| <= |u_i| / g + 1``, so ``|v|_2 <= C / g + sqrt(d) = Delta`` (the rounding
costs ``sqrt(d)``, as in Kairouz, Liu & Steinke 2021, "The Distributed Discrete Gaussian
Mechanism for Federated Learning with Secure Aggregation", ICML, Section 4, where each
client rounds its own update and the cost is ``sqrt(d) / 2`` with their randomized
rounding; the server rounds the sum once, deterministically). The step ``g`` is
``ROUNDING_SHARE * C / sqrt(d)``, so rounding inflates the sensitivity by 1%, and
``sigma_Z = z Delta``: the multivariate discrete Gaussian with ``|v|_2 <= Delta`` is
``Delta^2 / (2 sigma_Z^2) = 1 / (2 z^2)``-zCDP (CKS 2020, Theorem 14), i.e. its Renyi
divergence of every order ``alpha`` is at most ``alpha / (2 z^2)``: that of the Gaussian
mechanism of multiplier ``z``. A budget calibrated by the Renyi accountant for ``z``
(``accountant = "rdp"``) therefore holds for this noise; its standard deviation on the sum
is ``g sigma_Z <= z (C + g sqrt(d)) = 1.01 z C`` per coordinate.

**Cost.** Each sample takes a few dozen exact Bernoulli trials in Python, once per
coordinate and close (docs/privacy.md gives the measured rate).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from fedrank.errors import ConfigError
from fedrank.optim.serialization import check_hyperparameter

#: The share of the sensitivity that rounding to the lattice may add (module docstring).
ROUNDING_SHARE = 0.01
#: ``sigma_Z`` is rounded up to a multiple of ``1 / SIGMA_GRID``: exact rationals of small
#: denominators keep the sampler's arithmetic fast, and more noise keeps the guarantee.
SIGMA_GRID = 1 << 10
#: Keystream bytes generated at once.
_CHUNK = 1 << 16


def noise_key(secret: int, label: str) -> bytes:
    """The 256-bit ChaCha20 key of one noise draw: HMAC-SHA256 of ``label`` (e.g. the
    iteration) under ``secret`` (the store's 128 random bits, or a test's seed), so draws of
    different labels are independent and none reveals the secret."""
    if secret < 0:
        raise ConfigError(f"the noise secret must be an integer >= 0, got {secret}")
    width = max(16, (secret.bit_length() + 7) // 8)
    return hmac.digest(secret.to_bytes(width, "big"), label.encode(), hashlib.sha256)


class KeyStream:
    """Uniform integers and exact samples from the ChaCha20 keystream of ``key`` (32
    bytes; module docstring)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ConfigError(f"a ChaCha20 key has 32 bytes, got {len(key)}")
        cipher = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None)
        self._encryptor = cipher.encryptor()
        self._buffer = b""
        self._pos = 0

    def _bytes(self, n: int) -> bytes:
        if self._pos + n > len(self._buffer):
            rest = self._buffer[self._pos :]
            self._buffer = rest + self._encryptor.update(bytes(max(_CHUNK, n)))
            self._pos = 0
        out = self._buffer[self._pos : self._pos + n]
        self._pos += n
        return out

    def below(self, n: int) -> int:
        """A uniform integer in ``0 .. n - 1`` (rejection sampling: exact)."""
        if n < 1:
            raise ValueError(f"below() needs n >= 1, got {n}")
        if n == 1:
            return 0
        bits = (n - 1).bit_length()
        width, mask = (bits + 7) // 8, (1 << bits) - 1
        while True:
            value = int.from_bytes(self._bytes(width), "little") & mask
            if value < n:
                return value

    def bernoulli(self, p: Fraction) -> bool:
        """``True`` with the rational probability ``p`` in [0, 1], exactly."""
        return self.below(p.denominator) < p.numerator

    def bernoulli_exp(self, gamma: Fraction) -> bool:
        """``True`` with probability ``exp(-gamma)``, ``gamma >= 0`` rational (CKS 2020,
        Algorithm 1): for ``gamma <= 1`` the parity of the first ``K`` with
        ``Bernoulli(gamma / K) = 0``; beyond, ``floor(gamma)`` trials of ``exp(-1)`` and
        one of the rest."""
        if gamma < 0:
            raise ValueError(f"bernoulli_exp needs gamma >= 0, got {gamma}")
        while gamma > 1:
            if not self._bernoulli_exp_unit(Fraction(1)):
                return False
            gamma -= 1
        return self._bernoulli_exp_unit(gamma)

    def _bernoulli_exp_unit(self, gamma: Fraction) -> bool:
        k = 1
        while self.bernoulli(gamma / k):
            k += 1
        return k % 2 == 1

    def discrete_laplace(self, t: int) -> int:
        """A sample of the discrete Laplace ``P(x) ∝ exp(-|x| / t)`` on the integers,
        ``t >= 1`` an integer (CKS 2020, Algorithm 2 with ``s = 1``)."""
        while True:
            u = self.below(t)
            if not self.bernoulli_exp(Fraction(u, t)):
                continue
            v = 0
            while self.bernoulli_exp(Fraction(1)):
                v += 1
            y = u + t * v
            negative = self.below(2) == 1
            if negative and y == 0:
                continue
            return -y if negative else y

    def discrete_gaussian(self, sigma2: Fraction) -> int:
        """A sample of ``N_Z(0, sigma2)``, ``P(x) ∝ exp(-x^2 / (2 sigma2))``, for rational
        ``sigma2 > 0`` (CKS 2020, Algorithm 3)."""
        t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # floor(sigma) + 1
        while True:
            y = self.discrete_laplace(t)
            excess = abs(y) - sigma2 / t
            if self.bernoulli_exp(excess * excess / (2 * sigma2)):
                return y

    def discrete_gaussians(self, sigma2: Fraction, size: int) -> np.ndarray:
        """``size`` independent samples of :meth:`discrete_gaussian` (``int64``)."""
        return np.array([self.discrete_gaussian(sigma2) for _ in range(size)], dtype=np.int64)


def discrete_gaussian_pmf(sigma2: float, support: np.ndarray) -> np.ndarray:
    """The probabilities of ``N_Z(0, sigma2)`` at the integers ``support`` (the normalizing
    sum taken over ``|x| <= 40 sigma + 40``, beyond which the mass is below 1e-300)."""
    reach = int(40 * math.sqrt(sigma2)) + 40
    grid = np.arange(-reach, reach + 1, dtype=np.float64)
    norm = np.exp(-(grid**2) / (2 * sigma2)).sum()
    return np.exp(-(np.asarray(support, dtype=np.float64) ** 2) / (2 * sigma2)) / norm


class LatticeGaussian:
    """The discrete Gaussian mechanism on the lattice ``g Z^d`` for sums of ``d``
    coordinates of updates clipped to L2 norm ``clip``, with the Renyi guarantee of the
    Gaussian mechanism of ``noise_multiplier`` (module docstring).

    Args:
        clip: ``C``.
        noise_multiplier: ``z``.
        dim: ``d``.
    """

    def __init__(self, clip: float, noise_multiplier: float, dim: int) -> None:
        self.clip = check_hyperparameter("clip", clip)
        self.noise_multiplier = check_hyperparameter("noise_multiplier", noise_multiplier)
        if dim < 1:
            raise ConfigError(f"the lattice needs dim >= 1, got {dim}")
        self.dim = int(dim)
        #: ``g``: the lattice step.
        self.step = ROUNDING_SHARE * self.clip / math.sqrt(self.dim)
        #: ``Delta``: the L2 sensitivity of the rounded sum, in lattice units.
        self.sensitivity = self.clip / self.step + math.sqrt(self.dim)
        #: ``sigma_Z^2`` (exact): the integer noise's variance parameter, ``sigma_Z >= z
        #: Delta`` (rounded up to :data:`SIGMA_GRID`).
        sigma = math.ceil(self.noise_multiplier * self.sensitivity * SIGMA_GRID)
        self.sigma2 = Fraction(sigma, SIGMA_GRID) ** 2

    def __repr__(self) -> str:
        return (
            f"LatticeGaussian(clip={self.clip:g}, noise_multiplier={self.noise_multiplier:g}, "
            f"dim={self.dim})"
        )

    @property
    def sum_std(self) -> float:
        """The noise's standard deviation on the sum, per coordinate (at most ``g
        sigma_Z``; the discrete Gaussian's variance is below ``sigma_Z^2``)."""
        return self.step * math.sqrt(float(self.sigma2))

    def describe(self) -> dict[str, float | str]:
        """What the privacy report says of the noise."""
        return {
            "noise": "secure",
            "noise_sampler": "discrete Gaussian on a lattice, exact from ChaCha20 "
            "(Canonne, Kamath & Steinke 2020)",
            "lattice_step": self.step,
            "lattice_sensitivity": self.sensitivity,
            "lattice_sigma": math.sqrt(float(self.sigma2)),
        }

    def noised_sum(self, total: np.ndarray, stream: KeyStream) -> np.ndarray:
        """``g (round(total / g) + N_Z(0, sigma_Z^2))`` per coordinate (float64)."""
        vec = np.asarray(total, dtype=np.float64)
        if vec.shape != (self.dim,):
            raise ConfigError(f"the sum must have shape ({self.dim},), got {vec.shape}")
        lattice = np.rint(vec / self.step)
        if not np.all(np.isfinite(lattice)):
            raise ConfigError("the sum is not finite: nothing to noise")
        noise = stream.discrete_gaussians(self.sigma2, self.dim)
        return (lattice + noise) * self.step
