"""Classic Firefox frecency (paper Sec. 4; pre-2024 ``CalculateFrecency``): hand-computed
cases for every rule, a slow loop-based reference, vectorization and the daily decay."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.models.frecency import classic as classic_module
from fedrank.models.frecency.classic import ClassicFrecency, VisitSlots, bucketed_points
from fedrank.models.frecency.history import PageHistories, VisitType
from fedrank.models.frecency.scorer import ClassicScorer
from fedrank.models.frecency.weights import (
    CLASSIC_INDEX,
    CLASSIC_WEIGHT_NAMES,
    classic_defaults,
    weights_from_dict,
)

#: A visit row: (age in days, visit type, redirect) where redirect is False / True (led to a
#: PERMANENT redirect) or the redirect target's type; optionally a 4th entry, the origin
#: visit's type of a redirect visit.
Visit = tuple


def make_pages(pages: list[dict[str, object]], width: int = 10) -> PageHistories:
    """PageHistories from ``[{"visits": [(age, type, redirect[, origin]), ...],
    "visit_count": int, "bookmarked": bool, "typed": bool, "query": bool,
    "bookmark_age": float}, ...]``."""
    n = len(pages)
    age = np.zeros((n, width))
    vtype = np.zeros((n, width), dtype=np.int8)
    target = np.zeros((n, width), dtype=np.int8)
    origin = np.zeros((n, width), dtype=np.int8)
    for i, page in enumerate(pages):
        visits: list[Visit] = page.get("visits", [])  # type: ignore[assignment]
        for j, visit in enumerate(visits):
            age[i, j], vtype[i, j] = visit[0], visit[1]
            redirect = visit[2]
            target[i, j] = VisitType.REDIRECT_PERMANENT if redirect is True else int(redirect)
            origin[i, j] = visit[3] if len(visit) > 3 else 0
    return PageHistories.build(
        age,
        vtype,
        np.array([p.get("visit_count", len(p.get("visits", []))) for p in pages], np.int64),
        visit_origin_type=origin,
        visit_redirect_target=target,
        bookmarked=np.array([bool(p.get("bookmarked", False)) for p in pages]),
        typed=np.array([bool(p.get("typed", False)) for p in pages]),
        is_place_query=np.array([bool(p.get("query", False)) for p in pages]),
        bookmark_age_days=np.array([float(p.get("bookmark_age", 0.0)) for p in pages]),
    )


#: GetFrecencyTransitionBonus(type, aVisited = true): the pref of each transition type.
_TYPE_BONUS = {
    VisitType.LINK: "linkVisitBonus",
    VisitType.TYPED: "typedVisitBonus",
    VisitType.BOOKMARK: "bookmarkVisitBonus",
    VisitType.EMBED: "embedVisitBonus",
    VisitType.REDIRECT_PERMANENT: "permRedirectVisitBonus",
    VisitType.REDIRECT_TEMPORARY: "tempRedirectVisitBonus",
    VisitType.DOWNLOAD: "downloadVisitBonus",
    VisitType.FRAMED_LINK: "framedLinkVisitBonus",
    VisitType.RELOAD: "reloadVisitBonus",
}


def _rows_of(pages: PageHistories, i: int) -> list[tuple[float, int, int]]:
    """(age, effective type, use redirect bonus) of page ``i``'s sampled rows."""
    out = []
    for j in range(pages.visit_type.shape[1]):
        vtype = int(pages.visit_type[i, j])
        if vtype == 0:
            continue
        origin = int(pages.visit_origin_type[i, j])
        eff = origin if vtype in (5, 6) and origin else vtype  # IFNULL(origin.visit_type, ...)
        target = int(pages.visit_redirect_target[i, j])
        redirect = target == 5 or (target == 6 and eff != 2)  # useRedirectBonus
        out.append((float(pages.visit_age_days[i, j]), eff, redirect))
    return out


def reference_classic(
    params: np.ndarray, pages: PageHistories, rounding: bool = True
) -> np.ndarray:
    """A literal transcription of Firefox 62-68's ``CalculateFrecencyFunction`` with exact
    rational arithmetic (``Fraction`` of the float parameters)."""
    w = {name: Fraction(float(v)) for name, v in zip(CLASSIC_WEIGHT_NAMES, params, strict=True)}
    cutoffs = [w[f"{k}BucketCutoff"] for k in ("first", "second", "third", "fourth")]
    weights = [w[f"{k}BucketWeight"] for k in ("first", "second", "third", "fourth")]

    def aged_weight(age: Fraction) -> Fraction:  # GetFrecencyAgedWeight: an if chain
        for cutoff, weight in zip(cutoffs, weights, strict=True):
            if age <= cutoff:
                return weight
        return w["defaultBucketWeight"]

    out = []
    for i in range(pages.n_pages):
        visit_count = int(pages.visit_count[i])
        bookmarked, typed = bool(pages.bookmarked[i]), bool(pages.typed[i])
        rows = _rows_of(pages, i) if visit_count > 0 else []  # sampling needs visitCount > 0
        if rows:
            points = Fraction(0)
            for age, eff, redirect in rows:
                if redirect:
                    bonus = w["redirectSourceVisitBonus"]
                else:
                    bonus = w[_TYPE_BONUS.get(eff, "defaultVisitBonus")]  # type: ignore[call-overload]
                if bookmarked:
                    bonus += w["bookmarkVisitBonus"]
                if bonus:
                    points += aged_weight(Fraction(age)) * bonus / 100
            if points == 0:
                out.append(-1.0)
                continue
            if rounding:
                value = Fraction(math.ceil(visit_count * math.ceil(points) / len(rows)))
            else:
                value = visit_count * points / len(rows)
        elif not bookmarked or pages.is_place_query[i]:
            value = Fraction(0)
        else:
            bonus = w["unvisitedBookmarkBonus"] + (w["unvisitedTypedBonus"] if typed else 0)
            value = w["firstBucketWeight"] * bonus / 100
            value = Fraction(math.ceil(value)) if rounding else value
        out.append(float(value))
    return np.array(out)


def reference_classic_float32(params: np.ndarray, pages: PageHistories) -> np.ndarray:
    """The same transcription in the C++'s precision: ``points`` is a float accumulated
    with ``(float)(weight * (bonus / 100.0))``; the result ``ceilf(visitCount *
    ceilf(points) / numSampledVisits)`` in float32; integer preferences."""
    f32 = np.float32
    w = {name: int(v) for name, v in zip(CLASSIC_WEIGHT_NAMES, params, strict=True)}
    cutoffs = [w[f"{k}BucketCutoff"] for k in ("first", "second", "third", "fourth")]
    weights = [w[f"{k}BucketWeight"] for k in ("first", "second", "third", "fourth")]
    out = []
    for i in range(pages.n_pages):
        visit_count = int(pages.visit_count[i])
        rows = _rows_of(pages, i) if visit_count > 0 else []
        if rows:
            points = f32(0.0)
            for age, eff, redirect in rows:
                if redirect:
                    bonus = w["redirectSourceVisitBonus"]
                else:
                    bonus = w[_TYPE_BONUS.get(eff, "defaultVisitBonus")]  # type: ignore[call-overload]
                if pages.bookmarked[i]:
                    bonus += w["bookmarkVisitBonus"]
                if bonus:
                    weight = next(
                        (wt for c, wt in zip(cutoffs, weights, strict=True) if age <= c),
                        w["defaultBucketWeight"],
                    )
                    points = f32(points + f32(weight * (bonus / 100.0)))
            if not points:
                out.append(-1.0)
                continue
            value = np.ceil(f32(f32(visit_count) * np.ceil(points)) / f32(len(rows)))
            out.append(float(f32(value)))
        elif not pages.bookmarked[i] or pages.is_place_query[i]:
            out.append(0.0)
        else:
            bonus = w["unvisitedBookmarkBonus"] + (
                w["unvisitedTypedBonus"] if pages.typed[i] else 0
            )
            points = f32(f32(w["firstBucketWeight"]) * (f32(bonus) / f32(100.0)))
            out.append(float(np.ceil(f32(1.0) * np.ceil(points))))
    return np.array(out)


def fd_rows(theta: np.ndarray | None = None) -> np.ndarray:
    return FiniteDifferenceEstimator().parameter_rows(
        classic_defaults() if theta is None else theta
    )


def random_pages(n: int, rng: np.random.Generator, width: int = 10) -> PageHistories:
    n_visits = rng.integers(0, width + 1, n)
    mask = np.arange(width)[None, :] < n_visits[:, None]
    ages = np.sort(
        rng.choice([0.0, 3.0, 4.0, 5.0, 14.0, 15.0, 31.0, 90.0, 91.0, 200.0], size=(n, width))
        + rng.integers(0, 3, (n, width)),
        axis=1,
    )
    vtype = np.where(mask, rng.integers(1, 12, (n, width)), 0).astype(np.int8)
    return PageHistories.build(
        np.where(mask, ages, 0.0),
        vtype,
        (n_visits + rng.integers(0, 20, n)) * (rng.random(n) > 0.05),
        visit_origin_type=np.where(np.isin(vtype, (5, 6)), rng.integers(0, 4, (n, width)), 0),
        visit_redirect_target=np.where(
            mask & (rng.random((n, width)) < 0.15), rng.integers(5, 7, (n, width)), 0
        ),
        bookmarked=rng.random(n) < 0.3,
        typed=rng.random(n) < 0.3,
        is_place_query=rng.random(n) < 0.05,
    )


# -- interface -------------------------------------------------------------------------


def test_names_and_defaults() -> None:
    model = ClassicFrecency()
    assert model.names == CLASSIC_WEIGHT_NAMES
    assert len(model.names) == 22
    np.testing.assert_array_equal(model.defaults(), classic_defaults())


def test_single_vector_gives_1d_and_rows_give_2d() -> None:
    pages = make_pages([{"visits": [(0.0, 1, False)]}, {}])
    model = ClassicFrecency()
    assert model.score(classic_defaults(), pages).shape == (2,)
    assert model.score(fd_rows(), pages).shape == (45, 2)


@pytest.mark.parametrize("shape", [(21,), (3, 21), (2, 3, 22), ()])
def test_bad_parameter_shape_raises(shape: tuple[int, ...]) -> None:
    pages = make_pages([{"visits": [(0.0, 1, False)]}])
    with pytest.raises(ConfigError, match="22"):
        ClassicFrecency().score(np.zeros(shape), pages)


# -- hand-computed rules (Firefox defaults) ---------------------------------------------


def test_bucket_edges_single_link_visit() -> None:
    # One LINK visit (bonus 100), visit_count 1: frecency = bucket weight * 100 / 100.
    ages = [0.0, 4.0, 4.5, 14.0, 14.01, 31.0, 32.0, 90.0, 90.5, 1000.0]
    expected = [100, 100, 70, 70, 50, 50, 30, 30, 10, 10]
    pages = make_pages([{"visits": [(a, VisitType.LINK, False)]} for a in ages])
    np.testing.assert_array_equal(ClassicFrecency().score(classic_defaults(), pages), expected)


def test_each_visit_type_uses_its_bonus() -> None:
    # Distinct bonuses 1..11 (x 100 so that the first bucket gives exactly the bonus).
    theta = classic_defaults()
    bonus_names = [
        "embedVisitBonus",
        "framedLinkVisitBonus",
        "linkVisitBonus",
        "typedVisitBonus",
        "bookmarkVisitBonus",
        "downloadVisitBonus",
        "permRedirectVisitBonus",
        "tempRedirectVisitBonus",
        "redirectSourceVisitBonus",
        "defaultVisitBonus",
        "reloadVisitBonus",
    ]
    for k, name in enumerate(bonus_names):
        theta[CLASSIC_INDEX[name]] = 10.0 * (k + 1)
    cases = {
        VisitType.EMBED: "embedVisitBonus",
        VisitType.FRAMED_LINK: "framedLinkVisitBonus",
        VisitType.LINK: "linkVisitBonus",
        VisitType.TYPED: "typedVisitBonus",
        VisitType.BOOKMARK: "bookmarkVisitBonus",
        VisitType.DOWNLOAD: "downloadVisitBonus",
        VisitType.REDIRECT_PERMANENT: "permRedirectVisitBonus",
        VisitType.REDIRECT_TEMPORARY: "tempRedirectVisitBonus",
        VisitType.RELOAD: "reloadVisitBonus",
        10: "defaultVisitBonus",  # unknown transition types
        42: "defaultVisitBonus",
        -3: "defaultVisitBonus",
    }
    pages = make_pages([{"visits": [(1.0, int(t), False)]} for t in cases])
    got = ClassicFrecency().score(theta, pages)
    np.testing.assert_array_equal(got, [theta[CLASSIC_INDEX[n]] for n in cases.values()])


def test_redirect_rules_follow_use_redirect_bonus() -> None:
    """SQLFunctions.cpp: ``useRedirectBonus = targetVisitType == REDIRECT_PERMANENT ||
    (targetVisitType == REDIRECT_TEMPORARY && visitType != TYPED)``, with ``visitType`` =
    ``IFNULL(origin.visit_type, v.visit_type)``: a redirect visit is scored as its origin."""
    T5, T6 = VisitType.REDIRECT_PERMANENT, VisitType.REDIRECT_TEMPORARY
    pages = make_pages(
        [
            {"visits": [(0.0, VisitType.LINK, T5)]},  # led to a 301: 25
            {"visits": [(0.0, VisitType.TYPED, T5)]},  # typed, led to a 301: 25
            {"visits": [(20.0, VisitType.LINK, T5)]},  # third bucket: 50 * 25 / 100 = 12.5
            {"visits": [(0.0, VisitType.LINK, T6)]},  # led to a 302: 25
            {"visits": [(0.0, VisitType.TYPED, T6)]},  # typed, led to a 302: typed bonus
            {"visits": [(0.0, T5, 0, VisitType.TYPED)]},  # 301 target of a typed visit
            {"visits": [(0.0, T6, 0, VisitType.LINK)]},  # 302 target of a link
            {"visits": [(0.0, T5, 0)]},  # redirect visit without origin: its own bonus, 0
            {"visits": [(0.0, T6, T6, VisitType.TYPED)]},  # typed chain 302 -> 302: typed
            {"visits": [(0.0, T6, T5, VisitType.TYPED)]},  # typed chain 302 -> 301: 25
        ]
    )
    got = ClassicFrecency().score(classic_defaults(), pages)
    np.testing.assert_array_equal(got, [25, 25, 13, 25, 2000, 2000, 100, -1, 2000, 25])
    np.testing.assert_array_equal(got, reference_classic(classic_defaults(), pages))


def test_bookmarked_page_adds_bookmark_bonus_to_every_visit() -> None:
    pages = make_pages(
        [
            {"visits": [(0.0, VisitType.LINK, False)], "bookmarked": True},  # 100 + 75
            {"visits": [(0.0, VisitType.BOOKMARK, False)], "bookmarked": True},  # 75 + 75
            {"visits": [(0.0, VisitType.LINK, True)], "bookmarked": True},  # 25 + 75
            {"visits": [(0.0, VisitType.EMBED, False)], "bookmarked": True},  # 0 + 75
            {
                "visits": [(0.0, VisitType.LINK, False), (20.0, VisitType.TYPED, False)],
                "bookmarked": True,
                "visit_count": 2,
            },  # 175 + 50 * 2075 / 100 = 1212.5
        ]
    )
    np.testing.assert_array_equal(
        ClassicFrecency().score(classic_defaults(), pages), [175, 150, 100, 75, 1213]
    )


def test_unvisited_pages() -> None:
    """SQLFunctions.cpp: no sampled row -> 0 unless ``hasBookmark && !isQuery``; then
    ``bonus = unvisitedBookmarkBonus (+ unvisitedTypedBonus if typed)`` and
    ``ceilf(1 * ceilf(firstBucketWeight * bonus / 100))``. Sampling only runs when
    ``visit_count > 0``."""
    pages = make_pages(
        [
            {"bookmarked": True},
            {"typed": True},  # typed, not bookmarked: 0 (no unvisited-typed score)
            {"bookmarked": True, "typed": True},
            {},
            {"bookmarked": True, "visit_count": 5},  # visit_count without sampled visits
            {"bookmarked": True, "query": True},  # a place: query
            {"visits": [(0.0, VisitType.FRAMED_LINK, False)], "visit_count": 0},  # hidden
            {
                "visits": [(0.0, VisitType.LINK, False)],
                "visit_count": 0,
                "bookmarked": True,
            },  # visit_count = 0: not sampled, scored as an unvisited bookmark
        ]
    )
    np.testing.assert_array_equal(
        ClassicFrecency().score(classic_defaults(), pages), [140, 0, 340, 0, 140, 0, 0, 140]
    )
    theta = weights_from_dict({"firstBucketWeight": 33, "unvisitedBookmarkBonus": 10})
    # ceil(33 * 10 / 100) = ceil(3.3) = 4; ceil(33 * 210 / 100) = ceil(69.3) = 70.
    np.testing.assert_array_equal(ClassicFrecency().score(theta, pages)[:3], [4, 0, 70])
    for model, ref in ((ClassicFrecency(), reference_classic), (ClassicFrecency(float32=True),
                       reference_classic_float32)):  # fmt: skip
        np.testing.assert_array_equal(model.score(theta, pages), ref(theta, pages))


def test_zero_points_give_minus_one() -> None:
    """SQLFunctions.cpp: sampled rows but ``!pointsForSampledVisits`` -> -1 ("so they are
    still shown in autocomplete")."""
    pages = make_pages(
        [
            {"visits": [(0.0, VisitType.EMBED, False)]},
            {
                "visits": [(3.0, VisitType.DOWNLOAD, False), (5.0, VisitType.RELOAD, False)],
                "visit_count": 9,
            },
            {"visits": [(0.0, VisitType.REDIRECT_TEMPORARY, False)], "visit_count": 1},
        ]
    )
    np.testing.assert_array_equal(ClassicFrecency().score(classic_defaults(), pages), [-1, -1, -1])
    np.testing.assert_array_equal(
        ClassicFrecency(rounding=False).score(classic_defaults(), pages), [-1, -1, -1]
    )


def test_average_times_visit_count_and_ceil() -> None:
    """SQLFunctions.cpp: ``ceilf(visitCount * ceilf(pointsForSampledVisits) /
    numSampledVisits)`` -- the points are rounded up before averaging."""
    pages = make_pages(
        [
            # 70 + 50 + 10 * 2000 / 100 = 320 points over 3 samples, 7 visits: 746.67 -> 747
            {
                "visits": [
                    (5.0, VisitType.LINK, False),
                    (20.0, VisitType.LINK, False),
                    (100.0, VisitType.TYPED, False),
                ],
                "visit_count": 7,
            },
            # bookmarked LINK in the third bucket: 50 * 175 / 100 = 87.5 -> 88; 3 visits
            {"visits": [(20.0, VisitType.LINK, False)], "bookmarked": True, "visit_count": 3},
        ]
    )
    theta = classic_defaults()
    np.testing.assert_array_equal(ClassicFrecency().score(theta, pages), [747, 264])
    np.testing.assert_allclose(
        ClassicFrecency(rounding=False).score(theta, pages), [7 * 320 / 3, 262.5]
    )


def test_unordered_cutoffs_follow_the_if_elif_chain() -> None:
    theta = weights_from_dict({"firstBucketCutoff": 10, "secondBucketCutoff": 5})
    pages = make_pages([{"visits": [(a, VisitType.LINK, False)]} for a in (7.0, 10.0, 12.0)])
    # 7 and 10 are <= 10 (first bucket); 12 is > 10 and > 5, <= 31 (third bucket).
    np.testing.assert_array_equal(ClassicFrecency().score(theta, pages), [100, 100, 50])
    np.testing.assert_array_equal(
        ClassicFrecency().score(theta, pages), reference_classic(theta, pages)
    )


def test_integer_weights_give_exact_ceilings() -> None:
    # 3 LINK visits in the second bucket (70 each = 210 points), 10 visits: exactly 700.
    pages = make_pages([{"visits": [(5.0, VisitType.LINK, False)] * 3, "visit_count": 10}])
    assert ClassicFrecency().score(classic_defaults(), pages)[0] == 700


# -- reference and vectorization ---------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> PageHistories:
    n = draw(st.integers(1, 6))
    width = draw(st.integers(1, 10))
    age_values = st.sampled_from(
        [0.0, 0.5, 3.0, 4.0, 4.5, 14.0, 15.0, 31.0, 60.0, 90.0, 91.0, 400.0]
    )
    pages = []
    for _ in range(n):
        k = draw(st.integers(0, width))
        visits = [
            (
                draw(age_values),
                draw(st.sampled_from([1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11])),
                draw(st.sampled_from([0, 0, 0, 5, 6])),
                draw(st.sampled_from([0, 1, 2, 3])),
            )
            for _ in range(k)
        ]
        pages.append(
            {
                "visits": sorted(visits),
                "visit_count": draw(st.sampled_from([0, k, k + draw(st.integers(0, 30))])),
                "bookmarked": draw(st.booleans()),
                "typed": draw(st.booleans()),
                "query": draw(st.booleans()),
            }
        )
    return make_pages(pages, width=width)


integer_params = st.lists(st.integers(0, 300), min_size=22, max_size=22).map(
    lambda v: np.array(v, dtype=np.float64)
)
float_params = st.lists(
    st.one_of(st.just(0.0), st.floats(0.01, 300)), min_size=22, max_size=22
).map(lambda v: np.array(v, dtype=np.float64))  # no denormals: products must not underflow


@settings(max_examples=150, deadline=None)
@given(pages=histories(), theta=integer_params)
def test_matches_reference_with_integer_weights(pages: PageHistories, theta: np.ndarray) -> None:
    np.testing.assert_array_equal(
        ClassicFrecency().score(theta, pages), reference_classic(theta, pages)
    )


@settings(max_examples=150, deadline=None)
@given(pages=histories(), theta=integer_params)
def test_float32_path_matches_the_cpp_transcription(
    pages: PageHistories, theta: np.ndarray
) -> None:
    np.testing.assert_array_equal(
        ClassicFrecency(float32=True).score(theta, pages), reference_classic_float32(theta, pages)
    )


def test_float32_and_exact_paths_differ_only_where_float32_rounds_up() -> None:
    """Weights whose terms are sums of hundredths: float32 accumulation can land just above
    an integer, which Firefox then rounds up; the exact path does not."""
    theta = weights_from_dict({"linkVisitBonus": 37, "firstBucketWeight": 30})  # 11.1 per visit
    pages = make_pages([{"visits": [(0.0, VisitType.LINK, False)] * k} for k in range(1, 11)])
    exact = ClassicFrecency().score(theta, pages)
    f32 = ClassicFrecency(float32=True).score(theta, pages)
    np.testing.assert_array_equal(f32, reference_classic_float32(theta, pages))
    np.testing.assert_array_equal(exact, reference_classic(theta, pages))
    assert np.all(f32 >= exact) and np.all(f32 - exact <= 1)
    # default weights: every term is a multiple of 1/2, exact in float32
    rng = np.random.default_rng(4)
    many = random_pages(3000, rng)
    np.testing.assert_array_equal(
        ClassicFrecency(float32=True).score(classic_defaults(), many),
        ClassicFrecency().score(classic_defaults(), many),
    )


def test_float32_refuses_fractional_weights() -> None:
    pages = make_pages([{"visits": [(0.0, VisitType.LINK, False)]}])
    theta = classic_defaults()
    theta[11] = 100.5
    with pytest.raises(ConfigError, match="integers"):
        ClassicFrecency(float32=True).score(theta, pages)
    with pytest.raises(ConfigError, match="rounding"):
        ClassicFrecency(rounding=False, float32=True)


@settings(max_examples=100, deadline=None)
@given(pages=histories(), theta=float_params)
def test_matches_reference_unrounded(pages: PageHistories, theta: np.ndarray) -> None:
    np.testing.assert_allclose(
        ClassicFrecency(rounding=False).score(theta, pages),
        reference_classic(theta, pages, rounding=False),
        rtol=1e-12,
        atol=1e-9,
    )


@settings(max_examples=60, deadline=None)
@given(pages=histories(), theta=integer_params, seed=st.integers(0, 2**32 - 1))
def test_grouped_and_broadcast_paths_agree(
    pages: PageHistories, theta: np.ndarray, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = fd_rows(theta)
    rows[-5:, :4] = rng.integers(0, 100, (5, 4))  # some unrelated cutoff vectors
    visits = ClassicFrecency.visit_slots(pages)
    args = (rows[:, 0:4], rows[:, 4:9], rows[:, 9:20], visits)
    np.testing.assert_allclose(
        classic_module._grouped_points(*args),
        classic_module._broadcast_points(*args),
        rtol=1e-12,
        atol=1e-9,
    )


@pytest.mark.parametrize("pad", [1, 2, 3, 5, 8])
def test_one_row_points_do_not_depend_on_padding(pad: int) -> None:
    """A page's points are its visits' terms added first visit first (``visit_sum``), so
    padding columns after them change no bit: the simulator scores pages in groups as
    narrow as their rows, the losses read ten-column histories, and its compiled scorer
    reads only the rows; all must agree to the bit (``np.einsum`` does not: on arrays
    this large it adds in an order that depends on the width)."""
    rng = np.random.default_rng(pad)
    visits = ClassicFrecency.visit_slots(random_pages(4000, rng, width=10 - pad))
    wide = replace(
        visits,
        age=np.concatenate([visits.age, rng.choice([0.0, 5.0, 400.0], (4000, pad))], axis=1),
        slot=np.concatenate([visits.slot, np.full((4000, pad), visits.n_slots, np.uint8)], 1),
    )
    theta = classic_defaults() * rng.uniform(0.5, 1.5, 22) + rng.normal(0, 0.3, 22)
    args = (theta[None, 0:4], theta[None, 4:9], theta[None, 9:20])
    narrow_points = bucketed_points(*args, visits)
    wide_points = bucketed_points(*args, wide)
    nonzero = narrow_points != 0.0  # (a zero may change sign: any zero scores -1)
    assert nonzero.mean() > 0.5
    np.testing.assert_array_equal(narrow_points[nonzero], wide_points[nonzero])
    np.testing.assert_array_equal(wide_points[~nonzero], 0.0)


@pytest.mark.parametrize("n_pages", [3, 40, 3000])  # broadcast and grouped paths
def test_rows_equal_row_by_row(n_pages: int) -> None:
    rng = np.random.default_rng(n_pages)
    pages = random_pages(n_pages, rng)
    rows = np.concatenate([fd_rows(), fd_rows(classic_defaults() + rng.integers(0, 5, 22))])
    rows[7, :4] = [20, 3, 50, 40]  # unordered cutoffs
    model = ClassicFrecency()
    batch = model.score(rows, pages)
    one_by_one = np.stack([model.score(row, pages) for row in rows])
    np.testing.assert_array_equal(batch, one_by_one)
    np.testing.assert_array_equal(batch[0], reference_classic(rows[0], pages))
    np.testing.assert_array_equal(batch[7], reference_classic(rows[7], pages))


def test_large_batch_matches_reference_on_sample() -> None:
    rng = np.random.default_rng(7)
    pages = random_pages(2000, rng)
    rows = fd_rows()
    got = ClassicFrecency().score(rows, pages)
    sample = rng.choice(2000, 60, replace=False)
    sub = pages.take(sample)
    for r in (0, 1, 4, 23, 44):
        np.testing.assert_array_equal(got[r, sample], reference_classic(rows[r], sub))


def test_bucketed_points_with_no_pages_or_no_visits() -> None:
    empty = VisitSlots(age=np.zeros((0, 10)), slot=np.zeros((0, 10), np.uint8), n_slots=11)
    assert bucketed_points(np.zeros((3, 4)), np.zeros((3, 5)), np.zeros((3, 11)), empty).shape == (
        3,
        0,
    )
    pages = make_pages([{}, {"bookmarked": True}], width=0)
    rows = fd_rows()
    expected = np.ceil(
        rows[:, CLASSIC_INDEX["firstBucketWeight"]]
        * rows[:, CLASSIC_INDEX["unvisitedBookmarkBonus"]]
        / 100
    )
    np.testing.assert_array_equal(
        ClassicFrecency().score(rows, pages), np.stack([np.zeros(45), expected], axis=1)
    )


# -- daily decay -----------------------------------------------------------------------


def sql_daily_decay(value: float, days: int, rate: float = 0.975) -> float:
    """``days`` runs of ``UPDATE moz_places SET frecency = ROUND(frecency * :decay_rate)
    WHERE frecency > 0``, the rate bound as the double of the float pref."""
    r = float(np.float32(rate))
    for _ in range(days):
        if value > 0:
            value = float(math.floor(value * r + 0.5))  # SQLite ROUND: halves away from 0
    return value


def test_decayed_score() -> None:
    pages = make_pages(
        [
            {"visits": [(10.0, VisitType.LINK, False)]},
            {"visits": [(10.0, VisitType.LINK, False), (20.0, VisitType.LINK, False)]},
            {"bookmarked": True},  # unvisited bookmark added today
            {"visits": [(30.0, VisitType.EMBED, False)]},
            {"visits": [(0.0, VisitType.LINK, False)]},
            {"visits": [(2.9, VisitType.LINK, False)]},
            {"bookmarked": True, "bookmark_age": 12.0},  # added 12 days ago: decayed since
            {"visits": [(300.0, VisitType.TYPED, False)], "visit_count": 3},
        ]
    )
    model = ClassicFrecency()
    got = model.decayed_score(classic_defaults(), pages)
    # page 0: 100 at its visit, rounded after each of 10 days: 98, 96, 94, ..., 80
    # page 1: at its newest visit the ages are 0 and 10: 100 + 70 = 170, then 10 days
    # page 3: -1 is not decayed; page 4: fresh; page 5: 2.9 days -> 2 whole days
    # page 7: 3 * 2000 = 6000, 300 days: values of 20 or less stop decaying (20 * 0.975
    # rounds back to 20)
    expected = [
        sql_daily_decay(100, 10),
        sql_daily_decay(170, 10),
        140.0,
        -1.0,
        100.0,
        sql_daily_decay(100, 2),
        sql_daily_decay(140, 12),
        sql_daily_decay(6000, 300),
    ]
    assert expected[0] == 80.0 and expected[7] == 20.0
    assert got.tolist() == expected
    assert model.decayed_score(classic_defaults(), pages, decay_rate=1.0).tolist() == [
        100.0, 170.0, 140.0, -1.0, 100.0, 100.0, 140.0, 6000.0,
    ]  # fmt: skip
    unrounded = ClassicFrecency(rounding=False).decayed_score(classic_defaults(), pages)
    assert unrounded[0] == pytest.approx(100 * 0.975**10)
    rows = fd_rows()
    batch = model.decayed_score(rows, pages)
    assert batch.shape == (45, 8)
    np.testing.assert_array_equal(batch[0], got)
    for r in (3, 17, 44):
        np.testing.assert_array_equal(batch[r], model.decayed_score(rows[r], pages))


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.integers(-3, 3000).map(float),
            st.integers(2**20 - 5, 2**20 + 5).map(float),  # around the table's limit
            st.floats(-5, 500, allow_nan=False),  # non-integers run day by day
        ),
        min_size=1,
        max_size=30,
    ),
    days=st.integers(0, 400),
    rate=st.sampled_from([float(np.float32(0.975)), 0.5, 0.1, 1.0, 0.999]),
)
def test_daily_decay_equals_the_sql_run_day_by_day(
    values: list[float], days: int, rate: float
) -> None:
    """The table lookups (binary lifting) give what running the SQL once a day gives."""
    v = np.array(values)
    d = (np.arange(v.size) * 7 + days) % 401
    r32 = float(np.float32(rate))  # the pref's float, as the SQL binds it
    got = classic_module.daily_decay(v, d, r32)
    want = [sql_daily_decay(x, int(n), rate) for x, n in zip(values, d, strict=True)]
    assert got.tolist() == want
    twice = classic_module.daily_decay(np.stack([v, 2 * v]), d, r32)  # (P, n) rows
    assert twice[0].tolist() == want and twice[1].tolist() == [
        sql_daily_decay(2 * x, int(n), rate) for x, n in zip(values, d, strict=True)
    ]


def test_decayed_score_rejects_bad_rate() -> None:
    pages = make_pages([{"visits": [(1.0, 1, False)]}])
    for rate in (0.0, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="decay_rate"):
            ClassicFrecency().decayed_score(classic_defaults(), pages, decay_rate=rate)


# -- how long a score stays the same (simulators keep scores: PageScoreCache) -----------


@settings(max_examples=200, deadline=None)
@given(
    pages=histories(),
    theta=st.one_of(integer_params, float_params),
    shift=st.lists(st.one_of(st.integers(0, 120), st.just(10**6)), min_size=6, max_size=6),
)
def test_scores_stay_the_same_while_no_row_passes_its_age_limit(
    pages: PageHistories, theta: np.ndarray, shift: list[int]
) -> None:
    """``ClassicScorer.fresh_age_limits``: a page aged by whole days, up to the point where
    its first row reaches its limit, scores the same (rows move bucket only past their
    bucket's cutoff; unvisited bookmarks score without an age)."""
    whole = replace(pages, visit_age_days=np.floor(pages.visit_age_days))
    scorer = ClassicScorer()
    rows, bookmark = scorer.fresh_age_limits(theta, whole)
    assert np.isinf(bookmark).all()
    room = np.where(whole.visit_mask, rows - whole.visit_age_days, np.inf).min(axis=1)
    days = np.minimum(np.array(shift[: whole.n_pages], dtype=np.float64), room)
    days[np.isinf(days)] = 10**6
    np.testing.assert_array_equal(
        scorer.fresh(theta, whole.aged(days), 0.0), scorer.fresh(theta, whole, 0.0)
    )


def test_age_limits_are_the_bucket_cutoffs() -> None:
    """Default cutoffs 4, 14, 31, 90 days: an age in bucket ``i`` keeps its weight up to
    the cutoff (whole days), the last bucket forever."""
    pages = make_pages([{"visits": [(a, 1, 0, 0)]} for a in (0, 4, 5, 14, 30, 90, 91, 500)])
    rows, _ = ClassicScorer().fresh_age_limits(classic_defaults(), pages)
    np.testing.assert_array_equal(rows[:, 0], [4, 4, 14, 14, 31, 90, np.inf, np.inf])
