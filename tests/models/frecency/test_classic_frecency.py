"""Classic Firefox frecency (paper Sec. 4; pre-2024 ``CalculateFrecency``): hand-computed
cases for every rule, a slow loop-based reference, vectorization and the daily decay."""

from __future__ import annotations

import math
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
from fedrank.models.frecency.weights import (
    CLASSIC_INDEX,
    CLASSIC_WEIGHT_NAMES,
    classic_defaults,
    weights_from_dict,
)

Visit = tuple[float, int, bool]  # (age in days, visit type, is redirect source)


def make_pages(pages: list[dict[str, object]], width: int = 10) -> PageHistories:
    """PageHistories from ``[{"visits": [(age, type, redirect_source), ...],
    "visit_count": int, "bookmarked": bool, "typed": bool}, ...]``."""
    n = len(pages)
    age = np.zeros((n, width))
    vtype = np.zeros((n, width), dtype=np.int8)
    source = np.zeros((n, width), dtype=bool)
    for i, page in enumerate(pages):
        visits: list[Visit] = page.get("visits", [])  # type: ignore[assignment]
        for j, (a, t, s) in enumerate(visits):
            age[i, j], vtype[i, j], source[i, j] = a, t, s
    return PageHistories(
        visit_age_days=age,
        visit_type=vtype,
        visit_is_redirect_source=source,
        visit_count=np.array(
            [p.get("visit_count", len(p.get("visits", []))) for p in pages], dtype=np.int64
        ),
        bookmarked=np.array([bool(p.get("bookmarked", False)) for p in pages]),
        typed=np.array([bool(p.get("typed", False)) for p in pages]),
    )


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


def reference_classic(
    params: np.ndarray, pages: PageHistories, rounding: bool = True
) -> np.ndarray:
    """Slow, literal implementation of the documented algorithm (exact rational arithmetic:
    ``Fraction`` of the float parameters)."""
    w = {name: Fraction(float(v)) for name, v in zip(CLASSIC_WEIGHT_NAMES, params, strict=True)}
    cutoffs = [
        w["firstBucketCutoff"],
        w["secondBucketCutoff"],
        w["thirdBucketCutoff"],
        w["fourthBucketCutoff"],
    ]
    weights = [
        w["firstBucketWeight"],
        w["secondBucketWeight"],
        w["thirdBucketWeight"],
        w["fourthBucketWeight"],
    ]
    out = []
    for i in range(pages.n_pages):
        visits = [
            (
                Fraction(float(pages.visit_age_days[i, j])),
                int(pages.visit_type[i, j]),
                bool(pages.visit_is_redirect_source[i, j]),
            )
            for j in range(pages.visit_type.shape[1])
            if pages.visit_type[i, j] != 0
        ]
        bookmarked, typed = bool(pages.bookmarked[i]), bool(pages.typed[i])
        if visits:
            points = Fraction(0)
            for age, vtype, source in visits:
                if source:
                    bonus = w["redirectSourceVisitBonus"]
                elif vtype in _TYPE_BONUS:
                    bonus = w[_TYPE_BONUS[VisitType(vtype)]]
                else:
                    bonus = w["defaultVisitBonus"]
                if bookmarked:
                    bonus += w["bookmarkVisitBonus"]
                weight = w["defaultBucketWeight"]
                for cutoff, bucket_weight in zip(cutoffs, weights, strict=True):
                    if age <= cutoff:
                        weight = bucket_weight
                        break
                points += weight * bonus / 100
            if points == 0:
                out.append(-1.0)
                continue
            value = int(pages.visit_count[i]) * points / len(visits)
        elif bookmarked or typed:
            bonus = (w["unvisitedBookmarkBonus"] if bookmarked else 0) + (
                w["unvisitedTypedBonus"] if typed else 0
            )
            value = w["firstBucketWeight"] * bonus / 100
        else:
            value = Fraction(0)
        out.append(float(math.ceil(value)) if rounding else float(value))
    return np.array(out)


def fd_rows(theta: np.ndarray | None = None) -> np.ndarray:
    return FiniteDifferenceEstimator().parameter_rows(
        classic_defaults() if theta is None else theta
    )


def random_pages(n: int, rng: np.random.Generator, width: int = 10) -> PageHistories:
    n_visits = rng.integers(0, width + 1, n)
    mask = np.arange(width)[None, :] < n_visits[:, None]
    ages = np.sort(
        rng.choice([0.0, 3.5, 4.0, 5.0, 14.0, 15.0, 31.0, 90.0, 91.0, 200.0], size=(n, width))
        + rng.integers(0, 3, (n, width)),
        axis=1,
    )
    return PageHistories(
        visit_age_days=np.where(mask, ages, 0.0),
        visit_type=np.where(mask, rng.integers(1, 12, (n, width)), 0).astype(np.int8),
        visit_is_redirect_source=mask & (rng.random((n, width)) < 0.1),
        visit_count=n_visits + rng.integers(0, 20, n),
        bookmarked=rng.random(n) < 0.3,
        typed=rng.random(n) < 0.3,
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


def test_redirect_source_replaces_the_type_bonus() -> None:
    pages = make_pages(
        [
            {"visits": [(0.0, VisitType.LINK, True)]},
            {"visits": [(0.0, VisitType.TYPED, True)]},
            {"visits": [(20.0, VisitType.LINK, True)]},
        ]
    )
    # redirectSourceVisitBonus 25: 100 * 25 / 100 = 25; third bucket: 50 * 25 / 100 = 12.5.
    np.testing.assert_array_equal(ClassicFrecency().score(classic_defaults(), pages), [25, 25, 13])


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
    pages = make_pages(
        [
            {"bookmarked": True},
            {"typed": True},
            {"bookmarked": True, "typed": True},
            {},
            {"bookmarked": True, "visit_count": 5},  # visit_count without sampled visits
        ]
    )
    np.testing.assert_array_equal(
        ClassicFrecency().score(classic_defaults(), pages), [140, 200, 340, 0, 140]
    )
    theta = weights_from_dict({"firstBucketWeight": 33, "unvisitedBookmarkBonus": 10})
    # ceil(33 * 10 / 100) = ceil(3.3) = 4; ceil(33 * 210 / 100) = ceil(69.3) = 70.
    np.testing.assert_array_equal(ClassicFrecency().score(theta, pages)[:3], [4, 66, 70])


def test_zero_points_give_minus_one() -> None:
    pages = make_pages(
        [
            {"visits": [(0.0, VisitType.EMBED, False)]},
            {
                "visits": [(3.0, VisitType.DOWNLOAD, False), (5.0, VisitType.RELOAD, False)],
                "visit_count": 9,
            },
            {"visits": [(0.0, VisitType.FRAMED_LINK, False)], "visit_count": 0},
        ]
    )
    np.testing.assert_array_equal(ClassicFrecency().score(classic_defaults(), pages), [-1, -1, -1])
    np.testing.assert_array_equal(
        ClassicFrecency(rounding=False).score(classic_defaults(), pages), [-1, -1, -1]
    )


def test_average_times_visit_count_and_ceil() -> None:
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
            # bookmarked LINK in the third bucket: 50 * 175 / 100 = 87.5; 3 visits, 1 sample
            {"visits": [(20.0, VisitType.LINK, False)], "bookmarked": True, "visit_count": 3},
        ]
    )
    theta = classic_defaults()
    np.testing.assert_array_equal(ClassicFrecency().score(theta, pages), [747, 263])
    np.testing.assert_allclose(
        ClassicFrecency(rounding=False).score(theta, pages), [7 * 320 / 3, 262.5]
    )
    # Firefox's C++ rounds the points up first: ceil(3 * ceil(87.5) / 1) = 264.
    np.testing.assert_array_equal(ClassicFrecency(ceil_points=True).score(theta, pages), [747, 264])


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
                draw(st.booleans()),
            )
            for _ in range(k)
        ]
        pages.append(
            {
                "visits": sorted(visits),
                "visit_count": k + draw(st.integers(0, 30)),
                "bookmarked": draw(st.booleans()),
                "typed": draw(st.booleans()),
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


def test_finite_difference_batch_is_fast_enough_for_the_study() -> None:
    # Budget: 45 parameter rows x 10 pages (one search) must cost well under a millisecond.
    import time

    pages = random_pages(10, np.random.default_rng(0))
    rows = fd_rows()
    model = ClassicFrecency()
    model.score(rows, pages)
    start = time.perf_counter()
    for _ in range(200):
        model.score(rows, pages)
    assert (time.perf_counter() - start) / 200 < 2e-3


# -- daily decay -----------------------------------------------------------------------


def test_decayed_score() -> None:
    pages = make_pages(
        [
            {"visits": [(10.0, VisitType.LINK, False)]},
            {"visits": [(10.0, VisitType.LINK, False), (20.0, VisitType.LINK, False)]},
            {"bookmarked": True},
            {"visits": [(30.0, VisitType.EMBED, False)]},
            {"visits": [(0.0, VisitType.LINK, False)]},
            {"visits": [(2.9, VisitType.LINK, False)]},
        ]
    )
    model = ClassicFrecency()
    got = model.decayed_score(classic_defaults(), pages)
    # page 0: 100 at its visit, decayed 10 days: round(100 * 0.975**10) = round(77.63) = 78
    # page 1: at its newest visit the ages are 0 and 10: 100 + 70 = 170 -> round(132.0)
    # page 2: unvisited bookmark, never decayed; page 3: -1 is not decayed; page 4: fresh
    # page 5: 2.9 days -> 2 whole days of decay: round(100 * 0.975**2) = round(95.06) = 95
    assert got.tolist() == [78.0, round(170 * 0.975**10), 140.0, -1.0, 100.0, 95.0]
    assert model.decayed_score(classic_defaults(), pages, decay_rate=1.0).tolist() == [
        100.0,
        170.0,
        140.0,
        -1.0,
        100.0,
        100.0,
    ]
    unrounded = ClassicFrecency(rounding=False).decayed_score(classic_defaults(), pages)
    assert unrounded[0] == pytest.approx(100 * 0.975**10)
    rows = fd_rows()
    batch = model.decayed_score(rows, pages)
    assert batch.shape == (45, 6)
    np.testing.assert_array_equal(batch[0], got)


def test_decayed_score_rejects_bad_rate() -> None:
    pages = make_pages([{"visits": [(1.0, 1, False)]}])
    for rate in (0.0, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="decay_rate"):
            ClassicFrecency().decayed_score(classic_defaults(), pages, decay_rate=rate)
