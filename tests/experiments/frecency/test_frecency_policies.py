"""The iteration-length policies' stream (Mozilla Sec. 6.4): every iteration is a round of
the one loop, so an adaptive norm bound carries from one iteration to the next, as in the
study and the server."""

from __future__ import annotations

import numpy as np

from fedrank.core.iteration_policy import MinUpdates
from fedrank.experiments.frecency.policies import StreamConfig, run_policy

SMALL = {
    "n_users": 150,
    "reports_per_hour": 600.0,
    "validation_searches": 200,
    "max_reports": 900,
    "target_fraction": 0.01,  # never reached: the stream runs its whole budget
}


def test_the_adaptive_norm_bound_moves_from_iteration_to_iteration() -> None:
    """Each close moves the bound by Andrew et al.'s factor ``exp(-eta (b - gamma))``, ``b``
    the share of the iteration's gradients within it, from the previous iteration's bound:
    every iteration has its own bound, each within a factor ``exp(eta / 2)`` of the one
    before (the stream used to start every iteration from the configured bound)."""
    config = StreamConfig(norm_bound=1e-6, norm_quantile=0.5, **SMALL)  # type: ignore[arg-type]
    result = run_policy(MinUpdates(100), config, seed=4)
    bounds = np.array(result["norm_bound_per_iteration"])
    assert result["iterations"] == len(bounds) >= 3 and bounds[0] == 1e-6
    ratios = bounds[1:] / bounds[:-1]
    assert np.all(ratios != 1.0)
    assert np.all(np.abs(np.log(ratios)) <= 0.2 * 0.5 + 1e-12)


def test_a_fixed_bound_and_no_bound() -> None:
    fixed = run_policy(MinUpdates(100), StreamConfig(norm_bound=1e-6, **SMALL), seed=4)  # type: ignore[arg-type]
    assert set(fixed["norm_bound_per_iteration"]) == {1e-6}
    plain = run_policy(MinUpdates(100), StreamConfig(**SMALL), seed=4)  # type: ignore[arg-type]
    assert "norm_bound_per_iteration" not in plain and plain["iterations"] >= 3
