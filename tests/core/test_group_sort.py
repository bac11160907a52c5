"""group_key_order is np.lexsort((key, group)), permutation for permutation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.core.group_sort import group_key_order
from fedrank.errors import DataFormatError


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 300),
    n_groups=st.integers(1, 12),
    n_keys=st.integers(1, 8),
    ascending=st.booleans(),
    floats=st.booleans(),
)
def test_the_permutation_of_lexsort(
    seed: int, n: int, n_groups: int, n_keys: int, ascending: bool, floats: bool
) -> None:
    # few distinct keys: many ties, whose original order both sorts must keep
    rng = np.random.default_rng(seed)
    group = rng.integers(0, n_groups, n)
    if ascending:
        group = np.sort(group)
    key = rng.integers(-n_keys, n_keys, n)
    if floats:
        key = key * 0.5 + np.where(rng.random(n) < 0.5, 0.0, -0.0)
    order = group_key_order(key, group)
    assert order.dtype == np.int64
    np.testing.assert_array_equal(order, np.lexsort((key, group)))


def test_a_world_sized_click_stream() -> None:
    rng = np.random.default_rng(3)
    user = np.repeat(np.arange(2000), rng.integers(1, 400, 2000))
    time = np.round(rng.random(user.size) * 90, 2)  # rounded: ties within a user
    np.testing.assert_array_equal(group_key_order(time, user), np.lexsort((time, user)))
    shuffled = rng.permutation(user)
    np.testing.assert_array_equal(group_key_order(time, shuffled), np.lexsort((time, shuffled)))


@pytest.mark.parametrize(
    ("key", "group", "message"),
    [
        (np.array([1.0, np.nan]), np.array([0, 0]), "NaN"),
        (np.zeros(3), np.zeros(2, dtype=np.int64), "one length"),
        (np.zeros((2, 2)), np.zeros((2, 2), dtype=np.int64), "1-D"),
        (np.zeros(2), np.zeros(2), "group must be integers"),
        (np.array(["a", "b"]), np.zeros(2, dtype=np.int64), "key numbers"),
    ],
)
def test_bad_input_is_refused(key: np.ndarray, group: np.ndarray, message: str) -> None:
    with pytest.raises(DataFormatError, match=message):
        group_key_order(key, group)
