"""Central training of the FedPS models: the server holds every user's log (Table 3's
"PEPS" and K-NRM rows, and the GroupUser and CoverQuery baselines on the server's logs;
FedPS Sec. 4-5).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from fedrank.estimators.local_sgd import UserWorkspace, train_step
from fedrank.experiments.fedps.clients import new_model
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.experiments.fedps.training import (
    Evaluator,
    Progress,
    checkpoint_steps,
    model_arguments,
    report_progress,
    stream_seeds,
)
from fedrank.models.peps.ranker import PEPSRanker
from fedrank.retrieval.candidates import UserData


def _new_model(
    data: FedPSData, personalized: bool, seed: int, settings: FedPSSettings
) -> PEPSRanker:
    return new_model(data.word_vectors, **model_arguments(data, personalized, seed, settings))


def train_central(
    data: FedPSData,
    users: Sequence[UserData],
    settings: FedPSSettings,
    personalized: bool,
    progress: Progress | None = None,
) -> tuple[Evaluator, int]:
    """Central training: the server holds every user's samples and personal embeddings;
    each epoch runs every user's minibatches in one global shuffled order with one Adam
    for the shared parameters (each user's personal embeddings have their own), evaluated
    ``evals_per_round`` times per epoch with early stopping. ``settings.upload ==
    "frozen"`` keeps the global word embeddings at their word2vec values (the model of
    upload case 3, Sec. 3.3.2). Returns the evaluator and the number of minibatch steps
    run."""
    seeds = stream_seeds(settings.seed)
    model = _new_model(data, personalized, seeds["model"], settings)
    model.set_global_embedding_trainable(settings.upload != "frozen")
    workspaces = [
        UserWorkspace(
            u,
            data.doc_tokens,
            data.word_vectors,
            seed=seeds["clients"] + i,
            personalized=personalized,
            learning_rate=settings.learning_rate,
        )
        for i, u in enumerate(users)
    ]
    rng = np.random.default_rng(seeds["schedule"])

    def evaluate(split: str) -> np.ndarray:
        return np.concatenate([w.evaluate(model, split) for w in workspaces])

    def epochs(n: int, evaluator: Evaluator, stage: str, steps: int) -> int:
        """Up to ``n`` epochs with one fresh Adam for the shared parameters, after
        ``steps`` steps; returns the steps run in all."""
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate, fused=True)
        for epoch in range(1, n + 1):
            start = time.perf_counter()
            jobs = [(w, b) for w in workspaces for b in w.batches(settings.batch_size)]
            checkpoints = checkpoint_steps(len(jobs), settings.evals_per_round)
            losses: list[float] = []
            for done, j in enumerate(rng.permutation(len(jobs)), start=1):
                w, batch = jobs[j]
                losses.append(train_step(model, batch, w.personal, [optimizer, *w.optimizers]))
                steps += 1
                if done % 200 == 0 or done == len(jobs):
                    report_progress(progress, f"{stage}{epoch}/{n}", done, len(jobs))
                if done in checkpoints:
                    position = epoch - 1 + done / len(jobs)
                    loss = float(np.mean(losses))
                    losses = []
                    if evaluator(position, steps, loss, time.perf_counter() - start):
                        return steps
        return steps

    steps = 0
    warmup: Evaluator | None = None
    if personalized and settings.warmup:
        model.set_features_only(True)
        warmup = Evaluator(evaluate, settings.patience, model.get_flat_parameters)
        steps = epochs(settings.warmup, warmup, "warm-up epoch ", steps)
        model.set_features_only(False)
        assert warmup.best_parameters is not None
        model.set_flat_parameters(warmup.best_parameters)
    evaluator = Evaluator(evaluate, settings.patience)
    evaluator.warmup = warmup
    steps = epochs(settings.rounds, evaluator, "epoch ", steps)
    return evaluator, steps
