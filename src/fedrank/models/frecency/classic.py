"""Classic Firefox frecency with its 22 tunable weights, exactly as Firefox 62-68 computed it.

This is the scorer the Mozilla study optimized (paper Section 4). The truth is Firefox's
C++: ``CalculateFrecencyFunction::OnFunctionCall`` in
``toolkit/components/places/SQLFunctions.cpp`` and ``nsNavHistory::GetFrecencyAgedWeight``
/ ``GetFrecencyTransitionBonus`` in ``nsNavHistory.h`` (Firefox 62-68, the study's era), not
the MDN prose. For one page (its sampled rows: :class:`~fedrank.models.frecency.history.
PageHistories`):

* **Sampling** runs only when ``moz_places.visit_count > 0``: the page's visit rows, newest
  first, ``LIMIT places.frecency.numVisits`` (10).
* **Bonus of a row** (``GetFrecencyTransitionBonus(visitType, true, useRedirectBonus)``):
  the *effective* type is the origin visit's type for a redirect visit
  (``IFNULL(origin.visit_type, v.visit_type)``); the row gets ``redirectSourceVisitBonus``
  when the visit led to a PERMANENT redirect, or to a TEMPORARY redirect and its effective
  type is not TYPED (``useRedirectBonus``); otherwise the bonus of its effective type (LINK
  ``linkVisitBonus``, TYPED ``typedVisitBonus``, BOOKMARK ``bookmarkVisitBonus``, EMBED,
  REDIRECT_PERMANENT, REDIRECT_TEMPORARY, DOWNLOAD, FRAMED_LINK, RELOAD their own, anything
  else ``defaultVisitBonus``). A bookmarked page (``foreign_count > 0``) adds
  ``bookmarkVisitBonus`` to every row.
* **Weight of a row** (``GetFrecencyAgedWeight(ageInDays)``): ``age <= firstBucketCutoff``
  gives ``firstBucketWeight``, else ``<= secondBucketCutoff`` ``secondBucketWeight``, ... ,
  else ``defaultBucketWeight``. ``ageInDays`` is a whole number: the SQL computes
  ``(now_seconds - visit_date / 1000000) / 86400`` in integer arithmetic
  (:func:`firefox_age_days`), so the first bucket holds visits under 5 days old.
* ``points = sum over rows with a non-zero bonus of weight * bonus / 100`` (a float32 sum)
  and ``frecency = ceilf(visit_count * ceilf(points) / numSampledVisits)``; ``-1`` if
  ``points == 0`` (the page has visits, so it still shows in the UI).
* **No sampled row** (never visited, or ``visit_count = 0``, e.g. hidden framed-link
  targets): ``0`` unless the page is bookmarked and not a ``place:`` query; then ``bonus =
  unvisitedBookmarkBonus (+ unvisitedTypedBonus if typed)`` and ``frecency =
  ceilf(ceilf(firstBucketWeight * bonus / 100))``.

Firefox's preferences are integers; with integer weights every ``weight * bonus`` is an
integer and this module computes ``100 * points`` exactly in float64, which equals the
C++'s float32 result except where float32 rounding of a sum of hundredths lands just above
an integer. ``ClassicFrecency(float32=True)`` reproduces the C++ arithmetic bit for bit
(row by row, in float32; integer weights only). With ``rounding=False`` both ``ceil`` are
dropped (``visit_count * points / numSampledVisits``, a piecewise-linear score for analysis).

Firefox caches frecency and, once a day (idle-daily), runs ``UPDATE moz_places SET
frecency = ROUND(frecency * :decay_rate) WHERE frecency > 0`` with ``decay_rate`` the float
pref ``places.frecency.decayRate`` = 0.975: see :meth:`ClassicFrecency.decayed_score`.

Everything is vectorized: the points are linear in the products ``bucket weight x bonus``, so
``points = sum_{b, t} H[page, b, t] * W[b] * Bonus[t]`` where ``H`` counts the rows of each
page per (age bucket, bonus slot). ``H`` depends on the parameters only through the four
cutoffs, so parameter rows are grouped by their cutoff vector (a finite-difference batch of
45 rows has 9 distinct ones) and each group is one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.frecency.history import REDIRECT_TYPES, PageHistories, VisitType
from fedrank.models.frecency.weights import (
    BUCKET_WEIGHT_SLICE,
    CLASSIC_INDEX,
    CLASSIC_WEIGHT_NAMES,
    CUTOFF_SLICE,
    N_CLASSIC_WEIGHTS,
    VISIT_BONUS_SLICE,
    classic_defaults,
)

#: Number of age buckets (four cutoffs).
N_BUCKETS = 5

#: Firefox's daily decay of cached frecency (``places.frecency.decayRate``).
DEFAULT_DECAY_RATE = 0.975

#: :func:`bucketed_points` broadcasts over (rows x visits) when there are at most this many
#: elements, or at most :data:`_FEW_ROWS` rows (in chunks of :data:`_CHUNK` elements); larger
#: batches use the count-matrix product (crossover measured on 45-row finite-difference
#: batches of synthetic histories).
_BROADCAST_LIMIT = 1 << 14
_FEW_ROWS = 2
_CHUNK = 1 << 22


def as_param_rows(params: np.ndarray, dim: int, model: str) -> tuple[np.ndarray, bool]:
    """``params`` as a float64 ``(P, dim)`` matrix, and whether it was a single vector."""
    arr = np.asarray(params, dtype=np.float64)
    if arr.ndim == 1 and arr.shape[0] == dim:
        return arr[None, :], True
    if arr.ndim == 2 and arr.shape[1] == dim:
        return arr, False
    raise ConfigError(f"{model} parameters must have shape ({dim},) or (P, {dim}), got {arr.shape}")


def effective_cutoffs(cutoffs: np.ndarray) -> np.ndarray:
    """Running maximum of the cutoffs along the last axis.

    Firefox's ``if age <= c1 ... elif age <= c2 ...`` chain puts an age in bucket ``<= i``
    exactly when ``age <= max(c_1..c_i)``, so with these non-decreasing cutoffs the bucket
    is simply the number of cutoffs below the age, whatever order the raw cutoffs are in.
    """
    return np.maximum.accumulate(np.asarray(cutoffs, dtype=np.float64), axis=-1)


def bucket_of(ages: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """uint8 age bucket (0..4) of every age for one cutoff 4-vector: the first ``i`` with
    ``age <= cutoffs[i]``, else 4 (Firefox's ``GetFrecencyAgedWeight`` if/elif chain)."""
    eff = effective_cutoffs(cutoffs)
    bucket = np.zeros(np.shape(ages), dtype=np.uint8)
    for c in eff:
        bucket += ages > c
    return bucket


@dataclass(frozen=True)
class VisitSlots:
    """Visits of ``n`` pages as dense ``(n, V)`` arrays for :func:`bucketed_points`.

    Visit ``(i, v)`` adds ``bucket_weight[bucket(age)] * slot_weight[slot]`` to page ``i``;
    ``slot == n_slots`` is the padding slot (weight 0: padding, or a visit worth nothing).
    When ``extra_slot`` is set, every real visit of a page with ``extra[i]`` also adds
    ``bucket_weight[bucket(age)] * slot_weight[extra_slot]`` (classic frecency: the
    ``bookmarkVisitBonus`` added to every visit of a bookmarked page).

    Attributes:
        age: float64 ``(n, V)`` visit ages in days.
        slot: uint8 ``(n, V)`` slot of each visit, ``n_slots`` for none.
        n_slots: number of weighted slots ``S`` (``slot_weights`` has ``S`` columns).
        extra: bool ``(n,)`` pages with the extra contribution (or ``None``).
        extra_slot: the slot of the extra contribution (ignored without ``extra``).
    """

    age: np.ndarray
    slot: np.ndarray
    n_slots: int
    extra: np.ndarray | None = None
    extra_slot: int = 0

    @property
    def n_pages(self) -> int:
        return int(self.slot.shape[0])

    def extra_visits(self) -> np.ndarray | None:
        """bool ``(n, V)``: real visits of the pages with the extra contribution."""
        if self.extra is None or not self.extra.any():
            return None
        return self.extra[:, None] & (self.slot != self.n_slots)


def bucketed_points(
    cutoffs: np.ndarray,
    bucket_weights: np.ndarray,
    slot_weights: np.ndarray,
    visits: VisitSlots,
) -> np.ndarray:
    """``(P, n)``: for every parameter row ``p`` and page ``i``, the sum over the page's
    visits of ``bucket_weights[p, bucket_p(age)] * slot_weights[p, slot]`` (plus the extra
    contributions, see :class:`VisitSlots`).

    Args:
        cutoffs: ``(P, 4)`` bucket cutoffs in days.
        bucket_weights: ``(P, 5)`` weight per age bucket.
        slot_weights: ``(P, S)`` weight per slot (visit bonus or type weight).
        visits: the visits of ``n`` pages.
    """
    n_rows = cutoffs.shape[0]
    n_pages, n_visits = visits.slot.shape
    if n_pages == 0 or n_visits == 0 or n_rows == 0:
        return np.zeros((n_rows, n_pages), dtype=np.float64)
    if n_rows <= _FEW_ROWS or n_rows * n_pages * n_visits <= _BROADCAST_LIMIT:
        step = max(1, _CHUNK // (n_pages * n_visits))
        parts = [
            _broadcast_points(
                cutoffs[r : r + step],
                bucket_weights[r : r + step],
                slot_weights[r : r + step],
                visits,
            )
            for r in range(0, n_rows, step)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    return _grouped_points(cutoffs, bucket_weights, slot_weights, visits)


def _padded(slot_weights: np.ndarray) -> np.ndarray:
    """``(P, S + 1)``: the slot weights with a zero column for the padding slot."""
    return np.concatenate([slot_weights, np.zeros((slot_weights.shape[0], 1))], axis=1)


def _broadcast_points(
    cutoffs: np.ndarray,
    bucket_weights: np.ndarray,
    slot_weights: np.ndarray,
    visits: VisitSlots,
) -> np.ndarray:
    """Broadcast over (rows, visits): lowest fixed cost, for few rows or few visits."""
    n_rows = cutoffs.shape[0]
    n_pages, n_visits = visits.slot.shape
    age = visits.age.reshape(1, -1)
    eff = effective_cutoffs(cutoffs)
    bucket = np.zeros((n_rows, age.size), dtype=np.uint8)
    for i in range(N_BUCKETS - 1):
        bucket += age > eff[:, i, None]
    row = np.arange(n_rows, dtype=np.intp)[:, None]
    w = np.ascontiguousarray(bucket_weights).ravel()[bucket + row * N_BUCKETS]
    padded = _padded(slot_weights)
    sw = padded.ravel()[visits.slot.reshape(1, -1) + row * padded.shape[1]]
    w = w.reshape(n_rows, n_pages, n_visits)
    points = visit_sum(w * sw.reshape(n_rows, n_pages, n_visits))
    extra = visits.extra_visits()
    if extra is not None:
        points += slot_weights[:, visits.extra_slot, None] * visit_sum(w * extra)
    return points


def visit_sum(terms: np.ndarray) -> np.ndarray:
    """The sum over the last axis (a page's visits) added left to right, first visit first:
    one fixed order of additions, which the simulator's compiled scorer
    (:mod:`fedrank.simulation.frecency.kernels.classic`) follows too, so that both give the
    same bits (``np.einsum`` and ``np.sum`` pick their order by array size and CPU)."""
    out = terms[..., 0].copy()
    for v in range(1, terms.shape[-1]):
        out += terms[..., v]
    return out


def _grouped_points(
    cutoffs: np.ndarray,
    bucket_weights: np.ndarray,
    slot_weights: np.ndarray,
    visits: VisitSlots,
) -> np.ndarray:
    """Count matrix ``H (n, 5 * (S + 1))`` of (page, bucket, slot) for a reference cutoff
    vector (the one most rows share) and one BLAS product for all rows; then, for every
    other cutoff vector, a sparse correction over the visits whose bucket differs."""
    n_rows = cutoffs.shape[0]
    n_pages, n_visits = visits.slot.shape
    n_slots = visits.n_slots
    width = N_BUCKETS * (n_slots + 1)
    age = visits.age.reshape(-1)
    slot = visits.slot.reshape(-1)
    eff = effective_cutoffs(cutoffs)
    unique_cutoffs, inverse, group_size = np.unique(
        eff, axis=0, return_inverse=True, return_counts=True
    )
    inverse = inverse.reshape(-1)
    ref = int(np.argmax(group_size))
    ref_cut = unique_cutoffs[ref]
    ref_bucket = bucket_of(age, ref_cut)

    code = np.repeat(np.arange(n_pages, dtype=np.intp) * width, n_visits)
    code += ref_bucket.astype(np.intp) * (n_slots + 1)
    code += slot
    counts = np.bincount(code, minlength=n_pages * width).astype(np.float64)
    counts = counts.reshape(n_pages, N_BUCKETS, n_slots + 1)
    extra = visits.extra_visits()
    if extra is not None:
        counts[:, :, visits.extra_slot] += (
            counts[:, :, :n_slots].sum(axis=2) * visits.extra[:, None]
        )
    padded = _padded(slot_weights)
    weights = (bucket_weights[:, :, None] * padded[:, None, :]).reshape(n_rows, width)
    out = weights @ counts.reshape(n_pages, width).T

    real = slot != n_slots
    extra_flat = None if extra is None else extra.reshape(-1)
    for g, cut in enumerate(unique_cutoffs):
        if g == ref:
            continue
        # A visit changes bucket only if one of its comparisons age > cutoff flips.
        moved = np.zeros(age.shape, dtype=bool)
        for i in np.flatnonzero(cut != ref_cut):
            lo, hi = min(cut[i], ref_cut[i]), max(cut[i], ref_cut[i])
            moved |= (age > lo) & (age <= hi)
        idx = np.flatnonzero(moved & real)
        if idx.size == 0:
            continue
        new_bucket = bucket_of(age[idx], cut).astype(np.intp)
        old_bucket = ref_bucket[idx].astype(np.intp)
        page = idx // n_visits
        moved_slot = slot[idx].astype(np.intp)
        has_extra = None if extra_flat is None else extra_flat[idx]
        for r in np.flatnonzero(inverse == g):
            gain = padded[r, moved_slot]
            if has_extra is not None:
                gain = gain + has_extra * slot_weights[r, visits.extra_slot]
            delta = (bucket_weights[r, new_bucket] - bucket_weights[r, old_bucket]) * gain
            out[r] += np.bincount(page, weights=delta, minlength=n_pages)
    return out


def slot_table(slot_of: dict[int, int], other: int, padding: int) -> np.ndarray:
    """uint8 lookup table over ``visit_type.view(uint8)``: the slot of every visit type
    (``0``, padding, maps to ``padding``; unknown types, including negative ones, to
    ``other``)."""
    table = np.full(256, other, dtype=np.uint8)
    table[0] = padding
    for visit_type, slot in slot_of.items():
        table[visit_type] = slot
    return table


def type_slots(visit_type: np.ndarray, table: np.ndarray) -> np.ndarray:
    """uint8 ``table[visit_type]`` for an int8 (or any integer) visit-type array."""
    vt = np.asarray(visit_type)
    if vt.dtype != np.int8 and vt.dtype != np.uint8:
        vt = np.where((vt >= -128) & (vt <= 127), vt, -128).astype(np.int8)
    return table[vt.view(np.uint8)]


def _bonus_slot(name: str) -> int:
    return CLASSIC_INDEX[name] - VISIT_BONUS_SLICE.start


#: Number of classic visit-bonus slots (the padding slot is this value).
N_BONUS_SLOTS = VISIT_BONUS_SLICE.stop - VISIT_BONUS_SLICE.start

#: Bonus slot (index into the visit-bonus block of the parameters) of each visit type.
CLASSIC_SLOT_TABLE = slot_table(
    {
        int(VisitType.LINK): _bonus_slot("linkVisitBonus"),
        int(VisitType.TYPED): _bonus_slot("typedVisitBonus"),
        int(VisitType.BOOKMARK): _bonus_slot("bookmarkVisitBonus"),
        int(VisitType.EMBED): _bonus_slot("embedVisitBonus"),
        int(VisitType.REDIRECT_PERMANENT): _bonus_slot("permRedirectVisitBonus"),
        int(VisitType.REDIRECT_TEMPORARY): _bonus_slot("tempRedirectVisitBonus"),
        int(VisitType.DOWNLOAD): _bonus_slot("downloadVisitBonus"),
        int(VisitType.FRAMED_LINK): _bonus_slot("framedLinkVisitBonus"),
        int(VisitType.RELOAD): _bonus_slot("reloadVisitBonus"),
    },
    other=_bonus_slot("defaultVisitBonus"),
    padding=N_BONUS_SLOTS,
)
REDIRECT_SOURCE_SLOT = _bonus_slot("redirectSourceVisitBonus")
#: The bookmark visit bonus among the visit bonus slots.
BOOKMARK_SLOT = _bonus_slot("bookmarkVisitBonus")
_I_FIRST_WEIGHT = CLASSIC_INDEX["firstBucketWeight"]
_I_UNVISITED_BOOKMARK = CLASSIC_INDEX["unvisitedBookmarkBonus"]
_I_UNVISITED_TYPED = CLASSIC_INDEX["unvisitedTypedBonus"]


def newest_visit_age(pages: PageHistories) -> np.ndarray:
    """float64 ``(n,)``: age of each page's newest sampled visit (0 for unvisited pages)."""
    return _newest_age(pages.visit_age_days, pages.visit_mask)


def _newest_age(age: np.ndarray, visit_mask: np.ndarray) -> np.ndarray:
    if age.shape[1] == 0:
        return np.zeros(age.shape[0])
    newest = np.where(visit_mask, age, np.inf).min(axis=1)
    return np.where(np.isfinite(newest), newest, 0.0)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """SQLite's ``ROUND(x)``: to the nearest integer, halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def firefox_age_days(now_us: int, visit_date_us: np.ndarray) -> np.ndarray:
    """int64 ages in whole days as Firefox 62-68's sampling SQL computes them:
    ``ROUND((strftime('%s', 'now') - v.visit_date / 1000000) / 86400)`` -- integer seconds,
    then integer division by a day, both truncating toward zero (SQLite integer arithmetic;
    ``ROUND`` of an integer is the integer)."""
    now_s = int(now_us) // 1_000_000
    date_s = _trunc_div(np.asarray(visit_date_us, dtype=np.int64), 1_000_000)
    return _trunc_div(now_s - date_s, 86_400)


def _trunc_div(values: np.ndarray, divisor: int) -> np.ndarray:
    """Integer division truncating toward zero (C and SQLite), not floor."""
    q = np.abs(values) // divisor
    return np.where(values < 0, -q, q)


def _check_integer_rows(rows: np.ndarray) -> None:
    if not np.array_equal(rows, np.round(rows)) or np.abs(rows).max(initial=0) >= 2**31:
        raise ConfigError(
            "float32=True reproduces Firefox's C++, whose places.frecency.* preferences are "
            "32-bit integers: round the weights first (published models are integers)"
        )


class ClassicFrecency:
    """Firefox's classic frecency as a vectorized scorer of 22 weights (see module doc).

    Args:
        rounding: return Firefox's integer result ``ceilf(visit_count * ceilf(points) /
            n)`` (default); ``False`` returns ``visit_count * points / n`` unrounded.
        float32: reproduce the C++'s float32 arithmetic row by row (integer weights only;
            slower: for scoring a profile, not for finite differences).
    """

    names: tuple[str, ...] = CLASSIC_WEIGHT_NAMES

    def __init__(self, rounding: bool = True, float32: bool = False) -> None:
        self.rounding = bool(rounding)
        self.float32 = bool(float32)
        if self.float32 and not self.rounding:
            raise ConfigError("float32=True reproduces Firefox's integer result: keep rounding")

    @staticmethod
    def defaults() -> np.ndarray:
        """Firefox's default weights, in :attr:`names` order."""
        return classic_defaults()

    @staticmethod
    def redirect_bonus_rows(pages: PageHistories) -> np.ndarray:
        """bool ``(n, V)``: rows scored with ``redirectSourceVisitBonus`` (the C++'s
        ``useRedirectBonus``): the visit led to a PERMANENT redirect, or to a TEMPORARY one
        and its effective type is not TYPED."""
        target = pages.visit_redirect_target
        return pages.visit_mask & (
            (target == VisitType.REDIRECT_PERMANENT)
            | ((target == VisitType.REDIRECT_TEMPORARY) & (pages.effective_type != VisitType.TYPED))
        )

    @staticmethod
    def row_slots(
        visit_type: np.ndarray,
        origin_type: np.ndarray,
        redirect_target: np.ndarray,
        visit_count: np.ndarray,
    ) -> np.ndarray:
        """uint8 ``(n, V)``: the bonus slot of every sampled row (:meth:`visit_slots`) from
        the row columns of :class:`PageHistories` (``visit_type`` 0: padding) and the
        pages' ``visit_count``; ``N_BONUS_SLOTS`` for padding and unsampled pages."""
        visit_type = np.asarray(visit_type)
        origin_type = np.asarray(origin_type)
        redirected = np.isin(visit_type, REDIRECT_TYPES) & (origin_type != 0)
        effective = np.where(redirected, origin_type, visit_type).astype(np.int8)
        slot = type_slots(effective, CLASSIC_SLOT_TABLE)
        visited = visit_type != 0
        target = np.asarray(redirect_target)
        redirect = visited & (
            (target == VisitType.REDIRECT_PERMANENT)
            | ((target == VisitType.REDIRECT_TEMPORARY) & (effective != VisitType.TYPED))
        )
        np.copyto(slot, REDIRECT_SOURCE_SLOT, where=redirect)
        slot[np.asarray(visit_count) <= 0] = N_BONUS_SLOTS
        slot[~visited] = N_BONUS_SLOTS
        return slot

    @classmethod
    def visit_slots(cls, pages: PageHistories) -> VisitSlots:
        """The rows in bonus slots: each sampled row's effective-type bonus (or
        ``redirectSourceVisitBonus``), plus ``bookmarkVisitBonus`` as the extra contribution
        of bookmarked pages. Pages with ``visit_count = 0`` are not sampled (no slot)."""
        slot = cls.row_slots(
            pages.visit_type,
            pages.visit_origin_type,
            pages.visit_redirect_target,
            pages.visit_count,
        )
        return cls.slotted(pages.visit_age_days, slot, pages.bookmarked)

    @staticmethod
    def slotted(age: np.ndarray, slot: np.ndarray, bookmarked: np.ndarray) -> VisitSlots:
        """:class:`VisitSlots` of rows with ages ``age`` (days), bonus slots ``slot``
        (:meth:`row_slots`) and the pages' bookmark flags."""
        return VisitSlots(
            age=np.asarray(age, dtype=np.float64),
            slot=slot,
            n_slots=N_BONUS_SLOTS,
            extra=np.asarray(bookmarked, dtype=bool),
            extra_slot=BOOKMARK_SLOT,
        )

    def points100(self, rows: np.ndarray, pages: PageHistories) -> np.ndarray:
        """``(P, n)``: ``100 * points`` (sum of bucket weight x bonus over sampled rows)."""
        return self._points100(rows, self.visit_slots(pages))

    @staticmethod
    def _points100(rows: np.ndarray, visits: VisitSlots) -> np.ndarray:
        return bucketed_points(
            rows[:, CUTOFF_SLICE],
            rows[:, BUCKET_WEIGHT_SLICE],
            rows[:, VISIT_BONUS_SLICE],
            visits,
        )

    def _float32_points(self, rows: np.ndarray, visits: VisitSlots) -> np.ndarray:
        """``(P, n)`` float32 ``points`` summed row by row in the C++'s order and precision:
        ``points += (float)(weight * (bonus / 100.0))`` for rows with ``bonus != 0``."""
        assert visits.extra is not None
        real = visits.slot != N_BONUS_SLOTS
        eff = effective_cutoffs(rows[:, CUTOFF_SLICE])
        out = np.zeros((rows.shape[0], visits.n_pages), dtype=np.float32)
        for r in range(rows.shape[0]):
            bucket = np.zeros(visits.age.shape, dtype=np.intp)
            for c in eff[r]:
                bucket += visits.age > c
            weight = rows[r, BUCKET_WEIGHT_SLICE][bucket]
            bonus = _padded(rows[r : r + 1, VISIT_BONUS_SLICE])[0][visits.slot]
            bonus = bonus + np.where(
                real & visits.extra[:, None], rows[r, VISIT_BONUS_SLICE][BOOKMARK_SLOT], 0.0
            )
            term = (weight * (bonus / 100.0)).astype(np.float32)
            term[~real | (bonus == 0)] = 0.0
            points = np.zeros(visits.n_pages, dtype=np.float32)
            for j in range(term.shape[1]):  # the C++ loop order (a handful of rows)
                points += term[:, j]
            out[r] = points
        return out

    def score(self, params: np.ndarray, pages: PageHistories) -> np.ndarray:
        """Frecency of every page: ``(n,)`` for a ``(22,)`` vector, ``(P, n)`` for ``(P, 22)``
        rows (float64; integral values when ``rounding``)."""
        return self.score_slots(
            params,
            self.visit_slots(pages),
            pages.visit_count,
            pages.n_sampled,
            pages.bookmarked,
            pages.typed,
            pages.is_place_query,
        )

    def score_slots(
        self,
        params: np.ndarray,
        visits: VisitSlots,
        visit_count: np.ndarray,
        n_sampled: np.ndarray,
        bookmarked: np.ndarray,
        typed: np.ndarray,
        is_place_query: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`score` of pages given as their rows in bonus slots (:meth:`visit_slots`,
        :meth:`slotted`) and page facts (``is_place_query`` ``None``: no ``place:`` query),
        for a caller that keeps the slots (they change only with the history)."""
        rows, single = as_param_rows(params, N_CLASSIC_WEIGHTS, "classic frecency")
        if self.float32:
            _check_integer_rows(rows)
            points = self._float32_points(rows, visits)
        else:
            points = self._points100(rows, visits)
        out = self.from_points(
            rows, points, visit_count, n_sampled, bookmarked, typed, is_place_query
        )
        return out[0] if single else out

    def from_points(
        self,
        rows: np.ndarray,
        points: np.ndarray,
        visit_count: np.ndarray,
        n_sampled: np.ndarray,
        bookmarked: np.ndarray,
        typed: np.ndarray,
        is_place_query: np.ndarray | None = None,
    ) -> np.ndarray:
        """``(P, n)`` frecency of the pages (:meth:`score_slots`) from their points under
        every parameter row: float32 ``points`` with ``float32``, else ``100 * points``
        (:meth:`points100`): Firefox's rounding and its rules for unsampled pages."""
        sampled = np.asarray(n_sampled * (visit_count > 0), dtype=np.int64)
        n = np.maximum(sampled, 1)
        visit_count = visit_count.astype(np.float64)
        if self.float32:
            zero = points == 0
            # ceilf(visitCount * ceilf(points) / numSampledVisits), every step in float32
            out = np.ceil(
                visit_count.astype(np.float32) * np.ceil(points) / n.astype(np.float32)
            ).astype(np.float64)
        else:
            zero = points == 0.0
            if self.rounding:
                # visit_count * ceil(points) is exact in float64 for integer weights.
                out = np.ceil(np.ceil(points / 100.0) * visit_count / n)
            else:
                out = points * visit_count / (100.0 * n)
        out[zero] = -1.0

        unsampled = np.flatnonzero(sampled == 0)
        if unsampled.size:
            scored = bookmarked[unsampled]
            if is_place_query is not None:
                scored = scored & ~is_place_query[unsampled]
            bonus = (
                rows[:, _I_UNVISITED_BOOKMARK, None]
                + typed[unsampled] * rows[:, _I_UNVISITED_TYPED, None]
            )
            if self.float32:
                value = rows[:, _I_FIRST_WEIGHT, None].astype(np.float32) * (
                    bonus.astype(np.float32) / np.float32(100.0)
                )
            else:
                value = rows[:, _I_FIRST_WEIGHT, None] * bonus / 100.0
            if self.rounding:
                value = np.ceil(value)
            out[:, unsampled] = np.where(scored, value, 0.0)
        return out

    def decayed_score(
        self,
        params: np.ndarray,
        pages: PageHistories,
        decay_rate: float = DEFAULT_DECAY_RATE,
    ) -> np.ndarray:
        """The cached, daily-decayed frecency Firefox shows (paper Sec. 4: "once a day, all
        scores are decreased by a few percentage"; control branch of Sec. 6.2).

        Firefox recomputes a page's frecency when it is visited (or bookmarked) and caches
        it; its idle-daily job then runs ``ROUND(frecency * decay_rate) WHERE frecency > 0``
        (``decay_rate`` is the float pref ``places.frecency.decayRate``, 0.975: half-life of
        ~28 days). So a visited page shows the score as of its newest sampled visit
        (``pages`` aged by ``-newest_age``), an unvisited bookmark the score as of its newest
        bookmark, decayed once per whole day since, with SQLite's rounding (halves away from
        zero) after *every* day -- which is why values of 20 or less never decay further.
        Non-positive scores (``-1``, ``0``) are never decayed. With ``rounding=False`` the
        decay is the plain factor ``decay_rate ** days``.
        """
        return self.stored_scores(params, pages, decay_rate)[0]

    def stored_scores(
        self,
        params: np.ndarray,
        pages: PageHistories,
        decay_rate: float = DEFAULT_DECAY_RATE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(decayed, undecayed)``: :meth:`decayed_score` and the score Firefox cached
        when it last recomputed each page (as of its newest sampled visit, or its newest
        bookmark when unvisited), from one scoring pass."""
        return self.stored_slots(
            params,
            pages.visit_age_days,
            pages.visit_mask,
            self.visit_slots(pages).slot,
            pages.visit_count,
            pages.n_sampled,
            pages.bookmarked,
            pages.typed,
            pages.bookmark_age_days,
            pages.is_place_query,
            decay_rate,
        )

    def stored_slots(
        self,
        params: np.ndarray,
        age: np.ndarray,
        visit_mask: np.ndarray,
        slot: np.ndarray,
        visit_count: np.ndarray,
        n_sampled: np.ndarray,
        bookmarked: np.ndarray,
        typed: np.ndarray,
        bookmark_age_days: np.ndarray,
        is_place_query: np.ndarray | None = None,
        decay_rate: float = DEFAULT_DECAY_RATE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`stored_scores` of pages given as their rows' ages, real rows and bonus
        slots (:meth:`row_slots`) and page facts (the columns of :class:`PageHistories`),
        for a caller that keeps the slots."""
        if not (np.isfinite(decay_rate) and 0.0 < decay_rate <= 1.0):
            raise ConfigError(f"decay_rate must be in (0, 1], got {decay_rate}")
        sampled = (n_sampled > 0) & (visit_count > 0)
        since = np.where(sampled, _newest_age(age, visit_mask), bookmark_age_days)
        since = np.maximum(np.floor(since), 0.0)
        shift = -since  # each page as of its newest visit (PageHistories.aged)
        fresh = self.score_slots(
            params,
            self.slotted(age + shift[:, None], slot, bookmarked),
            visit_count,
            n_sampled,
            bookmarked,
            typed,
            is_place_query,
        )
        if not self.rounding:
            return np.where(fresh > 0, fresh * decay_rate**since, fresh), fresh
        rate = float(np.float32(decay_rate))  # the float pref, bound as a double
        return daily_decay(fresh, since.astype(np.int64), rate), fresh


def daily_decay(values: np.ndarray, days: np.ndarray, rate: float) -> np.ndarray:
    """``values`` (``(n,)`` or ``(P, n)``) after ``days[i]`` runs of Firefox's idle-daily
    ``ROUND(frecency * rate) WHERE frecency > 0`` on page ``i``.

    One run is the map ``step(v) = ROUND(v * rate)`` for ``v > 0`` (identity otherwise).
    Integer scores below :data:`_LIFT_LIMIT` (all of Firefox's, which are integers) take
    ``days`` runs by binary lifting: tables of ``step`` applied ``2**k`` times, one
    lookup per bit of ``days`` (:func:`decay_tables`); any other value runs day by day
    (:func:`_decay_by_day`). Both give the same result as running the days one by one."""
    out = np.array(values, dtype=np.float64, copy=True)
    flat = out.reshape(-1)
    d = np.broadcast_to(np.asarray(days, dtype=np.int64), out.shape).reshape(-1)
    todo = (flat > 0) & (d > 0)
    lift = todo & (flat < _LIFT_LIMIT) & (flat == np.floor(flat))
    idx = np.flatnonzero(lift)
    if idx.size:
        v = flat[idx].astype(np.int64)
        dd = d[idx]
        tables = decay_tables(rate, int(v.max()), int(dd.max()).bit_length())
        for k, table in enumerate(tables):
            bit = ((dd >> k) & 1).astype(bool)
            v[bit] = table[v[bit]]
        flat[idx] = v
    rest = np.flatnonzero(todo & ~lift)
    if rest.size:
        flat[rest] = _decay_by_day(flat[rest], d[rest], rate)
    return out


_LIFT_LIMIT = 1 << 20  # integer scores up to here are decayed by table lookups
_DECAY_TABLES: dict[float, list[np.ndarray]] = {}


def decay_tables(rate: float, top: int, n_levels: int) -> list[np.ndarray]:
    """``n_levels`` int32 tables covering ``0..top``: table ``k`` maps ``v`` to ``v`` after
    ``2**k`` daily runs (cached per rate, grown on demand; ``step`` never raises a value,
    so every lookup stays inside the table)."""
    old = _DECAY_TABLES.get(rate, [])
    if old and old[0].size > top and len(old) >= n_levels:
        return old[:n_levels]
    size = max(1024, 1 << int(top).bit_length(), old[0].size if old else 0)
    v = np.arange(size, dtype=np.float64)
    tables = [np.maximum(np.where(v > 0, round_half_away(v * rate), v), 0).astype(np.int32)]
    while len(tables) < max(n_levels, len(old)):
        tables.append(tables[-1][tables[-1]])
    _DECAY_TABLES[rate] = tables  # replaced whole, so concurrent readers stay valid
    return tables[:n_levels]


def _decay_by_day(values: np.ndarray, days: np.ndarray, rate: float) -> np.ndarray:
    """:func:`daily_decay` of 1-D ``values`` one day at a time (values that no longer change
    drop out)."""
    flat = values.copy()
    remaining = days.copy()
    active = np.flatnonzero((flat > 0) & (remaining > 0))
    while active.size:
        v = flat[active]
        new = round_half_away(v * rate)
        flat[active] = new
        left = remaining[active] - 1
        remaining[active] = left
        active = active[(left > 0) & (new != v) & (new > 0)]
    return flat
