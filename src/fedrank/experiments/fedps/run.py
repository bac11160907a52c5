"""FedPS experiments: every row of Tables 2-3 as one ``mode`` (FedPS Sec. 4-5).

Rankers without learning from text (:mod:`fedrank.baselines.list_rankers`), reported beside
every model:

* ``original``: the search engine's BM25 order (Table 3, "Original Rank"); ``ascending``:
  its reverse; ``popularity``: all users' background clicks; ``user_prior``: the user's
  earlier clicks on the document; ``pclick``: P-Click (Dou et al. 2007), the user's earlier
  clicks on the document for the same query; ``rule``: clicked before, then BM25 = 0, then
  popularity. Ties always fall back to the BM25 order.
* ``gbdt``: LightGBM lambdarank on the hand features only, tuned on validation.

Trained models:

* ``knrm``: the K-NRM baseline, no personalization, trained centrally.
* ``central``: the personalized PEPS-style model trained centrally on all users' logs (the
  server holds every log: Table 3, "PEPS").
* ``flat``: FedPSFlat, Algorithm 1: rounds of ``ceil(N/K)`` steps of ``K`` clients, each
  training ``E`` local epochs; the server adds the ``n_j``-weighted mean of the updates
  (``eta_s = 1``). A client's response time is drawn every step
  (:class:`fedrank.experiments.fedps.stragglers.ResponseTimes`); updates later than ``T_max``
  (10% of responses by default) are dropped (the clients still train their personal
  embeddings locally). Each search request carries ``m`` cover queries.
* ``proxy``: FedPSProxy (Sec. 3.4): clients sampled as ``K / 10`` proxies x 10 clients; each
  proxy merges its clients' updates with the same aggregator, the group servers merge their
  proxies' states, the central server those
  (:func:`fedrank.aggregators.hierarchy.hierarchical_aggregate`); late clients offload their
  training to their proxy, so no update is lost.
* ``coverquery``: CoverQuery [1, 4]: the server logs each user's queries with ``m`` cover
  queries and trains the personalized model centrally on that log.
* ``groupuser``: GroupUser [52]: users share one identity per group of ``group_size``; the
  server trains the personalized model centrally with one "user" per group.

Every mode ranks exactly the same candidate lists (:class:`fedrank.retrieval.candidates.
CandidateLists`, keyed by event); GroupUser and CoverQuery only compute their features from
the server's logs. Trained modes are evaluated on the validation lists ``evals_per_round``
times per round (epoch, for central training: every quarter by default) and stop
``patience`` evaluations after the best one; the reported ``MAP``, ``MRR`` and ``P@1`` are
the test metrics at the evaluation with the best validation MAP, and ``curve`` holds every
evaluation. ``kl`` holds the KL divergence between each user's real profile and the profile
the server can attribute to them (:mod:`fedrank.privacy.kl_settings`, Sec. 4.1) under every
modelling choice; ``kl_divergence`` is the paper's setting (the training server separate
from the search engine). :func:`run_seeds` repeats a mode over training seeds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from scipy import sparse

from fedrank.aggregators.hierarchy import Topology, hierarchical_aggregate
from fedrank.baselines.list_rankers import GBDTRanker, rule_scores
from fedrank.core.message import Message, MessageBatch
from fedrank.core.provenance import code_version
from fedrank.data.aol import BACKGROUND, TRAIN, AolCorpus, UserLog
from fedrank.errors import ConfigError
from fedrank.estimators.local_sgd import (
    LocalTraining,
    UploadPolicy,
    UserWorkspace,
    train_step,
)
from fedrank.experiments.executors import side_process
from fedrank.experiments.fedps.baselines import (
    cover_queries_for,
    cover_query_logs,
    group_user_logs,
)
from fedrank.experiments.fedps.client_sampling import (
    flat_schedule,
    poisson_schedule,
    proxy_schedule,
)
from fedrank.experiments.fedps.clients import (
    ClientPool,
    DaskClients,
    LocalClients,
    new_model,
)
from fedrank.experiments.fedps.communication import flat_round_time, proxy_round_time
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.server import FedPSServer
from fedrank.experiments.fedps.settings import (
    FEDERATED_MODES,
    RULE_MODES,
    FedPSSettings,
    dp_block,
    dp_steps,
)
from fedrank.experiments.fedps.stragglers import ResponseTimes
from fedrank.federation.privacy import run_record
from fedrank.metrics.relevance import per_query_table
from fedrank.models.peps.ranker import PEPSRanker
from fedrank.privacy import kl_settings
from fedrank.privacy import profile_kl as kl
from fedrank.privacy.cover_queries import CoverQueryGenerator
from fedrank.privacy.report import fedps_privacy, run_privacy
from fedrank.retrieval.candidates import UserData, build_users
from fedrank.simulation.attacks import Attack, FedPSAttacker

if TYPE_CHECKING:
    from distributed import Client

METRICS: tuple[str, ...] = ("MAP", "MRR", "P@1")


#: ``progress(stage, done, total)``: called as work advances (the CLI draws a bar).
Progress = Callable[[str, int, int], None]
#: ``observer(client_index, message)``: sees every message a client sends (tests).
MessageObserver = Callable[[int, Message], None]


@dataclass
class FedPSResult:
    """The outcome of :func:`run_fedps` (``to_json`` is what ``--json`` writes).

    ``per_query`` holds the test AP / RR / P@1 of every test query at the reported
    evaluation and ``event_ids`` the query events they belong to (equal across modes, in
    any order), for paired tests between modes."""

    settings: FedPSSettings
    metrics: dict[str, float]
    kl_divergence: float
    best_round: float
    steps: int
    steps_to_best: int
    wall_seconds: float
    kl: dict[str, float] = field(default_factory=dict)
    curve: list[dict[str, float]] = field(default_factory=list)
    communication: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    per_query: np.ndarray | None = None
    event_ids: np.ndarray | None = None
    attack: dict[str, Any] = field(default_factory=dict)
    #: Distributed DP: the guarantee as the run's server recorded it (plan, contributors).
    distributed_dp: dict[str, Any] | None = None
    #: The click-feature warm-up (:func:`warmup_record`); empty when the run had none.
    warmup: dict[str, Any] = field(default_factory=dict)

    def privacy(self) -> dict[str, Any]:
        """The run's ``privacy`` object (:func:`fedrank.privacy.report.run_privacy`): each
        user's central- or distributed-DP guarantee over the training, or no mechanism (the
        KL measure is a disclosure figure, not a guarantee)."""
        if self.distributed_dp is not None:
            return self.distributed_dp
        block = dp_block(self.settings, self.data.get("users"))
        rate = 1.0 if block is None else block["sampling_rate"]
        return run_privacy(fedps_privacy(self.settings.mode, block), rate)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.metrics,
            "kl_divergence": self.kl_divergence,
            "kl": self.kl,
            "best_round": self.best_round,
            "steps": self.steps,
            "steps_to_best": self.steps_to_best,
            "wall_seconds": self.wall_seconds,
            "settings": asdict(self.settings),
            "curve": self.curve,
            "warmup": self.warmup,
            "communication": self.communication,
            "details": self.details,
            "data": self.data,
            "privacy": self.privacy(),
            **({"attack": self.attack} if self.attack else {}),
            "code": code_version(),  # the fedrank source that ran it
        }


# --------------------------------------------------------------------------- helpers


def summarize(per_query: np.ndarray) -> dict[str, float]:
    """Mean AP / RR / P@1 over queries with a relevant candidate."""
    counted = np.isfinite(per_query[:, 0])
    means = per_query[counted].mean(axis=0) if counted.any() else np.full(3, np.nan)
    return {name: float(v) for name, v in zip(METRICS, means, strict=True)}


def _test_event_ids(users: Sequence[UserData]) -> np.ndarray:
    return np.concatenate([u.test.event_ids for u in users] or [np.zeros(0, np.int64)])


def _rule_per_query(users: Sequence[UserData], rule: str) -> np.ndarray:
    rows = [
        per_query_table(rule_scores(u.test, rule), u.test.labels, u.test.mask)
        for u in users
        if u.test.n_queries
    ]
    return np.concatenate(rows) if rows else np.zeros((0, 3))


class _Evaluator:
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
        self.warmup: _Evaluator | None = None

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


def _checkpoints(n_steps: int, evals: int) -> set[int]:
    """The step counts (1-based, within one round) after which to evaluate."""
    return {max(1, round(n_steps * k / evals)) for k in range(1, evals + 1)} if n_steps else set()


def _model_kwargs(
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


def _new_model(
    data: FedPSData, personalized: bool, seed: int, settings: FedPSSettings
) -> PEPSRanker:
    return new_model(data.word_vectors, **_model_kwargs(data, personalized, seed, settings))


def _seeds(seed: int) -> dict[str, int]:
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


# --------------------------------------------------------------------------- training


def train_central(
    data: FedPSData,
    users: Sequence[UserData],
    settings: FedPSSettings,
    personalized: bool,
    progress: Progress | None = None,
) -> tuple[_Evaluator, int]:
    """Central training: the server holds every user's samples and personal embeddings;
    each epoch runs every user's minibatches in one global shuffled order with one Adam
    for the shared parameters (each user's personal embeddings have their own), evaluated
    ``evals_per_round`` times per epoch with early stopping. ``settings.upload ==
    "frozen"`` keeps the global word embeddings at their word2vec values (the model of
    upload case 3, Sec. 3.3.2). Returns the evaluator and the number of minibatch steps
    run."""
    seeds = _seeds(settings.seed)
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

    def epochs(n: int, evaluator: _Evaluator, stage: str, steps: int) -> int:
        """Up to ``n`` epochs with one fresh Adam for the shared parameters, after
        ``steps`` steps; returns the steps run in all."""
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate, fused=True)
        for epoch in range(1, n + 1):
            start = time.perf_counter()
            jobs = [(w, b) for w in workspaces for b in w.batches(settings.batch_size)]
            checkpoints = _checkpoints(len(jobs), settings.evals_per_round)
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
    warmup: _Evaluator | None = None
    if personalized and settings.warmup:
        model.set_features_only(True)
        warmup = _Evaluator(evaluate, settings.patience, model.get_flat_parameters)
        steps = epochs(settings.warmup, warmup, "warm-up epoch ", steps)
        model.set_features_only(False)
        assert warmup.best_parameters is not None
        model.set_flat_parameters(warmup.best_parameters)
    evaluator = _Evaluator(evaluate, settings.patience)
    evaluator.warmup = warmup
    steps = epochs(settings.rounds, evaluator, "epoch ", steps)
    return evaluator, steps


@dataclass(frozen=True)
class Federation:
    """What a federated run needs beyond the settings: response times and topology."""

    response: ResponseTimes
    topology: Topology


def make_federation(users: Sequence[UserData], settings: FedPSSettings) -> Federation:
    """The clients' response-time model (``T_max`` calibrated to ``straggler_ratio`` of
    responses unless given) and the proxy topology, both from the training seed."""
    seeds = _seeds(settings.seed)
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
) -> tuple[_Evaluator, FederatedRun]:
    """FedPSFlat or FedPSProxy training (Algorithm 1; Sec. 3.4), evaluated
    ``evals_per_round`` times per round with early stopping. The clients run in this
    process, or with ``dask`` in blocks on the cluster's workers (same result bit for bit,
    :mod:`fedrank.experiments.fedps.clients`). ``attacker``: some users poison their
    deltas (:mod:`fedrank.simulation.attacks`)."""
    seeds = _seeds(settings.seed)
    model_kwargs = _model_kwargs(data, True, seeds["model"], settings)
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

    def rounds(n: int, evaluator: _Evaluator, stage: str) -> bool:
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
            checkpoints = _checkpoints(len(schedule), settings.evals_per_round)
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
    warmup: _Evaluator | None = None
    if settings.warmup:
        # the click-feature warm-up (no DP: settings refuse it), FedAvg like the rest;
        # the full training starts from its best model
        clients.set_features_only(True)
        warmup = _Evaluator(evaluate, settings.patience, server.broadcast)
        rounds(settings.warmup, warmup, "warm-up round ")
        clients.set_features_only(False)
        assert warmup.best_parameters is not None
        server.restart_from(warmup.best_parameters)
    evaluator = _Evaluator(evaluate, settings.patience)
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


# --------------------------------------------------------------------------- privacy


def _word_counts(
    queries: Sequence[np.ndarray], texts: Sequence[np.ndarray], vocab_size: int
) -> sparse.csr_matrix:
    """``(N, V)`` counts of the words of each user's ``queries[u]`` and ``texts[u]``."""
    n = len(queries)
    owner_q = np.repeat(np.arange(n), [q.shape[0] for q in queries])
    owner_t = np.repeat(np.arange(n), [t.shape[0] for t in texts])
    return (
        kl.term_counts(np.concatenate(queries), vocab_size, owner=owner_q, n_owners=n)
        + kl.term_counts(np.concatenate(texts), vocab_size, owner=owner_t, n_owners=n)
    ).tocsr()


def _profile_matrix(users: Sequence[UserData], attr: str, vocab_size: int) -> sparse.csr_matrix:
    ids = [getattr(u, attr) for u in users]
    row = np.concatenate([np.full(len(c), i) for i, c in enumerate(ids)])
    col = np.concatenate([c[:, 0] for c in ids])
    val = np.concatenate([c[:, 1] for c in ids]).astype(np.float64)
    return sparse.csr_matrix((val, (row, col)), shape=(len(users), vocab_size))


def _cover_counts(
    data: FedPSData, logs: Sequence[UserLog], covers: Sequence[np.ndarray]
) -> sparse.csr_matrix:
    """``(N, V)`` counts of the covers of each user's background and training queries."""
    seen = [c[np.isin(log.split, (BACKGROUND, TRAIN))] for log, c in zip(logs, covers, strict=True)]
    owner = np.repeat(np.arange(len(seen)), [c.shape[0] for c in seen])
    width = max(c.shape[2] for c in seen)
    padded = np.concatenate([np.pad(c, ((0, 0), (0, 0), (0, width - c.shape[2]))) for c in seen])
    return kl.term_counts(padded, data.vocab_size, owner=owner, n_owners=len(seen))


def profile_counts(
    data: FedPSData,
    received: np.ndarray | None = None,
    covers: Sequence[np.ndarray] | None = None,
) -> kl_settings.ProfileCounts:
    """The per-user term counts of the KL measure (Sec. 4.1): real queries and clicks, cover
    queries, and the words of each client's training samples, with and without the
    non-clicked candidates (the global-embedding rows its update changes)."""
    users, v, docs = data.users, data.vocab_size, data.doc_tokens
    train_queries = [u.train.query for u in users]
    positives = [docs[u.train.candidates[u.train.mask & (u.train.labels > 0)]] for u in users]
    everything = [docs[u.train.candidates[u.train.mask]] for u in users]
    return kl_settings.ProfileCounts(
        queries=_profile_matrix(users, "query_term_counts", v),
        clicks=_profile_matrix(users, "click_term_counts", v),
        covers=None if covers is None else _cover_counts(data, data.corpus.users, covers),
        train_all=_word_counts(train_queries, everything, v),
        train_positive=_word_counts(train_queries, positives, v),
        received=np.ones(len(users), dtype=bool) if received is None else received,
    )


def fit_cover_generator(
    past_tokens: np.ndarray, vocab_size: int, settings: FedPSSettings
) -> CoverQueryGenerator:
    """LDA over the past documents' texts ``past_tokens`` (Sec. 3.2)."""
    generator = CoverQueryGenerator(n_topics=settings.n_topics)
    return generator.fit(
        past_tokens, vocab_size, np.random.default_rng(_seeds(settings.seed)["lda"])
    )


def _cover_inputs(corpus: AolCorpus) -> tuple[np.ndarray, int, list[UserLog]]:
    """What the cover queries need: the past documents' word ids, the vocabulary size and
    the users' logs (the corpus only: no lists, no word vectors)."""
    return corpus.pool.tokens[corpus.past_docs].astype(np.int64), len(corpus.vocab), corpus.users


def start_covers(
    corpus: AolCorpus, settings: FedPSSettings, stack: contextlib.ExitStack
) -> Future[list[np.ndarray]]:
    """FedPSFlat's cover queries for ``settings``, computed in a process beside the driver
    (:func:`~fedrank.experiments.executors.side_process`, closed with ``stack``; a thread
    would hold the GIL the driver's steps need). On Dask only the KL measure at the end
    needs them, so they are computed while the cluster trains; the CLI starts them as soon
    as the corpus is built, while the driver prepares the lists and word2vec."""
    return stack.enter_context(side_process()).submit(_covers, *_cover_inputs(corpus), settings)


def _covers(
    past_tokens: np.ndarray,
    vocab_size: int,
    logs: Sequence[UserLog],
    settings: FedPSSettings,
) -> list[np.ndarray]:
    """Every user's ``m`` cover queries per query (none when ``cover_queries`` is 0)."""
    if settings.cover_queries > 0:
        return cover_queries_for(
            logs,
            fit_cover_generator(past_tokens, vocab_size, settings),
            settings.cover_queries,
            np.random.default_rng(_seeds(settings.seed)["covers"]),
        )
    return [np.zeros((log.n_events, 0, log.queries.shape[1]), np.int32) for log in logs]


def _kl_method(mode: str) -> str:
    return mode if mode in ("flat", "proxy", "coverquery", "groupuser") else "central"


# --------------------------------------------------------------------------- run


def run_fedps(
    data: FedPSData,
    settings: FedPSSettings,
    *,
    progress: Progress | None = None,
    observer: MessageObserver | None = None,
    dask: Client | None = None,
    attack: Attack | None = None,
    covers: Future[list[np.ndarray]] | None = None,
) -> FedPSResult:
    """Run one mode on prepared data (see the module docstring). Sets torch to one thread
    (the per-batch work is small; competing OpenMP threads only slow it down). With
    ``dask``, a federated run's clients train on the cluster's workers (the same result;
    :mod:`fedrank.experiments.fedps.clients`) and FedPSFlat's cover queries, needed only
    for the KL measure, are computed in a process beside the driver meanwhile
    (:func:`start_covers`; ``covers``: already started for these settings). ``attack``
    (flat and proxy modes): a fixed share of the users is malicious (:class:`~fedrank.
    simulation.attacks.FedPSAttacker`); the result records it under ``attack``."""
    if covers is not None and (settings.mode != "flat" or dask is None):
        raise ConfigError(
            "cover queries started beside the driver are for a FedPSFlat run on Dask; "
            f"mode {settings.mode} {'on Dask' if dask is not None else 'in one process'} "
            "computes its own"
        )
    attacker = None
    if attack is not None and attack.active:
        if settings.mode not in FEDERATED_MODES:
            raise ConfigError(
                f"attacks poison the clients' updates of a federated run (flat, proxy); mode "
                f"{settings.mode} has none"
            )
        attacker = FedPSAttacker(
            attack, len(data.users), settings.seed, settings.server_learning_rate
        )
    with contextlib.ExitStack() as stack:
        result = _run_fedps(data, settings, progress, observer, dask, stack, attacker, covers)
    if attacker is not None:
        result.attack = attacker.log.to_json()
    return result


def _run_fedps(
    data: FedPSData,
    settings: FedPSSettings,
    progress: Progress | None,
    observer: MessageObserver | None,
    dask: Client | None,
    stack: contextlib.ExitStack,
    attacker: FedPSAttacker | None = None,
    covers_started: Future[list[np.ndarray]] | None = None,
) -> FedPSResult:
    start = time.perf_counter()
    torch.set_num_threads(1)
    mode = settings.mode
    seeds = _seeds(settings.seed)
    upload = _upload_policy(data, settings)
    covers: list[np.ndarray] | None = None
    pending: Future[list[np.ndarray]] | None = None
    if mode == "flat" and dask is not None:
        pending = (
            covers_started
            if covers_started is not None
            else start_covers(data.corpus, settings, stack)
        )
    elif mode in ("flat", "coverquery"):
        report_progress(progress, "cover queries (LDA)", 0, 1)
        covers = _covers(*_cover_inputs(data.corpus), settings)
        report_progress(progress, "cover queries (LDA)", 1, 1)
    groups = None
    if mode == "groupuser":
        groups = kl.assign_groups(
            len(data.users), settings.group_size, np.random.default_rng(seeds["groups"])
        )

    users: Sequence[UserData] = data.users
    evaluator: _Evaluator | None = None
    steps = 0
    communication: dict[str, Any] = {}
    details: dict[str, Any] = {}
    received: np.ndarray | None = None
    proxies: np.ndarray | None = None
    distributed_dp: dict[str, Any] | None = None
    if mode in RULE_MODES:
        per_query = _rule_per_query(users, mode)
    elif mode == "gbdt":
        ranker = GBDTRanker(seed=settings.seed).fit(
            [u.train for u in users], [u.valid for u in users]
        )
        per_query = ranker.per_query([u.test for u in users])
        details["gbdt"] = {
            "choice": asdict(ranker.choice_),
            "grid": [asdict(g) for g in ranker.grid_],
        }
    elif mode in FEDERATED_MODES:
        federation = make_federation(users, settings)
        evaluator, fed = train_federated(
            data, users, settings, federation, upload, progress, observer, dask, attacker
        )
        steps = fed.steps
        received = fed.received
        distributed_dp = fed.distributed_dp
        proxies = federation.topology.proxy_of
        communication = _communication(fed, federation, mode)
    else:
        if mode == "coverquery":
            assert covers is not None
            users = _rebuild(data, cover_query_logs(data.corpus.users, covers))
        elif mode == "groupuser":
            assert groups is not None
            users = _rebuild(data, group_user_logs(data.corpus.users, groups))
        evaluator, steps = train_central(data, users, settings, mode != "knrm", progress)
    if evaluator is not None:
        assert evaluator.best_test is not None
        per_query = evaluator.best_test
    if pending is not None:
        covers = pending.result()

    counts = profile_counts(data, received, covers)
    grid = kl_settings.kl_grid(
        _kl_method(mode),
        counts,
        groups=groups,
        proxies=proxies,
        upload_case={"all": 1, "frequent": 2, "frozen": 3}[upload.case],
        uploaded_words=upload.frequent_words,
    )
    return FedPSResult(
        settings=settings,
        metrics=summarize(per_query),
        kl_divergence=grid[kl_settings.PAPER_SETTING.key()],
        kl=grid,
        best_round=evaluator.best_round if evaluator is not None else 0.0,
        steps=steps,
        steps_to_best=evaluator.best_steps if evaluator is not None else 0,
        wall_seconds=time.perf_counter() - start,
        curve=evaluator.curve if evaluator is not None else [],
        communication=communication,
        details=details,
        data=data.summary(),
        per_query=per_query,
        event_ids=_test_event_ids(users),
        distributed_dp=distributed_dp,
        warmup=warmup_record(evaluator),
    )


def warmup_record(evaluator: _Evaluator | None) -> dict[str, Any]:
    """The JSON ``warmup`` object of a run: the click-feature warm-up's best validation
    MAP (features alone), when it came (rounds, steps) and its curve; ``{}`` without one."""
    warm = None if evaluator is None else evaluator.warmup
    if warm is None:
        return {}
    return {
        "best_valid_MAP": warm.best_valid,
        "test": summarize(warm.best_test) if warm.best_test is not None else {},
        "best_round": warm.best_round,
        "steps_to_best": warm.best_steps,
        "curve": warm.curve,
    }


@dataclass
class SeededResults:
    """One mode over several training seeds (:func:`run_seeds`)."""

    results: list[FedPSResult]

    @property
    def seeds(self) -> list[int]:
        return [r.settings.seed for r in self.results]

    def aligned(self) -> tuple[np.ndarray, np.ndarray]:
        """``(event_ids, per_query)``: the sorted test events and ``(S, Q, 3)`` metrics."""
        tables = []
        events = None
        for r in self.results:
            assert r.per_query is not None and r.event_ids is not None
            order = np.argsort(r.event_ids, kind="stable")
            if events is None:
                events = r.event_ids[order]
            elif not np.array_equal(events, r.event_ids[order]):
                raise ConfigError("seeds were evaluated on different test queries")
            tables.append(r.per_query[order])
        assert events is not None
        return events, np.stack(tables)

    def summary(self) -> dict[str, Any]:
        """``MAP_mean``, ``MAP_sd`` (over seeds, ddof 1), ``MAP_per_seed`` and the same for
        MRR and P@1, plus the mean KL divergence and best rounds."""
        out: dict[str, Any] = {"seeds": self.seeds}
        for m in METRICS:
            values = np.array([r.metrics[m] for r in self.results])
            out[f"{m}_mean"] = float(values.mean())
            out[f"{m}_sd"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
            out[f"{m}_per_seed"] = values.tolist()
        out["kl_divergence"] = float(np.mean([r.kl_divergence for r in self.results]))
        out["best_round_per_seed"] = [r.best_round for r in self.results]
        out["privacy"] = self.results[0].privacy()  # the same for every seed
        return out


def run_seeds(
    data: FedPSData,
    settings: FedPSSettings,
    seeds: Sequence[int],
    *,
    progress: Progress | None = None,
    dask: Client | None = None,
    attack: Attack | None = None,
    covers: Future[list[np.ndarray]] | None = None,
) -> SeededResults:
    """:func:`run_fedps` once per training seed (the data stay the same); ``dask``: run the
    federated modes' clients on that cluster; ``attack``: poison each run's updates;
    ``covers``: the first seed's cover queries, already started (:func:`start_covers`)."""
    if not seeds:
        raise ConfigError("give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct, got {list(seeds)}")
    return SeededResults(
        [
            run_fedps(
                data,
                replace(settings, seed=int(s)),
                progress=progress,
                dask=dask,
                attack=attack,
                covers=covers if i == 0 else None,
            )
            for i, s in enumerate(seeds)
        ]
    )


def _upload_policy(data: FedPSData, settings: FedPSSettings) -> UploadPolicy:
    if settings.upload == "frequent":
        return UploadPolicy.most_frequent(
            data.doc_tokens[data.corpus.past_docs], data.vocab_size, settings.frequent_words
        )
    return UploadPolicy(settings.upload)  # type: ignore[arg-type]


def _rebuild(data: FedPSData, logs: Sequence[UserLog]) -> list[UserData]:
    """Samples of server-side logs (cover-query or group logs) on the same candidate lists
    as every other mode: only the features change (they come from the server's logs)."""
    return build_users(logs, data.corpus.pool, data.corpus.vocab, data.lists)


def _communication(fed: FederatedRun, federation: Federation, mode: str) -> dict[str, Any]:
    """Table 6's communication time of the first round, from the actual schedule and the
    responses that came after ``T_max``."""
    first, late = fed.schedules[0], fed.late[0]
    n = len(late)
    steps = first[:n]  # a run stopped early has fewer steps than its schedule
    if mode == "proxy":
        t = proxy_round_time(steps, late, federation.topology)
    else:
        t = flat_round_time(steps, late)
    return {
        "first_round_time": str(t),
        "t_units": t.t_units,
        "d_units": t.d_units,
        "first_round_steps": n,
        "t_max_seconds": federation.response.t_max,
        "updates_received": fed.updates_received,
        "updates_late": fed.updates_late,
        "late_share": fed.updates_late / max(sum(int(s.size) for r in fed.late for s in r), 1),
        "late_weight_share": fed.weight_late / fed.weight_total if fed.weight_total else 0.0,
        "clients_never_received": int((~fed.received).sum()),
        "proxies": federation.topology.n_proxies,
        "group_servers": federation.topology.n_groups,
    }
