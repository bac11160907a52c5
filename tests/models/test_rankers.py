"""LETOR rankers: zero initialization, per-row scoring equals single scoring, and the
vector-Jacobian product equals finite differences of the score."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.models.linear import LinearRanker
from fedrank.models.mlp import TwoLayerRanker
from fedrank.models.rankers import make_ranker

RANKERS = [LinearRanker(7), TwoLayerRanker(7, hidden=4)]


def test_dimensions_and_zero_init() -> None:
    assert make_ranker("linear", 46).dim == 46
    assert make_ranker("two-layer", 46).dim == 46 * 10 + 10 + 10 == 480
    for ranker in RANKERS:
        p = ranker.init_params()
        assert p.shape == (ranker.dim,) and not p.any()
        assert not ranker.score(p, np.ones((3, 7))).any()
    with pytest.raises(ConfigError, match="unknown ranker"):
        make_ranker("tree", 3)


@pytest.mark.parametrize("ranker", RANKERS, ids=lambda r: r.name)
def test_score_rows_equals_scoring_each_row(ranker: LinearRanker | TwoLayerRanker) -> None:
    rng = np.random.default_rng(0)
    params = rng.normal(size=(5, ranker.dim))
    x = rng.random((5, 6, 7)).astype(np.float32)
    rows = ranker.score_rows(params, x)
    for i in range(5):
        np.testing.assert_allclose(rows[i], ranker.score(params[i], x[i]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranker", RANKERS, ids=lambda r: r.name)
def test_vjp_matches_finite_differences(ranker: LinearRanker | TwoLayerRanker) -> None:
    rng = np.random.default_rng(1)
    params = rng.normal(size=(3, ranker.dim))
    x = rng.random((3, 5, 7))
    weights = rng.normal(size=(3, 5))
    vjp = ranker.vjp_rows(params, x, weights)

    def objective(p: np.ndarray, i: int) -> float:
        return float(np.dot(weights[i], ranker.score(p, x[i]).astype(np.float64)))

    eps = 1e-2
    for i in range(3):
        for j in range(ranker.dim):
            step = np.zeros(ranker.dim)
            step[j] = eps
            fd = (objective(params[i] + step, i) - objective(params[i] - step, i)) / (2 * eps)
            assert abs(fd - vjp[i, j]) < 2e-3 * (1 + abs(fd)), (i, j)
