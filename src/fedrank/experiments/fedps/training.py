"""What central and federated FedPS training share (FedPS Sec. 4-5): the independent seeds
of a run's random streams, the arguments of its model, progress reports, and evaluation
on the validation lists with early stopping (the test metrics at the best validation
MAP are the ones reported).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.settings import FedPSSettings

#: The reported test metrics, in the column order of the per-query tables.
METRICS: tuple[str, ...] = ("MAP", "MRR", "P@1")

#: ``progress(stage, done, total)``: called as work advances (the CLI draws a bar).
Progress = Callable[[str, int, int], None]


def summarize(per_query: np.ndarray) -> dict[str, float]:
    """Mean AP / RR / P@1 over queries with a relevant candidate."""
    counted = np.isfinite(per_query[:, 0])
    means = per_query[counted].mean(axis=0) if counted.any() else np.full(3, np.nan)
    return {name: float(v) for name, v in zip(METRICS, means, strict=True)}


class Evaluator:
    """Validation MAP at every evaluation; test metrics whenever validation improves; the
    signal to stop ``patience`` evaluations after the best."""

    def __init__(
        self,
        evaluate: Callable[[str], np.ndarray],
        patience: int,
        snapshot: Callable[[], np.ndarray] | None = None,
    ) -> None:
        self.evaluate = evaluate
        self.patience = patience
        self.snapshot = snapshot
        self.best_parameters: np.ndarray | None = None
        self.best_valid = -np.inf
        self.best_round = 0.0
        self.best_steps = 0
        self.best_test: np.ndarray | None = None
        self.since_best = 0
        self.curve: list[dict[str, float]] = []
        #: the click-feature warm-up's own evaluator, when the run had one
        self.warmup: Evaluator | None = None

    def __call__(self, position: float, steps: int, loss: float, seconds: float) -> bool:
        """Evaluate after ``position`` rounds (``steps`` steps); True means stop."""
        valid = summarize(self.evaluate("valid"))
        point = {
            "round": position,
            "steps": steps,
            "train_loss": loss,
            "seconds": seconds,
            "valid_MAP": valid["MAP"],
        }
        score = valid["MAP"] if np.isfinite(valid["MAP"]) else -np.inf
        if score > self.best_valid or self.best_test is None:
            self.best_valid = score
            self.best_round = position
            self.best_steps = steps
            self.best_test = self.evaluate("test")
            self.since_best = 0
            if self.snapshot is not None:
                self.best_parameters = self.snapshot()
            point.update({f"test_{k}": v for k, v in summarize(self.best_test).items()})
        else:
            self.since_best += 1
        self.curve.append(point)
        return self.since_best >= self.patience


def checkpoint_steps(n_steps: int, evals: int) -> set[int]:
    """The step counts (1-based, within one round) after which to evaluate."""
    return {max(1, round(n_steps * k / evals)) for k in range(1, evals + 1)} if n_steps else set()


def model_arguments(
    data: FedPSData, personalized: bool, seed: int, settings: FedPSSettings
) -> dict[str, Any]:
    """:func:`~fedrank.experiments.fedps.clients.new_model`'s keyword arguments."""
    return {
        "vocab_size": data.vocab_size,
        "personalized": personalized,
        "seed": seed,
        "model": settings.model,
        "text_dropout": settings.text_dropout,
    }


def stream_seeds(seed: int) -> dict[str, int]:
    """The independent seeds of a run's random streams (the model, the clients, the
    schedule, ...), by name, spawned from the training seed ``seed``."""
    names = (
        "model", "clients", "schedule", "stragglers", "late", "topology", "covers", "groups", "lda",
        "dp",
    )  # fmt: skip
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {n: int(c.generate_state(1)[0]) for n, c in zip(names, children, strict=True)}


def report_progress(progress: Progress | None, stage: str, done: int, total: int) -> None:
    """Call ``progress`` if there is one."""
    if progress is not None:
        progress(stage, done, total)
