"""Modern (Firefox 128+) frecency arithmetic and the synthetic-history converter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.history import PageHistories, VisitType
from fedrank.models.frecency.modern import (
    HIGH,
    LOW,
    MEDIUM,
    MODERN_WEIGHT_NAMES,
    PADDING,
    VERY_HIGH,
    ModernFrecency,
    ModernPrefs,
    ModernSamples,
    modern_samples_from_histories,
)

DAY = 20_779  # 2026-11-22


def make_samples(
    pages: list[list[tuple[int, int]]], visit_count: list[int], place: list[bool] | None = None
) -> ModernSamples:
    """Samples from ``[[(day, class), ...], ...]``."""
    width = max(1, max(len(p) for p in pages))
    day = np.zeros((len(pages), width), dtype=np.int64)
    cls = np.full((len(pages), width), PADDING, dtype=np.int8)
    for i, page in enumerate(pages):
        for j, (d, c) in enumerate(page):
            day[i, j], cls[i, j] = d, c
    return ModernSamples(
        sample_day=day,
        sample_class=cls,
        visit_count=np.array(visit_count, dtype=np.int64),
        is_place_query=np.array(place or [False] * len(pages)),
    )


def reference_modern(theta: np.ndarray, samples: ModernSamples) -> np.ndarray:
    lam = math.log(2) / theta[4]
    out = []
    for i in range(samples.n_pages):
        items = [
            (int(d), int(c))
            for d, c in zip(samples.sample_day[i], samples.sample_class[i], strict=True)
            if c >= 0
        ]
        if not items or samples.is_place_query[i]:
            out.append(0.0)
            continue
        ref = max(d for d, _ in items)
        s = sum(theta[c] * math.exp(-lam * (ref - d)) for d, c in items)
        if s <= 0:
            out.append(0.0)
            continue
        x = s / len(items) * max(int(samples.visit_count[i]), len(items))
        out.append(float(ref + int(math.log(x) / lam)))
    return np.array(out)


def test_names_and_defaults() -> None:
    model = ModernFrecency()
    assert (
        model.names
        == MODERN_WEIGHT_NAMES
        == ("lowWeight", "mediumWeight", "highWeight", "veryHighWeight", "halfLifeDays")
    )
    np.testing.assert_array_equal(model.defaults(), [20, 50, 100, 200, 30])
    assert ModernPrefs() == ModernPrefs(10, 120, 60, 50, 20)


def test_hand_computed() -> None:
    samples = make_samples(
        [
            [(DAY, HIGH)],  # ln(100) / (ln 2 / 30) = 199.3 -> DAY + 199
            [(DAY, MEDIUM), (DAY - 30, LOW)],  # s = 50 + 20 / 2 = 60; 60 / 2 * 5 = 150
            [(DAY - 3, VERY_HIGH)] * 3,  # 200 * 3 / 3 * 7 = 1400 -> 30 log2(1400) = 313.5
            [],  # no samples
            [(DAY, HIGH)],  # place: URL
        ],
        visit_count=[1, 5, 7, 3, 4],
        place=[False, False, False, False, True],
    )
    got = ModernFrecency().score(ModernFrecency.defaults(), samples)
    expected = [
        DAY + 199,
        DAY + int(30 * math.log2(150)),
        DAY - 3 + int(30 * math.log2(1400)),
        0,
        0,
    ]
    assert got.tolist() == expected
    assert expected[1] == DAY + 216 and expected[2] == DAY - 3 + 313
    np.testing.assert_array_equal(got, reference_modern(ModernFrecency.defaults(), samples))


def test_unrounded_and_truncation_toward_zero() -> None:
    samples = make_samples([[(DAY, LOW)], [(DAY, HIGH)]], visit_count=[1, 1])
    theta = np.array([0.3, 50, 100, 200, 30])
    # ln(0.3) / lambda = 30 log2(0.3) = -52.1: truncated toward zero (SQL CAST) -> -52.
    assert ModernFrecency().score(theta, samples)[0] == DAY - 52
    raw = ModernFrecency(rounding=False).score(theta, samples)
    assert raw[0] == pytest.approx(DAY + 30 * math.log2(0.3))
    assert raw[1] == pytest.approx(DAY + 30 * math.log2(100))


def test_zero_score_gives_zero() -> None:
    samples = make_samples([[(DAY, LOW)], [(DAY, MEDIUM)]], visit_count=[1, 1])
    got = ModernFrecency().score(np.array([0.0, 50, 100, 200, 30]), samples)
    assert got[0] == 0 and got[1] == DAY + int(30 * math.log2(50))


def test_rows_equal_row_by_row_and_reference() -> None:
    rng = np.random.default_rng(3)
    n, width = 400, 12
    k = rng.integers(0, width + 1, n)
    mask = np.arange(width)[None, :] < k[:, None]
    samples = ModernSamples(
        sample_day=np.where(mask, DAY - rng.integers(0, 200, (n, width)), 0),
        sample_class=np.where(mask, rng.integers(0, 4, (n, width)), PADDING).astype(np.int8),
        visit_count=rng.integers(0, 40, n),
        is_place_query=rng.random(n) < 0.05,
    )
    theta = ModernFrecency.defaults()
    rows = np.concatenate(
        [theta[None], theta + np.eye(5), theta - np.eye(5), [[7, 3, 500, 1, 12.5]]]
    )
    model = ModernFrecency()
    batch = model.score(rows, samples)
    assert batch.shape == (12, n)
    np.testing.assert_array_equal(batch, np.stack([model.score(r, samples) for r in rows]))
    for r in range(rows.shape[0]):
        np.testing.assert_array_equal(batch[r], reference_modern(rows[r], samples))


def test_bad_parameters() -> None:
    samples = make_samples([[(DAY, HIGH)]], visit_count=[1])
    with pytest.raises(ConfigError, match="5"):
        ModernFrecency().score(np.zeros(4), samples)
    with pytest.raises(ConfigError, match="halfLifeDays"):
        ModernFrecency().score(np.array([20, 50, 100, 200, 0.0]), samples)
    with pytest.raises(ConfigError, match="numSampledVisits"):
        ModernPrefs(numSampledVisits=0)


def test_samples_validation() -> None:
    with pytest.raises(DataFormatError, match="sample_day"):
        ModernSamples(
            np.zeros((2, 3), np.int64),
            np.zeros((2, 2), np.int8),
            np.zeros(2, np.int64),
            np.zeros(2, bool),
        )
    with pytest.raises(DataFormatError, match="sample_class"):
        ModernSamples(
            np.zeros((1, 1), np.int64),
            np.full((1, 1), 4, np.int8),
            np.zeros(1, np.int64),
            np.zeros(1, bool),
        )
    with pytest.raises(DataFormatError, match="visit_count"):
        ModernSamples(
            np.zeros((2, 1), np.int64),
            np.zeros((2, 1), np.int8),
            np.zeros(3, np.int64),
            np.zeros(2, bool),
        )


def test_samples_from_histories() -> None:
    """Firefox 128+'s classes (SQLFunctions.cpp, CalculateFrecency): effective type = the
    origin's for a redirect visit; ``t`` = the visit led to a redirect; high = BOOKMARK, or
    source bookmark, or (TYPED and not t); medium = not t and not EMBED; else low."""
    width = 12
    T5, T6 = VisitType.REDIRECT_PERMANENT, VisitType.REDIRECT_TEMPORARY
    visits = [
        # (age, type, redirect target it led to, origin type)
        [
            (0.4, VisitType.LINK, 0, 0),
            (1.0, VisitType.DOWNLOAD, 0, 0),
            (2.0, VisitType.TYPED, 0, 0),
            (3.0, VisitType.TYPED, T6, 0),  # typed, led to a redirect: low
            (4.0, VisitType.BOOKMARK, T5, 0),  # bookmark visit: high even when t
            (5.0, VisitType.EMBED, 0, 0),
            (6.0, VisitType.RELOAD, 0, 0),
            (7.0, T6, 0, 0),  # redirect visit without origin: its own type, medium
            (8.0, VisitType.FRAMED_LINK, 0, 0),
            (9.5, T5, 0, VisitType.TYPED),  # redirect target of a typed visit: high
            (10.0, VisitType.LINK, 0, 0),
            (11.0, VisitType.LINK, 0, 0),
        ],
        [],
        [(3.0, VisitType.RELOAD, 0, 0)],
        [],
    ]
    n = len(visits)
    age = np.zeros((n, width))
    vtype = np.zeros((n, width), np.int8)
    target = np.zeros((n, width), np.int8)
    origin = np.zeros((n, width), np.int8)
    for i, page in enumerate(visits):
        for j, (a, t, tt, o) in enumerate(page):
            age[i, j], vtype[i, j], target[i, j], origin[i, j] = a, t, tt, o

    def histories(bookmarked: list[bool]) -> PageHistories:
        return PageHistories.build(
            age,
            vtype,
            np.array([40, 0, 1, 0]),
            visit_origin_type=origin,
            visit_redirect_target=target,
            bookmarked=np.array(bookmarked),
            bookmark_age_days=np.array([0.0, 0.0, 6.0, 0.0]),
        )

    pages = histories([False, True, True, False])
    samples = modern_samples_from_histories(pages, DAY)
    assert samples.sample_class.shape == (4, 10)
    # Page 0: 12 visits, 3 excluded (DOWNLOAD, RELOAD, FRAMED_LINK); the 9 others kept.
    assert samples.sample_class[0].tolist() == [
        MEDIUM,
        HIGH,
        LOW,
        HIGH,
        LOW,
        MEDIUM,
        HIGH,
        MEDIUM,
        MEDIUM,
        PADDING,
    ]
    assert samples.sample_day[0, :9].tolist() == [
        DAY,
        DAY - 2,
        DAY - 3,
        DAY - 4,
        DAY - 5,
        DAY - 7,
        DAY - 9,
        DAY - 10,
        DAY - 11,
    ]
    # Bookmarked pages without sampled visits: one high sample on the bookmark's day.
    assert samples.sample_class[1].tolist() == [HIGH] + [PADDING] * 9
    assert samples.sample_class[2].tolist() == [HIGH] + [PADDING] * 9
    assert samples.sample_day[1, 0] == DAY and samples.sample_day[2, 0] == DAY - 6
    assert (samples.sample_class[3] == PADDING).all()
    np.testing.assert_array_equal(samples.visit_count, [40, 0, 1, 0])
    assert not samples.is_place_query.any()
    scores = ModernFrecency().score(ModernFrecency.defaults(), samples)
    assert scores[3] == 0 and scores[1] == DAY + 199

    # Visits to a bookmarked page carry source = bookmark (default): all high; the old
    # reading (source = organic) keeps the type rules.
    pages_bm = histories([True, True, True, False])
    organic = modern_samples_from_histories(pages_bm, DAY, bookmarked_visits_high=False)
    np.testing.assert_array_equal(organic.sample_class[0], samples.sample_class[0])
    high = modern_samples_from_histories(pages_bm, DAY)
    assert high.sample_class[0].tolist() == [HIGH] * 9 + [PADDING]
