"""When to close an iteration (Mozilla paper, Section 6.4, future work).

The deployed system closed an iteration every 30 minutes, whatever number of reports had
arrived; activity followed the day (Fig. 6), so some iterations had very few reports. The
paper proposes closing iterations by report count, or once the update estimate is stable.
Three policies, compared on the same simulated report stream:

* :class:`FixedTime` -- close every ``minutes`` (the deployed protocol).
* :class:`MinUpdates` -- close as soon as ``min_reports`` reports have arrived.
* :class:`SignStable` -- close once the sign of the running aggregate has not changed over
  the last ``window`` arrivals (checked per tick), after at least ``min_reports`` reports.

:func:`compare_policies` runs each policy on a simulated stream whose arrival rate follows
a daily cycle and reports how many reports (and hours) each needed to bring the loss on a
fixed validation set of searches below a common target. The users' histories are held
fixed while the stream runs (the policies are compared on the same searches, not on how
the history evolves).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from fedrank.core.iteration_policy import (
    FixedTime,
    IterationPolicy,
    MinUpdates,
    OpenIteration,
    SignStable,
)
from fedrank.core.message import MessageBatch
from fedrank.core.validation import Interval, Options
from fedrank.data.synthetic_history import generate_world
from fedrank.experiments.frecency.presets import PRESETS, hidden_weights
from fedrank.federation.round import Round
from fedrank.simulation.frecency.branches import TREATMENT
from fedrank.simulation.frecency.world import FrecencyWorld
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy


@dataclass(frozen=True)
class StreamConfig(FrecencyConfig):
    """The simulated report stream, and the learning settings
    (:class:`~fedrank.systems.frecency.config.FrecencyConfig`: classic frecency, the paper's
    Rprop, gate and safeguards by default).

    Attributes:
        preset: the users' hidden preference
            (:func:`~fedrank.experiments.frecency.presets.hidden_weights`).
        n_users: simulated users (all treatment).
        reports_per_hour: mean arrival rate of reports.
        daily_amplitude: relative amplitude of the daily cycle (rate x (1 + a sin)).
        tick_minutes: granularity at which the server looks at the stream.
        validation_searches: size of the fixed validation set.
        target_fraction: target loss as a fraction of the initial validation loss.
        max_reports: budget after which a policy is declared not to reach the target.
    """

    preset: str = "shifted"
    n_users: int = 2000
    reports_per_hour: float = 1500.0
    daily_amplitude: float = 0.8
    tick_minutes: float = 5.0
    validation_searches: int = 3000
    target_fraction: float = 0.5
    max_reports: int = 60_000

    ACCEPTS = {
        **FrecencyConfig.ACCEPTS,
        "preset": Options(*PRESETS),
        "n_users": Interval(Integral, 1, None),
        "reports_per_hour": Interval(Real, 0, None, closed="neither"),
        "daily_amplitude": Interval(Real, 0, None),
        "tick_minutes": Interval(Real, 0, None, closed="neither"),
        "validation_searches": Interval(Integral, 1, None),
        "target_fraction": Interval(Real, 0, 1, closed="neither"),
        "max_reports": Interval(Integral, 1, None),
    }


def _validation_loss(
    world: FrecencyWorld, users: np.ndarray, targets_rng_seed: int, theta: np.ndarray
) -> float:
    rng = np.random.default_rng(targets_rng_seed)  # the same intents every time
    batch = world.search(world.draw_searches(users, rng, state_for=theta), theta, rng)
    return float(np.nanmean(world.branch_losses(batch, theta)))


def run_policy(policy: IterationPolicy, config: StreamConfig, seed: int) -> dict[str, Any]:
    """Simulate the stream under ``policy`` until the validation loss reaches the target."""
    rng = np.random.default_rng(seed)
    strategy = FrecencyStrategy(config)
    client = FrecencyClient(config)
    world = FrecencyWorld(
        generate_world(config.n_users, rng),
        hidden_weights(config.preset, config.model),
        rng,
        shares=(1.0, 0.0, 0.0),
        delta=strategy.config.delta,
        score_scale=strategy.config.score_scale,
        model=config.model,
    )
    round_ = Round(strategy)
    val_users = rng.integers(0, world.n_users, size=config.validation_searches)
    val_seed = int(rng.integers(2**31))
    initial = _validation_loss(world, val_users, val_seed, round_.params)
    target = config.target_fraction * initial

    minutes, total_minutes, n_open = 0.0, 0.0, 0
    stable, last_sign = 0, None
    bounds: list[float] = []  # each iteration's norm bound (norm_bound), in order
    reports_used, reached, loss = 0, False, initial
    while reports_used < config.max_reports:
        theta = round_.params
        hours = total_minutes / 60.0
        rate = config.reports_per_hour * (
            1 + config.daily_amplitude * np.sin(2 * np.pi * hours / 24)
        )
        arrivals = int(rng.poisson(max(rate, 0.0) * config.tick_minutes / 60.0))
        minutes += config.tick_minutes
        total_minutes += config.tick_minutes
        if arrivals:
            users = rng.integers(0, world.n_users, size=arrivals)
            batch = world.search(world.draw_searches(users, rng, state_for=theta), theta, rng)
            reports = world.client_reports(batch, theta, client.estimator, TREATMENT)
            keep = reports.n > 0
            round_.fold(MessageBatch.of_vectors(reports.updates[keep], reports.n[keep]))
            n_open += int(keep.sum())
            reports_used += int(keep.sum())
            sign = np.sign(round_.running_update())
            stable = stable + 1 if last_sign is not None and np.array_equal(sign, last_sign) else 0
            last_sign = sign
        if policy.should_close(OpenIteration(minutes, n_open, stable)):
            if config.norm_bound:
                bounds.append(float(round_.aggregate.bound))
            round_.close()
            minutes, n_open, stable, last_sign = 0.0, 0, 0, None
            loss = _validation_loss(world, val_users, val_seed, round_.params)
            if loss <= target:
                reached = True
                break
    return {
        "policy": policy.name,
        "reached": reached,
        "reports": reports_used,
        "iterations": round_.version,
        "hours": total_minutes / 60.0,
        "initial_loss": initial,
        "target_loss": target,
        "final_loss": loss,
        **({"norm_bound_per_iteration": bounds} if config.norm_bound else {}),
    }


def compare_policies(
    config: StreamConfig | None = None,
    policies: list[IterationPolicy] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Run every policy on the same stream (same seed) and report what each needed."""
    config = config or StreamConfig()
    policies = policies or [FixedTime(30.0), MinUpdates(500), SignStable(3, 100)]
    return [run_policy(p, config, seed) for p in policies]
