"""fedrank.core.arrays: unique_values equals np.unique."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrank.core.arrays import unique_values


@given(hnp.arrays(np.int64, st.integers(0, 200), elements=st.integers(-(2**62), 2**62)))
def test_unique_values_equals_np_unique(x: np.ndarray) -> None:
    out = unique_values(x)
    np.testing.assert_array_equal(out, np.unique(x))
    assert out.dtype == x.dtype


def test_unique_values_of_a_2d_array_flattens() -> None:
    np.testing.assert_array_equal(unique_values(np.array([[3, 1], [1, 2]])), [1, 2, 3])
    assert unique_values(np.zeros(0, np.int32)).dtype == np.int32
