"""FedPS experiments: every row of Tables 2-3 as one ``mode`` (FedPS Sec. 4-5).

Modes (``fedrank fedps run --mode ...``):

* ``original``: the first-stage BM25 order of the candidates (Table 3, "Original Rank").
* ``pclick``: P-Click (Dou et al. 2007): candidates re-ranked by how often this user clicked
  them before for the same query, ties in BM25 order.
* ``knrm``: the K-NRM baseline, no personalization, trained centrally.
* ``central``: the personalized PEPS-style model trained centrally on all users' logs (the
  server holds every log: Table 3, "PEPS").
* ``flat``: FedPSFlat, Algorithm 1: ``R`` rounds of ``ceil(N/K)`` steps of ``K`` clients, each
  training ``E`` local epochs; a fixed ``straggler_ratio`` of clients are slow or offline and
  their uploads arrive after ``T_max``: the server drops them (the clients still train their
  personal embeddings locally). Each search request carries ``m`` cover queries.
* ``proxy``: FedPSProxy (Sec. 3.4): the same training, with clients sampled as ``K/10``
  proxies x 10 clients and each proxy merging its clients' updates with the same
  aggregator before forwarding (:class:`fedrank.aggregators.hierarchy.ProxyRound`);
  stragglers offload their training to their proxy, so no update is lost.
* ``coverquery``: CoverQuery [1, 4]: the server logs each user's queries with ``m`` cover
  queries and trains the personalized model centrally on that log.
* ``groupuser``: GroupUser [52]: users share one identity per group of ``group_size``; the
  server trains the personalized model centrally with one "user" per group.

Every trained mode is evaluated after each round (epoch, for central training) on the
validation queries; the reported ``MAP``, ``MRR`` and ``P@1`` are the test metrics at the
round with the best validation MAP (the paper's "Best MAP"), and ``curve`` holds every
round. ``kl_divergence`` is the mean KL divergence between each user's real profile and the
profile the server can attribute to them (:mod:`fedrank.privacy.profile_kl`, Sec. 4.1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import sparse

from fedrank.aggregators.hierarchy import ProxyRound, Topology
from fedrank.core.message import Message
from fedrank.data.aol import BACKGROUND, TRAIN, UserLog
from fedrank.errors import ConfigError
from fedrank.experiments.fedps_baselines import (
    cover_queries_for,
    cover_query_logs,
    group_user_logs,
)
from fedrank.experiments.fedps_data import FedPSData
from fedrank.metrics.relevance import per_query_table
from fedrank.models.peps import PEPSConfig, PEPSRanker
from fedrank.privacy import profile_kl as kl
from fedrank.privacy.cover_queries import CoverQueryGenerator
from fedrank.retrieval.candidates import FEATURE_NAMES, BM25Candidates, UserData, build_users
from fedrank.simulation.client_sampling import flat_schedule, proxy_schedule
from fedrank.simulation.communication import flat_round_time, proxy_round_time
from fedrank.simulation.fedps_client import (
    FedPSClient,
    LocalTraining,
    UploadPolicy,
    UserWorkspace,
    train_step,
)
from fedrank.simulation.fedps_server import FedPSServer

MODES: tuple[str, ...] = (
    "original",
    "pclick",
    "knrm",
    "central",
    "flat",
    "proxy",
    "coverquery",
    "groupuser",
)
TRAINED_MODES: tuple[str, ...] = ("knrm", "central", "flat", "proxy", "coverquery", "groupuser")
METRICS: tuple[str, ...] = ("MAP", "MRR", "P@1")

#: ``progress(stage, done, total)``: called as work advances (the CLI draws a bar).
Progress = Callable[[str, int, int], None]
#: ``observer(client_index, message)``: sees every message a client sends (tests).
MessageObserver = Callable[[int, Message], None]


@dataclass(frozen=True)
class FedPSSettings:
    """One experiment's settings (defaults: FedPS Sec. 4.3).

    Attributes:
        mode: one of :data:`MODES`.
        rounds: ``R``, rounds of federated training (epochs of central training).
        clients_per_step: ``K`` (paper: 10).
        local_epochs: ``E`` (paper: 1).
        batch_size: ``B``, queries per minibatch.
        learning_rate: ``eta``, Adam's step size (clients' and central).
        server_learning_rate: ``eta_s`` of the FedAvg step. Algorithm 1 is ``eta_s = 1``;
            the default 3 reaches its best validation MAP in fewer rounds (docs/fedps.md
            compares both, with the trade-off measured).
        straggler_ratio: fraction of clients that are slow or offline (paper: 10%).
        clients_per_proxy, proxies_per_group: the FedPSProxy topology (paper: 100, 1,000).
        upload: upload case of Sec. 3.3.2: ``"all"``, ``"frequent"`` or ``"frozen"``.
        frequent_words: words whose rows are uploaded under ``"frequent"``.
        cover_queries: ``m``, cover queries per real query (paper: 1).
        n_topics: LDA topics of the cover-query generator.
        group_size: users per GroupUser identity (paper: 100).
        dim: word-embedding dimension of the model (the word vectors' dimension).
        seed: seeds model initialization, sampling, stragglers, covers and groups.
    """

    mode: str
    rounds: int = 4
    clients_per_step: int = 10
    local_epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 1e-3
    server_learning_rate: float = 3.0
    straggler_ratio: float = 0.1
    clients_per_proxy: int = 100
    proxies_per_group: int = 1000
    upload: str = "all"
    frequent_words: int = 5000
    cover_queries: int = 1
    n_topics: int = 50
    group_size: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        for name in ("rounds", "clients_per_step", "local_epochs", "batch_size", "group_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.straggler_ratio < 1.0:
            raise ConfigError(f"straggler_ratio must be in [0, 1), got {self.straggler_ratio}")
        if self.cover_queries < 0:
            raise ConfigError(f"cover_queries must be >= 0, got {self.cover_queries}")
        if self.mode == "proxy" and self.clients_per_step % min(10, self.clients_per_step):
            raise ConfigError(
                f"FedPSProxy samples K/10 proxies x 10 clients: K must be < 10 or a multiple "
                f"of 10, got {self.clients_per_step}"
            )


@dataclass
class FedPSResult:
    """The outcome of :func:`run_fedps` (``to_json`` is what ``--json`` writes).

    ``per_query`` holds the test AP / RR / P@1 of every test query (in user order) at the
    reported round, for paired significance tests between modes."""

    settings: FedPSSettings
    metrics: dict[str, float]
    kl_divergence: float
    rounds: int
    steps: int
    best_round: int
    wall_seconds: float
    curve: list[dict[str, float]] = field(default_factory=list)
    communication: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    per_query: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.metrics,
            "kl_divergence": self.kl_divergence,
            "rounds": self.rounds,
            "steps": self.steps,
            "best_round": self.best_round,
            "wall_seconds": self.wall_seconds,
            "settings": asdict(self.settings),
            "curve": self.curve,
            "communication": self.communication,
            "data": self.data,
        }


# --------------------------------------------------------------------------- helpers


def _summarize(per_query: np.ndarray) -> dict[str, float]:
    """Mean AP / RR / P@1 over queries with a relevant candidate."""
    counted = np.isfinite(per_query[:, 0])
    means = per_query[counted].mean(axis=0) if counted.any() else np.full(3, np.nan)
    return {name: float(v) for name, v in zip(METRICS, means, strict=True)}


def _heuristic_per_query(users: Sequence[UserData], mode: str) -> np.ndarray:
    """Test metrics of the BM25 order (``original``) or P-Click (``pclick``)."""
    pclick = FEATURE_NAMES.index("log_pclick")
    rows = []
    for user in users:
        s = user.test
        width = s.mask.shape[1]
        original = -np.arange(width, dtype=np.float64)[None, :]  # columns are in BM25 order
        score = original if mode == "original" else s.features[..., pclick] * width + original
        rows.append(per_query_table(np.where(s.mask, score, -np.inf), s.labels, s.mask))
    return np.concatenate(rows)


class _Evaluator:
    """Validation MAP after every round; test metrics whenever validation improves."""

    def __init__(self, evaluate: Callable[[str], np.ndarray]) -> None:
        self.evaluate = evaluate
        self.best_valid = -np.inf
        self.best_round = 0
        self.best_test: np.ndarray | None = None
        self.curve: list[dict[str, float]] = []

    def __call__(self, round_index: int, loss: float, seconds: float) -> None:
        valid = _summarize(self.evaluate("valid"))
        point = {"round": round_index, "train_loss": loss, "seconds": seconds}
        point["valid_MAP"] = valid["MAP"]
        score = valid["MAP"] if np.isfinite(valid["MAP"]) else -np.inf
        if score > self.best_valid or self.best_test is None:
            self.best_valid = score
            self.best_round = round_index
            self.best_test = self.evaluate("test")
            point.update({f"test_{k}": v for k, v in _summarize(self.best_test).items()})
        self.curve.append(point)


def _new_model(data: FedPSData, personalized: bool, seed: int) -> PEPSRanker:
    config = PEPSConfig(
        vocab_size=data.vocab_size,
        dim=int(data.word_vectors.shape[1]),
        n_features=len(FEATURE_NAMES),
        personalized=personalized,
    )
    return PEPSRanker(config, data.word_vectors, seed=seed)


def _seeds(seed: int) -> dict[str, int]:
    names = ("model", "clients", "schedule", "stragglers", "topology", "covers", "groups", "lda")
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
    for the shared parameters (each user's personal embeddings have their own).
    Returns the evaluator and the number of minibatch steps."""
    seeds = _seeds(settings.seed)
    model = _new_model(data, personalized, seeds["model"])
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
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate, fused=True)
    rng = np.random.default_rng(seeds["schedule"])

    def evaluate(split: str) -> np.ndarray:
        return np.concatenate([w.evaluate(model, split) for w in workspaces])

    evaluator = _Evaluator(evaluate)
    steps = 0
    for epoch in range(1, settings.rounds + 1):
        start = time.perf_counter()
        jobs = [(w, b) for w in workspaces for b in w.batches(settings.batch_size)]
        losses = []
        for done, j in enumerate(rng.permutation(len(jobs)), start=1):
            w, batch = jobs[j]
            losses.append(train_step(model, batch, w.personal, [optimizer, *w.optimizers]))
            if done % 200 == 0 or done == len(jobs):
                report_progress(progress, f"epoch {epoch}/{settings.rounds}", done, len(jobs))
        steps += len(jobs)
        evaluator(epoch, float(np.mean(losses)), time.perf_counter() - start)
    return evaluator, steps


@dataclass(frozen=True)
class Federation:
    """What a federated run needs beyond the settings: the straggler set and topology."""

    straggler: np.ndarray
    topology: Topology


def make_federation(n_clients: int, settings: FedPSSettings) -> Federation:
    """A fixed set of ``round(straggler_ratio * N)`` stragglers and the proxy topology,
    both from the seed."""
    seeds = _seeds(settings.seed)
    straggler = np.zeros(n_clients, dtype=bool)
    n_slow = int(round(settings.straggler_ratio * n_clients))
    straggler[np.random.default_rng(seeds["stragglers"]).permutation(n_clients)[:n_slow]] = True
    topology = Topology.build(
        n_clients,
        np.random.default_rng(seeds["topology"]),
        clients_per_proxy=settings.clients_per_proxy,
        proxies_per_group=settings.proxies_per_group,
    )
    return Federation(straggler, topology)


def train_federated(
    data: FedPSData,
    users: Sequence[UserData],
    settings: FedPSSettings,
    federation: Federation,
    upload: UploadPolicy,
    progress: Progress | None = None,
    observer: MessageObserver | None = None,
) -> tuple[_Evaluator, int, list[list[np.ndarray]], int]:
    """FedPSFlat or FedPSProxy training (Algorithm 1; Sec. 3.4). Returns the evaluator, the
    number of steps, every round's schedule and the number of client updates the server
    received (those not dropped)."""
    seeds = _seeds(settings.seed)
    model = _new_model(data, True, seeds["model"])
    server = FedPSServer(model.get_flat_parameters(), settings.server_learning_rate)
    clients = [
        FedPSClient(
            u,
            data.doc_tokens,
            data.word_vectors,
            seed=seeds["clients"] + i,
            learning_rate=settings.learning_rate,
        )
        for i, u in enumerate(users)
    ]
    training = LocalTraining(
        settings.local_epochs, settings.batch_size, settings.learning_rate, upload
    )
    rng = np.random.default_rng(seeds["schedule"])
    proxy = settings.mode == "proxy"
    per_proxy = min(10, settings.clients_per_step)

    def evaluate(split: str) -> np.ndarray:
        model.set_flat_parameters(server.broadcast())
        return np.concatenate([c.evaluate(model, split) for c in clients])

    evaluator = _Evaluator(evaluate)
    schedules: list[list[np.ndarray]] = []
    steps = 0
    for r in range(1, settings.rounds + 1):
        start = time.perf_counter()
        if proxy:
            schedule = proxy_schedule(
                federation.topology, settings.clients_per_step, rng, per_proxy=per_proxy
            )
        else:
            schedule = flat_schedule(len(clients), settings.clients_per_step, rng)
        schedules.append(schedule)
        losses = []
        for done, sampled in enumerate(schedule, start=1):
            parameters = server.broadcast()
            hierarchy = ProxyRound(server.aggregator, federation.topology) if proxy else None
            state = server.aggregator.zero()
            for c in sampled:
                message = clients[c].local_update(model, parameters, training, server.version)
                if observer is not None:
                    observer(int(c), message)
                losses.append(message.metrics["train_loss"])
                if hierarchy is not None:
                    hierarchy.accumulate(int(c), message)  # stragglers offload to the proxy
                elif not federation.straggler[c]:
                    state = server.aggregator.accumulate(state, message)
                # else: arrived after T_max, dropped
            server.apply(hierarchy.forward().state if hierarchy is not None else state)
            report_progress(progress, f"round {r}/{settings.rounds}", done, len(schedule))
        steps += len(schedule)
        evaluator(r, float(np.nanmean(losses)), time.perf_counter() - start)
    return evaluator, steps, schedules, server.updates_applied


# --------------------------------------------------------------------------- privacy


def _training_words(
    users: Sequence[UserData], doc_tokens: np.ndarray, vocab_size: int
) -> sparse.csr_matrix:
    """``(N, V)`` counts of the words of each client's training samples (queries and
    candidate texts): the global-embedding rows its local training changes."""
    queries = [u.train.query for u in users]
    texts = [doc_tokens[u.train.candidates[u.train.mask]] for u in users]
    owner = np.repeat(np.arange(len(users)), [q.shape[0] for q in queries])
    text_owner = np.repeat(np.arange(len(users)), [t.shape[0] for t in texts])
    n = len(users)
    return (
        kl.term_counts(np.concatenate(queries), vocab_size, owner=owner, n_owners=n)
        + kl.term_counts(np.concatenate(texts), vocab_size, owner=text_owner, n_owners=n)
    ).tocsr()


def _profile_counts(
    data: FedPSData, users: Sequence[UserData]
) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """Real profile parts per user: ``(query_counts, click_counts)`` (Sec. 4.1)."""
    v = data.vocab_size

    def matrix(attr: str) -> sparse.csr_matrix:
        ids = [getattr(u, attr) for u in users]
        row = np.concatenate([np.full(len(c), i) for i, c in enumerate(ids)])
        col = np.concatenate([c[:, 0] for c in ids])
        val = np.concatenate([c[:, 1] for c in ids]).astype(np.float64)
        return sparse.csr_matrix((val, (row, col)), shape=(len(users), v))

    return matrix("query_term_counts"), matrix("click_term_counts")


def _cover_counts(
    data: FedPSData, logs: Sequence[UserLog], covers: Sequence[np.ndarray]
) -> sparse.csr_matrix:
    """``(N, V)`` counts of the covers of each user's background and training queries."""
    seen = [c[np.isin(log.split, (BACKGROUND, TRAIN))] for log, c in zip(logs, covers, strict=True)]
    owner = np.repeat(np.arange(len(seen)), [c.shape[0] for c in seen])
    width = max(c.shape[2] for c in seen)
    padded = np.concatenate([np.pad(c, ((0, 0), (0, 0), (0, width - c.shape[2]))) for c in seen])
    return kl.term_counts(padded, data.vocab_size, owner=owner, n_owners=len(seen))


def fit_cover_generator(data: FedPSData, settings: FedPSSettings) -> CoverQueryGenerator:
    """LDA over the document texts (Sec. 3.2)."""
    generator = CoverQueryGenerator(n_topics=settings.n_topics)
    return generator.fit(
        data.doc_tokens, data.vocab_size, np.random.default_rng(_seeds(settings.seed)["lda"])
    )


def privacy_kl(
    data: FedPSData,
    settings: FedPSSettings,
    federation: Federation | None = None,
    upload: UploadPolicy | None = None,
    covers: Sequence[np.ndarray] | None = None,
    groups: np.ndarray | None = None,
) -> float:
    """Mean KL divergence between the users' real profiles and what the server can
    attribute to them under ``settings.mode`` (see :mod:`fedrank.privacy.profile_kl` for
    the observed profile of each mode). Modes without any protection (original, pclick,
    knrm, central) let the server log every query and click."""
    users = data.users
    queries, clicks = _profile_counts(data, users)
    real = sparse.csr_matrix(queries + clicks)
    mode = settings.mode
    if mode in ("flat", "proxy"):
        assert federation is not None and upload is not None
        case = {"all": 1, "frequent": 2, "frozen": 3}[upload.case]
        revealed = kl.revealed_words(
            _training_words(users, data.doc_tokens, data.vocab_size),
            case,
            uploaded_words=upload.frequent_words,
        )
        if mode == "flat":
            # The server never receives the late stragglers' updates.
            keep = sparse.diags((~federation.straggler).astype(np.float64))
            assert covers is not None
            observed = kl.observed_fedps_flat(
                queries, _cover_counts(data, data.corpus.users, covers), keep @ revealed
            )
        else:
            observed = kl.observed_fedps_proxy(
                queries, revealed, proxies=federation.topology.proxy_of
            )
    elif mode == "coverquery":
        assert covers is not None
        observed = kl.observed_cover_query(
            queries, _cover_counts(data, data.corpus.users, covers), clicks
        )
    elif mode == "groupuser":
        observed = kl.observed_group_user(queries, clicks, groups=groups)
    else:
        observed = real
    return kl.mean_kl(real, observed)


# --------------------------------------------------------------------------- run


def run_fedps(
    data: FedPSData,
    settings: FedPSSettings,
    *,
    progress: Progress | None = None,
    observer: MessageObserver | None = None,
) -> FedPSResult:
    """Run one mode on prepared data (see the module docstring). Sets torch to one thread
    (the per-batch work is small; competing OpenMP threads only slow it down)."""
    start = time.perf_counter()
    torch.set_num_threads(1)
    mode = settings.mode
    seeds = _seeds(settings.seed)
    n = len(data.users)
    federation = make_federation(n, settings) if mode in ("flat", "proxy") else None
    upload = _upload_policy(data, settings)
    covers = None
    if mode in ("flat", "coverquery") and settings.cover_queries > 0:
        report_progress(progress, "cover queries (LDA)", 0, 1)
        generator = fit_cover_generator(data, settings)
        covers = cover_queries_for(
            data.corpus.users,
            generator,
            settings.cover_queries,
            np.random.default_rng(seeds["covers"]),
        )
        report_progress(progress, "cover queries (LDA)", 1, 1)
    elif mode in ("flat", "coverquery"):
        covers = [
            np.zeros((log.n_events, 0, log.queries.shape[1]), np.int32) for log in data.corpus.users
        ]
    groups = None
    if mode == "groupuser":
        groups = kl.assign_groups(n, settings.group_size, np.random.default_rng(seeds["groups"]))
    kl_value = privacy_kl(data, settings, federation, upload, covers, groups)

    steps = 0
    schedules: list[list[np.ndarray]] = []
    communication: dict[str, Any] = {}
    if mode in ("original", "pclick"):
        per_query = _heuristic_per_query(data.users, mode)
        evaluator = None
    else:
        if mode in ("flat", "proxy"):
            assert federation is not None
            evaluator, steps, schedules, received = train_federated(
                data, data.users, settings, federation, upload, progress, observer
            )
            communication = _communication(schedules, federation, mode)
            communication["updates_received"] = received
        else:
            users: Sequence[UserData] = data.users
            if mode == "coverquery":
                assert covers is not None
                users = _rebuild(data, cover_query_logs(data.corpus.users, covers), seeds)
            elif mode == "groupuser":
                assert groups is not None
                users = _rebuild(data, group_user_logs(data.corpus.users, groups), seeds)
            evaluator, steps = train_central(data, users, settings, mode != "knrm", progress)
        assert evaluator.best_test is not None
        per_query = evaluator.best_test
    return FedPSResult(
        settings=settings,
        metrics=_summarize(per_query),
        kl_divergence=kl_value,
        rounds=settings.rounds if evaluator is not None else 0,
        steps=steps,
        best_round=evaluator.best_round if evaluator is not None else 0,
        wall_seconds=time.perf_counter() - start,
        curve=evaluator.curve if evaluator is not None else [],
        communication=communication,
        data=data.summary(),
        per_query=per_query,
    )


def _upload_policy(data: FedPSData, settings: FedPSSettings) -> UploadPolicy:
    if settings.upload == "frequent":
        return UploadPolicy.most_frequent(data.doc_tokens, data.vocab_size, settings.frequent_words)
    return UploadPolicy(settings.upload)  # type: ignore[arg-type]


def _rebuild(data: FedPSData, logs: Sequence[UserLog], seeds: dict[str, int]) -> list[UserData]:
    """Samples of server-side logs (cover-query or group logs), with the same candidate
    generator settings as the real users' samples."""
    generator = BM25Candidates.from_pool(
        data.corpus.pool, rng=np.random.default_rng(seeds["clients"])
    )
    return build_users(logs, data.corpus.pool, data.corpus.vocab, generator)


def _communication(
    schedules: list[list[np.ndarray]], federation: Federation, mode: str
) -> dict[str, Any]:
    """Table 6's communication time of the first round, from the actual schedule."""
    first = schedules[0]
    if mode == "proxy":
        t = proxy_round_time(first, federation.straggler, federation.topology)
    else:
        t = flat_round_time(first, federation.straggler)
    return {
        "round_time": str(t),
        "t_units": t.t_units,
        "d_units": t.d_units,
        "stragglers": int(federation.straggler.sum()),
        "proxies": federation.topology.n_proxies,
        "group_servers": federation.topology.n_groups,
    }
