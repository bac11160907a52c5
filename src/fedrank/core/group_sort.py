"""Sorting by (group, key) faster than ``np.lexsort((key, group))``.

The synthetic world sorts millions of clicks by user, then time; the users are already in
order, so only each user's few hundred clicks need sorting. :func:`group_key_order` gives
the very permutation ``np.lexsort`` gives (both sorts are stable) by sorting each group on
its own in compiled code, which costs a fraction of one global sort of the pairs.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import DataFormatError

__all__ = ["group_key_order"]


def group_key_order(key: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``np.lexsort((key, group))``: the int64 permutation that orders ``group`` ascending,
    then ``key`` ascending within a group, ties in their original order.

    Args:
        key: 1-D integer or float array without NaN.
        group: 1-D integer array of the same length (fastest when already ascending).
    """
    key = np.asarray(key)
    group = np.asarray(group)
    if key.ndim != 1 or group.shape != key.shape:
        raise DataFormatError(
            f"key and group must be 1-D arrays of one length, got {key.shape} and {group.shape}"
        )
    if group.dtype.kind not in "iu" or key.dtype.kind not in "iuf":
        raise DataFormatError(
            f"group must be integers and key numbers, got {group.dtype} and {key.dtype}"
        )
    if key.dtype.kind == "f" and np.isnan(key).any():
        raise DataFormatError("key contains NaN (its place in the order is not defined here)")
    if key.size == 0:
        return np.zeros(0, dtype=np.int64)
    if np.all(group[1:] >= group[:-1]):
        by_group = None
        ordered = group
    else:
        by_group = np.argsort(group, kind="stable")
        ordered = group[by_group]
        key = key[by_group]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    offsets = np.concatenate([[0], cuts, [key.size]]).astype(np.int64)
    from fedrank.core.group_sort_kernels import sort_each_group

    order = sort_each_group(np.ascontiguousarray(key), offsets)
    return order if by_group is None else by_group[order]
