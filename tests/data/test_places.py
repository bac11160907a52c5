"""Reading and scoring a Firefox ``places.sqlite`` (``fedrank.data.places``).

Most tests use the real databases written by Firefox ESR 153 (``firefox_dir`` fixture; see
``../shared/data/firefox/README.md``): ``places.sqlite`` and ``places-aged.sqlite``, whose
visits of place ``id`` were moved back by ``(id * 7) % 60`` days before Firefox recomputed
frecency. The others build tiny databases by hand with ``sqlite3``, where the expected
frecency can be computed from the documented formulas.

Expected values are derived independently of the code under test. Classic frecency: from
Firefox 62-68's own sampling SQL run on the files and its ``CalculateFrecencyFunction`` loop
transcribed line by line in float32 (:func:`firefox68_classic`; the truth is the C++ in
``toolkit/components/places/SQLFunctions.cpp`` and ``nsNavHistory.h``, not MDN's prose).
Modern frecency: from SQL queries on the files and the formula of
``fedrank.models.frecency.modern``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrank.data.places import (
    PlacesData,
    classic_histories,
    modern_samples,
    read_places,
    score_places,
)
from fedrank.errors import ConfigError, DataFormatError, FedrankError, SchemaError
from fedrank.models.frecency.modern import HIGH, PADDING, ModernFrecency

US_PER_DAY = 86_400_000_000
BASE = "http://127.0.0.1:8765"

# Facts about the real files (README "Row counts" and "Per-page visits").
N_PAGES = 64
N_VISITS = 223
N_BOOKMARKS = 19
N_METADATA = 31
# The one page whose stored frecency in places.sqlite differs from fedrank's: the hidden
# source of the typed 307 redirect. Firefox computed it when its TYPED visit arrived (high
# sample: day + 199) and did not recompute it once the redirect made that visit a redirect
# source (low sample: day + 129); places-aged.sqlite, fully recomputed, agrees with fedrank.
STALE_URL = f"{BASE}/r307/papaya"
DEFAULT_BOOKMARK_URLS = (
    "https://support.mozilla.org/products/firefox",
    "https://www.mozilla.org/contribute/",
    "https://www.mozilla.org/about/",
)
UNVISITED_BOOKMARK_URL = f"{BASE}/zucchini/nutrition.html"


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def _connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _query(path: Path, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    with closing(_connect_ro(path)) as conn:
        return conn.execute(sql, tuple(params)).fetchall()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _writable_copy(src: Path, dst_dir: Path, name: str = "places.sqlite") -> Path:
    dst = dst_dir / name
    shutil.copyfile(src, dst)  # content only: the shared files are mode 0444
    dst.chmod(0o644)
    return dst


def _exec(path: Path, *statements: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        for sql in statements:
            conn.execute(sql)
        conn.commit()


def _pages_by_url(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["url"]: p for p in result["pages"]}


def _modern_expected(samples: list[tuple[int, float]], visit_count: int) -> int:
    """Firefox's modern frecency from the formula of ``fedrank.models.frecency.modern``:
    ``t_ref + trunc(ln(s / n * max(visit_count, n)) / lambda)``, halfLifeDays = 30."""
    lam = math.log(2.0) / 30.0
    t_ref = max(day for day, _ in samples)
    s = sum(weight * math.exp(-lam * (t_ref - day)) for day, weight in samples)
    n = len(samples)
    return t_ref + math.trunc(math.log(s / n * max(visit_count, n)) / lam)


@pytest.fixture(scope="module")
def places_path(firefox_dir: Path) -> Path:
    return firefox_dir / "places.sqlite"


@pytest.fixture(scope="module")
def aged_path(firefox_dir: Path) -> Path:
    return firefox_dir / "places-aged.sqlite"


@pytest.fixture(scope="module")
def data(places_path: Path) -> PlacesData:
    return read_places(places_path)


@pytest.fixture(scope="module")
def modern_result(places_path: Path) -> dict[str, Any]:
    return score_places(places_path, "modern")


@pytest.fixture(scope="module")
def aged_result(aged_path: Path) -> dict[str, Any]:
    return score_places(aged_path, "modern")


# ----------------------------------------------------------------------------------------
# Reading the real file
# ----------------------------------------------------------------------------------------


def test_read_places_loads_every_row(places_path: Path, data: PlacesData) -> None:
    assert data.path == places_path
    assert data.n_places == N_PAGES
    assert data.n_visits == N_VISITS
    assert data.n_bookmarks == N_BOOKMARKS
    assert data.n_metadata == N_METADATA

    rows = _query(
        places_path,
        "SELECT id, url, title, visit_count, typed, hidden, frecency FROM moz_places ORDER BY id",
    )
    assert data.place_id.tolist() == [r[0] for r in rows]
    assert data.url.tolist() == [r[1] for r in rows]
    assert data.title.tolist() == [r[2] for r in rows]
    assert data.visit_count.tolist() == [r[3] for r in rows]
    assert data.typed.tolist() == [bool(r[4]) for r in rows]
    assert data.hidden.tolist() == [bool(r[5]) for r in rows]
    assert data.frecency.tolist() == [r[6] for r in rows]

    visits = _query(
        places_path,
        "SELECT id, from_visit, place_id, visit_date, visit_type, source "
        "FROM moz_historyvisits ORDER BY id",
    )
    assert data.visit_id.tolist() == [v[0] for v in visits]
    assert data.visit_from.tolist() == [v[1] for v in visits]
    assert data.visit_place_id.tolist() == [v[2] for v in visits]
    assert data.visit_date.tolist() == [v[3] for v in visits]
    assert data.visit_type.tolist() == [v[4] for v in visits]
    assert data.visit_source is not None
    assert data.visit_source.tolist() == [v[5] for v in visits]

    # Folders have a NULL fk, read as 0.
    rows_fk = _query(places_path, "SELECT fk FROM moz_bookmarks")
    fks = sorted(0 if fk is None else fk for (fk,) in rows_fk)
    assert sorted(data.bookmark_fk.tolist()) == fks


def test_place_index_and_latest_timestamp(places_path: Path, data: PlacesData) -> None:
    ids = data.place_id
    assert data.place_index(ids).tolist() == list(range(N_PAGES))
    assert data.place_index(np.array([0, -5, 10**9])).tolist() == [-1, -1, -1]

    (newest_visit,) = _query(places_path, "SELECT max(visit_date) FROM moz_historyvisits")[0]
    (newest_bookmark,) = _query(places_path, "SELECT max(dateAdded) FROM moz_bookmarks")[0]
    (newest_meta,) = _query(places_path, "SELECT max(created_at) FROM moz_places_metadata")[0]
    expected = max(newest_visit, newest_bookmark, newest_meta * 1000)
    assert data.latest_timestamp_us() == expected
    # The session lasted minutes, on 2026-11-22 (day 20779).
    assert expected // US_PER_DAY == 20779


def test_reader_does_not_modify_the_file(places_path: Path, tmp_path: Path) -> None:
    original_hash = _sha256(places_path)
    read_places(places_path)
    score_places(places_path, "modern")
    score_places(places_path, "classic")
    assert _sha256(places_path) == original_hash

    # On a writable copy too: same bytes, same mtime, no journal / -wal / -shm left over.
    copy = _writable_copy(places_path, tmp_path)
    before = (_sha256(copy), copy.stat().st_mtime_ns)
    read_places(copy)
    score_places(copy, "modern")
    score_places(copy, "classic")
    assert (_sha256(copy), copy.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["places.sqlite"]


def test_reader_works_on_a_read_only_copy(
    places_path: Path, data: PlacesData, modern_result: dict[str, Any], tmp_path: Path
) -> None:
    copy = _writable_copy(places_path, tmp_path)
    copy.chmod(0o444)
    tmp_path.chmod(0o555)  # no journal or -shm could be created next to it either
    try:
        ro = read_places(copy)
        result = score_places(copy, "modern")
    finally:
        tmp_path.chmod(0o755)
        copy.chmod(0o644)
    assert ro.n_places == data.n_places
    np.testing.assert_array_equal(ro.visit_date, data.visit_date)
    assert result["pages"] == modern_result["pages"]
    assert result["path"] == str(copy)


# ----------------------------------------------------------------------------------------
# score_places: structure
# ----------------------------------------------------------------------------------------


def test_score_places_one_entry_per_row_ordered_by_id(
    places_path: Path, modern_result: dict[str, Any]
) -> None:
    assert modern_result["algorithm"] == "modern"
    assert modern_result["path"] == str(places_path)
    pages = modern_result["pages"]
    rows = _query(places_path, "SELECT id, url, frecency FROM moz_places ORDER BY id")
    assert len(pages) == len(rows) == N_PAGES
    for page, (pid, url, stored) in zip(pages, rows, strict=True):
        assert set(page) == {"place_id", "url", "frecency", "firefox_frecency"}
        assert page["place_id"] == pid
        assert page["url"] == url
        assert page["firefox_frecency"] == stored
        assert isinstance(page["frecency"], int)
    ids = [p["place_id"] for p in pages]
    assert ids == sorted(ids)
    urls = {p["url"] for p in pages}
    assert f"{BASE}/index.html" in urls
    assert f"{BASE}/r301/mango" in urls
    assert set(DEFAULT_BOOKMARK_URLS) <= urls


# ----------------------------------------------------------------------------------------
# Modern algorithm against Firefox's stored frecency
# ----------------------------------------------------------------------------------------


def test_modern_matches_firefox_on_63_of_64_pages(modern_result: dict[str, Any]) -> None:
    pages = modern_result["pages"]
    assert len(pages) == N_PAGES
    equal = [p for p in pages if p["frecency"] == p["firefox_frecency"]]
    different = [p for p in pages if p["frecency"] != p["firefox_frecency"]]
    assert len(equal) == 63
    assert [p["url"] for p in different] == [STALE_URL]
    # The difference is exactly the class of the sample: high (+199) vs low (+129) days.
    (stale,) = different
    assert stale["firefox_frecency"] - stale["frecency"] == 199 - 129

    by_url = _pages_by_url(modern_result)
    assert by_url[f"{BASE}/index.html"]["frecency"] == 21145
    assert by_url[f"{BASE}/cherry.html"]["frecency"] == 21089
    assert by_url[f"{BASE}/frame-target1.html"]["frecency"] == 0


def test_modern_matches_firefox_on_all_64_pages_of_the_aged_copy(
    aged_result: dict[str, Any],
) -> None:
    pages = aged_result["pages"]
    assert len(pages) == N_PAGES
    assert sum(p["frecency"] == p["firefox_frecency"] for p in pages) == 64
    by_url = _pages_by_url(aged_result)
    assert by_url[f"{BASE}/index.html"]["frecency"] == 21110
    assert by_url[STALE_URL]["frecency"] == 20901


def test_aged_copy_shifts_modern_frecency_by_the_shift_in_days(
    places_path: Path,
    aged_path: Path,
    modern_result: dict[str, Any],
    aged_result: dict[str, Any],
) -> None:
    # The shift of every visit, measured from the two files (not taken from the README).
    original = dict(_query(places_path, "SELECT id, visit_date FROM moz_historyvisits"))
    aged_rows = _query(aged_path, "SELECT id, place_id, visit_date FROM moz_historyvisits")
    assert {vid for vid, _, _ in aged_rows} == set(original)
    shift: dict[int, set[int]] = {}
    for vid, place_id, date in aged_rows:
        delta = original[vid] - date
        assert delta % US_PER_DAY == 0
        shift.setdefault(place_id, set()).add(delta // US_PER_DAY)
    # One shift per page, the README's (id * 7) % 60.
    assert all(len(days) == 1 for days in shift.values())
    days_of = {pid: days.pop() for pid, days in shift.items()}
    assert days_of == {pid: (pid * 7) % 60 for pid in days_of}

    # Bookmarks were not moved.
    bookmarks_sql = "SELECT fk, dateAdded FROM moz_bookmarks ORDER BY id"
    assert _query(places_path, bookmarks_sql) == _query(aged_path, bookmarks_sql)

    before = {p["place_id"]: p for p in modern_result["pages"]}
    after = {p["place_id"]: p for p in aged_result["pages"]}
    sampled = {
        pid
        for (pid,) in _query(
            places_path,
            "SELECT DISTINCT place_id FROM moz_historyvisits WHERE visit_type NOT IN (7, 8, 9)",
        )
    }
    moved = 0
    for pid, page in before.items():
        diff = page["frecency"] - after[pid]["frecency"]
        if pid in sampled:
            # Every sample moves back by the same number of days: t_ref drops by it and the
            # decayed sum is unchanged.
            assert diff == days_of[pid], page["url"]
            moved += diff != 0
        else:
            # Only-bookmarked pages (sampled on the bookmark's day) and pages whose visits
            # are all FRAMED_LINK (frecency 0) do not move.
            assert diff == 0, page["url"]
    # README: "56 frecency values changed (the moved ones)".
    assert moved == 56


def test_modern_samples_of_the_real_file(places_path: Path, data: PlacesData) -> None:
    samples = modern_samples(data)
    assert samples.n_pages == N_PAGES
    row = {url: i for i, url in enumerate(data.url)}

    # A never-visited bookmark: one high sample on the day its bookmark was added.
    i = row[UNVISITED_BOOKMARK_URL]
    ((date_added,),) = _query(
        places_path,
        "SELECT b.dateAdded FROM moz_bookmarks b JOIN moz_places p ON p.id = b.fk WHERE p.url = ?",
        (UNVISITED_BOOKMARK_URL,),
    )
    assert samples.n_samples[i] == 1
    valid = samples.sample_class[i] != PADDING
    assert samples.sample_class[i][valid].tolist() == [HIGH]
    assert samples.sample_day[i][valid].tolist() == [date_added // US_PER_DAY]

    # FRAMED_LINK-only pages have no sample at all.
    assert samples.n_samples[row[f"{BASE}/frame-target1.html"]] == 0
    # index.html has 48 visits: only the 10 most recent are sampled.
    assert samples.n_samples[row[f"{BASE}/index.html"]] == 10
    # orange.html: 2 LINK + 1 RELOAD; RELOAD is not sampled.
    assert samples.n_samples[row[f"{BASE}/orange.html"]] == 2


def test_modern_default_params_explicit_equal_implicit(
    places_path: Path, modern_result: dict[str, Any]
) -> None:
    explicit = score_places(places_path, "modern", params=ModernFrecency.defaults())
    assert explicit["pages"] == modern_result["pages"]
    # A longer half-life changes scores (the parameters are used).
    params = ModernFrecency.defaults()
    params[4] = 60.0
    longer = score_places(places_path, "modern", params=params)
    assert [p["frecency"] for p in longer["pages"]] != [
        p["frecency"] for p in modern_result["pages"]
    ]


# ----------------------------------------------------------------------------------------
# Classic algorithm: Firefox 62-68's C++ and SQL, transcribed, run on the files themselves
# ----------------------------------------------------------------------------------------

#: Firefox 62-68's sampling statement (SQLFunctions.cpp, CalculateFrecencyFunction), with
#: strftime('%s','now','localtime','utc') bound as :now_s.
_FIREFOX68_VISITS_SQL = (
    "SELECT IFNULL(origin.visit_type, v.visit_type) AS visit_type, "
    "target.visit_type AS target_visit_type, "
    "ROUND((:now_s - v.visit_date/1000000)/86400) AS age_in_days "
    "FROM moz_historyvisits v "
    "LEFT JOIN moz_historyvisits origin ON origin.id = v.from_visit "
    "AND v.visit_type BETWEEN 5 AND 6 "
    "LEFT JOIN moz_historyvisits target ON v.id = target.from_visit "
    "AND target.visit_type BETWEEN 5 AND 6 "
    "WHERE v.place_id = :page_id ORDER BY v.visit_date DESC LIMIT :max_visits"
)
#: nsNavHistory.h, GetFrecencyTransitionBonus(type, aVisited = true), default prefs.
_VISITED_BONUS = {8: 0, 4: 0, 1: 100, 2: 2000, 3: 75, 7: 0, 5: 0, 6: 0, 9: 0}
_DEFAULT_VISIT_BONUS, _REDIRECT_SOURCE_BONUS = 0, 25
_UNVISITED_BOOKMARK_BONUS, _UNVISITED_TYPED_BONUS = 140, 200


def _aged_weight(age: int) -> int:
    """nsNavHistory::GetFrecencyAgedWeight with the default cutoffs and weights."""
    for cutoff, weight in ((4, 100), (14, 70), (31, 50), (90, 30)):
        if age <= cutoff:
            return weight
    return 10


def firefox68_classic(path: Path, now_us: int) -> dict[int, int]:
    """Every page's frecency as CalculateFrecencyFunction::OnFunctionCall computes it (with
    ``mostRecentVisitBonus = eUnknown``, a recalculation): the page query, the sampling
    statement above on the file, and the C++ loop in its float32 arithmetic."""
    f32 = np.float32
    out: dict[int, int] = {}
    with closing(_connect_ro(path)) as conn:
        pages = conn.execute(
            "SELECT id, typed, visit_count, foreign_count, (substr(url, 0, 7) = 'place:') "
            "FROM moz_places ORDER BY id"
        ).fetchall()
        for page_id, typed, visit_count, foreign_count, is_query in pages:
            has_bookmark = foreign_count > 0
            points, n_sampled, bonus = f32(0.0), 0, 0
            if visit_count > 0:
                rows = conn.execute(
                    _FIREFOX68_VISITS_SQL,
                    {"now_s": now_us // 1_000_000, "page_id": page_id, "max_visits": 10},
                ).fetchall()
                for visit_type, target_type, age in rows:
                    target = target_type or 0
                    redirect = target == 5 or (target == 6 and visit_type != 2)
                    if redirect:
                        bonus = _REDIRECT_SOURCE_BONUS
                    else:
                        bonus = _VISITED_BONUS.get(visit_type, _DEFAULT_VISIT_BONUS)
                    if has_bookmark:
                        bonus += _VISITED_BONUS[3]
                    if bonus:
                        points = f32(points + f32(_aged_weight(int(age)) * (bonus / 100.0)))
                    n_sampled += 1
            if n_sampled:
                if not points:
                    out[page_id] = -1
                else:
                    out[page_id] = int(
                        np.ceil(f32(f32(visit_count) * np.ceil(points)) / f32(n_sampled))
                    )
                continue
            if not has_bookmark or is_query:
                out[page_id] = 0
                continue
            bonus = _UNVISITED_BOOKMARK_BONUS + (_UNVISITED_TYPED_BONUS if typed else 0)
            points = f32(f32(100) * (f32(bonus) / f32(100.0)))
            out[page_id] = int(np.ceil(f32(1) * np.ceil(points)))
    return out


def _newest_visit_or_bookmark(path: Path) -> int:
    return max(
        _query(path, "SELECT max(visit_date) FROM moz_historyvisits")[0][0] or 0,
        _query(path, "SELECT max(dateAdded) FROM moz_bookmarks")[0][0] or 0,
    )


@pytest.mark.parametrize("name", ["places.sqlite", "places-aged.sqlite"])
def test_classic_equals_firefox68_on_every_page_of_both_real_profiles(
    firefox_dir: Path, name: str
) -> None:
    path = firefox_dir / name
    result = score_places(path, "classic")
    now = _newest_visit_or_bookmark(path)
    assert result["algorithm"] == "classic" and result["now_us"] == now
    got = {p["place_id"]: p["frecency"] for p in result["pages"]}
    assert len(got) == N_PAGES
    assert got == firefox68_classic(path, now)
    # the same at other times: a week, a month and a year later
    for days in (7, 31, 365):
        later = now + days * US_PER_DAY + 12_345_678
        again = score_places(path, "classic", now_us=later)
        assert again["now_us"] == later
        assert {p["place_id"]: p["frecency"] for p in again["pages"]} == firefox68_classic(
            path, later
        ), days


def test_classic_on_the_real_file_by_rule(places_path: Path) -> None:
    """Pages of the real profile that exercise each C++ rule, at its own "now"."""
    by_url = _pages_by_url(score_places(places_path, "classic"))
    # Unvisited bookmarks (foreign_count 1, visit_count 0): ceilf(100 * 140 / 100) = 140.
    for url in (*DEFAULT_BOOKMARK_URLS, UNVISITED_BOOKMARK_URL):
        assert by_url[url]["frecency"] == 140
    # 12 LINK visits today, 10 sampled: ceilf(12 * ceilf(10 * 100) / 10) = 1200.
    assert by_url[f"{BASE}/apple.html"]["frecency"] == 1200
    # visit_count = 0 (only FRAMED_LINK visits, a hidden page): not sampled, not bookmarked: 0.
    assert by_url[f"{BASE}/frame-target1.html"]["frecency"] == 0
    # A visit that led to a 301 scores redirectSourceVisitBonus (25) instead of LINK's 100.
    assert by_url[f"{BASE}/r301/mango"]["frecency"] == math.ceil(4 * 4 * 25 / 4)
    # orange.html: LINK x2 + RELOAD (bonus 0, not counted in visit_count 2): ceil(2*200/3).
    assert by_url[f"{BASE}/orange.html"]["frecency"] == 134


def test_classic_histories_of_the_real_file(data: PlacesData) -> None:
    pages = classic_histories(data)
    assert pages.n_pages == N_PAGES
    row = {url: i for i, url in enumerate(data.url)}
    assert pages.n_sampled[row[f"{BASE}/index.html"]] == 10
    assert pages.visit_count[row[f"{BASE}/index.html"]] == 48
    assert pages.n_sampled[row[UNVISITED_BOOKMARK_URL]] == 0
    assert bool(pages.bookmarked[row[UNVISITED_BOOKMARK_URL]])
    assert not pages.bookmarked[row[f"{BASE}/apple.html"]]
    # visit_count = 0: Firefox does not sample, so neither do we.
    assert pages.n_sampled[row[f"{BASE}/frame-target1.html"]] == 0
    # every visit of /r302/kiwi led to a 302 (target type 6)
    i = row[f"{BASE}/r302/kiwi"]
    assert (pages.visit_redirect_target[i][pages.visit_mask[i]] == 6).all()
    # redirect targets carry the type of the visit they came from (origin)
    redirects = np.isin(pages.visit_type, (5, 6))
    assert redirects.any() and (pages.visit_origin_type[redirects] > 0).all()
    # ages are whole days; the whole session is "today" at the default now
    assert float(pages.visit_age_days[pages.visit_mask].max()) == 0.0
    np.testing.assert_array_equal(pages.visit_age_days, np.round(pages.visit_age_days))


def test_classic_ages_are_firefox_whole_days(places_path: Path, data: PlacesData) -> None:
    """ROUND((now_s - visit_date / 1000000) / 86400) in integer arithmetic: whole seconds
    first (both truncated), then whole days (truncated)."""
    apple = list(data.url).index(f"{BASE}/apple.html")
    newest = int(data.visit_date[data.visit_place_id == data.place_id[apple]].max())
    second = newest // 1_000_000 * 1_000_000  # the start of the visit's second
    assert newest > second  # the visit has a fractional second, which Firefox drops
    # One microsecond before 5 days after the visit's second: 4 whole days, first bucket
    before = second + 5 * US_PER_DAY - 1
    assert classic_histories(data, before).visit_age_days[apple, 0] == 4.0
    score_before = _pages_by_url(score_places(places_path, "classic", now_us=before))
    # At 5 days after the visit's *second* -- less than 5 days after the visit in
    # microseconds -- Firefox already counts 5 days: second bucket, 12 * 70 = 840
    at = second + 5 * US_PER_DAY
    assert at - newest < 5 * US_PER_DAY
    assert classic_histories(data, at).visit_age_days[apple, 0] == 5.0
    by_url = _pages_by_url(score_places(places_path, "classic", now_us=at))
    # the newest visit moved from the first bucket (weight 100) to the second (70)
    assert by_url[f"{BASE}/apple.html"]["frecency"] < score_before[f"{BASE}/apple.html"]["frecency"]
    for now in (before, at):
        scores = {p["place_id"]: p["frecency"] for p in score_places(
            places_path, "classic", now_us=now)["pages"]}  # fmt: skip
        assert scores == firefox68_classic(places_path, now)
    # Unvisited bookmarks do not depend on time.
    assert by_url[UNVISITED_BOOKMARK_URL]["frecency"] == 140


def test_classic_cli_writes_every_page(places_path: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fedrank.cli import main

    out = tmp_path / "classic.json"
    args = ["frecency", "score", "--places", str(places_path), "--algorithm", "classic"]
    result = CliRunner().invoke(main, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    now = _newest_visit_or_bookmark(places_path)
    assert written["now_us"] == now
    assert [sorted(p) for p in written["pages"]] == [
        ["firefox_frecency", "frecency", "place_id", "url"]
    ] * N_PAGES
    assert {p["place_id"]: p["frecency"] for p in written["pages"]} == firefox68_classic(
        places_path, now
    )
    stored = dict(_query(places_path, "SELECT id, frecency FROM moz_places"))
    assert {p["place_id"]: p["firefox_frecency"] for p in written["pages"]} == stored
    # --now as microseconds and as an ISO date/time give the same scores
    later = now + 40 * US_PER_DAY
    iso = datetime.fromtimestamp(later / 1e6, tz=UTC).isoformat()
    a = CliRunner().invoke(main, [*args, "--now", str(later), "--json", str(tmp_path / "a")])
    b = CliRunner().invoke(main, [*args, "--now", iso, "--json", str(tmp_path / "b")])
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    assert json.loads((tmp_path / "a").read_text()) == json.loads((tmp_path / "b").read_text())
    bad = CliRunner().invoke(main, [*args, "--now", "next tuesday"])
    assert bad.exit_code == 2 and "ISO 8601" in bad.output
    modern = CliRunner().invoke(
        main, ["frecency", "score", "--places", str(places_path), "--now", str(now)]
    )
    assert modern.exit_code == 2 and "classic" in modern.output


# ----------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table", ["moz_places", "moz_historyvisits", "moz_bookmarks", "moz_places_metadata"]
)
def test_missing_table_raises_schema_error_naming_it(
    places_path: Path, tmp_path: Path, table: str
) -> None:
    copy = _writable_copy(places_path, tmp_path)
    _exec(copy, f"DROP TABLE {table}")
    with pytest.raises(SchemaError, match=rf"table '{table}' is missing") as info:
        read_places(copy)
    assert str(copy) in str(info.value)
    with pytest.raises(SchemaError, match=table):
        score_places(copy, "modern")


@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("moz_places", "visit_count"),
        ("moz_places", "url"),
        ("moz_historyvisits", "visit_type"),
        ("moz_historyvisits", "from_visit"),
        ("moz_bookmarks", "dateAdded"),
        ("moz_places_metadata", "key_presses"),
    ],
)
def test_missing_column_in_real_copy_raises_schema_error_naming_it(
    places_path: Path, tmp_path: Path, table: str, column: str
) -> None:
    copy = _writable_copy(places_path, tmp_path)
    with closing(sqlite3.connect(copy)) as conn:
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        assert column in columns
        kept = ", ".join(c for c in columns if c != column)
        conn.execute(f"CREATE TABLE rebuilt AS SELECT {kept} FROM {table}")
        conn.execute(f"DROP TABLE {table}")
        conn.execute(f"ALTER TABLE rebuilt RENAME TO {table}")
        conn.commit()
    with pytest.raises(SchemaError, match=rf"table '{table}' has no column '{column}'"):
        read_places(copy)


def test_missing_column_in_hand_built_db_raises_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "places.sqlite"
    _exec(
        path,
        # moz_places without visit_count
        "CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT, title TEXT, "
        "typed INTEGER, hidden INTEGER, frecency INTEGER)",
        "CREATE TABLE moz_historyvisits (id INTEGER PRIMARY KEY, from_visit INTEGER, "
        "place_id INTEGER, visit_date INTEGER, visit_type INTEGER, source INTEGER)",
        # Firefox's indexes: the sampling query walks (place_id, visit_date) backwards, so
        # equal dates come in descending id, and a visit's redirect targets in ascending id
        "CREATE INDEX moz_historyvisits_placedateindex ON moz_historyvisits (place_id, visit_date)",
        "CREATE INDEX moz_historyvisits_fromindex ON moz_historyvisits (from_visit)",
        "CREATE TABLE moz_bookmarks (id INTEGER PRIMARY KEY, fk INTEGER, dateAdded INTEGER)",
        "CREATE TABLE moz_places_metadata (id INTEGER PRIMARY KEY, place_id INTEGER, "
        "created_at INTEGER, total_view_time INTEGER, key_presses INTEGER)",
    )
    with pytest.raises(SchemaError, match="visit_count") as info:
        read_places(path)
    assert "moz_places" in str(info.value)
    assert isinstance(info.value, DataFormatError)


def test_missing_source_column_only_blocks_the_modern_algorithm(
    places_path: Path, tmp_path: Path
) -> None:
    copy = _writable_copy(places_path, tmp_path)
    _exec(copy, "ALTER TABLE moz_historyvisits DROP COLUMN source")
    data = read_places(copy)
    assert data.visit_source is None
    assert data.n_visits == N_VISITS
    with pytest.raises(SchemaError, match="'source'"):
        modern_samples(data)
    with pytest.raises(SchemaError, match="source"):
        score_places(copy, "modern")
    # Classic does not need it and gives the same scores as on the intact file.
    assert score_places(copy, "classic")["pages"] == score_places(places_path, "classic")["pages"]


def test_not_an_sqlite_file_raises_data_format_error(tmp_path: Path) -> None:
    path = tmp_path / "places.sqlite"
    path.write_bytes(b"this is not an SQLite database\n" * 64)
    with pytest.raises(DataFormatError, match="could not be read as an SQLite database") as info:
        read_places(path)
    assert isinstance(info.value, FedrankError)
    assert not isinstance(info.value, sqlite3.Error)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_empty_file_raises_schema_error(tmp_path: Path) -> None:
    # SQLite treats an empty file as an empty database: no tables at all.
    path = tmp_path / "places.sqlite"
    path.write_bytes(b"")
    with pytest.raises(SchemaError, match="moz_places"):
        read_places(path)


def test_missing_path_raises_file_not_found(tmp_path: Path) -> None:
    # Documented in read_places: FileNotFoundError (not a FedrankError subclass).
    missing = tmp_path / "nope" / "places.sqlite"
    with pytest.raises(FileNotFoundError, match="no such file") as info:
        read_places(missing)
    assert str(missing) in str(info.value)
    assert not missing.exists()  # read-only: nothing was created
    # A directory is not a file either.
    with pytest.raises(FileNotFoundError):
        read_places(tmp_path)


def test_unknown_algorithm_raises_config_error(places_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown frecency algorithm 'bucket'") as info:
        score_places(places_path, "bucket")
    assert "classic" in str(info.value) and "modern" in str(info.value)
    # Checked before the file is opened.
    with pytest.raises(ConfigError):
        score_places(tmp_path / "missing.sqlite", "Modern")


def test_params_of_the_wrong_shape_raise_config_error(places_path: Path) -> None:
    with pytest.raises(ConfigError):
        score_places(places_path, "modern", params=np.ones(3))
    with pytest.raises(ConfigError, match="one parameter vector"):
        score_places(places_path, "modern", params=np.tile(ModernFrecency.defaults(), (2, 1)))
    with pytest.raises(ConfigError):
        score_places(places_path, "classic", params=ModernFrecency.defaults())


# ----------------------------------------------------------------------------------------
# A hand-built places.sqlite
# ----------------------------------------------------------------------------------------

DAY = 20779  # 2026-11-22
LOW_W, MEDIUM_W, HIGH_W, VERY_HIGH_W = 20.0, 50.0, 100.0, 200.0


def _prtime(day: int, seconds: int = 12 * 3600) -> int:
    return day * US_PER_DAY + seconds * 1_000_000


def _build_places(path: Path) -> dict[str, dict[str, Any]]:
    """A tiny places.sqlite with the columns fedrank reads. Returns, per URL, the visits'
    modern samples (day, weight) and visit_count, for the expected values."""
    places: list[tuple[int, str, int, int]] = []  # id, url, visit_count, typed
    visits: list[tuple[int, int, int, int, int, int]] = []  # id, from, place, date, type, source
    bookmarks: list[tuple[int, int]] = []  # fk, dateAdded
    metadata: list[tuple[int, int, int, int]] = []  # place_id, created_at ms, view ms, keys

    def page(url: str, visit_count: int, typed: int = 0) -> int:
        pid = len(places) + 1
        places.append((pid, url, visit_count, typed))
        return pid

    def visit(pid: int, date: int, vtype: int, source: int = 0, from_visit: int = 0) -> int:
        vid = len(visits) + 1
        visits.append((vid, from_visit, pid, date, vtype, source))
        return vid

    # Two LINK visits (medium), today and 30 days ago (one half-life).
    p = page("http://a.test/two-links", 2)
    visit(p, _prtime(DAY), 1)
    visit(p, _prtime(DAY - 30), 1)
    # One TYPED visit (high), 10 days ago.
    p = page("http://b.test/typed", 1, typed=1)
    visit(p, _prtime(DAY - 10), 2)
    # visit_count larger than the samples: scaled by max(visit_count, n) / n.
    p = page("http://c.test/count", 5)
    visit(p, _prtime(DAY), 1)
    # No visit, bookmarked 3 days ago: one high sample on that day.
    p = page("http://d.test/bookmark-only", 0)
    bookmarks.append((p, _prtime(DAY - 3)))
    # No visit, no bookmark: 0.
    page("http://e.test/nothing", 0)
    # TYPED visit with a 70 s interaction 30 s later: interesting, veryHigh.
    p = page("http://f.test/typed-interaction", 1, typed=1)
    date = _prtime(DAY)
    visit(p, date, 2)
    metadata.append((p, date // 1000 + 30_000, 70_000, 0))
    # place: URLs score 0.
    p = page("place:sort=8&maxResults=10", 1)
    visit(p, _prtime(DAY), 1)
    # A 301 redirect: the source (LINK) becomes low, the target takes the source's type.
    src = page("http://g.test/r301", 1)
    src_visit = visit(src, _prtime(DAY), 1)
    dst = page("http://g.test/target", 1)
    visit(dst, _prtime(DAY) + 1000, 5, from_visit=src_visit)
    # A LINK visit of source 2 (bookmark): high.
    p = page("http://h.test/from-bookmark", 1)
    visit(p, _prtime(DAY), 1, source=2)
    # Only a RELOAD visit (not sampled), not bookmarked: 0.
    p = page("http://i.test/reload-only", 0)
    visit(p, _prtime(DAY), 9)
    # 12 LINK visits on 12 consecutive days: only the 10 newest are sampled.
    p = page("http://j.test/twelve", 12)
    for k in range(12):
        visit(p, _prtime(DAY - k), 1)
    # Typed but never visited, not bookmarked.
    page("http://k.test/typed-unvisited", 0, typed=1)

    _exec(
        path,
        "CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT, title TEXT, "
        "visit_count INTEGER, typed INTEGER, hidden INTEGER, frecency INTEGER, "
        "foreign_count INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE moz_historyvisits (id INTEGER PRIMARY KEY, from_visit INTEGER, "
        "place_id INTEGER, visit_date INTEGER, visit_type INTEGER, source INTEGER)",
        # Firefox's indexes: the sampling query walks (place_id, visit_date) backwards, so
        # equal dates come in descending id, and a visit's redirect targets in ascending id
        "CREATE INDEX moz_historyvisits_placedateindex ON moz_historyvisits (place_id, visit_date)",
        "CREATE INDEX moz_historyvisits_fromindex ON moz_historyvisits (from_visit)",
        "CREATE TABLE moz_bookmarks (id INTEGER PRIMARY KEY, fk INTEGER, dateAdded INTEGER)",
        "CREATE TABLE moz_places_metadata (id INTEGER PRIMARY KEY, place_id INTEGER, "
        "created_at INTEGER, total_view_time INTEGER, key_presses INTEGER)",
    )
    with closing(sqlite3.connect(path)) as conn:
        conn.executemany(
            "INSERT INTO moz_places (id, url, title, visit_count, typed, hidden, frecency) "
            "VALUES (?, ?, NULL, ?, ?, 0, -1)",
            places,
        )
        conn.executemany("INSERT INTO moz_historyvisits VALUES (?, ?, ?, ?, ?, ?)", visits)
        conn.executemany("INSERT INTO moz_bookmarks (fk, dateAdded) VALUES (?, ?)", bookmarks)
        conn.execute(  # Firefox keeps foreign_count = the page's bookmarks (and keywords)
            "UPDATE moz_places SET foreign_count = "
            "(SELECT count(*) FROM moz_bookmarks b WHERE b.fk = moz_places.id)"
        )
        conn.executemany(
            "INSERT INTO moz_places_metadata (place_id, created_at, total_view_time, "
            "key_presses) VALUES (?, ?, ?, ?)",
            metadata,
        )
        conn.commit()
    return {url: {"id": pid, "visit_count": vc} for pid, url, vc, _ in places}


@pytest.fixture
def hand_built(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    path = tmp_path / "places.sqlite"
    return path, _build_places(path)


def test_hand_built_modern_frecency_matches_the_formula(
    hand_built: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    path, _ = hand_built
    result = score_places(path, "modern")
    got = {p["url"]: p["frecency"] for p in result["pages"]}
    expected_by_formula = {
        "http://a.test/two-links": _modern_expected([(DAY, MEDIUM_W), (DAY - 30, MEDIUM_W)], 2),
        "http://b.test/typed": _modern_expected([(DAY - 10, HIGH_W)], 1),
        "http://c.test/count": _modern_expected([(DAY, MEDIUM_W)], 5),
        "http://d.test/bookmark-only": _modern_expected([(DAY - 3, HIGH_W)], 0),
        "http://e.test/nothing": 0,
        "http://f.test/typed-interaction": _modern_expected([(DAY, VERY_HIGH_W)], 1),
        "place:sort=8&maxResults=10": 0,
        "http://g.test/r301": _modern_expected([(DAY, LOW_W)], 1),
        "http://g.test/target": _modern_expected([(DAY, MEDIUM_W)], 1),
        "http://h.test/from-bookmark": _modern_expected([(DAY, HIGH_W)], 1),
        "http://i.test/reload-only": 0,
        "http://j.test/twelve": _modern_expected([(DAY - k, MEDIUM_W) for k in range(10)], 12),
        "http://k.test/typed-unvisited": 0,
    }
    assert got == expected_by_formula
    # The same numbers worked out by hand: day + trunc(30 * log2(x)).
    assert got == {
        "http://a.test/two-links": DAY + 186,  # x = (50 + 25) / 2 * 2 = 75
        "http://b.test/typed": DAY - 10 + 199,  # x = 100
        "http://c.test/count": DAY + 238,  # x = 50 * 5 = 250
        "http://d.test/bookmark-only": DAY - 3 + 199,
        "http://e.test/nothing": 0,
        "http://f.test/typed-interaction": DAY + 229,  # x = 200
        "place:sort=8&maxResults=10": 0,
        "http://g.test/r301": DAY + 129,  # x = 20
        "http://g.test/target": DAY + 169,  # x = 50
        "http://h.test/from-bookmark": DAY + 199,
        "http://i.test/reload-only": 0,
        "http://j.test/twelve": got["http://j.test/twelve"],
        "http://k.test/typed-unvisited": 0,
    }
    # 10 newest of 12 (a sample of all 12 would give a different value).
    assert got["http://j.test/twelve"] != _modern_expected(
        [(DAY - k, MEDIUM_W) for k in range(12)], 12
    )


def test_hand_built_interaction_rules(tmp_path: Path) -> None:
    """Short interactions do not count; long-enough ones with many keypresses do; an
    interaction far from any visit is a virtual (interesting LINK, high) visit."""
    path = tmp_path / "places.sqlite"
    _build_places(path)
    date = _prtime(DAY)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE moz_places_metadata SET total_view_time = 59999")
        conn.commit()
    by_url = _pages_by_url(score_places(path, "modern"))
    assert by_url["http://f.test/typed-interaction"]["frecency"] == DAY + 199  # high again

    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE moz_places_metadata SET total_view_time = 20000, key_presses = 50")
        conn.commit()
    by_url = _pages_by_url(score_places(path, "modern"))
    assert by_url["http://f.test/typed-interaction"]["frecency"] == DAY + 229  # veryHigh

    # 121 s away from the visit: not interesting, and a virtual visit of its own. (With
    # visit_count 4, one veryHigh sample and two high ones give different values.)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "UPDATE moz_places_metadata SET created_at = ?, total_view_time = 70000",
            (date // 1000 + 121_000,),
        )
        conn.execute(
            "UPDATE moz_places SET visit_count = 4 WHERE url = 'http://f.test/typed-interaction'"
        )
        conn.commit()
    by_url = _pages_by_url(score_places(path, "modern"))
    # Samples: TYPED high (100) + virtual LINK high (100) on the same day; visit_count 4.
    expected = _modern_expected([(DAY, HIGH_W), (DAY, HIGH_W)], 4)
    assert expected == DAY + 259  # x = 200 / 2 * 4 = 400
    assert expected != _modern_expected([(DAY, VERY_HIGH_W)], 4)
    assert by_url["http://f.test/typed-interaction"]["frecency"] == expected


@pytest.mark.parametrize(
    ("offset_ms", "interesting"),
    [(120_000, True), (-120_000, True), (120_001, False), (-120_001, False)],
)
def test_hand_built_interaction_gap_is_inclusive(
    tmp_path: Path, offset_ms: int, interesting: bool
) -> None:
    """maxVisitGapSeconds = 120 is inclusive (SQL BETWEEN) on both sides of the visit."""
    path = tmp_path / "places.sqlite"
    _build_places(path)
    with closing(sqlite3.connect(path)) as conn:
        ((pid, date),) = conn.execute(
            "SELECT p.id, v.visit_date FROM moz_places p JOIN moz_historyvisits v "
            "ON v.place_id = p.id WHERE p.url = 'http://f.test/typed-interaction'"
        ).fetchall()
        assert date % 1000 == 0  # a whole millisecond, like created_at
        conn.execute(
            "UPDATE moz_places_metadata SET created_at = ? WHERE place_id = ?",
            (date // 1000 + offset_ms, pid),
        )
        # visit_count 4 so that the two outcomes differ (x = 800 vs x = 400).
        conn.execute("UPDATE moz_places SET visit_count = 4 WHERE id = ?", (pid,))
        conn.commit()
    by_url = _pages_by_url(score_places(path, "modern"))
    got = by_url["http://f.test/typed-interaction"]["frecency"]
    if interesting:
        assert got == _modern_expected([(DAY, VERY_HIGH_W)], 4) == DAY + 289
    else:
        # The TYPED visit stays high and the interaction becomes a virtual visit (high).
        assert got == _modern_expected([(DAY, HIGH_W), (DAY, HIGH_W)], 4) == DAY + 259


def test_latest_timestamp_counts_interactions_in_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "places.sqlite"
    _build_places(path)
    newest_ms = _prtime(DAY + 2) // 1000  # after every visit and bookmark
    _exec(path, f"UPDATE moz_places_metadata SET created_at = {newest_ms}")
    data = read_places(path)
    assert int(data.visit_date.max()) < newest_ms * 1000
    assert data.latest_timestamp_us() == newest_ms * 1000
    # Classic frecency's "now" ignores interactions (study-era Firefox had none): the newest
    # visit or bookmark, so a.test's visits are 0 and 30 days old: ceil(2 * (100 + 50) / 2).
    assert data.latest_visit_or_bookmark_us() == int(data.visit_date.max())
    by_url = _pages_by_url(score_places(path, "classic"))
    assert by_url["http://a.test/two-links"]["frecency"] == 150


def test_hand_built_classic_frecency(hand_built: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    """Firefox 62-68's rules on the hand-built file, each against the transcribed C++ and
    SQL (:func:`firefox68_classic`) and by hand."""
    path, _ = hand_built
    now = _prtime(DAY)  # the newest visit
    result = score_places(path, "classic", now_us=now)
    got = {p["url"]: p["frecency"] for p in result["pages"]}
    by_id = {p["place_id"]: p["frecency"] for p in result["pages"]}
    assert by_id == firefox68_classic(path, now)
    # Ages 0 and 30 days: buckets 1 (100) and 3 (50); LINK 100: points 150; ceil(2*150/2).
    assert got["http://a.test/two-links"] == 150
    # TYPED, 10 days: bucket 2 (70) * 2000 / 100 = 1400.
    assert got["http://b.test/typed"] == 1400
    # visit_count 5, one sampled LINK today: ceil(5 * 100 / 1).
    assert got["http://c.test/count"] == 500
    # Unvisited: bookmarked 140; typed only or neither: 0 (only bookmarks get a score).
    assert got["http://d.test/bookmark-only"] == 140
    assert got["http://k.test/typed-unvisited"] == 0
    assert got["http://e.test/nothing"] == 0
    # The source of a 301: redirectSourceVisitBonus 25. The 301's target visit is scored
    # with its origin's type (LINK, 100), not permRedirectVisitBonus (0).
    assert got["http://g.test/r301"] == 25
    assert got["http://g.test/target"] == 100
    # RELOAD-only with visit_count 0: not sampled, not bookmarked: 0.
    assert got["http://i.test/reload-only"] == 0
    # 12 LINK visits on 12 days, 10 sampled (ages 0..9): 5 x 100 + 5 x 70 = 850; 12 visits
    assert got["http://j.test/twelve"] == math.ceil(12 * 850 / 10)
    # place: query with a visit: scored like any visited page
    assert got["place:sort=8&maxResults=10"] == 100
    # The default "now" is the newest visit or bookmark in the file (the newest visit here).
    assert score_places(path, "classic")["pages"] == result["pages"]


def test_hand_built_redirect_chains_ties_and_multiple_targets(tmp_path: Path) -> None:
    """Rows of the sampling join: a visit that redirected twice is two rows (both counted in
    numSampledVisits and the LIMIT); equal visit dates; a typed 302 chain. Every page is
    checked against Firefox's SQL and C++ transcribed."""
    path = tmp_path / "places.sqlite"
    _build_places(path)
    day = _prtime(DAY)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "INSERT INTO moz_places (id, url, visit_count, typed, hidden, frecency) "
            "VALUES (100, 'http://m.test/', 11, 1, 0, 0)"
        )
        conn.execute(
            "INSERT INTO moz_places (id, url, visit_count, typed, hidden, frecency) "
            "VALUES (101, 'http://n.test/', 2, 0, 0, 0)"
        )
        conn.execute(
            "INSERT INTO moz_places (id, url, visit_count, typed, hidden, frecency) "
            "VALUES (102, 'http://o.test/', 1, 0, 0, 0)"
        )
        conn.execute(
            "INSERT INTO moz_places (id, url, visit_count, typed, hidden, frecency) "
            "VALUES (103, 'http://p.test/', 11, 1, 0, 0)"
        )
        visits = [
            # m.test: a TYPED visit that redirected to two targets (302 and 301), 10 more
            # LINK visits, two of them at the very same time as the typed one
            (1000, 0, 100, day, 2),
            (1001, 0, 100, day, 1),
            (1002, 0, 100, day, 1),
            *[(1003 + k, 0, 100, day - (k + 1) * US_PER_DAY, 1) for k in range(8)],
            (1020, 1000, 101, day + 10, 6),  # typed -> 302: TYPED bonus on both sides
            (1021, 1000, 102, day + 20, 5),  # typed -> 301: the source gets 25
            (1022, 1020, 101, day + 30, 6),  # 302 -> 302 chain: origin type is 6 itself
            # p.test: 11 visits at one instant, the first one typed: which 10 the LIMIT
            # keeps depends on the order of equal dates (SQLite: descending id)
            (1030, 0, 103, day - US_PER_DAY, 2),
            *[(1031 + k, 0, 103, day - US_PER_DAY, 1) for k in range(10)],
        ]
        conn.executemany(
            "INSERT INTO moz_historyvisits (id, from_visit, place_id, visit_date, visit_type, "
            "source) VALUES (?, ?, ?, ?, ?, 0)",
            visits,
        )
        conn.commit()
    now = day + 3 * US_PER_DAY
    result = score_places(path, "classic", now_us=now)
    assert {p["place_id"]: p["frecency"] for p in result["pages"]} == firefox68_classic(path, now)
    data = read_places(path)
    pages = classic_histories(data, now)
    m = list(data.place_id).index(100)
    # 11 visits give 12 rows (the typed one twice); the LIMIT keeps 10 rows
    assert pages.n_sampled[m] == 10
    assert sorted(pages.visit_redirect_target[m][:4].tolist()) == [0, 0, 5, 6]
    # p.test: the typed visit (smallest id) is the 11th row, cut by the LIMIT: 11 * 100
    p = list(data.place_id).index(103)
    assert (pages.visit_type[p][pages.visit_mask[p]] == 1).all()
    assert {r["place_id"]: r["frecency"] for r in result["pages"]}[103] == 1100


def test_empty_database_scores_no_page(tmp_path: Path) -> None:
    path = tmp_path / "places.sqlite"
    _build_places(path)
    _exec(
        path,
        "DELETE FROM moz_places",
        "DELETE FROM moz_historyvisits",
        "DELETE FROM moz_bookmarks",
        "DELETE FROM moz_places_metadata",
    )
    data = read_places(path)
    assert data.n_places == 0 and data.latest_timestamp_us() == 0
    for algorithm in ("modern", "classic"):
        assert score_places(path, algorithm)["pages"] == []
