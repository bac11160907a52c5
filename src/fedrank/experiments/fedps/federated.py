"""Federated training of the FedPS model: FedPSFlat and FedPSProxy (FedPS Algorithm 1,
Sec. 3.4). The rounds loop samples each step's clients, collects their updates, drops the
late ones (FedPSFlat) or has their proxies train for them (FedPSProxy), and has the server
(:class:`~fedrank.experiments.fedps.server.FedPSServer`, which closes each step as a
:class:`~fedrank.federation.round.Round`) fold and apply them; the clients' response
times and the proxy topology are the run's :class:`Federation`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrank.aggregators.hierarchy import Topology, hierarchical_aggregate
from fedrank.core.message import Message, MessageBatch
from fedrank.estimators.local_sgd import LocalTraining, UploadPolicy
from fedrank.experiments.fedps.client_sampling import (
    flat_schedule,
    poisson_schedule,
    proxy_schedule,
)
from fedrank.experiments.fedps.clients import ClientPool, DaskClients, LocalClients, new_model
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.server import FedPSServer
from fedrank.experiments.fedps.settings import FedPSSettings, dp_steps
from fedrank.experiments.fedps.stragglers import ResponseTimes
from fedrank.experiments.fedps.training import (
    Evaluator,
    Progress,
    checkpoint_steps,
    model_arguments,
    report_progress,
    stream_seeds,
)
from fedrank.federation.privacy import run_record
from fedrank.retrieval.candidates import UserData
from fedrank.simulation.attacks import FedPSAttacker

if TYPE_CHECKING:
    from distributed import Client


#: ``observer(client_index, message)``: sees every message a client sends (tests).
MessageObserver = Callable[[int, Message], None]


@dataclass(frozen=True)
class Federation:
    """What a federated run needs beyond the settings: response times and topology."""

    response: ResponseTimes
    topology: Topology


def make_federation(users: Sequence[UserData], settings: FedPSSettings) -> Federation:
    """The clients' response-time model (``T_max`` calibrated to ``straggler_ratio`` of
    responses unless given) and the proxy topology, both from the training seed."""
    seeds = stream_seeds(settings.seed)
    n_train = np.array([u.train.n_queries for u in users], dtype=np.float64)
    response = ResponseTimes.build(
        n_train,
        np.random.default_rng(seeds["stragglers"]),
        ratio=settings.straggler_ratio,
        t_max=settings.t_max,
        epochs=settings.local_epochs,
    )
    topology = Topology.build(
        len(users),
        np.random.default_rng(seeds["topology"]),
        clients_per_proxy=settings.clients_per_proxy,
        proxies_per_group=settings.proxies_per_group,
    )
    return Federation(response, topology)


@dataclass
class FederatedRun:
    """What :func:`train_federated` returns besides the evaluator."""

    steps: int
    schedules: list[list[np.ndarray]]
    late: list[list[np.ndarray]]
    received: np.ndarray
    updates_received: int = 0
    updates_late: int = 0
    weight_total: float = 0.0
    weight_late: float = 0.0
    #: Distributed DP: the run's ``privacy`` record (the plan, each step's contributors).
    distributed_dp: dict[str, Any] | None = None


def train_federated(
    data: FedPSData,
    users: Sequence[UserData],
    settings: FedPSSettings,
    federation: Federation,
    upload: UploadPolicy,
    progress: Progress | None = None,
    observer: MessageObserver | None = None,
    dask: Client | None = None,
    attacker: FedPSAttacker | None = None,
) -> tuple[Evaluator, FederatedRun]:
    """FedPSFlat or FedPSProxy training (Algorithm 1; Sec. 3.4), evaluated
    ``evals_per_round`` times per round with early stopping. The clients run in this
    process, or with ``dask`` in blocks on the cluster's workers (same result bit for bit,
    :mod:`fedrank.experiments.fedps.clients`). ``attacker``: some users poison their
    deltas (:mod:`fedrank.simulation.attacks`)."""
    seeds = stream_seeds(settings.seed)
    model_kwargs = model_arguments(data, True, seeds["model"], settings)
    initial = new_model(data.word_vectors, **model_kwargs).get_flat_parameters()
    server = FedPSServer(
        initial,
        settings.server_learning_rate,
        settings.privacy(),
        seed=seeds["dp"],
        clients=settings.clients_per_step,
        **dp_steps(settings, len(users)),
    )
    training = LocalTraining(
        settings.local_epochs,
        settings.batch_size,
        settings.learning_rate,
        upload,
        report_loss=settings.client_metrics,
    )
    where = LocalClients if dask is None else partial(DaskClients, dask)
    clients: ClientPool = where(
        users, data.doc_tokens, data.word_vectors, training, model_kwargs, seeds["clients"]
    )
    rng = np.random.default_rng(seeds["schedule"])
    late_rng = np.random.default_rng(seeds["late"])
    proxy = settings.mode == "proxy"
    per_proxy = min(settings.clients_per_proxy_step, settings.clients_per_step)

    def evaluate(split: str) -> np.ndarray:
        return clients.evaluate(server.broadcast(), split)

    def rounds(n: int, evaluator: Evaluator, stage: str) -> bool:
        """Up to ``n`` rounds; True when ``evaluator`` stopped them early."""
        n_train = federation.response.n_train
        for r in range(1, n + 1):
            start = time.perf_counter()
            if proxy:
                schedule = proxy_schedule(
                    federation.topology, settings.clients_per_step, rng, per_proxy=per_proxy
                )
            elif settings.sampling == "poisson":
                schedule = poisson_schedule(clients.n_clients, settings.clients_per_step, rng)
            else:
                schedule = flat_schedule(clients.n_clients, settings.clients_per_step, rng)
            checkpoints = checkpoint_steps(len(schedule), settings.evals_per_round)
            run.schedules.append(schedule)
            run.late.append([])
            losses: list[float] = []
            for done, sampled in enumerate(schedule, start=1):
                late = federation.response.late(sampled, late_rng)
                run.late[-1].append(late)
                parameters = server.broadcast()
                messages = clients.local_updates(parameters, sampled.tolist(), server.version)
                if attacker is not None:
                    messages = attacker.apply(run.steps, sampled, messages, parameters)
                for c, message in zip(sampled.tolist(), messages, strict=True):
                    if observer is not None:
                        observer(c, message)
                    if "train_loss" in message.metrics:
                        losses.append(message.metrics["train_loss"])
                batch = MessageBatch.of_vectors(
                    np.stack([m.update for m in messages]), np.array([m.n for m in messages])
                )
                if proxy:  # a late client offloads its training to its proxy: none is lost
                    run.received[sampled] = True
                    merged = hierarchical_aggregate(
                        server.strategy.aggregator,
                        federation.topology,
                        sampled,
                        batch,
                        empty=server.empty(),
                        fold=server.strategy.accumulate,
                    )
                    server.merge(merged.state)
                else:  # an update later than T_max is dropped
                    on_time = np.flatnonzero(~late)
                    run.received[sampled[on_time]] = True
                    server.fold(batch.take(on_time))
                run.updates_late += int(late.sum())
                run.weight_total += float(n_train[sampled].sum())
                run.weight_late += float(n_train[sampled[late]].sum())
                run.updates_received += server.round.aggregate.count
                server.apply()
                run.steps += 1
                report_progress(progress, f"{stage}{r}/{n}", done, len(schedule))
                if done in checkpoints:
                    loss = float(np.nanmean(losses)) if losses else float("nan")
                    losses = []
                    position = r - 1 + done / len(schedule)
                    if evaluator(position, run.steps, loss, time.perf_counter() - start):
                        return True
        return False

    run = FederatedRun(0, [], [], np.zeros(clients.n_clients, dtype=bool))
    warmup: Evaluator | None = None
    if settings.warmup:
        # the click-feature warm-up (no DP: settings refuse it), FedAvg like the rest;
        # the full training starts from its best model
        clients.set_features_only(True)
        warmup = Evaluator(evaluate, settings.patience, server.broadcast)
        rounds(settings.warmup, warmup, "warm-up round ")
        clients.set_features_only(False)
        assert warmup.best_parameters is not None
        server.restart_from(warmup.best_parameters)
    evaluator = Evaluator(evaluate, settings.patience)
    evaluator.warmup = warmup
    rounds(settings.rounds, evaluator, "round ")
    return evaluator, _recorded(run, server, settings)


def _recorded(run: FederatedRun, server: FedPSServer, settings: FedPSSettings) -> FederatedRun:
    """``run`` with its distributed-DP record (planned rounds: an early stop releases less
    than the guarantee covers)."""
    privacy = settings.privacy()
    if privacy is not None and privacy.mode == "distributed":
        run.distributed_dp = run_record(server.strategy, privacy, settings.rounds, system="fedps")
    return run
