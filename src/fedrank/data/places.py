"""Reading a Firefox profile's ``places.sqlite`` and scoring it with fedrank's frecency.

:func:`read_places` loads the columns frecency needs from ``moz_places``,
``moz_historyvisits``, ``moz_bookmarks`` and ``moz_places_metadata`` with one query per table
(read-only), then everything is numpy:

* :func:`classic_histories` builds the :class:`PageHistories` of the classic algorithm
  (paper Section 4; each page's 10 most recent visits);
* :func:`modern_samples` reproduces, for every page at once, the sampling query of Firefox
  153's ``CalculateFrecency`` (``toolkit/components/places/SQLFunctions.cpp``), whose result
  :class:`~fedrank.models.frecency.modern.ModernFrecency` turns into Firefox's frecency;
* :func:`score_places` scores every ``moz_places`` row and reports it next to the frecency
  Firefox stored.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.errors import ConfigError, DataFormatError, SchemaError
from fedrank.models.frecency.classic import ClassicFrecency, firefox_age_days
from fedrank.models.frecency.history import NUM_SAMPLED_VISITS, PageHistories
from fedrank.models.frecency.modern import (
    HIGH,
    LOW,
    MEDIUM,
    PADDING,
    US_PER_DAY,
    VERY_HIGH,
    ModernFrecency,
    ModernPrefs,
    ModernSamples,
)

#: Tables and columns fedrank reads (``moz_historyvisits.source`` is optional: only the
#: modern algorithm needs it, and old profiles lack it; ``moz_places.foreign_count``, the
#: number of bookmarks and keywords of a page, is what Firefox's classic frecency tests).
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "moz_places": ("id", "url", "title", "visit_count", "typed", "hidden", "frecency"),
    "moz_historyvisits": ("id", "from_visit", "place_id", "visit_date", "visit_type"),
    "moz_bookmarks": ("fk", "dateAdded"),
    "moz_places_metadata": ("place_id", "created_at", "total_view_time", "key_presses"),
}
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    "moz_historyvisits": ("source",),
    "moz_places": ("foreign_count",),
}

#: Scoring algorithms of :func:`score_places`.
ALGORITHMS: tuple[str, ...] = ("classic", "modern")

# moz_historyvisits.visit_type values used by the modern query.
_REDIRECTS = (5, 6)
_NOT_SAMPLED = (7, 8, 9)
_NOT_MEDIUM = (4, 8, 9)


@dataclass(frozen=True)
class PlacesData:
    """The frecency-relevant columns of a ``places.sqlite``, as numpy arrays.

    ``moz_places`` columns (one entry per row, ordered by ``id``): ``place_id``, ``url``,
    ``title`` (object arrays; a NULL title is ``None``), ``visit_count``, ``typed``,
    ``hidden``, ``frecency`` (NULL integers read as 0), ``foreign_count`` (``None`` when the
    column does not exist).
    ``moz_historyvisits`` (ordered by ``id``): ``visit_id``, ``visit_from``,
    ``visit_place_id``, ``visit_date`` (PRTime, microseconds), ``visit_type``,
    ``visit_source`` (``None`` when the column does not exist).
    ``moz_bookmarks``: ``bookmark_fk`` (0 for folders and separators), ``bookmark_date_added``.
    ``moz_places_metadata``: ``meta_place_id``, ``meta_created_at`` (milliseconds),
    ``meta_total_view_time`` (milliseconds), ``meta_key_presses``.
    """

    path: Path
    place_id: np.ndarray
    url: np.ndarray
    title: np.ndarray
    visit_count: np.ndarray
    typed: np.ndarray
    hidden: np.ndarray
    frecency: np.ndarray
    foreign_count: np.ndarray | None
    visit_id: np.ndarray
    visit_from: np.ndarray
    visit_place_id: np.ndarray
    visit_date: np.ndarray
    visit_type: np.ndarray
    visit_source: np.ndarray | None
    bookmark_fk: np.ndarray
    bookmark_date_added: np.ndarray
    meta_place_id: np.ndarray
    meta_created_at: np.ndarray
    meta_total_view_time: np.ndarray
    meta_key_presses: np.ndarray

    @property
    def n_places(self) -> int:
        return int(self.place_id.size)

    @property
    def n_visits(self) -> int:
        return int(self.visit_id.size)

    @property
    def n_bookmarks(self) -> int:
        return int(self.bookmark_fk.size)

    @property
    def n_metadata(self) -> int:
        return int(self.meta_place_id.size)

    def place_index(self, place_ids: np.ndarray) -> np.ndarray:
        """Row index in ``moz_places`` of every id (``-1`` where the id is not a place)."""
        ids = np.asarray(place_ids, dtype=np.int64)
        if self.n_places == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.place_id, ids), 0, self.n_places - 1)
        return np.where(self.place_id[pos] == ids, pos, -1)

    def latest_visit_or_bookmark_us(self) -> int:
        """The newest ``visit_date`` or bookmark ``dateAdded``, in microseconds (0 if there
        is none): classic frecency's default "now" (study-era Firefox had no page
        interactions)."""
        return max(
            [0] + [int(a.max()) for a in (self.visit_date, self.bookmark_date_added) if a.size]
        )

    def latest_timestamp_us(self) -> int:
        """The largest timestamp in the database, in microseconds: the newest visit,
        bookmark ``dateAdded`` or page-interaction ``created_at`` (0 if there is none)."""
        candidates = [0]
        for arr, scale in (
            (self.visit_date, 1),
            (self.bookmark_date_added, 1),
            (self.meta_created_at, 1000),
        ):
            if arr.size:
                candidates.append(int(arr.max()) * scale)
        return max(candidates)


def _int_array(values: Iterable[Any]) -> np.ndarray:
    return np.fromiter((0 if v is None else int(v) for v in values), dtype=np.int64)


def _check_schema(conn: sqlite3.Connection, path: Path) -> set[str]:
    """Raise :class:`SchemaError` unless every required table and column exists; return the
    optional columns (``table.column``) that do."""
    present: set[str] = set()
    hint = "it must be a Firefox profile's places.sqlite"
    for table, columns in REQUIRED_COLUMNS.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if not have:
            raise SchemaError(
                f"{path}: table {table!r} is missing (fedrank needs its columns "
                f"{', '.join(columns)}); {hint}"
            )
        for column in columns:
            if column not in have:
                raise SchemaError(
                    f"{path}: table {table!r} has no column {column!r} (fedrank needs "
                    f"{table}.{column}); {hint}"
                )
        for column in OPTIONAL_COLUMNS.get(table, ()):
            if column in have:
                present.add(f"{table}.{column}")
    return present


def read_places(path: str | Path) -> PlacesData:
    """Read a ``places.sqlite`` (opened read-only; the file is never modified).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: the file is not an SQLite database.
        SchemaError: a needed table or column is missing.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no such file: {path} (expected a Firefox profile's places.sqlite)"
        )
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            optional = _check_schema(conn, path)
            has_source = "moz_historyvisits.source" in optional
            has_foreign = "moz_places.foreign_count" in optional
            places = conn.execute(
                "SELECT id, url, title, visit_count, typed, hidden, frecency"
                + (", foreign_count" if has_foreign else "")
                + " FROM moz_places ORDER BY id"
            ).fetchall()
            visits = conn.execute(
                "SELECT id, from_visit, place_id, visit_date, visit_type"
                + (", source" if has_source else "")
                + " FROM moz_historyvisits ORDER BY id"
            ).fetchall()
            bookmarks = conn.execute("SELECT fk, dateAdded FROM moz_bookmarks").fetchall()
            metadata = conn.execute(
                "SELECT place_id, created_at, total_view_time, key_presses FROM moz_places_metadata"
            ).fetchall()
    except sqlite3.DatabaseError as err:
        raise DataFormatError(
            f"{path} could not be read as an SQLite database ({err}); it must be a Firefox "
            "profile's places.sqlite"
        ) from err

    def column(rows: list[tuple[Any, ...]], i: int) -> np.ndarray:
        return _int_array(row[i] for row in rows)

    return PlacesData(
        path=path,
        place_id=column(places, 0),
        url=np.array([row[1] if row[1] is not None else "" for row in places], dtype=object),
        title=np.array([row[2] for row in places], dtype=object),
        visit_count=column(places, 3),
        typed=column(places, 4) != 0,
        hidden=column(places, 5) != 0,
        frecency=column(places, 6),
        foreign_count=column(places, 7) if has_foreign else None,
        visit_id=column(visits, 0),
        visit_from=column(visits, 1),
        visit_place_id=column(visits, 2),
        visit_date=column(visits, 3),
        visit_type=column(visits, 4),
        visit_source=column(visits, 5) if has_source else None,
        bookmark_fk=column(bookmarks, 0),
        bookmark_date_added=column(bookmarks, 1),
        meta_place_id=column(metadata, 0),
        meta_created_at=column(metadata, 1),
        meta_total_view_time=column(metadata, 2),
        meta_key_presses=column(metadata, 3),
    )


# ----------------------------------------------------------------------------------------
# Small vectorized helpers
# ----------------------------------------------------------------------------------------


def _rank_within(group: np.ndarray) -> np.ndarray:
    """Position of every element inside its run of equal ``group`` values (``group`` must be
    sorted)."""
    n = group.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - run_start


def _newest_per_group(group: np.ndarray, date: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` newest entries of every group, ordered by group then newest
    first (``ORDER BY date DESC LIMIT limit`` per group)."""
    order = np.lexsort((-date, group))
    keep = _rank_within(group[order]) < limit
    return order[keep]


def _exists_within(
    q_group: np.ndarray,
    q_date: np.ndarray,
    ref_group: np.ndarray,
    ref_date: np.ndarray,
    gap: int,
) -> np.ndarray:
    """For every query, whether some reference of the same group has
    ``q_date - gap <= ref_date <= q_date + gap`` (SQL ``BETWEEN``, inclusive)."""
    if q_group.size == 0 or ref_group.size == 0:
        return np.zeros(q_group.size, dtype=bool)
    lo, hi = q_date - gap, q_date + gap
    # Replace dates by their rank among all dates involved, so that (group, date) fits in
    # one int64 key that sorts like the pair.
    levels = np.unique(np.concatenate([ref_date, lo, hi]))
    width = np.int64(levels.size)
    ref_key = np.sort(ref_group * width + np.searchsorted(levels, ref_date))
    lo_key = q_group * width + np.searchsorted(levels, lo)
    hi_key = q_group * width + np.searchsorted(levels, hi)
    return np.searchsorted(ref_key, hi_key, "right") > np.searchsorted(ref_key, lo_key, "left")


def _sql_div(values: np.ndarray, divisor: int) -> np.ndarray:
    """SQLite integer division (truncates toward zero)."""
    q = np.abs(values) // divisor
    return np.where(values < 0, -q, q)


def _lookup(
    keys: np.ndarray, table_keys: np.ndarray, table_values: np.ndarray, missing: int
) -> np.ndarray:
    """``table_values[i]`` where ``table_keys[i] == key`` (``table_keys`` sorted, unique),
    else ``missing``."""
    if table_keys.size == 0:
        return np.full(keys.shape, missing, dtype=np.int64)
    pos = np.clip(np.searchsorted(table_keys, keys), 0, table_keys.size - 1)
    return np.where(table_keys[pos] == keys, table_values[pos], missing)


def _pad_rows(
    group: np.ndarray, values: list[np.ndarray], n_groups: int, fill: list[int], min_width: int = 1
) -> list[np.ndarray]:
    """Scatter per-entry values into ``(n_groups, width)`` arrays, one row per group, in the
    given entry order (``group`` must be sorted)."""
    counts = np.bincount(group, minlength=n_groups) if group.size else np.zeros(n_groups, int)
    width = max(min_width, int(counts.max()) if counts.size else 0)
    col = _rank_within(group)
    out = []
    for vals, fill_value in zip(values, fill, strict=True):
        arr = np.full((n_groups, width), fill_value, dtype=np.int64)
        arr[group, col] = vals
        out.append(arr)
    return out


# ----------------------------------------------------------------------------------------
# Classic histories
# ----------------------------------------------------------------------------------------


def classic_histories(
    data: PlacesData,
    now_us: int | None = None,
    num_sampled_visits: int = NUM_SAMPLED_VISITS,
) -> PageHistories:
    """The :class:`PageHistories` of every ``moz_places`` row (same order as ``data``), as
    Firefox 62-68's ``CalculateFrecencyFunction`` samples them (``SQLFunctions.cpp``)::

        SELECT IFNULL(origin.visit_type, v.visit_type), target.visit_type,
               ROUND((strftime('%s','now') - v.visit_date/1000000)/86400)
        FROM moz_historyvisits v
        LEFT JOIN moz_historyvisits origin ON origin.id = v.from_visit
                                          AND v.visit_type BETWEEN 5 AND 6
        LEFT JOIN moz_historyvisits target ON v.id = target.from_visit
                                          AND target.visit_type BETWEEN 5 AND 6
        WHERE v.place_id = :page_id ORDER BY v.visit_date DESC LIMIT :max_visits

    One row per (visit, redirect target) -- a visit that redirected twice gives two rows,
    and the ``LIMIT`` counts rows -- newest first; equal dates in descending visit id (the
    order of SQLite's backward scan of the ``(place_id, visit_date)`` index), the targets
    of one visit in ascending id. Ages are whole days (:func:`~fedrank.models.frecency.
    classic.firefox_age_days`) at ``now_us`` (default: the newest visit or bookmark,
    :meth:`PlacesData.latest_visit_or_bookmark_us`). ``bookmarked`` is ``foreign_count > 0``
    when the column exists (bookmarks and keywords), else "is the ``fk`` of a bookmark";
    ``bookmark_age_days`` is the age of the newest bookmark of the page.
    """
    now = data.latest_visit_or_bookmark_us() if now_us is None else int(now_us)
    n = data.n_places
    place = data.place_index(data.visit_place_id)
    is_redirect = np.isin(data.visit_type, _REDIRECTS)
    # origin: the visit a redirect came from (LEFT JOIN: 0 when missing).
    origin = _lookup(data.visit_from, data.visit_id, data.visit_type, missing=0)
    origin = np.where(is_redirect, origin, 0)
    # target: redirect visits whose from_visit is this visit; one row per match.
    t_idx = np.flatnonzero(is_redirect)
    t_idx = t_idx[np.lexsort((data.visit_id[t_idx], data.visit_from[t_idx]))]
    t_from = data.visit_from[t_idx]
    first = np.searchsorted(t_from, data.visit_id, side="left")
    n_targets = np.searchsorted(t_from, data.visit_id, side="right") - first
    repeat = np.maximum(n_targets, 1)
    row_visit = np.repeat(np.arange(data.n_visits), repeat)
    within = np.arange(row_visit.size) - np.repeat(np.cumsum(repeat) - repeat, repeat)
    has_target = np.repeat(n_targets > 0, repeat)
    target_pos = np.repeat(first, repeat) + within
    row_target = np.zeros(row_visit.size, dtype=np.int64)
    row_target[has_target] = data.visit_type[t_idx[target_pos[has_target]]]

    keep = place[row_visit] >= 0
    keep &= data.visit_count[np.maximum(place[row_visit], 0)] > 0  # visit_count = 0: no sample
    rows = np.flatnonzero(keep)
    v = row_visit[rows]
    order = np.lexsort((within[rows], -data.visit_id[v], -data.visit_date[v], place[v]))
    rows, v = rows[order], v[order]
    rows = rows[_rank_within(place[v]) < num_sampled_visits]
    v = row_visit[rows]
    vtype, vage, vorigin, vtarget = _pad_rows(
        place[v],
        [
            data.visit_type[v],
            firefox_age_days(now, data.visit_date[v]),
            origin[v],
            row_target[rows],
        ],
        n,
        [0, 0, 0, 0],
        min_width=num_sampled_visits,
    )
    b_place = data.place_index(data.bookmark_fk)
    b_ok = b_place >= 0
    newest_bookmark = np.full(n, now, dtype=np.int64)
    if b_ok.any():
        latest = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, b_place[b_ok], data.bookmark_date_added[b_ok])
        newest_bookmark = np.where(latest > np.iinfo(np.int64).min, latest, now)
    bookmarked = (
        data.foreign_count > 0
        if data.foreign_count is not None
        else np.isin(data.place_id, data.bookmark_fk)
    )
    return PageHistories(
        visit_age_days=vage.astype(np.float64),
        visit_type=vtype.astype(np.int8),
        visit_origin_type=vorigin.astype(np.int8),
        visit_redirect_target=vtarget.astype(np.int8),
        visit_count=data.visit_count.copy(),
        bookmarked=bookmarked,
        typed=data.typed.copy(),
        is_place_query=_is_place_query(data.url),
        bookmark_age_days=np.where(bookmarked, firefox_age_days(now, newest_bookmark), 0).astype(
            np.float64
        ),
    )


def _is_place_query(urls: np.ndarray) -> np.ndarray:
    """bool: ``place:`` URLs (saved queries; Firefox's ``substr(url, 0, 7) = 'place:'``)."""
    return np.array([str(u).startswith("place:") for u in urls], dtype=bool)


# ----------------------------------------------------------------------------------------
# Modern samples (Firefox 153 CalculateFrecency, SQLFunctions.cpp)
# ----------------------------------------------------------------------------------------


def modern_samples(data: PlacesData, prefs: ModernPrefs | None = None) -> ModernSamples:
    """The modern-frecency samples of every ``moz_places`` row, exactly as Firefox 153's
    ``CalculateFrecency`` query selects and classifies them (for all pages at once).

    Per page:

    1. *Interactions*: its ``moz_places_metadata`` rows with ``total_view_time >=
       viewTimeSeconds * 1000`` or (``total_view_time >= viewTimeIfManyKeypressesSeconds *
       1000`` and ``key_presses >= manyKeypresses``), dated ``created_at * 1000``; the
       ``numSampledVisits`` most recent are kept.
    2. *Sampled visits*: its visits whose type is not DOWNLOAD / FRAMED_LINK / RELOAD
       (7, 8, 9), the ``numSampledVisits`` most recent. A visit is *interesting* when a kept
       interaction lies within ``maxVisitGapSeconds`` of it (inclusive).
    3. *Virtual visits*: kept interactions with no visit of the page (any type) within
       ``maxVisitGapSeconds``; they count as interesting LINK visits of source 0.
    4. The ``numSampledVisits`` most recent of (2) and (3) are classified. With ``s`` the
       source visit of a redirect (its ``from_visit``, for types 5 and 6), the effective
       type is ``s``'s type if ``s`` exists, else the visit's own; ``t`` = the visit is the
       source of a redirect (some type 5/6 visit has it as ``from_visit``). Like the SQL
       ``LEFT JOIN``, a visit that is the source of ``k > 1`` redirects is counted ``k``
       times. Sources: 0 organic, 1 sponsored, 2 bookmark, 3 searched.

       - effective type BOOKMARK, or source bookmark, or (effective TYPED, source not
         sponsored/searched, not ``t``): veryHigh if interesting else high;
       - else not ``t``, effective type not EMBED/FRAMED_LINK/RELOAD, source not sponsored:
         high if interesting else medium;
       - else low.
    5. A page with no sample but a bookmark gets one high sample on the day of its most
       recent bookmark's ``dateAdded``.

    Days are ``PRTime // 86_400_000_000`` (SQLite integer division).

    Raises:
        SchemaError: the database has no ``moz_historyvisits.source`` column (profiles
            older than Firefox 120 cannot be scored with the modern algorithm).
    """
    prefs = prefs or ModernPrefs()
    if data.visit_source is None:
        raise SchemaError(
            f"{data.path}: table 'moz_historyvisits' has no column 'source', which the modern "
            "frecency algorithm needs; use a places.sqlite written by Firefox 120 or later, "
            "or the classic algorithm"
        )
    limit = int(prefs.numSampledVisits)
    gap = int(prefs.maxVisitGapSeconds) * 1_000_000
    n = data.n_places

    # 1. Interactions, the `limit` most recent per page.
    view = data.meta_total_view_time
    qualifies = (view >= prefs.viewTimeSeconds * 1000) | (
        (view >= prefs.viewTimeIfManyKeypressesSeconds * 1000)
        & (data.meta_key_presses >= prefs.manyKeypresses)
    )
    i_place = data.place_index(data.meta_place_id)
    i_idx = np.flatnonzero(qualifies & (i_place >= 0))
    i_date_all = data.meta_created_at * 1000
    i_idx = i_idx[_newest_per_group(i_place[i_idx], i_date_all[i_idx], limit)]
    i_grp, i_date = i_place[i_idx], i_date_all[i_idx]

    # 2. Sampled visits (types other than 7, 8, 9), the `limit` most recent per page.
    v_place = data.place_index(data.visit_place_id)
    v_idx = np.flatnonzero((v_place >= 0) & ~np.isin(data.visit_type, _NOT_SAMPLED))
    v_idx = v_idx[_newest_per_group(v_place[v_idx], data.visit_date[v_idx], limit)]
    v_grp, v_date = v_place[v_idx], data.visit_date[v_idx]
    v_interesting = _exists_within(v_grp, v_date, i_grp, i_date, gap)

    # 3. Virtual visits: interactions with no visit of the page (any type) nearby.
    all_known = v_place >= 0
    lonely = ~_exists_within(i_grp, i_date, v_place[all_known], data.visit_date[all_known], gap)

    # 4. Union, `limit` most recent per page.
    u_grp = np.concatenate([v_grp, i_grp[lonely]])
    u_date = np.concatenate([v_date, i_date[lonely]])
    n_virtual = int(lonely.sum())
    u_id = np.concatenate([data.visit_id[v_idx], np.full(n_virtual, -1, dtype=np.int64)])
    u_from = np.concatenate([data.visit_from[v_idx], np.zeros(n_virtual, dtype=np.int64)])
    u_type = np.concatenate([data.visit_type[v_idx], np.ones(n_virtual, dtype=np.int64)])
    u_source = np.concatenate([data.visit_source[v_idx], np.zeros(n_virtual, dtype=np.int64)])
    u_interesting = np.concatenate([v_interesting, np.ones(n_virtual, dtype=bool)])
    keep = _newest_per_group(u_grp, u_date, limit)
    u_grp, u_date, u_id, u_from, u_type, u_source, u_interesting = (
        a[keep] for a in (u_grp, u_date, u_id, u_from, u_type, u_source, u_interesting)
    )

    # Redirect joins. s: the visit whose id = from_visit, only for redirect targets.
    from_type = _lookup(u_from, data.visit_id, data.visit_type, missing=-1)
    effective = np.where(np.isin(u_type, _REDIRECTS) & (from_type >= 0), from_type, u_type)
    # t: visits of type 5/6 whose from_visit = this visit's id (one SQL row per match).
    redirect_from = data.visit_from[np.isin(data.visit_type, _REDIRECTS)]
    t_keys, t_counts = np.unique(redirect_from, return_counts=True)
    t_count = np.where(u_id >= 0, _lookup(u_id, t_keys, t_counts, missing=0), 0)
    t_exists = t_count > 0

    top = (
        (effective == 3)
        | (u_source == 2)
        | ((effective == 2) & ~np.isin(u_source, (1, 3)) & ~t_exists)
    )
    middle = ~t_exists & ~np.isin(effective, _NOT_MEDIUM) & (u_source != 1)
    cls = np.select(
        [top & u_interesting, top, middle & u_interesting, middle],
        [VERY_HIGH, HIGH, HIGH, MEDIUM],
        LOW,
    )
    repeat = np.maximum(t_count, 1)
    s_grp = np.repeat(u_grp, repeat)
    s_day = np.repeat(_sql_div(u_date, US_PER_DAY), repeat)
    s_cls = np.repeat(cls, repeat)

    # 5. Bookmark fallback for pages without samples.
    b_place = data.place_index(data.bookmark_fk)
    b_ok = b_place >= 0
    newest_bookmark = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(newest_bookmark, b_place[b_ok], data.bookmark_date_added[b_ok])
    has_sample = np.zeros(n, dtype=bool)
    has_sample[s_grp] = True
    fallback = np.flatnonzero(~has_sample & (newest_bookmark > np.iinfo(np.int64).min))
    s_grp = np.concatenate([s_grp, fallback])
    s_day = np.concatenate([s_day, _sql_div(newest_bookmark[fallback], US_PER_DAY)])
    s_cls = np.concatenate([s_cls, np.full(fallback.size, HIGH, dtype=np.int64)])

    order = np.argsort(s_grp, kind="stable")
    day, klass = _pad_rows(s_grp[order], [s_day[order], s_cls[order]], n, [0, PADDING])
    return ModernSamples(
        sample_day=day,
        sample_class=klass.astype(np.int8),
        visit_count=data.visit_count.copy(),
        is_place_query=_is_place_query(data.url),
    )


# ----------------------------------------------------------------------------------------
# Scoring a whole file
# ----------------------------------------------------------------------------------------


def score_places(
    path: str | Path,
    algorithm: str,
    params: np.ndarray | None = None,
    now_us: int | None = None,
) -> dict[str, Any]:
    """Score every ``moz_places`` row of a ``places.sqlite``.

    Args:
        path: the ``places.sqlite`` file.
        algorithm: ``"classic"`` (22 integer weights: what Firefox 62-68's C++ computes for
            the file at ``now_us``, float32 arithmetic included, :class:`ClassicFrecency`)
            or ``"modern"`` (5 parameters, :class:`ModernFrecency`, Firefox 128+; ``now_us``
            is not used: modern frecency is an absolute day number).
        params: the parameter vector (default: Firefox's defaults).
        now_us: "now" in microseconds for the classic algorithm (default: the newest
            ``visit_date`` or bookmark ``dateAdded`` in the file).

    Returns:
        ``{"algorithm", "path", "now_us" (classic only), "pages": [{"place_id", "url",
        "frecency", "firefox_frecency"}, ...]}`` with one page per ``moz_places`` row,
        ordered by id; ``firefox_frecency`` is the value stored in the file.
    """
    if algorithm not in ALGORITHMS:
        raise ConfigError(
            f"unknown frecency algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}"
        )
    data = read_places(path)
    result: dict[str, Any] = {"algorithm": algorithm, "path": str(path)}
    if algorithm == "classic":
        classic = ClassicFrecency(float32=True)
        theta = classic.defaults() if params is None else np.asarray(params, dtype=np.float64)
        now = data.latest_visit_or_bookmark_us() if now_us is None else int(now_us)
        result["now_us"] = now
        scores = classic.score(theta, classic_histories(data, now))
    else:
        modern = ModernFrecency()
        theta = modern.defaults() if params is None else np.asarray(params, dtype=np.float64)
        scores = modern.score(theta, modern_samples(data))
    if scores.ndim != 1:
        raise ConfigError(f"params must be one parameter vector, got shape {theta.shape}")
    result["pages"] = [
        {
            "place_id": int(pid),
            "url": str(url),
            "frecency": int(score),
            "firefox_frecency": int(stored),
        }
        for pid, url, score, stored in zip(
            data.place_id, data.url, scores, data.frecency, strict=True
        )
    ]
    return result
