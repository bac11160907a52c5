"""Clip, encode, wrap: what central DP, distributed DP and secure aggregation share.

* :func:`clip_coordinates`: every update scaled down to L2 norm at most ``l2_bound``
  (:func:`~fedrank.privacy.clipping.clip_l2`, the clip of central DP and of a norm bound),
  then each coordinate clamped to ``[-max_abs, max_abs]`` (after L2 scaling a coordinate can
  exceed the bound by a rounding error; the clamp makes ``|y_i| <= B`` hold exactly);
* :func:`encode`: the clipped updates on the integer grid ``rint(scale y)`` (``int64``);
* :func:`signed`: a sum modulo :data:`MODULUS` as the integer it decodes to, in
  ``[-2**31, 2**31)``.

Secure aggregation (:mod:`fedrank.secagg.field`) adds the encoded vectors in ``Z_q``,
``q = 2**32``; distributed DP's emulation in one process
(:mod:`fedrank.strategies.distributed_dp`) adds them as integers and wraps the noisy sum as
the field would; the Skellam plan (:mod:`fedrank.privacy.skellam`) sizes the grid so that
no sum leaves :data:`MAX_ABS_SUM`.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import DataFormatError
from fedrank.privacy.clipping import clip_l2

#: ``q = 2**MODULUS_BITS``.
MODULUS_BITS = 32
#: The modulus ``q`` of the group ``Z_q`` in which vectors are masked and summed.
MODULUS = 1 << MODULUS_BITS
#: The largest ``|sum|`` of encoded integers that decodes exactly: the decoder maps
#: ``[0, q)`` to ``[-q/2, q/2 - 1]``, so a sum must stay within ``+-(q/2 - 1)``.
MAX_ABS_SUM = MODULUS // 2 - 1


def clip_coordinates(
    updates: np.ndarray, max_abs: float, l2_bound: float | None = None
) -> np.ndarray:
    """Rows of ``(m, d)`` ``updates`` (or one ``(d,)`` vector) scaled down to L2 norm at
    most ``l2_bound`` (``None``: not), then clamped to ``[-max_abs, max_abs]`` per
    coordinate: a float64 copy. Non-finite values raise
    :class:`~fedrank.errors.DataFormatError`."""
    mat = np.array(updates, dtype=np.float64, ndmin=1)
    if not np.all(np.isfinite(mat)):
        raise DataFormatError("the update to encode has NaN or infinite values")
    if l2_bound is not None:
        mat = clip_l2(mat, l2_bound)
    return np.clip(mat, -max_abs, max_abs, out=mat)


def encode(
    updates: np.ndarray, scale: float, max_abs: float, l2_bound: float | None = None
) -> np.ndarray:
    """:func:`clip_coordinates`, then ``rint(scale y)`` as ``int64`` (the grid of step
    ``1 / scale``)."""
    return np.rint(clip_coordinates(updates, max_abs, l2_bound) * np.float64(scale)).astype(
        np.int64
    )


def signed(total: np.ndarray) -> np.ndarray:
    """The representative in ``[-q/2, q/2)`` of integers modulo ``q``: what a sum in
    ``Z_q`` decodes to (``int64``)."""
    t = np.asarray(total).astype(np.int64) % MODULUS
    return t - np.where(t >= MODULUS // 2, MODULUS, 0)
