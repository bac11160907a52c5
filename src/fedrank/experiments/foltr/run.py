"""Federated online learning to rank on LETOR data: FOLtR-ES (Kharitonov, WSDM 2019) and,
beyond the paper, FPDGD (Wang et al., ICTIR 2021), in one simulator with one report.

One iteration: ``clients`` simulated users each run ``batch`` interactions (``B``) with the
current model and send a message; the server aggregates the messages and publishes the next
model. ``interactions // (clients * batch)`` iterations are run, as in the reference
implementation. The report (:meth:`FoltrResult.to_json`) has the per-iteration mean MaxRR
the users experienced (non-privatized, ``batch_maxrr``: what Figures 1-5 plot), the exact
expected MaxRR of the final model under the training click model on the train and test
queries (Table 3), nDCG@10, the privacy parameter and its epsilon, and the speed.

FOLtR-ES (Section 3): :class:`~fedrank.estimators.evolution_strategies.ESEstimator` ->
randomized response -> :class:`~fedrank.aggregators.es_gradient.ESGradient` -> Adam
(PyTorch defaults, lr 1e-3) ascending the metric.

FPDGD: each client starts from the published model, runs PDGD on its ``B`` interactions
(:class:`~fedrank.estimators.pdgd.PDGDClients`, local learning rate 0.1, an update after
every interaction) and sends its model delta, optionally clipped and noised
(:mod:`fedrank.privacy.laplace`); the server adds the mean delta weighted by interactions
(:class:`~fedrank.aggregators.mean.WeightedMean`, FedAvg). FPDGD's paper ran 10 clients per
iteration; the default here is the same 2,000 x 4 as FOLtR-ES, for a like-for-like budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fedrank.core.client_random import ClientRandom
from fedrank.core.message import MessageBatch
from fedrank.core.provenance import code_version
from fedrank.core.validation import Accepts, Delegated, Interval, Options, Rule, Validated
from fedrank.data.letor.split import LetorFold
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError
from fedrank.experiments.foltr.clients import (
    DaskESClients,
    DaskFPDGDClients,
    ESClients,
    LocalESClients,
    LocalFPDGDClients,
)
from fedrank.experiments.foltr.differences import ReportDifferences
from fedrank.federation import registry
from fedrank.federation.privacy import PrivacyConfig, private
from fedrank.federation.round import Round
from fedrank.metrics.evaluate import evaluate
from fedrank.metrics.maxrr import maxrr_values
from fedrank.models.click_models import CLICK_MODEL_NAMES, click_model, grades_of
from fedrank.models.rankers import RANKER_NAMES, Ranker, make_ranker
from fedrank.simulation.attacks import Attack, FoltrAttacker
from fedrank.systems.foltr_es.client import FoltrEsClient
from fedrank.systems.foltr_es.config import TRUTH_PROBABILITY, FoltrEsConfig
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy
from fedrank.systems.fpdgd.client import FpdgdClient
from fedrank.systems.fpdgd.config import FpdgdConfig
from fedrank.systems.fpdgd.strategy import FpdgdStrategy
from fedrank.systems.system import System

if TYPE_CHECKING:
    from distributed import Client

Algorithm = Literal["es", "fpdgd"]
#: The system each ``algorithm`` trains (:data:`fedrank.federation.registry.SYSTEMS`).
SYSTEM_OF: dict[str, str] = {"es": "foltr-es", "fpdgd": "fpdgd"}
ALGORITHMS: tuple[str, ...] = tuple(SYSTEM_OF)
DPMode = Literal["none", "local", "distributed", "central"]
DP_MODES: tuple[str, ...] = ("none", "local", "distributed", "central")


@dataclass(frozen=True)
class FoltrConfig(Validated):
    """A training run (defaults: the paper's Section 6.3 setting).

    Attributes:
        click_model: simulated users: ``perfect``, ``navigational``, ``informational``
            (Table 1) or ``position-based``.
        ranker: ``linear`` or ``two-layer``.
        algorithm: ``es`` (FOLtR-ES) or ``fpdgd``.
        clients: clients per iteration, ``N`` (2,000).
        batch: interactions per client and message, ``B`` (4).
        p: randomized-response truth probability (0.9); ``None`` sends true metrics. ES only.
        sigma: ES perturbation scale (0.01).
        antithetic: ES antithetic variates (on).
        learning_rate: server Adam learning rate for ES; FPDGD's local learning rate;
            ``None``: the system's default (ES: the server's Adam, the paper's PyTorch
            default 1e-3; FPDGD: the clients' local step, the FPDGD paper's 0.1).
        interactions: total interaction budget (2,000,000).
        seed: seed of every random choice.
        dp: FPDGD's optional differential privacy of the model deltas: ``none``,
            ``local`` (:class:`~fedrank.privacy.laplace.LocalLaplace`), ``distributed``
            (:class:`~fedrank.privacy.laplace.DistributedLaplace`, FPDGD's mechanism) or
            ``central`` (:class:`~fedrank.strategies.dp.DPStrategy`, the wrapper the other
            systems use: deltas clipped in L2 norm, the server adds Gaussian noise to their
            mean, and each client's epsilon over the training is accounted).
        dp_epsilon: its epsilon: per round for the Laplace mechanisms (FPDGD's paper used
            1.2 to 10), each client's budget over the whole training for ``central``.
        dp_delta: ``central``: the budget's delta.
        dp_clip: the L1 radius deltas are clipped to (Laplace); their L2 bound (central).
        difference_bound: FOLtR-ES: every report's antithetic difference is clipped to
            this bound (:class:`~fedrank.aggregators.es_gradient.ESGradient`); 0: off.
    """

    click_model: str = "navigational"
    ranker: str = "linear"
    algorithm: Algorithm = "es"
    clients: int = 2000
    batch: int = 4
    p: float | None = 0.9
    sigma: float = 0.01
    antithetic: bool = True
    learning_rate: float | None = None
    interactions: int = 2_000_000
    seed: int = 0
    dp: DPMode = "none"
    dp_epsilon: float = 4.5
    dp_clip: float = 1.0
    difference_bound: float = 0.0
    dp_delta: float = 1e-6

    ACCEPTS = {
        "click_model": Options(*CLICK_MODEL_NAMES),
        "ranker": Options(*RANKER_NAMES),
        "algorithm": Options(*ALGORITHMS),
        "clients": Interval(Integral, 1, None),
        "batch": Interval(Integral, 1, None),
        "p": Accepts(TRUTH_PROBABILITY, None, note="MaxRR at depth 10 has n = 11 values"),
        "sigma": FoltrEsConfig.ACCEPTS["sigma"],
        "antithetic": bool,
        "learning_rate": Accepts(Interval(Real, 0, None, closed="neither"), None),
        "interactions": Interval(Integral, 1, None),
        "seed": Interval(Integral, 0, 2**63 - 1),
        "dp": Options(*DP_MODES),
        "dp_epsilon": Interval(Real, 0, None, closed="neither"),
        "dp_clip": Accepts(
            Interval(Real, 0, None, closed="neither"),
            note="the L1 radius of the Laplace mechanisms, central DP's L2 bound",
        ),
        "difference_bound": FoltrEsConfig.ACCEPTS["difference_bound"],
        "dp_delta": Interval(Real, 0, 1, closed="neither"),
    }
    RULES = (
        Rule(
            lambda c: c.interactions >= c.clients * c.batch,
            "interactions ({interactions}) must cover at least one iteration of clients x "
            "batch = {clients} x {batch} interactions",
        ),
        Rule(
            lambda c: c.dp == "none" or c.algorithm != "es",
            "dp applies to FPDGD's model deltas; FOLtR-ES privatizes its metric with p",
        ),
        Rule(
            lambda c: not c.difference_bound or c.algorithm == "es",
            "difference_bound clips FOLtR-ES reports' antithetic differences; FPDGD sends "
            "model deltas",
        ),
        # central DP's budget is calibrated now: one it cannot meet fails before any work
        Delegated(lambda c: c.dp != "central" or c.noise_multiplier()),
    )

    @property
    def system(self) -> System:
        """The system the run trains."""
        return registry.system(SYSTEM_OF[self.algorithm])

    @property
    def iterations(self) -> int:
        return self.interactions // (self.clients * self.batch)

    def noise_multiplier(self) -> float:
        """Central DP's noise multiplier: the smallest that keeps every iteration (each
        client slot reports in all of them) within ``(dp_epsilon, dp_delta)``."""
        from fedrank.privacy.report import budget_noise_multiplier

        return budget_noise_multiplier(self.dp_epsilon, self.dp_delta, self.iterations, "pld")

    def privacy(self) -> PrivacyConfig | None:
        """Central DP's budget (``dp = "central"``), for the privacy factory; else
        ``None``."""
        if self.dp != "central":
            return None
        return PrivacyConfig(epsilon=self.dp_epsilon, delta=self.dp_delta, clip=self.dp_clip)

    def fpdgd_config(self, n_features: int) -> FpdgdConfig:
        """The FPDGD system's section for this run (what a server would be given)."""
        laplace = self.dp if self.dp in ("local", "distributed") else "none"
        return FpdgdConfig(
            ranker=self.ranker,
            n_features=n_features,
            batch=self.batch,
            learning_rate=self.lr,
            laplace=laplace,
            laplace_epsilon=self.dp_epsilon,
            laplace_clip=self.dp_clip,
            laplace_shares=self.clients,
            seed=self.seed,
        )

    def strategy_config(self, n_features: int) -> FoltrEsConfig:
        """The FOLtR-ES strategy's section for this run (what a server would be given)."""
        return FoltrEsConfig(
            ranker=self.ranker,
            n_features=n_features,
            sigma=self.sigma,
            batch=self.batch,
            antithetic=self.antithetic,
            p=1.0 if self.p is None else self.p,
            learning_rate=self.lr,
            difference_bound=self.difference_bound,
        )

    @property
    def lr(self) -> float:
        """The learning rate in effect."""
        if self.learning_rate is None:
            return (FoltrEsConfig if self.algorithm == "es" else FpdgdConfig)().learning_rate
        return float(self.learning_rate)


@dataclass
class FoltrResult:
    """What a run produced; :meth:`to_json` is the documented report."""

    config: FoltrConfig
    data: dict[str, Any]
    batch_maxrr: list[float] = field(default_factory=list)
    expected_maxrr: dict[str, float] = field(default_factory=dict)
    ndcg10: dict[str, float] = field(default_factory=dict)
    epsilon: float | None = None
    wall_seconds: float = 0.0
    params: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    attack: dict[str, Any] = field(default_factory=dict)
    report_differences: dict[str, Any] = field(default_factory=dict)

    @property
    def interactions_run(self) -> int:
        return len(self.batch_maxrr) * self.config.clients * self.config.batch

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "data": self.data,
            "iterations": len(self.batch_maxrr),
            "interactions": self.interactions_run,
            "batch_maxrr": self.batch_maxrr,
            "expected_maxrr": self.expected_maxrr,
            "ndcg10": self.ndcg10,
            "epsilon": None if self.epsilon is None or np.isinf(self.epsilon) else self.epsilon,
            "wall_seconds": self.wall_seconds,
            "interactions_per_second": self.interactions_run / self.wall_seconds
            if self.wall_seconds > 0
            else None,
            "final_params": self.params.tolist(),
            "privacy": self.privacy(),
            **({"attack": self.attack} if self.attack else {}),
            **({"report_differences": self.report_differences} if self.report_differences else {}),
            "code": code_version(),  # the fedrank source that ran it
        }

    def privacy(self) -> dict[str, Any]:
        """Each client slot's guarantee over the run (:func:`fedrank.privacy.report.
        run_privacy`): randomized response (FOLtR-ES) or FPDGD's Laplace mechanism, composed
        over the iterations; no mechanism gives epsilon ``None``."""
        from fedrank.privacy.report import foltr_es_privacy, fpdgd_privacy, run_privacy

        rounds = len(self.batch_maxrr)
        if self.config.algorithm == "es":
            return run_privacy(foltr_es_privacy(self.config.p, self.config.batch, rounds))
        return run_privacy(fpdgd_privacy(asdict(self.config), rounds))

    def privacy_report(self) -> dict[str, Any]:
        """FOLtR-ES's guarantees of this run at three levels: per interaction (Eq. 10), per
        message (``B`` interactions) and per client slot over every iteration
        (:func:`fedrank.privacy.report.foltr_es_privacy`); strings say why there is none
        (``p = 1``)."""
        from fedrank.privacy.accounting import randomized_response_epsilon
        from fedrank.privacy.report import foltr_es_privacy

        if self.config.algorithm != "es":
            raise ConfigError("privacy_report is FOLtR-ES's (randomized response); see privacy()")
        p = self.config.p
        row = foltr_es_privacy(p, self.config.batch, len(self.batch_maxrr))
        return {
            "per_interaction": None
            if p is None
            else randomized_response_epsilon(p, len(maxrr_values())),
            "per_message": row.per_message,
            "per_user": row.per_user,
        }


def train_es(
    config: FoltrConfig,
    ranker: Ranker,
    bank: QueryBank,
    progress: Callable[[int, int], None] | None = None,
    dask: Client | None = None,
    attacker: FoltrAttacker | None = None,
    differences: ReportDifferences | None = None,
) -> tuple[np.ndarray, list[float], float | None]:
    """FOLtR-ES training; returns ``(final params, batch MaxRR per iteration, epsilon)``.
    Client ``c`` of iteration ``t`` draws its numbers from ``ClientRandom(config.seed, t,
    c)``; with ``dask`` the clients run on the cluster's workers, with the same result.
    ``attacker``: some clients' reports are poisoned, and the server refuses reports out
    of MaxRR's range (:mod:`fedrank.simulation.attacks`). ``differences`` counts the
    antithetic differences of the reports the server folds."""
    section = config.strategy_config(ranker.n_features)
    client = FoltrEsClient(section)
    estimator = client.estimator(click_model(config.click_model, grades_of(bank.split.labels)))
    clients: ESClients = (
        LocalESClients(estimator, bank) if dask is None else DaskESClients(dask, estimator, bank)
    )
    round_ = Round(FoltrEsStrategy(section))
    curve: list[float] = []
    ids = np.arange(config.clients)
    for iteration in range(config.iterations):
        theta = round_.params
        reports = clients.interact(theta, ClientRandom(config.seed, iteration, ids))
        curve.append(float(reports.maxrr.mean()))
        batch = MessageBatch.of_es(reports.seeds, reports.metric, reports.antithetic_metric)
        if attacker is not None:
            batch = attacker.es(iteration, theta, batch)
        if differences is not None:
            differences.add(batch)
        round_.fold(batch)
        round_.close()
        if progress is not None:
            progress(iteration + 1, config.iterations)
    privatizer = estimator.privatizer
    return round_.params, curve, None if privatizer is None else privatizer.epsilon()


def train_fpdgd(
    config: FoltrConfig,
    ranker: Ranker,
    bank: QueryBank,
    progress: Callable[[int, int], None] | None = None,
    dask: Client | None = None,
    attacker: FoltrAttacker | None = None,
) -> tuple[np.ndarray, list[float], float | None]:
    """FPDGD training; returns ``(final params, batch MaxRR per iteration, epsilon)``. The
    initial parameters come from a generator seeded by ``config.seed``; client ``c`` of
    iteration ``t`` draws its queries, rankings, clicks and noise from ``ClientRandom(
    config.seed, t, c)``; with ``dask`` the clients run on the cluster's workers, with the
    same result. ``attacker``: some clients' deltas are poisoned
    (:mod:`fedrank.simulation.attacks`). Central DP (``dp = "central"``) wraps the system's
    strategy by the privacy factory, its noise from the run seed's second stream."""
    section = config.fpdgd_config(ranker.n_features)
    client = FpdgdClient(section)
    update = client.estimator(click_model(config.click_model, grades_of(bank.split.labels)))
    clients = (
        LocalFPDGDClients(update, bank) if dask is None else DaskFPDGDClients(dask, update, bank)
    )
    noise = np.random.SeedSequence(config.seed).spawn(2)[1]
    strategy = private(
        FpdgdStrategy(section), config.privacy(), rounds=config.iterations, rng=noise
    )
    round_ = Round(strategy)
    ids = np.arange(config.clients)
    curve: list[float] = []
    for iteration in range(config.iterations):
        reports = clients.train(round_.params, ClientRandom(config.seed, iteration, ids))
        messages = reports.messages(config.batch)
        if attacker is not None:
            messages = MessageBatch.of_vectors(
                attacker.vectors(iteration, reports.deltas), messages.weight
            )
        round_.fold(messages)
        round_.close()
        curve.append(float(reports.maxrr.mean()))
        if progress is not None:
            progress(iteration + 1, config.iterations)
    if config.dp == "central":
        from fedrank.privacy.report import fpdgd_privacy

        row = fpdgd_privacy(asdict(config), config.iterations)
        return round_.params, curve, float(row.per_user["epsilon"])  # type: ignore[index]
    privatizer = client.privatizer
    return round_.params, curve, None if privatizer is None else privatizer.epsilon()


def run_foltr(
    config: FoltrConfig,
    fold: LetorFold,
    progress: Callable[[int, int], None] | None = None,
    dask: Client | None = None,
    attack: Attack | None = None,
) -> FoltrResult:
    """Train on ``fold.train`` and evaluate the final model on its train and test queries
    (``dask``: run the clients on that cluster's workers, with the same result). ``attack``:
    a share of each iteration's clients is malicious (:mod:`fedrank.simulation.attacks`);
    the report then records the attack and its message counts under ``attack``."""
    train_bank = QueryBank(fold.train)
    test_bank = QueryBank(fold.test)
    ranker = make_ranker(config.ranker, fold.train.n_features)
    attacker = None
    if attack is not None and attack.active:
        attacker = FoltrAttacker(attack, config.clients, config.seed, config.system)
    start = time.perf_counter()
    differences = ReportDifferences()
    if config.algorithm == "es":
        theta, curve, epsilon = train_es(
            config, ranker, train_bank, progress, dask, attacker, differences
        )
    else:
        theta, curve, epsilon = train_fpdgd(config, ranker, train_bank, progress, dask, attacker)
    wall = time.perf_counter() - start
    model = click_model(config.click_model, grades_of(fold.train.labels))
    result = FoltrResult(
        config=config,
        data={
            "name": fold.name,
            "train_queries": fold.train.n_queries,
            "test_queries": fold.test.n_queries,
            "n_features": fold.train.n_features,
        },
        batch_maxrr=curve,
        epsilon=epsilon,
        wall_seconds=wall,
        params=theta,
        attack={} if attacker is None else attacker.log.to_json(),
        report_differences=differences.to_json() if differences.counts.any() else {},
    )
    for split, bank in (("train", train_bank), ("test", test_bank)):
        quality = evaluate(
            bank, lambda x, th=theta: ranker.score(th, x), {config.click_model: model}
        )
        result.expected_maxrr[split] = quality[config.click_model]
        result.ndcg10[split] = quality["ndcg"]
    return result
