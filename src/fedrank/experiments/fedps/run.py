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

The trained modes train in :mod:`fedrank.experiments.fedps.central` and
:mod:`fedrank.experiments.fedps.federated` (what both share, the seeds of a run's random
streams and the evaluation with early stopping, in :mod:`fedrank.experiments.fedps.training`);
the cover queries come from :mod:`fedrank.experiments.fedps.covers` and the KL measure's
term counts from :mod:`fedrank.experiments.fedps.kl_measure`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedrank.baselines.list_rankers import GBDTRanker, rule_scores
from fedrank.core.provenance import code_version
from fedrank.data.aol import UserLog
from fedrank.errors import ConfigError
from fedrank.estimators.local_sgd import UploadPolicy
from fedrank.experiments.fedps.baselines import cover_query_logs, group_user_logs
from fedrank.experiments.fedps.central import train_central
from fedrank.experiments.fedps.communication import flat_round_time, proxy_round_time
from fedrank.experiments.fedps.covers import compute_covers, cover_inputs, start_covers
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.federated import (
    FederatedRun,
    Federation,
    MessageObserver,
    make_federation,
    train_federated,
)
from fedrank.experiments.fedps.kl_measure import profile_counts
from fedrank.experiments.fedps.settings import FEDERATED_MODES, RULE_MODES, FedPSSettings, dp_block
from fedrank.experiments.fedps.training import (
    METRICS,
    Evaluator,
    Progress,
    report_progress,
    stream_seeds,
    summarize,
)
from fedrank.metrics.relevance import per_query_table
from fedrank.privacy import kl_settings
from fedrank.privacy import profile_kl as kl
from fedrank.privacy.report import fedps_privacy, run_privacy
from fedrank.retrieval.candidates import UserData, build_users
from fedrank.simulation.attacks import Attack, FedPSAttacker

if TYPE_CHECKING:
    from distributed import Client


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


def _test_event_ids(users: Sequence[UserData]) -> np.ndarray:
    return np.concatenate([u.test.event_ids for u in users] or [np.zeros(0, np.int64)])


def _rule_per_query(users: Sequence[UserData], rule: str) -> np.ndarray:
    rows = [
        per_query_table(rule_scores(u.test, rule), u.test.labels, u.test.mask)
        for u in users
        if u.test.n_queries
    ]
    return np.concatenate(rows) if rows else np.zeros((0, 3))


def _kl_method(mode: str) -> str:
    return mode if mode in ("flat", "proxy", "coverquery", "groupuser") else "central"


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
    (:func:`~fedrank.experiments.fedps.covers.start_covers`; ``covers``: already started
    for these settings). ``attack`` (flat and proxy modes): a fixed share of the users is
    malicious (:class:`~fedrank.simulation.attacks.FedPSAttacker`); the result records it
    under ``attack``."""
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
    seeds = stream_seeds(settings.seed)
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
        # FedPSFlat's search requests carry m cover queries each (Sec. 3.3) and its KL
        # measure (Sec. 4.1) counts them: a flat run needs them (none with --cover-queries 0)
        stage = "cover queries (LDA, for the KL measure)" if mode == "flat" else "cover queries"
        report_progress(progress, stage, 0, 1)
        covers = compute_covers(*cover_inputs(data.corpus), settings)
        report_progress(progress, stage, 1, 1)
    groups = None
    if mode == "groupuser":
        groups = kl.assign_groups(
            len(data.users), settings.group_size, np.random.default_rng(seeds["groups"])
        )

    users: Sequence[UserData] = data.users
    evaluator: Evaluator | None = None
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


def warmup_record(evaluator: Evaluator | None) -> dict[str, Any]:
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
    ``covers``: the first seed's cover queries, already started
    (:func:`~fedrank.experiments.fedps.covers.start_covers`)."""
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
