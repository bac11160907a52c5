"""Gaussian noise that is a pure function of a 32-bit seed (FOLtR-ES, Section 3.2).

A FOLtR-ES client "randomly generates a pseudo-random seed s, uses this seed s to sample a
perturbed model theta_s ~ N(phi, sigma^2 I)" and sends only ``(s, f)``; the server "can
generate the same model theta_s". Both sides therefore need the *same* noise vector from the
seed, on any machine, and the simulator needs it for thousands of clients at once. A
per-client ``numpy.random.Generator`` costs about 11 us to create, which alone would cap a
2,000-client iteration at 45 iterations per second; this module instead computes the noise
of many seeds in one vectorized, counter-based pass:

* ``key = mix(seed * G + K_SEED)`` per seed and ``ctr_i = mix(i * G + K_CTR)`` per pair
  index, with ``G = 0x9E3779B97F4A7C15`` and ``mix`` the SplitMix64 finalizer (Steele, Lea
  and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014). The two offsets
  keep the domains apart: ``key_s == ctr_i`` would need ``s - i = (K_CTR - K_SEED) / G``
  (mod 2**64), about -3e18, impossible for 32-bit seeds and any realistic ``i`` (with equal
  offsets, pair ``s`` of seed ``s`` would hash 0 and give the same two values for every
  seed);
* ``h = mix(key xor ctr_i)`` gives 64 bits per *pair* of coordinates; its low and high 32
  bits are two uniforms ``u1 in (0, 1)`` and ``u2 in [0, 1)``;
* Box-Muller turns them into two standard normals, ``r cos(2 pi u2)`` and
  ``r sin(2 pi u2)`` with ``r = sqrt(-2 ln u1)``, written to coordinates ``2i`` and
  ``2i + 1``.

The arithmetic is float32 (as the reference implementation's noise), so tails reach
``sqrt(-2 ln 2^-33) = 6.8`` standard deviations. The output for a seed never depends on how
many other seeds are generated with it, and a golden-value test pins it: changing this
function would make old messages decode to different models.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

#: Seeds travel in 4 bytes (FOLtR-ES, Section 3.2): values in [0, 2**32).
SEED_BITS = 32

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_K_SEED = np.uint64(0x632BE59BD9B4E019)
_K_CTR = np.uint64(0x8CB92BA72F3D8DD7)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TWO_POW_M32 = np.float32(2.0**-32)
_TWO_PI = np.float32(2.0 * np.pi)


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on a uint64 array (wrapping arithmetic), in place; returns it."""
    tmp = np.empty_like(z)
    for shift, factor in ((_S30, _M1), (_S27, _M2), (_S31, None)):
        np.right_shift(z, shift, out=tmp)
        np.bitwise_xor(z, tmp, out=z)
        if factor is not None:
            np.multiply(z, factor, out=z)
    return z


def check_seeds(seeds: np.ndarray | int) -> np.ndarray:
    """``seeds`` as a 1-D uint32 array; values outside ``[0, 2**32)`` raise."""
    arr = np.asarray(seeds)
    if arr.dtype.kind not in "iu":
        raise DataFormatError(f"seeds must be integers, got dtype {arr.dtype}")
    if arr.ndim > 1:
        raise DataFormatError(f"seeds must be a scalar or 1-D array, got shape {arr.shape}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 2**SEED_BITS):
        raise DataFormatError(
            f"seeds are {SEED_BITS}-bit unsigned integers (they travel in 4 bytes); got values "
            f"in [{int(arr.min())}, {int(arr.max())}]"
        )
    return np.atleast_1d(arr).astype(np.uint32)


def gaussian_noise(seeds: np.ndarray | int, dim: int) -> np.ndarray:
    """Standard normal noise, one row of length ``dim`` per seed.

    Args:
        seeds: a seed or a 1-D array of seeds (integers in ``[0, 2**32)``).
        dim: length of each noise vector (the number of model parameters).

    Returns:
        float32 array of shape ``(len(seeds), dim)``, or ``(dim,)`` for a scalar seed.
    """
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ConfigError(f"dim must be a positive integer, got {dim!r}")
    scalar = np.ndim(seeds) == 0
    s = check_seeds(seeds)
    pairs = (int(dim) + 1) // 2
    key = mix64(s.astype(np.uint64) * GOLDEN + _K_SEED)
    ctr = mix64(np.arange(pairs, dtype=np.uint64) * GOLDEN + _K_CTR)
    h = mix64(key[:, None] ^ ctr[None, :])
    # Viewed as little-endian 32-bit words, each hash is (low half, high half) on any machine.
    words = h.astype("<u8", copy=False).view("<u4").reshape(s.size, pairs, 2)
    u1 = (words[..., 0].astype(np.float32) + np.float32(0.5)) * _TWO_POW_M32
    u2 = words[..., 1].astype(np.float32) * _TWO_POW_M32
    radius = np.sqrt(np.float32(-2.0) * np.log(u1))
    angle = _TWO_PI * u2
    out = np.empty((s.size, 2 * pairs), dtype=np.float32)
    np.multiply(radius, np.cos(angle), out=out[:, 0::2])
    np.multiply(radius, np.sin(angle), out=out[:, 1::2])
    out = out[:, : int(dim)]
    return out[0] if scalar else np.ascontiguousarray(out)
