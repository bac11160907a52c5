"""The paper's simplified frecency formula (Mozilla paper, Section 4)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.models.frecency.history import PageHistories, VisitType
from fedrank.models.frecency.simplified import SIMPLIFIED_WEIGHT_NAMES, SimplifiedFrecency
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES


def make_pages(pages: list[dict[str, object]], width: int = 10) -> PageHistories:
    n = len(pages)
    age = np.zeros((n, width))
    vtype = np.zeros((n, width), dtype=np.int8)
    for i, page in enumerate(pages):
        for j, (a, t) in enumerate(page.get("visits", [])):  # type: ignore[arg-type]
            age[i, j], vtype[i, j] = a, t
    return PageHistories.build(
        age,
        vtype,
        np.array([p.get("visit_count", 1) for p in pages], dtype=np.int64),
        bookmarked=np.array([bool(p.get("bookmarked", False)) for p in pages]),
    )


def reference_simplified(theta: np.ndarray, pages: PageHistories) -> np.ndarray:
    cut, weight = theta[0:4], theta[4:9]
    link, typed, bookmarked = theta[9:12]
    out = np.zeros(pages.n_pages)
    for i in range(pages.n_pages):
        total, n = 0.0, 0
        for j in range(pages.visit_type.shape[1]):
            t = int(pages.visit_type[i, j])
            if t == 0:
                continue
            n += 1
            age = pages.visit_age_days[i, j]
            recency = weight[4]
            for c, w in zip(cut, weight[:4], strict=True):
                if age <= c:
                    recency = w
                    break
            if t == VisitType.TYPED:
                kind = typed
            elif pages.bookmarked[i] or t == VisitType.BOOKMARK:
                kind = bookmarked
            elif t == VisitType.LINK:
                kind = link
            else:
                kind = 0.0
            total += recency * kind
        out[i] = pages.visit_count[i] / n * total if n else 0.0
    return out


def test_names_and_defaults() -> None:
    model = SimplifiedFrecency()
    assert model.names == SIMPLIFIED_WEIGHT_NAMES
    assert model.names[:9] == CLASSIC_WEIGHT_NAMES[:9]
    assert model.names[9:] == ("linkTypeWeight", "typedTypeWeight", "bookmarkedTypeWeight")
    np.testing.assert_array_equal(
        model.defaults(), [4, 14, 31, 90, 100, 70, 50, 30, 10, 1.2, 2.0, 1.4]
    )


def test_hand_computed() -> None:
    pages = make_pages(
        [
            # TYPED at 2 days: 100 * 2; LINK at 20: 50 * 1.2; BOOKMARK visit at 100: 10 * 1.4;
            # EMBED: 0. Sum 274 over 4 samples, 10 visits: 274 * 10 / 4 = 685.
            {
                "visits": [
                    (2.0, VisitType.TYPED),
                    (20.0, VisitType.LINK),
                    (100.0, VisitType.BOOKMARK),
                    (1.0, VisitType.EMBED),
                ],
                "visit_count": 10,
            },
            # Bookmarked page: LINK counts 1.4, TYPED still 2, REDIRECT gets 1.4 too.
            {
                "visits": [
                    (0.0, VisitType.LINK),
                    (5.0, VisitType.TYPED),
                    (40.0, VisitType.REDIRECT_TEMPORARY),
                ],
                "bookmarked": True,
                "visit_count": 3,
            },
            {"bookmarked": True, "visit_count": 0},  # no visits: 0
            {"visits": [(3.0, VisitType.DOWNLOAD)], "visit_count": 2},  # type weight 0
        ]
    )
    got = SimplifiedFrecency().score(SimplifiedFrecency.defaults(), pages)
    np.testing.assert_allclose(got, [685.0, 100 * 1.4 + 70 * 2.0 + 30 * 1.4, 0.0, 0.0])
    np.testing.assert_allclose(got, reference_simplified(SimplifiedFrecency.defaults(), pages))


@pytest.mark.parametrize("n_pages", [4, 3000])
def test_rows_equal_row_by_row_and_reference(n_pages: int) -> None:
    rng = np.random.default_rng(n_pages)
    width = 10
    k = rng.integers(0, width + 1, n_pages)
    mask = np.arange(width)[None, :] < k[:, None]
    pages = PageHistories.build(
        np.where(mask, np.sort(rng.exponential(30, (n_pages, width)), 1), 0),
        np.where(mask, rng.integers(1, 10, (n_pages, width)), 0).astype(np.int8),
        k + rng.integers(0, 9, n_pages),
        bookmarked=rng.random(n_pages) < 0.3,
    )
    model = SimplifiedFrecency()
    rows = FiniteDifferenceEstimator().parameter_rows(model.defaults())
    rows[3, :4] = [40, 3, 8, 100]  # unordered cutoffs
    batch = model.score(rows, pages)
    assert batch.shape == (25, n_pages)
    np.testing.assert_allclose(batch, np.stack([model.score(r, pages) for r in rows]), rtol=1e-12)
    sample = rng.choice(n_pages, min(n_pages, 50), replace=False)
    for r in (0, 3, 12, 24):
        np.testing.assert_allclose(
            batch[r, sample], reference_simplified(rows[r], pages.take(sample)), rtol=1e-12
        )


def test_bad_shape() -> None:
    with pytest.raises(ConfigError, match="12"):
        SimplifiedFrecency().score(np.zeros(22), make_pages([{}]))
