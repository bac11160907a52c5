"""Power analysis of the frecency study, at the level of users (Mozilla paper, Sec. 6.2;
blog "Power Analysis").

The study's power analysis had two parts:

1. *How many users are needed to train a model?* -- answered by simulation.
   :func:`training_power` runs whole simulated studies with ``n`` users and counts how
   often the treatment loss falls by at least ``target_reduction`` over the optimization
   phase; :func:`fedrank.experiments.stats.smallest_n` finds the smallest ``n`` reaching
   the wanted probability.
2. *How many users are needed to show an effect?* -- "classical hypothesis testing, based
   on the Mann-Whitney-U test", on the **rank of the selected suggestion** (the blog: there
   was no prior data on characters typed, so no power analysis for that metric).
   :func:`effect_power` simulates a pilot evaluation phase with half the users on Firefox's
   defaults (control) and half on the treatment model, takes every user's mean, and
   resamples *users* (:func:`fedrank.experiments.stats.required_users`): searches of one
   user are correlated, so resampling searches would overstate the power.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from fedrank.errors import ConfigError
from fedrank.experiments.frecency.study import (
    FrecencyStudyConfig,
    StudyResult,
    build_world,
    evaluate_phase,
    run_study,
    study_streams,
)
from fedrank.experiments.stats import per_user_means, required_users, smallest_n
from fedrank.simulation.frecency.branches import TREATMENT

__all__ = ["effect_power", "training_power"]


def effect_power(
    config: FrecencyStudyConfig,
    theta: np.ndarray,
    *,
    metric: str = "selected_rank",
    alpha: float = 0.05 / 6,
    power: float = 0.8,
    repetitions: int = 200,
    effect: float | None = None,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Users per branch a two-sided MWU test on per-user means needs to tell ``theta`` (or,
    with ``effect``, the control users shifted by ``effect``) from the defaults.

    The pilot is ``config``'s evaluation phase (``config.n_users`` users, half control and
    half treatment, ``eval_searches_per_user`` searches each) after ``config.iterations``
    iterations of the world's own dynamics, without learning."""
    if metric not in ("chars_typed", "selected_rank"):
        raise ConfigError(f"metric must be chars_typed or selected_rank, got {metric!r}")
    c = config.resolved()
    world_seed, train_seed, eval_seed, _ = study_streams(c.seed)
    world = build_world(c, np.random.default_rng(world_seed))
    half = np.random.default_rng(train_seed).permutation(world.n_users) < world.n_users // 2
    world.branch[:] = np.where(half, TREATMENT, 1)
    result = StudyResult(config=c)
    evaluate_phase(world, np.asarray(theta, dtype=np.float64), c, eval_seed, result, compare=False)
    samples = result.eval_samples
    _, control, _ = per_user_means(samples["control"][metric], samples["control"]["user"])
    if effect is not None:
        treatment = control + effect
    else:
        _, treatment, _ = per_user_means(samples["treatment"][metric], samples["treatment"]["user"])
    res = required_users(
        treatment, control, alpha=alpha, power=power, repetitions=repetitions, rng=rng
    )
    res.update(
        metric=metric,
        alpha=alpha,
        target_power=power,
        unit="user",
        pilot_users={"control": int(control.size), "treatment": int(treatment.size)},
        control_mean=float(control.mean()),
        treatment_mean=float(treatment.mean()),
        searches_per_user=c.eval_searches_per_user,
    )
    return res


def training_power(
    config: FrecencyStudyConfig,
    *,
    target_reduction: float = 0.2,
    probability: float = 0.8,
    repetitions: int = 5,
    n_min: int = 50,
    n_max: int = 20_000,
    progress: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Smallest number of enrolled users (60% of them treatment) for which the study's
    treatment loss -- mean of the last 5 iterations over the first 5 -- falls by at least
    ``target_reduction`` in at least ``probability`` of ``repetitions`` studies (seeds
    ``config.seed``, ``config.seed + 1``, ...). Runs whole studies: minutes."""
    if not 0 < target_reduction < 1 or not 0 < probability <= 1 or repetitions < 1:
        raise ConfigError("need 0 < target_reduction < 1, 0 < probability <= 1, repetitions >= 1")
    runs: dict[int, list[float]] = {}

    def reduction(result: StudyResult) -> float:
        losses = np.asarray(result.loss_per_iteration, dtype=np.float64)
        k = min(5, max(1, losses.size // 2))
        first, last = np.nanmean(losses[:k]), np.nanmean(losses[-k:])
        return float(1.0 - last / first) if first > 0 else 0.0

    def power_at(n: int) -> float:
        if n not in runs:
            runs[n] = [
                reduction(run_study(replace(config, n_users=max(n, 3), seed=config.seed + r)))
                for r in range(repetitions)
            ]
        share = float(np.mean(np.asarray(runs[n]) >= target_reduction))
        if progress is not None:
            progress(n, share)
        return share

    res = smallest_n(power_at, probability, n_min, n_max, start=n_min, rel_tol=0.1)
    res.update(
        target_reduction=target_reduction,
        probability=probability,
        repetitions=repetitions,
        reductions={str(n): r for n, r in sorted(runs.items())},
        iterations=config.iterations,
    )
    return res
