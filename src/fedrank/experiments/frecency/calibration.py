"""Fit the typing model to the paper's control branch (Mozilla paper, Sec. 6.3, Figure 5).

The study's control branch ran Firefox unchanged: its users typed 4.26239 characters on
average and selected the suggestion at rank 0.35350 (0-based). The simulated users'
:class:`~fedrank.simulation.frecency.urlbar.TypingModel` -- how many characters they type before
looking at the suggestions (``blind_chars``) and how far down they read
(``scan_continue``) -- is chosen so that the *control branch of the simulated study* shows
the same two numbers, and is then held fixed for every branch: whatever the treatment
branch gains comes from the ranking alone.

:func:`control_metrics` replays the study's timeline (the optimization phase's iterations,
then the evaluation phase) with every user in the control branch and returns the
evaluation phase's means; :func:`calibrate_typing` minimizes the squared relative errors
to the targets with Nelder-Mead on common random numbers (the same world and draws for
every candidate), starting from a coarse grid's best point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize

from fedrank.errors import ConfigError
from fedrank.simulation.frecency.urlbar import TypingModel

__all__ = ["PAPER_CONTROL", "CalibrationResult", "calibrate_typing", "control_metrics"]

#: The paper's control branch (Figure 5): mean characters typed, mean rank selected.
PAPER_CONTROL: tuple[float, float] = (4.26239, 0.35350)


def control_metrics(config: Any, typing: TypingModel) -> tuple[float, float]:
    """``(chars_typed_mean, selected_rank_mean)`` of the evaluation phase of ``config``'s
    study with every user in the control branch and the given typing model (no learning:
    the control branch's model never changes)."""
    from fedrank.experiments.frecency.study import (
        StudyResult,
        build_world,
        evaluate_phase,
        iteration_searches,
        study_streams,
    )

    c = replace(config, blind_chars=typing.blind_chars, scan_continue=typing.scan_continue)
    c = c.resolved()
    world_seed, train_seed, eval_seed, _ = study_streams(c.seed)
    world = build_world(c, np.random.default_rng(world_seed))
    world.branch[:] = 1  # every user in control
    rng = np.random.default_rng(train_seed)
    theta = world.scorer.defaults()
    for _ in range(c.iterations):
        searches = iteration_searches(
            world, c, c.searches_per_iteration, c.days_per_iteration, rng, theta
        )
        batch = world.search(searches, theta, rng)
        world.record(batch)
        world.advance(c.days_per_iteration)
    result = StudyResult(config=c)
    evaluate_phase(world, theta, c, eval_seed, result, compare=False)
    ev = result.eval["control"]
    return float(ev["chars_typed_mean"]), float(ev["selected_rank_mean"])


@dataclass(frozen=True)
class CalibrationResult:
    """The fitted typing model and how close it came."""

    typing: TypingModel
    chars_typed: float
    selected_rank: float
    target: tuple[float, float]
    evaluations: list[dict[str, float]]

    def to_json(self) -> dict[str, Any]:
        return {
            "blind_chars": self.typing.blind_chars,
            "scan_continue": self.typing.scan_continue,
            "chars_typed_mean": self.chars_typed,
            "selected_rank_mean": self.selected_rank,
            "paper_control": {"chars_typed_mean": self.target[0],
                              "selected_rank_mean": self.target[1]},
            "evaluations": self.evaluations,
        }  # fmt: skip


def calibrate_typing(
    config: Any,
    target: tuple[float, float] = PAPER_CONTROL,
    *,
    grid_blind: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0),
    grid_scan: tuple[float, ...] = (0.2, 0.4, 0.6),
    max_evaluations: int = 40,
    metrics: Callable[[Any, TypingModel], tuple[float, float]] = control_metrics,
    progress: Callable[[int, int], None] | None = None,
) -> CalibrationResult:
    """The typing model whose control branch matches ``target`` (see module docstring).

    ``metrics(config, typing)`` measures a candidate (default: :func:`control_metrics`);
    ``max_evaluations`` bounds the Nelder-Mead phase."""
    if target[0] <= 0 or target[1] <= 0:
        raise ConfigError(f"target characters and rank must be > 0, got {target}")
    log: list[dict[str, float]] = []

    def loss_of(blind: float, scan: float) -> float:
        typing = TypingModel(max(blind, 0.0), float(np.clip(scan, 0.0, 1.0)))
        chars, rank = metrics(config, typing)
        err = ((chars - target[0]) / target[0]) ** 2 + ((rank - target[1]) / target[1]) ** 2
        log.append(
            {
                "blind_chars": typing.blind_chars,
                "scan_continue": typing.scan_continue,
                "chars_typed_mean": chars,
                "selected_rank_mean": rank,
                "error": err,
            }
        )
        if progress is not None:
            progress(len(log), len(grid_blind) * len(grid_scan) + max_evaluations)
        return err

    grid = [(b, s, loss_of(b, s)) for b in grid_blind for s in grid_scan]
    b0, s0, _ = min(grid, key=lambda x: x[2])
    minimize(
        lambda x: loss_of(float(x[0]), float(x[1])),
        x0=np.array([b0, s0]),
        method="Nelder-Mead",
        options={"maxfev": max_evaluations, "xatol": 0.02, "fatol": 1e-5,
                 "initial_simplex": np.array([[b0, s0], [b0 + 0.5, s0], [b0, s0 + 0.1]])},
    )  # fmt: skip
    best = min(log, key=lambda row: row["error"])
    return CalibrationResult(
        typing=TypingModel(best["blind_chars"], best["scan_continue"]),
        chars_typed=best["chars_typed_mean"],
        selected_rank=best["selected_rank_mean"],
        target=target,
        evaluations=log,
    )
