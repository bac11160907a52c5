"""Coordinate-wise robust aggregation: trimmed mean and median (Yin, Chen, Ramchandran &
Bartlett 2018, "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates",
ICML, Sections 3-4).

For every coordinate ``j`` the server sorts the ``C`` clients' values ``H_1j, ..., H_Cj``
and

* :class:`CoordinateMedian` takes their median;
* :class:`TrimmedMean` drops the ``k = floor(trim * C)`` smallest and the ``k`` largest and
  averages the rest (``trim = 0``: the plain unweighted mean).

With a fraction ``f < trim`` of arbitrary (Byzantine) updates, at most ``k`` values of each
coordinate are an attacker's, so every value the trimmed mean averages lies within the
honest clients' range of that coordinate; the median tolerates any ``f < 1/2`` the same way.
A weighted mean has no such bound: one update, however large, moves it without limit.

**Unweighted: one client, one row.** The weight ``n`` of a message (its searches or
training queries) is reported by the client itself; an attacker would claim the largest
``n`` allowed, and a weighted median or trimmed mean would let it stand for many clients.
So ``n`` is validated like everywhere else and then ignored: every message counts once.

**Exactly mergeable.** The state keeps every client's values: a float64 ``(C, dim)`` matrix
(memory ``C x dim x 8`` bytes) and the count ``C``. Coordinate-wise statistics need each
coordinate's values only, not which client sent them together, so each *column* is kept
sorted on its own (an ``O(C)`` merge of sorted runs per accumulate or merge, and
``finalize`` needs no sort). That form is canonical -- the sorted columns of a multiset of
rows -- so the state, and with it the aggregate, is bit for bit the same for any order of
messages and any grouping into proxies, partitions or Dask workers: ``merge`` concatenates
and re-sorts, nothing is approximated. (``-0.0`` is stored as ``0.0`` for the same reason;
the two are equal as numbers.) A side effect: a forwarded state no longer holds any one
client's update vector, only per-coordinate multisets.

The price of exactness is memory: ``max_rows`` (default 100,000 rows; 17.6 MB at the 22
weights of classic frecency) bounds the state, and accumulating or merging beyond it raises
:class:`~fedrank.errors.DataFormatError`. Proxies do not reduce it: they forward their
clients' values unreduced. A proxy that pre-reduced its clients to one median would make
the server compute a *median of medians*, which is only an approximation of the median
(and a trimmed mean of trimmed means is not the trimmed mean); this module does not do
that. The mergeable sums of :class:`~fedrank.aggregators.mean.WeightedMean`,
:class:`~fedrank.aggregators.gated_mean.GatedMean` and
:class:`~fedrank.aggregators.norm_bounded.NormBounded` (memory ``O(dim)``) and the integer
votes of :class:`~fedrank.aggregators.sign_vote.SignVote` are the exact, constant-memory
alternatives.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.aggregators.mean import check_dim, check_update, check_weight, vector_columns
from fedrank.core.message import Message, MessageBatch
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError

#: Default bound on the rows a state may hold (see the module docstring).
DEFAULT_MAX_ROWS = 100_000


class SortedColumnsState(NamedTuple):
    """Partial aggregate of :class:`TrimmedMean` and :class:`CoordinateMedian`.

    Attributes:
        values: float64 ``(count, dim)``: the values of every message folded in, each
            column sorted ascending on its own (Fortran order, so columns are contiguous).
        count: number of messages folded in (the rows of ``values``).
    """

    values: npt.NDArray[np.float64]
    count: int


def _sorted_merge(a: np.ndarray, b: np.ndarray, dim: int) -> np.ndarray:
    """The columns of ``a`` and ``b`` (each already sorted) merged into one sorted
    ``(len(a) + len(b), dim)`` Fortran-order matrix. The stable sort is a timsort: two
    sorted runs per column merge in linear time."""
    out = np.empty((a.shape[0] + b.shape[0], dim), dtype=np.float64, order="F")
    out[: a.shape[0]] = a
    out[a.shape[0] :] = b
    out.sort(axis=0, kind="stable")
    return out


class _CoordinateOrderStatistic(ABC):
    """What :class:`TrimmedMean` and :class:`CoordinateMedian` share: the state of sorted
    columns (module docstring); subclasses say how a sorted column becomes one value."""

    type_name: ClassVar[str]

    def __init__(self, dim: int, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        self.dim = check_dim(dim)
        if isinstance(max_rows, bool) or not isinstance(max_rows, int | np.integer):
            raise ConfigError(f"max_rows must be a positive integer, got {max_rows!r}")
        if max_rows < 1:
            raise ConfigError(f"max_rows must be >= 1, got {max_rows}")
        self.max_rows = int(max_rows)

    def zero(self) -> SortedColumnsState:
        """The empty aggregate."""
        return SortedColumnsState(np.zeros((0, self.dim), dtype=np.float64, order="F"), 0)

    def capacity(self, state: SortedColumnsState) -> int:
        """How many more messages ``state`` can take before ``max_rows``."""
        return self.max_rows - state.count

    def _check_state(self, state: SortedColumnsState) -> None:
        values = state.values
        if values.ndim != 2 or values.shape[1] != self.dim:
            raise ConfigError(
                f"expected a state of dimension {self.dim} (values of shape (C, {self.dim})), "
                f"got shape {values.shape}"
            )

    def _check_room(self, rows: int) -> None:
        if rows > self.max_rows:
            raise DataFormatError(
                f"the {type(self).__name__} state would hold {rows} rows, more than its "
                f"max_rows = {self.max_rows}: it keeps every client's values (memory rows x "
                f"dim x 8 bytes) to stay exact. Raise max_rows if the memory allows, or "
                "aggregate fewer updates per iteration (close iterations sooner); proxies "
                "do not help, they forward their clients' rows unreduced"
            )

    def check_consistent(self, state: SortedColumnsState) -> None:
        """Refuse a state no sequence of messages can produce: a count other than the
        number of rows, more rows than ``max_rows``, non-finite values, or a column that is
        not sorted. Raises :class:`~fedrank.errors.DataFormatError`."""
        self._check_state(state)
        values = state.values
        if state.count < 0 or values.shape[0] != state.count:
            raise DataFormatError(
                f"the state's count {state.count} must equal its number of rows {values.shape[0]}"
            )
        if state.count > self.max_rows:
            raise DataFormatError(
                f"the state holds {state.count} rows, more than max_rows = {self.max_rows}"
            )
        if not np.all(np.isfinite(values)):
            raise DataFormatError("the state holds non-finite values")
        if np.any(values[1:] < values[:-1]):
            raise DataFormatError(
                "every column of the state must be sorted ascending (as accumulate and merge "
                "keep them)"
            )

    def accumulate(self, state: SortedColumnsState, message: Message) -> SortedColumnsState:
        """Fold one message into ``state`` (its weight ``n`` is checked, then ignored)."""
        self._check_state(state)
        vec = check_update(message.update, self.dim).astype(np.float64)
        check_weight(message.n)
        self._check_room(state.count + 1)
        row = (vec + 0.0)[None, :]  # -0.0 -> 0.0: one canonical form per value
        return SortedColumnsState(_sorted_merge(state.values, row, self.dim), state.count + 1)

    def accumulate_batch(
        self, state: SortedColumnsState, batch: MessageBatch
    ) -> SortedColumnsState:
        """Fold ``C`` messages at once (rows of ``batch.vector``; the weights are checked,
        then ignored): one sort of the new rows and one linear merge per column. Exactly
        equal to accumulating the rows one by one."""
        self._check_state(state)
        mat, _ = vector_columns(batch, self.dim)
        if mat.shape[0] == 0:
            return state
        self._check_room(state.count + mat.shape[0])
        block = np.sort(mat.astype(np.float64) + 0.0, axis=0)
        return SortedColumnsState(
            _sorted_merge(state.values, block, self.dim), state.count + int(mat.shape[0])
        )

    def merge(self, a: SortedColumnsState, b: SortedColumnsState) -> SortedColumnsState:
        """Combine two partial aggregates: their rows together (exact)."""
        self._check_state(a)
        self._check_state(b)
        if b.count == 0:
            return a
        if a.count == 0:
            return b
        self._check_room(a.count + b.count)
        return SortedColumnsState(_sorted_merge(a.values, b.values, self.dim), a.count + b.count)

    def finalize(self, state: SortedColumnsState) -> np.ndarray:
        """The statistic per coordinate (float64, shape ``(dim,)``); ``zeros(dim)`` for the
        empty state (no information, no step)."""
        self._check_state(state)
        if state.count == 0:
            return np.zeros(self.dim, dtype=np.float64)
        return self._statistic(state.values)

    @abstractmethod
    def _statistic(self, columns: np.ndarray) -> np.ndarray:
        """The statistic of each column of ``columns`` (sorted, at least one row)."""

    def state_to_json(self, state: SortedColumnsState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check_state(state)
        return encode_state(state, self.type_name, settings={"dim": self.dim})

    def state_from_json(self, data: dict[str, Any]) -> SortedColumnsState:
        """Inverse of :meth:`state_to_json` (the values in Fortran order again, as
        accumulate and merge keep them)."""
        state = decode_state(data, SortedColumnsState, self.type_name, settings={"dim": self.dim})
        self._check_state(state)
        return state._replace(values=np.asfortranarray(state.values))


class TrimmedMean(_CoordinateOrderStatistic):
    """Coordinate-wise trimmed mean (Yin et al. 2018, Definition 2): per coordinate, sort
    the ``C`` values, drop ``floor(trim * C)`` from each end and average the rest.

    Args:
        dim: length of the update vectors.
        trim: fraction trimmed from *each* end, in ``[0, 0.5)`` (default 0.1: robust to
            fewer than 10% of arbitrary updates). ``0`` is the plain unweighted mean.
        max_rows: most messages a state may hold (module docstring).

    Unweighted (one client, one row): the weight ``n`` is client-reported, and an attacker
    would inflate it. The average of the kept values is clipped to their own range, so
    float rounding can never put it outside the values it averages.
    """

    type_name = "TrimmedMean"

    def __init__(self, dim: int, trim: float = 0.1, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        super().__init__(dim, max_rows)
        if isinstance(trim, bool) or not isinstance(trim, int | float | np.floating):
            raise ConfigError(f"trim must be a number in [0, 0.5), got {trim!r}")
        if not 0.0 <= float(trim) < 0.5:
            raise ConfigError(
                f"trim (the fraction dropped from each end) must lie in [0, 0.5), got {trim}; "
                "use CoordinateMedian for the median"
            )
        self.trim = float(trim)

    def __repr__(self) -> str:
        return f"TrimmedMean(dim={self.dim}, trim={self.trim:g}, max_rows={self.max_rows})"

    def trimmed(self, count: int) -> int:
        """``k``: how many values are dropped from each end of a column of ``count``."""
        if count < 1:
            return 0
        return min(math.floor(self.trim * count), (count - 1) // 2)

    def _statistic(self, columns: np.ndarray) -> np.ndarray:
        c = columns.shape[0]
        k = self.trimmed(c)
        kept = columns[k : c - k]
        return np.clip(kept.mean(axis=0), kept[0], kept[-1])


class CoordinateMedian(_CoordinateOrderStatistic):
    """Coordinate-wise median (Yin et al. 2018, Definition 1): per coordinate, the middle
    value of the ``C`` sorted values (the mean of the two middle ones when ``C`` is even).

    Args:
        dim: length of the update vectors.
        max_rows: most messages a state may hold (module docstring).

    Unweighted (one client, one row), like :class:`TrimmedMean`.
    """

    type_name = "CoordinateMedian"

    def __repr__(self) -> str:
        return f"CoordinateMedian(dim={self.dim}, max_rows={self.max_rows})"

    def _statistic(self, columns: np.ndarray) -> np.ndarray:
        c = columns.shape[0]
        if c % 2:
            return columns[c // 2].copy()
        low, high = columns[c // 2 - 1], columns[c // 2]
        return np.clip(low * 0.5 + high * 0.5, low, high)  # halves first: no overflow
