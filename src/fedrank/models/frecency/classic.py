"""Classic Firefox frecency (pre-2024 ``CalculateFrecency``) with its 22 tunable weights.

This is the scorer the Mozilla study optimized (paper Section 4, "Search in the Firefox URL
bar"; MDN "Frecency algorithm"; Firefox ``toolkit/components/places/SQLFunctions.cpp``,
``CalculateFrecencyFunction`` before the 2024 rewrite). For one page ``x``:

* **Visited page** (at least one sampled visit ``v`` among its ``|T_x| <= 10`` most recent):

  - ``bonus(v)`` is ``redirectSourceVisitBonus`` when ``v`` redirected to another page,
    otherwise the bonus of its visit type: LINK ``linkVisitBonus``, TYPED
    ``typedVisitBonus``, BOOKMARK ``bookmarkVisitBonus``, EMBED ``embedVisitBonus``,
    REDIRECT_PERMANENT ``permRedirectVisitBonus``, REDIRECT_TEMPORARY
    ``tempRedirectVisitBonus``, DOWNLOAD ``downloadVisitBonus``, FRAMED_LINK
    ``framedLinkVisitBonus``, RELOAD ``reloadVisitBonus``, any other type
    ``defaultVisitBonus``. If the page is bookmarked, ``bookmarkVisitBonus`` is *added* to
    the bonus of every visit.
  - ``weight(v)`` is the bucket weight of the visit's age in days: ``age <=
    firstBucketCutoff`` gives ``firstBucketWeight``, else ``<= secondBucketCutoff`` gives
    ``secondBucketWeight``, else ``<= thirdBucketCutoff`` ``thirdBucketWeight``, else ``<=
    fourthBucketCutoff`` ``fourthBucketWeight``, else ``defaultBucketWeight`` (an ``if /
    elif`` chain, so unordered cutoffs behave exactly like Firefox's comparisons).
  - ``points = sum_v weight(v) * bonus(v) / 100`` and
    ``frecency = ceil(visit_count * points / |T_x|)`` -- the paper's
    ``|S_x| / |T_x| * sum_{v in T_x} visit(v)``. If ``points == 0`` the frecency is ``-1``
    (Firefox: the page has past visits, so "it will still appear in the UI").

* **Unvisited page** (no sampled visit): bookmarked and/or typed pages get
  ``bonus = unvisitedBookmarkBonus [if bookmarked] + unvisitedTypedBonus [if typed]`` and
  ``frecency = ceil(firstBucketWeight * bonus / 100)`` (Firefox assumes "now", i.e. the first
  bucket). Other unvisited pages score 0.

With ``rounding=False`` the two ``ceil`` are dropped (a piecewise-linear score, handy for
analysis). Firefox's C++ additionally rounds the points up before averaging
(``ceilf(visit_count * ceilf(points) / n)``); ``ceil_points=True`` reproduces that, the
default follows the documented formula above.

Firefox caches frecency and, once a day (idle-daily), multiplies every positive cached value
by ``places.frecency.decayRate`` = 0.975 (``ROUND(frecency * 0.975) WHERE frecency > 0``):
see :meth:`ClassicFrecency.decayed_score`.

Everything is vectorized: the points are linear in the products ``bucket weight x bonus``, so
``points = sum_{b, t} H[page, b, t] * W[b] * Bonus[t]`` where ``H`` counts the visits of each
page per (age bucket, bonus slot). ``H`` depends on the parameters only through the four
cutoffs, so parameter rows are grouped by their cutoff vector (a finite-difference batch of
45 rows has 9 distinct ones) and each group is one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.frecency.history import PageHistories, VisitType
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
    points = np.einsum("rnv,rnv->rn", w, sw.reshape(n_rows, n_pages, n_visits))
    extra = visits.extra_visits()
    if extra is not None:
        extra_w = np.einsum("rnv,nv->rn", w, extra.astype(np.float64))
        points += slot_weights[:, visits.extra_slot, None] * extra_w
    return points


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
_CLASSIC_SLOT_TABLE = slot_table(
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
_REDIRECT_SOURCE_SLOT = _bonus_slot("redirectSourceVisitBonus")
_BOOKMARK_SLOT = _bonus_slot("bookmarkVisitBonus")
_I_FIRST_WEIGHT = CLASSIC_INDEX["firstBucketWeight"]
_I_UNVISITED_BOOKMARK = CLASSIC_INDEX["unvisitedBookmarkBonus"]
_I_UNVISITED_TYPED = CLASSIC_INDEX["unvisitedTypedBonus"]


def newest_visit_age(pages: PageHistories) -> np.ndarray:
    """float64 ``(n,)``: age of each page's newest sampled visit (0 for unvisited pages)."""
    if pages.visit_type.shape[1] == 0:
        return np.zeros(pages.n_pages)
    newest = np.where(pages.visit_mask, pages.visit_age_days, np.inf).min(axis=1)
    return np.where(np.isfinite(newest), newest, 0.0)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """SQLite's ``ROUND(x)``: to the nearest integer, halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


class ClassicFrecency:
    """Firefox's classic frecency as a vectorized scorer of 22 weights (see module doc).

    Args:
        rounding: return Firefox's integer (``ceil``) result (default); ``False`` returns
            the un-rounded value.
        ceil_points: also round the points sum up before averaging, like Firefox's C++
            (``ceilf(visit_count * ceilf(points) / n)``); only used when ``rounding``.
    """

    names: tuple[str, ...] = CLASSIC_WEIGHT_NAMES

    def __init__(self, rounding: bool = True, ceil_points: bool = False) -> None:
        self.rounding = bool(rounding)
        self.ceil_points = bool(ceil_points)

    @staticmethod
    def defaults() -> np.ndarray:
        """Firefox's default weights, in :attr:`names` order."""
        return classic_defaults()

    @staticmethod
    def visit_slots(pages: PageHistories) -> VisitSlots:
        """The visits in bonus slots: each sampled visit's type bonus (or
        ``redirectSourceVisitBonus``), plus ``bookmarkVisitBonus`` as the extra contribution
        of bookmarked pages."""
        slot = type_slots(pages.visit_type, _CLASSIC_SLOT_TABLE)
        np.copyto(
            slot, _REDIRECT_SOURCE_SLOT, where=pages.visit_is_redirect_source & pages.visit_mask
        )
        return VisitSlots(
            age=np.asarray(pages.visit_age_days, dtype=np.float64),
            slot=slot,
            n_slots=N_BONUS_SLOTS,
            extra=np.asarray(pages.bookmarked, dtype=bool),
            extra_slot=_BOOKMARK_SLOT,
        )

    def points100(self, rows: np.ndarray, pages: PageHistories) -> np.ndarray:
        """``(P, n)``: ``100 * points`` (sum of bucket weight x bonus over sampled visits)."""
        return bucketed_points(
            rows[:, CUTOFF_SLICE],
            rows[:, BUCKET_WEIGHT_SLICE],
            rows[:, VISIT_BONUS_SLICE],
            self.visit_slots(pages),
        )

    def score(self, params: np.ndarray, pages: PageHistories) -> np.ndarray:
        """Frecency of every page: ``(n,)`` for a ``(22,)`` vector, ``(P, n)`` for ``(P, 22)``
        rows (float64; integral values when ``rounding``)."""
        rows, single = as_param_rows(params, N_CLASSIC_WEIGHTS, "classic frecency")
        pts100 = self.points100(rows, pages)
        n_sampled = pages.n_sampled
        visit_count = pages.visit_count.astype(np.float64)
        denom = 100.0 * np.maximum(n_sampled, 1)
        # frecency = visit_count * (100 points) / (100 n): visit_count * 100 points is exact
        # for integer weights, so one division and one ceil give the exact integer result.
        if self.rounding and self.ceil_points:
            out = np.ceil(pts100 / 100.0)
            out *= visit_count
            out /= np.maximum(n_sampled, 1)
        else:
            out = pts100 * visit_count
            out /= denom
        if self.rounding:
            np.ceil(out, out=out)
        out[pts100 == 0.0] = -1.0

        unvisited = np.flatnonzero(n_sampled == 0)
        if unvisited.size:
            bookmarked = pages.bookmarked[unvisited]
            typed = pages.typed[unvisited]
            bonus = (
                bookmarked * rows[:, _I_UNVISITED_BOOKMARK, None]
                + typed * rows[:, _I_UNVISITED_TYPED, None]
            )
            value = rows[:, _I_FIRST_WEIGHT, None] * bonus / 100.0
            if self.rounding:
                value = np.ceil(value)
            out[:, unvisited] = np.where(bookmarked | typed, value, 0.0)
        return out[0] if single else out

    def decayed_score(
        self,
        params: np.ndarray,
        pages: PageHistories,
        decay_rate: float = DEFAULT_DECAY_RATE,
    ) -> np.ndarray:
        """The cached, daily-decayed frecency Firefox shows (paper Sec. 4: "once a day, all
        scores are decreased by a few percentage"; control branch of Sec. 6.2).

        Model: Firefox recomputes a page's frecency when it is visited, caches it, and its
        idle-daily job multiplies every positive cached value by ``decay_rate``
        (``places.frecency.decayRate``, default 0.975: half-life of ~28 days). So the
        cached value is the score as of the page's newest sampled visit (``pages`` aged by
        ``-newest_age``) times ``decay_rate ** floor(newest_age)``, rounded to the nearest
        integer (halves away from zero, SQLite ``ROUND``) when ``rounding``. Non-positive
        scores (``-1``, ``0``) are not decayed (Firefox's ``WHERE frecency > 0``), nor are
        unvisited pages (their score does not depend on time). Firefox rounds after every
        daily step; this model rounds once (the two differ by less than
        ``0.5 / (1 - decay_rate)`` points, 20 at 0.975, and usually by 0 or 1).
        """
        if not (np.isfinite(decay_rate) and 0.0 < decay_rate <= 1.0):
            raise ConfigError(f"decay_rate must be in (0, 1], got {decay_rate}")
        newest = newest_visit_age(pages)
        fresh = self.score(params, pages.aged(-newest))
        factor = decay_rate ** np.floor(np.maximum(newest, 0.0))
        decayed = fresh * factor
        if self.rounding:
            decayed = round_half_away(decayed)
        return np.where(fresh > 0, decayed, fresh)
