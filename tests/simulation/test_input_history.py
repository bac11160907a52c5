"""Firefox's adaptive history (fedrank.simulation.frecency.input_history.InputHistory): the 0.9 use
count rule, row order and page ranges, the daily decay and its expiry threshold, against
hand-worked values and a dictionary reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError, DataFormatError
from fedrank.simulation.frecency.input_history import InputHistory


def _record(h: InputHistory, rows: list[tuple[int, int, int]]) -> None:
    if rows:
        page, word, length = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    else:
        page = word = length = np.zeros(0, np.int64)
    h.record(page, word, length)


def _rows(h: InputHistory) -> dict[tuple[int, int, int], float]:
    return {
        (int(p), int(w), int(n)): float(u)
        for p, w, n, u in zip(h.page, h.word, h.length, h.use_count, strict=True)
    }


def test_use_count_rule_by_hand() -> None:
    h = InputHistory(n_words=10)
    _record(h, [(3, 7, 2)])
    assert _rows(h) == {(3, 7, 2): pytest.approx(1.0)}  # 0 * 0.9 + 1
    _record(h, [(3, 7, 2)])
    assert _rows(h)[(3, 7, 2)] == pytest.approx(1.9)  # 1 * 0.9 + 1
    _record(h, [(3, 7, 2)])
    assert _rows(h)[(3, 7, 2)] == pytest.approx(2.71)  # 1.9 * 0.9 + 1
    # the same page with another length / word is another row
    _record(h, [(3, 7, 3), (3, 1, 2)])
    assert _rows(h) == pytest.approx({(3, 7, 2): 2.71, (3, 7, 3): 1.0, (3, 1, 2): 1.0})
    assert len(h) == 3


def test_repeats_in_one_call_by_hand() -> None:
    h = InputHistory(n_words=5)
    # three selections of one row in one call: 1 + 0.9 + 0.81 = 2.71
    _record(h, [(0, 1, 1), (2, 4, 3), (0, 1, 1), (0, 1, 1)])
    assert _rows(h) == pytest.approx({(0, 1, 1): 2.71, (2, 4, 3): 1.0})
    # then two more of it and one of the other: 2.71 * 0.81 + 1 + 0.9 = 4.0951; 1.9
    _record(h, [(0, 1, 1), (2, 4, 3), (0, 1, 1)])
    assert _rows(h) == pytest.approx({(0, 1, 1): 4.0951, (2, 4, 3): 1.9})


selections = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(1, 4)), min_size=0, max_size=30
)


@settings(max_examples=80, deadline=None)
@given(sel=selections, cuts=st.lists(st.integers(0, 30), max_size=5))
def test_batched_records_equal_one_at_a_time(
    sel: list[tuple[int, int, int]], cuts: list[int]
) -> None:
    # reference: a dict updated once per selection with Firefox's rule
    ref: dict[tuple[int, int, int], float] = {}
    for key in sel:
        ref[key] = ref.get(key, 0.0) * 0.9 + 1
    one = InputHistory(n_words=4)
    for key in sel:
        _record(one, [key])
    batched = InputHistory(n_words=4)
    bounds = sorted({0, len(sel), *(c for c in cuts if c <= len(sel))})
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        _record(batched, sel[lo:hi])
    for h in (one, batched):
        got = _rows(h)
        assert got.keys() == ref.keys()
        for key, value in ref.items():
            assert got[key] == pytest.approx(value, rel=1e-12)
        # rows sorted by (page, word, length), all columns aligned
        keys = list(zip(h.page.tolist(), h.word.tolist(), h.length.tolist(), strict=True))
        assert keys == sorted(ref)
        # rows_of_pages: the row range of pages first..last-1
        for first in range(7):
            for last in range(first, 8):
                start, stop = h.rows_of_pages(np.array([first]), np.array([last]))
                want = [k for k in keys if first <= k[0] < last]
                assert keys[int(start[0]) : int(stop[0])] == want


def test_rows_of_pages_by_hand() -> None:
    h = InputHistory(n_words=100)
    # rows sorted: (1,5,1) (1,50,2) (4,0,3) (4,0,9) (9,99,1)
    _record(h, [(4, 0, 9), (9, 99, 1), (1, 50, 2), (4, 0, 3), (1, 5, 1)])
    np.testing.assert_array_equal(h.page, [1, 1, 4, 4, 9])
    np.testing.assert_array_equal(h.word, [5, 50, 0, 0, 99])
    np.testing.assert_array_equal(h.length, [1, 2, 3, 9, 1])
    # users owning pages 0..2, 2..5, 5..9, 9..10 -> rows [0, 2), [2, 4), [4, 4), [4, 5)
    start, stop = h.rows_of_pages(np.array([0, 2, 5, 9]), np.array([2, 5, 9, 10]))
    np.testing.assert_array_equal(start, [0, 2, 4, 4])
    np.testing.assert_array_equal(stop, [2, 4, 4, 5])


def test_large_ids_and_lengths_round_trip() -> None:
    # the packed key (page * n_words + word) << 7 | length must give back every part
    h = InputHistory(n_words=200_000)
    _record(h, [(10**9, 199_999, 127), (10**9, 0, 1), (0, 199_999, 127)])
    assert _rows(h) == pytest.approx(
        {(0, 199_999, 127): 1.0, (10**9, 0, 1): 1.0, (10**9, 199_999, 127): 1.0}
    )


def test_decay_by_hand() -> None:
    h = InputHistory(n_words=3)
    _record(h, [(0, 0, 1), (0, 0, 1), (1, 2, 2)])  # 1.9 and 1.0
    h.decay(10)
    # 0.975 ** 10 = exp(10 * ln 0.975) = exp(-0.253178) = 0.776330
    assert _rows(h) == pytest.approx({(0, 0, 1): 1.9 * 0.776330, (1, 2, 2): 0.776330}, rel=1e-5)
    h.decay(0)  # no-op
    assert _rows(h)[(1, 2, 2)] == pytest.approx(0.776330, rel=1e-5)
    # another rate: 0.5 ** 2 = 0.25
    h2 = InputHistory(n_words=3)
    _record(h2, [(0, 0, 1)])
    h2.decay(2, rate=0.5)
    assert _rows(h2) == {(0, 0, 1): pytest.approx(0.25)}


def test_decay_expiry_threshold_by_hand() -> None:
    # rows below 0.975 ** 90 = exp(90 * -0.0253178) = exp(-2.27860) = 0.102427 are deleted.
    # use 1.0 reaches it after exactly 90 days (kept: not below), 91 days is below.
    h = InputHistory(n_words=4)
    _record(h, [(0, 0, 1)])
    h.decay(90)
    assert _rows(h) == {(0, 0, 1): pytest.approx(0.102427, rel=1e-5)}
    h.decay(1)
    assert len(h) == 0
    # use 1.9 lasts 90 + ln(1.9) / -ln(0.975) = 90 + 0.641854 / 0.0253178 = 115.35 days:
    # kept after 115, gone after 116. Use 1.0 and 2.71 rows alongside: after 116 days only
    # 2.71 survives (90 + ln(2.71) / 0.0253178 = 90 + 39.38 = 129.38), columns stay aligned.
    for days, survivors in ((115, {(1, 2, 3), (2, 3, 1)}), (116, {(2, 3, 1)})):
        h = InputHistory(n_words=4)
        _record(h, [(0, 1, 1), (1, 2, 3), (1, 2, 3), (2, 3, 1), (2, 3, 1), (2, 3, 1)])
        h.decay(days)
        assert set(_rows(h)) == survivors
        assert h.page.size == h.word.size == h.length.size == h.use_count.size == len(survivors)
    # decaying day by day ends where one multi-day decay does (away from the threshold)
    a, b = InputHistory(n_words=4), InputHistory(n_words=4)
    for h in (a, b):
        _record(h, [(1, 2, 3), (1, 2, 3), (0, 0, 1)])
    for _ in range(100):
        a.decay(1)
    b.decay(100)
    # 0.975 ** 100 = exp(-2.53178) = 0.079517: 1.9 * 0.079517 = 0.151083 kept; 1.0 deleted
    assert set(_rows(a)) == set(_rows(b)) == {(1, 2, 3)}
    assert _rows(a)[(1, 2, 3)] == pytest.approx(_rows(b)[(1, 2, 3)], rel=1e-12)
    assert _rows(b)[(1, 2, 3)] == pytest.approx(0.151083, rel=1e-5)


def test_decay_then_record_updates_the_decayed_row() -> None:
    h = InputHistory(n_words=2)
    _record(h, [(0, 1, 1)])
    h.decay(1, rate=0.5)  # 0.5
    _record(h, [(0, 1, 1)])  # 0.5 * 0.9 + 1 = 1.45
    assert _rows(h) == {(0, 1, 1): pytest.approx(1.45)}


def test_validation_errors_leave_the_rows_unchanged() -> None:
    with pytest.raises(ConfigError):
        InputHistory(n_words=0)
    h = InputHistory(n_words=5)
    _record(h, [(0, 4, 127)])  # 127 characters and the last word id are fine
    before = _rows(h)
    with pytest.raises(DataFormatError, match="one shape"):
        h.record(np.array([0, 1]), np.array([0]), np.array([1, 1]))
    for bad in [(0, -1, 1), (0, 5, 1), (0, 0, 0), (0, 0, 128)]:
        with pytest.raises(DataFormatError, match="word ids"):
            _record(h, [(0, 0, 1), bad])
    with pytest.raises(ConfigError):
        h.decay(-1)
    assert _rows(h) == before
    _record(h, [])  # empty: no-op
    assert _rows(h) == before
    empty = InputHistory(n_words=5)
    empty.decay(3)
    assert len(empty) == 0
    start, stop = empty.rows_of_pages(np.array([0]), np.array([4]))
    assert start.tolist() == stop.tolist() == [0]
