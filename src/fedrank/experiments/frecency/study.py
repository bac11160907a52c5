"""The federated frecency study, simulated end to end (Mozilla paper, Sections 5-6).

The tuned model is Firefox's classic frecency (22 weights, as in the paper; default) or
today's modern frecency (5 parameters): ``FrecencyStudyConfig.model``. The users come from a
world (``world``): the synthetic one calibrated to real browsing (default), or the real AOL
click log (:mod:`fedrank.simulation.frecency.world`).

Users are split into treatment / control / control-no-decay (60/20/20). In the optimization
phase, every iteration each user performs URL-bar searches (synthetic: a Poisson number;
AOL: the revisits of the log in the iteration's time window); treatment users search with
the current model and send a finite-difference gradient of the SVM loss (full precision, or
signs only); the server aggregates the reports, steps with Rprop and applies the
safeguards of the chosen ``setting`` -- the paper's text, or what the study's deployed
server did -- and publishes the next model (integers for the deployed server). What the
searches select enters the history (TYPED visits, adaptive history) and time passes. Every
branch reports its loss, on the study's loss and on the paper's own (raw frecency, margin
0, the deployed add-on's). Then an evaluation phase with the final model measures
characters typed and rank selected per branch, tested at the level of users (searches of
one user are correlated): two-sided Mann-Whitney U tests on per-user means at the
Bonferroni level 0.05/6, bootstrap intervals of the differences over users, and the pooled
per-search p-value as a secondary figure.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fedrank.core.arrays import unique_values
from fedrank.core.client_random import ClientRandom
from fedrank.core.message import MessageBatch
from fedrank.core.provenance import code_version
from fedrank.core.validation import Accepts, Interval, Options, Rule
from fedrank.data.browsing import BrowsingWorld
from fedrank.errors import ConfigError
from fedrank.experiments.frecency.clients import (
    DaskFrecencyClients,
    FrecencyClients,
    LocalFrecencyClients,
)
from fedrank.experiments.frecency.presets import PRESETS, hidden_weights
from fedrank.experiments.frecency.stability import subsample_l1_distances
from fedrank.experiments.stats import compare_branches_by_user, intra_user_correlation
from fedrank.federation.privacy import PrivacyConfig, private, run_record
from fedrank.federation.round import Round
from fedrank.models.frecency.scorer import page_scorer
from fedrank.simulation.attacks import Attack, FrecencyAttacker
from fedrank.simulation.frecency.branches import BRANCHES, TREATMENT
from fedrank.simulation.frecency.messages import ClientReports, ClientSearches
from fedrank.simulation.frecency.pipeline import Pipeline
from fedrank.simulation.frecency.urlbar import SearchBatch, TypingModel, UrlbarConfig
from fedrank.simulation.frecency.world import FrecencyWorld, Searches
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy

if TYPE_CHECKING:
    from distributed import Client

WORLDS: tuple[str, ...] = ("synthetic", "aol")

#: The paper's evaluation phase (Sec. 6.3, Figure 5): mean characters typed and mean rank
#: selected per branch.
PAPER_EVAL: dict[str, dict[str, float]] = {
    "treatment": {"chars_typed_mean": 3.6747, "selected_rank_mean": 0.37435},
    "control": {"chars_typed_mean": 4.26239, "selected_rank_mean": 0.35350},
    "control-no-decay": {"chars_typed_mean": 4.24125, "selected_rank_mean": 0.35771},
}
#: History searches per user per day in the paper's optimization phase: the 5,748,814
#: messages less the evaluation phase's 3,674,063, from 186,315 users in 137 iterations of
#: 30 minutes (Sec. 6.3).
PAPER_SEARCHES_PER_DAY = (5_748_814 - 3_674_063) / 186_315 / (137 * 0.5 / 24)
#: The evaluation phase: 3,674,063 pings from 306,200 users in 10 days (12 per user).
PAPER_EVAL_DAYS = 10.0
PAPER_EVAL_SEARCHES = 3_674_063 / 306_200

#: The typing model fitted to the paper's control branch in the default synthetic world
#: (``fedrank frecency calibrate --users 1000 --iterations 40 --seed 0
#: --max-evaluations 30``: control 4.264 characters, rank 0.353, against the paper's 4.262
#: and 0.354; docs/frecency.md), rounded to three decimals: the defaults of
#: :class:`~fedrank.simulation.frecency.urlbar.TypingModel`.
CALIBRATED_TYPING = TypingModel()

#: Most users a simulated study may enroll: memory grows with users, about 0.2 MB each
#: (docs/privacy.md, "At 100,000 users").
MAX_USERS = 100_000


@dataclass(frozen=True)
class FrecencyStudyConfig(FrecencyConfig):
    """Every knob of the study, with the paper's names and defaults where it has them: the
    learning settings of :class:`~fedrank.systems.frecency.config.FrecencyConfig` (model,
    setting, message, optimizer, gate, Rprop, safeguard, finite differences, loss, decay;
    the same section the server reads) and the simulated world's.

    Attributes:
        preset: the simulated users' hidden preference in the synthetic world (``paper``:
            Firefox's defaults; ``shifted``: another weighting), see
            :func:`fedrank.experiments.frecency.presets.hidden_weights`. Not a model
            setting: what the learner should discover.
        world: ``synthetic`` (calibrated to real browsing) or ``aol`` (the real log).
        n_users: users enrolled (split 60/20/20); the AOL world takes this many of its
            users (``None``: all).
        iterations: optimization iterations (paper: 137 of 30 minutes; 40 shown to suffice).
        seed: seed of every random choice in the study.
        searches_per_iteration: mean (Poisson) URL-bar searches per user per iteration
            (synthetic world).
        searches_per_day: history searches per user per day, which sets the simulated time
            of an iteration (``searches_per_iteration / searches_per_day`` days; the paper's
            optimization phase: 3.9).
        eval_searches_per_user, eval_days: searches per user in the evaluation phase and
            its length (the paper: 12 searches per user in 10 days).
        history_days: days of synthetic history before the study.
        aol_log: the AOL click log (``None``: the shared sample); ``aol_study_start``: the
            cut between history and study; ``aol_study_days``: days replayed, the last
            ``aol_eval_days`` of them for evaluation.
        blind_chars, scan_continue: the typing model (``None``: the calibrated values).
        host_share: how often a synthetic user types the site's name first.
        search_suggestions: rows of search suggestions in the URL bar (4; 0: none).
        noise_var: variance of the noise on the users' preference (paper: 30).
        track_stability, stability_sample, stability_draws: Figure 7 (plain mean, 2,000
            reports, 50 draws; the paper's iterations had about 15,000 reports, so a
            faithful Figure 7 needs at least 10,000 per iteration: ``n_users`` of about
            17,000 at one search per user and iteration).
    """

    preset: str = "shifted"
    world: str = "synthetic"
    n_users: int | None = 3000
    iterations: int = 40
    seed: int = 0
    searches_per_iteration: float = 1.0
    searches_per_day: float = PAPER_SEARCHES_PER_DAY
    eval_searches_per_user: int = 12
    eval_days: float = PAPER_EVAL_DAYS
    history_days: float = 61.0
    aol_log: str | None = None
    aol_study_start: str = "2006-05-01"
    aol_study_days: float = 31.0
    aol_eval_days: float = 10.0
    blind_chars: float | None = None
    scan_continue: float | None = None
    host_share: float = 0.7
    search_suggestions: int = 4
    noise_var: float = 30.0
    track_stability: bool = False
    stability_sample: int = 2000
    stability_draws: int = 50

    ACCEPTS = {
        **FrecencyConfig.ACCEPTS,
        "preset": Options(*PRESETS),
        "world": Options(*WORLDS),
        "n_users": Accepts(
            Interval(Integral, 3, MAX_USERS),
            None,
            note="one per branch at least; memory grows with users, about 0.2 MB each",
        ),
        "iterations": Interval(Integral, 1, None),
        "seed": Interval(Integral, 0, None),
        "searches_per_iteration": Interval(Real, 0, None, closed="neither"),
        "searches_per_day": Interval(Real, 0, None, closed="neither"),
        "eval_searches_per_user": Interval(Integral, 1, None),
        "eval_days": Interval(Real, 0, None, closed="neither"),
        "history_days": Interval(Real, 0, None, closed="neither"),
        "aol_log": Accepts(str, None),
        "aol_study_start": str,
        "aol_study_days": Interval(Real, 0, None, closed="neither"),
        "aol_eval_days": Interval(Real, 0, None, closed="neither"),
        "blind_chars": Accepts(Interval(Real, 0, None), None),
        "scan_continue": Accepts(Interval(Real, 0, 1), None),
        "host_share": Interval(Real, 0, 1),
        "search_suggestions": Interval(Integral, 0, 8),
        "noise_var": Interval(Real, 0, None),
        "track_stability": bool,
        "stability_sample": Interval(Integral, 1, None),
        "stability_draws": Interval(Integral, 1, None),
    }
    RULES = (
        *FrecencyConfig.RULES,
        Rule(
            lambda c: c.world != "synthetic" or c.n_users is not None,
            "the synthetic world needs n_users",
        ),
        Rule(
            lambda c: c.aol_eval_days < c.aol_study_days,
            "aol_eval_days must be < aol_study_days ({aol_study_days}), got {aol_eval_days}",
        ),
    )

    def resolved(self) -> FrecencyStudyConfig:
        """This configuration with every ``None`` default filled in: the learning defaults
        (:meth:`FrecencyConfig.resolved`) and the calibrated typing model."""
        learning = super().resolved()
        return replace(
            learning,
            blind_chars=CALIBRATED_TYPING.blind_chars if self.blind_chars is None
            else self.blind_chars,
            scan_continue=CALIBRATED_TYPING.scan_continue if self.scan_continue is None
            else self.scan_continue,
        )  # fmt: skip

    @property
    def days_per_iteration(self) -> float:
        """Simulated days per optimization iteration."""
        if self.world == "aol":
            return (self.aol_study_days - self.aol_eval_days) / self.iterations
        return self.searches_per_iteration / self.searches_per_day


def build_world(
    config: FrecencyStudyConfig, rng: np.random.Generator, pipeline: Pipeline | None = None
) -> FrecencyWorld:
    """The study's users: the browsing world, branches and URL bar of ``config``;
    ``pipeline``: how the world uses the cores (``None``: the default
    :class:`~fedrank.simulation.frecency.pipeline.Pipeline`)."""
    c = config.resolved()
    browsing = _browsing(c, rng)
    hidden = hidden_weights(c.preset, c.model) if c.world == "synthetic" else None
    return FrecencyWorld(
        browsing,
        hidden,
        rng,
        noise_var=c.noise_var,
        decay_rate=c.decay_rate,
        delta=c.delta,
        score_scale=c.score_scale,
        typing=TypingModel(float(c.blind_chars), float(c.scan_continue)),  # type: ignore[arg-type]
        urlbar=UrlbarConfig(search_suggestions=c.search_suggestions),
        host_share=c.host_share,
        model=c.model,
        pipeline=pipeline,
    )


def _browsing(config: FrecencyStudyConfig, rng: np.random.Generator) -> BrowsingWorld:
    if config.world == "synthetic":
        from fedrank.data.synthetic_history import BrowsingConfig, generate_world

        assert config.n_users is not None
        study_days = config.iterations * config.days_per_iteration + (config.eval_days)
        return generate_world(
            config.n_users,
            rng,
            BrowsingConfig(history_days=config.history_days, future_days=study_days + 1.0),
        )
    from fedrank.data.aol_browsing import aol_world
    from fedrank.experiments.fedps.data import default_log_path

    path = Path(config.aol_log) if config.aol_log else default_log_path()
    if not path.is_file():
        raise ConfigError(
            f"AOL log {path} not found: pass aol_log (--aol-log) or set FEDRANK_DATA_DIR"
        )
    return aol_world(
        path,
        study_start=np.datetime64(config.aol_study_start),
        users=config.n_users,
        rng=rng if config.n_users is not None else None,
    )


@dataclass
class StudyResult:
    """What a study run produced (``to_json`` gives the documented JSON)."""

    config: FrecencyStudyConfig
    loss_per_iteration: list[float] = field(default_factory=list)
    branch_loss_per_iteration: dict[str, list[float]] = field(default_factory=dict)
    paper_loss_per_iteration: dict[str, list[float]] = field(default_factory=dict)
    weights_per_iteration: list[dict[str, float]] = field(default_factory=list)
    final_weights: dict[str, float] = field(default_factory=dict)
    published_weights: dict[str, float] = field(default_factory=dict)
    reports_per_iteration: list[int] = field(default_factory=list)
    constraints_held: bool = True
    world_stats: dict[str, float] = field(default_factory=dict)
    eval: dict[str, dict[str, float]] = field(default_factory=dict)
    oracle: dict[str, float] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    all_tests: list[dict[str, Any]] = field(default_factory=list)
    intra_user_correlation: dict[str, float] = field(default_factory=dict)
    bonferroni_alpha: float = 0.05 / 6
    stability: list[dict[str, float]] = field(default_factory=list)
    attack: dict[str, Any] = field(default_factory=dict)
    privacy: dict[str, Any] = field(default_factory=dict)
    eval_samples: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    def weight_trajectory(self) -> np.ndarray:
        """The weights at the start of every iteration, then the final weights: shape
        ``(iterations + 1, n_params)``, columns in the model's parameter order."""
        names = page_scorer(self.config.model).names
        rows = [*self.weights_per_iteration, self.final_weights]
        return np.array([[w[name] for name in names] for w in rows], dtype=np.float64)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config.resolved()),
            "loss_per_iteration": self.loss_per_iteration,
            "branch_loss_per_iteration": self.branch_loss_per_iteration,
            "paper_loss_per_iteration": self.paper_loss_per_iteration,
            "weights_per_iteration": self.weights_per_iteration,
            "final_weights": self.final_weights,
            "published_weights": self.published_weights,
            "reports_per_iteration": self.reports_per_iteration,
            "constraints_held": self.constraints_held,
            "world_stats": self.world_stats,
            "eval": self.eval,
            "paper_eval": PAPER_EVAL,
            "oracle": self.oracle,
            "tests": self.tests,
            "all_tests": self.all_tests,
            "intra_user_correlation": self.intra_user_correlation,
            "bonferroni_alpha": self.bonferroni_alpha,
            "stability": self.stability,
            **({"attack": self.attack} if self.attack else {}),
            "privacy": self.privacy or self._device_privacy(),
            "code": code_version(),  # the fedrank source that ran it
        }

    def _device_privacy(self) -> dict[str, Any]:
        """The ``privacy`` object of a run without central DP: randomized signs
        (``sign_epsilon``), or no mechanism with epsilon ``None`` (plain sign messages are a
        compression, not DP)."""
        from fedrank.privacy.report import frecency_privacy, run_privacy

        config = {"message": self.config.message, "sign_epsilon": self.config.sign_epsilon}
        rounds = len(self.loss_per_iteration)
        return run_privacy(frecency_privacy(config, None, len(self.final_weights), rounds))


def _nanmean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def iteration_searches(
    world: FrecencyWorld, config: FrecencyStudyConfig, rate: float, days: float,
    rng: np.random.Generator, theta: np.ndarray | Callable[[], np.ndarray] | None = None,
) -> Searches:  # fmt: skip
    """The searches of one iteration: Poisson(``rate``) per user drawn from the hidden
    preference (synthetic), or the log's revisits of the next ``days`` days (AOL); either
    way the window's plain visits enter the history first. ``theta``: the treatment's
    vector of the coming URL-bar pass, or what returns it once known, whose state is
    computed while the targets are drawn
    (:meth:`~fedrank.simulation.frecency.world.FrecencyWorld.draw_searches`)."""
    replayed = world.due_searches(days)  # the users' own browsing in this window
    if config.world == "aol":
        return replayed
    counts = rng.poisson(rate, size=world.n_users)
    users = np.repeat(np.arange(world.n_users), counts)
    return world.draw_searches(users, rng, state_for=theta)


class StudyServer(Protocol):
    """The server half of the study's iterations: this process (:class:`InProcessServer`)
    or a real ``fedrank serve`` reached over HTTP (the service demo's)."""

    def model(self) -> np.ndarray:
        """The published model the clients rank with this iteration."""
        ...

    def weights(self) -> np.ndarray:
        """The server's current parameters (recorded once per iteration)."""
        ...

    def report(
        self,
        world: FrecencyWorld,
        batch: SearchBatch,
        losses: np.ndarray,
        reports: ClientReports,
    ) -> None:
        """Deliver the iteration's client messages (``reports.updates``: the treatment
        clients' privatized gradients, ``reports.n`` their weights) and per-search
        ``losses``."""
        ...

    def close(self) -> None:
        """Close the iteration: aggregate, step, check the safeguards, publish."""
        ...


class InProcessServer:
    """The strategy's server half in this process: the study's iterations as rounds of
    :class:`~fedrank.federation.round.Round` (its close raises
    :class:`~fedrank.strategies.base.SafeguardError` when a safeguard fails)."""

    def __init__(self, round_: Round) -> None:
        self.round = round_

    def model(self) -> np.ndarray:
        return self.round.model()

    def weights(self) -> np.ndarray:
        return self.round.params

    def report(
        self,
        world: FrecencyWorld,
        batch: SearchBatch,
        losses: np.ndarray,
        reports: ClientReports,
    ) -> None:
        self.round.fold(MessageBatch.of_vectors(reports.updates, reports.n))

    def close(self) -> None:
        self.round.close()


def optimization_phase(
    world: FrecencyWorld,
    config: FrecencyStudyConfig,
    client: FrecencyClient,
    server: StudyServer,
    rng: np.random.Generator,
    result: StudyResult,
    progress: Callable[[int, int], None] | None = None,
    clients: FrecencyClients | None = None,
    attack: Attack | None = None,
) -> None:
    """The study's iterations (Sec. 6.2): every iteration the clients take the published
    model, search, compute and privatize their finite-difference gradients (``client``,
    the client half, in this process or on Dask: ``clients``), deliver them to
    ``server`` and the server closes the iteration. Records the losses, weights and
    reports per iteration in ``result``. ``attack``: a fixed share of the treatment users
    sends poisoned updates (:class:`~fedrank.simulation.attacks.FrecencyAttacker`); the
    recorded losses stay the users' true ones, and ``result.attack`` gets the counts. The
    world's pipeline (:class:`~fedrank.simulation.frecency.pipeline.Pipeline`) says how
    the iterations use the cores: the server half beside the next draws, numpy's BLAS
    threads; the results are the same."""
    c = config
    clients = LocalFrecencyClients(client) if clients is None else clients
    scorer = page_scorer(c.model)
    attacker = None
    if attack is not None and attack.active:
        treatment = np.flatnonzero(world.branch == TREATMENT)
        attacker = FrecencyAttacker(attack, treatment, c.seed, sign_messages=c.message == "sign")
    # Figure 7: the plain (ungated, unbounded) mean or sign vote, whatever the server uses
    plain = FrecencyStrategy(
        replace(c, significance_z=0.0, aggregator="gated-mean", norm_bound=0.0, norm_quantile=None)
    ).aggregator
    result.branch_loss_per_iteration = {name: [] for name in BRANCHES}
    result.paper_loss_per_iteration = {name: [] for name in BRANCHES}
    days = c.days_per_iteration
    # While the server half of an iteration runs on a second thread (the clients' messages,
    # the server's step), this thread records the searches and draws the next iteration's;
    # the next URL bars' state waits for the published model (draw_searches). Not when
    # Figure 7's subsamples draw from rng: its draws come before the next searches'.
    pipeline = world.pipeline
    overlap = pipeline.threads and pipeline.overlap_server_half and not c.track_stability

    def server_half(
        iteration: int,
        batch: SearchBatch,
        losses: np.ndarray,
        held: ClientSearches,
        model: np.ndarray,
    ) -> None:
        """The clients' messages on ``model``, delivered; the server's step."""
        coins = ClientRandom(c.seed, iteration, held.users)  # each client's own (signs)
        reports = clients.messages(held, model, coins)
        sent = reports if attacker is None else attacker.apply(iteration, reports)
        server.report(world, batch, losses, sent)
        if c.track_stability:
            # Figure 7 compares plain means (no gate): the update of all reports vs of
            # 2,000 sampled ones; an iteration with fewer than twice that many reports
            # samples half of them (recorded as "sample").
            plain_state = plain.accumulate_batch(
                plain.zero(), MessageBatch.of_vectors(sent.updates, sent.n)
            )
            result.stability.append(
                subsample_l1_distances(
                    plain,
                    sent.updates,
                    sent.n,
                    plain.finalize(plain_state),
                    sample=min(c.stability_sample, max(1, sent.updates.shape[0] // 2)),
                    draws=c.stability_draws,
                    rng=rng,
                )
            )
        result.weights_per_iteration.append(scorer.to_dict(server.weights()))
        result.loss_per_iteration.append(
            float(np.sum(reports.loss * reports.n) / max(reports.n.sum(), 1))
        )
        result.reports_per_iteration.append(int(reports.users.size))
        server.close()

    def stepped_model(*half: Any) -> np.ndarray:
        """:func:`server_half`, then the model the server publishes."""
        server_half(*half)
        return server.model()

    with pipeline.blas(), pipeline.helper("fedrank-server") as pool:
        published = server.model()
        rate = c.searches_per_iteration
        searches = iteration_searches(world, c, rate, days, rng, published)
        for iteration in range(c.iterations):
            batch = world.search(searches, published, rng)
            # what the clients hold for their messages, taken before anything is recorded
            # (on the server's thread, idle until this iteration's half, while the shown
            # rows are scored here: both only read the world)
            held = pool.submit(world.client_searches, batch, TREATMENT)
            shown = world.shown_frecency(batch, published)
            losses = world.branch_losses(batch, published, shown=shown)
            half = (iteration, batch, losses, held.result(), published)
            more = iteration + 1 < c.iterations
            stepped = pool.submit(stepped_model, *half) if more and overlap else None
            paper = world.branch_losses(batch, published, scale="raw", delta=0.0, shown=shown)
            branch_of_search = world.branch[batch.user]
            for b, name in enumerate(BRANCHES):
                mask = branch_of_search == b
                result.branch_loss_per_iteration[name].append(_nanmean(losses[mask]))
                result.paper_loss_per_iteration[name].append(_nanmean(paper[mask]))
            world.record(batch)
            world.advance(days)
            if stepped is not None:
                searches = iteration_searches(world, c, rate, days, rng, stepped.result)
                published = stepped.result()
            else:
                server_half(*half)
                if more:
                    published = server.model()
                    searches = iteration_searches(world, c, rate, days, rng, published)
            if progress is not None:
                progress(iteration + 1, c.iterations)
    if attacker is not None:
        result.attack = attacker.log.to_json()


def study_streams(seed: int) -> list[np.random.SeedSequence]:
    """Independent streams: the world (population, branches), the optimization phase, the
    evaluation phase, and the service demo's clients (ids). Runs that differ only in how
    they learn share the world and the evaluation searches' intents (paired)."""
    return np.random.SeedSequence(seed).spawn(4)


def run_study(
    config: FrecencyStudyConfig,
    progress: Callable[[int, int], None] | None = None,
    *,
    branches: np.ndarray | None = None,
    dask: Client | None = None,
    attack: Attack | None = None,
    dp: PrivacyConfig | None = None,
    pipeline: Pipeline | None = None,
) -> StudyResult:
    """Run the optimization and evaluation phases; ``progress(done, total)`` is called after
    every iteration. ``branches``: each user's branch index (default: an exact random split
    by the configured shares), e.g. the branches a real server assigned in the service
    demo, to run the same study in this process. ``dask``: compute the clients' messages on
    this cluster's workers (:mod:`fedrank.experiments.frecency.clients`; the same result
    bit for bit). ``attack``: a share of the treatment users is malicious
    (:mod:`fedrank.simulation.attacks`). ``dp``: the server adds Gaussian noise to the
    clipped mean, calibrated to this per-user budget over the iterations
    (:class:`~fedrank.strategies.dp.DPStrategy`), and ``result.privacy`` records it.
    ``pipeline``: how the study uses the cores (``None``: the default
    :class:`~fedrank.simulation.frecency.pipeline.Pipeline`; the same result)."""
    world_seed, train_seed, eval_seed, _ = study_streams(config.seed)
    c = config.resolved()
    strategy = FrecencyStrategy(c)
    world = build_world(c, np.random.default_rng(world_seed), pipeline)
    if branches is not None:
        world.set_branches(branches)
    treatment = int(np.count_nonzero(world.branch == TREATMENT))  # who reports
    # DP's noise from a fifth stream, apart from the four
    noise_seed = np.random.SeedSequence(config.seed).spawn(5)[4]
    server_strategy = private(
        strategy,
        dp,
        rounds=c.iterations,
        rng=noise_seed,
        expected_updates=treatment,
        clients=treatment,
    )
    round_ = Round(server_strategy)
    server = InProcessServer(round_)
    result = StudyResult(config=config, world_stats=dict(world.browsing.stats))
    client = FrecencyClient(c)
    clients = None if dask is None else DaskFrecencyClients(dask, client)
    rng = np.random.default_rng(train_seed)
    optimization_phase(world, c, client, server, rng, result, progress, clients, attack)
    if dp is not None:
        counts = result.reports_per_iteration
        result.privacy = run_record(server_strategy, dp, c.iterations, counts, "frecency")
    result.final_weights = strategy.scorer.to_dict(server.weights())
    final = server.model()
    result.published_weights = strategy.scorer.to_dict(final)
    evaluate_phase(world, final, c, eval_seed, result)
    return result


def evaluate_phase(
    world: FrecencyWorld,
    theta: np.ndarray,
    config: FrecencyStudyConfig,
    seed: np.random.SeedSequence,
    result: StudyResult,
    *,
    compare: bool = True,
) -> None:
    """Evaluation phase (Sec. 6.3): the final model, no more updates. Synthetic world: every
    user searches ``eval_searches_per_user`` times on average over the phase; AOL: the log's
    revisits of the last ``aol_eval_days`` days. ``oracle`` (synthetic only; not a branch,
    not tested) ranks the treatment users' same searches by the hidden weights: the best
    any model could do. ``compare=False`` skips the oracle and the tests (calibration).
    The searches run under the world's pipeline's BLAS threads, the tests after them with
    the caller's (their bootstrap's products take both cores)."""
    rng = np.random.default_rng(seed)
    pipeline = world.pipeline
    with pipeline.helper("fedrank-import") as helper:
        # the tests' scipy.stats loads on a helper thread meanwhile (about 1 s)
        loading = helper.submit(importlib.import_module, "scipy.stats") if compare else None
        with pipeline.blas():
            _evaluate(world, theta, config, rng, result, compare)
    if loading is not None:
        loading.result()  # (raises what the import raised)
        _compare(seed, result)


def _evaluate(
    world: FrecencyWorld,
    theta: np.ndarray,
    config: FrecencyStudyConfig,
    rng: np.random.Generator,
    result: StudyResult,
    compare: bool,
) -> None:
    """:func:`evaluate_phase`'s searches and their figures (``result.eval``, the oracle's)."""
    if config.world == "aol":
        n_iter, rate = max(1, round(config.aol_eval_days)), 0.0
        days = config.aol_eval_days / n_iter
    else:
        n_iter = max(1, math.ceil(config.eval_searches_per_user / config.searches_per_iteration))
        rate = config.eval_searches_per_user / n_iter
        days = config.eval_days / n_iter
    batches: list[SearchBatch] = []
    oracles: list[SearchBatch] = []
    loss_parts: list[np.ndarray] = []
    paper_parts: list[np.ndarray] = []
    for _ in range(n_iter):
        searches = iteration_searches(world, config, rate, days, rng, theta)
        attention = int(rng.integers(2**63))
        batch = world.search(searches, theta, np.random.default_rng(attention))
        if compare and world.hidden is not None:  # the treatment users' searches, same draws
            treated = world.branch[searches.users] == TREATMENT
            oracles.append(
                world.search(searches, world.hidden, np.random.default_rng(attention), only=treated)
            )
        batches.append(batch)
        shown = world.shown_frecency(batch, theta)
        loss_parts.append(world.branch_losses(batch, theta, shown=shown))
        paper_parts.append(world.branch_losses(batch, theta, scale="raw", delta=0.0, shown=shown))
        world.record(batch)
        world.advance(days)
    user = np.concatenate([b.user for b in batches])
    found = np.concatenate([b.found for b in batches])
    chars = np.concatenate([b.chars_typed for b in batches]).astype(np.float64)
    rank = np.concatenate([b.selected_rank for b in batches]).astype(np.float64)
    losses = np.concatenate(loss_parts)
    paper = np.concatenate(paper_parts)
    branch = world.branch[user]
    samples: dict[str, dict[str, np.ndarray]] = {}
    for b, name in enumerate(BRANCHES):
        mask = (branch == b) & found
        samples[name] = {
            "user": user[mask],
            "chars_typed": chars[mask],
            "selected_rank": rank[mask],
        }
        result.eval[name] = {
            "chars_typed_mean": float(chars[mask].mean()) if mask.any() else float("nan"),
            "selected_rank_mean": float(rank[mask].mean()) if mask.any() else float("nan"),
            "loss_mean": _nanmean(losses[mask]),
            "paper_loss_mean": _nanmean(paper[mask]),
            "n": int(mask.sum()),
            "n_users": int(unique_values(user[mask]).size),
            "searches_without_history_selection": int(((branch == b) & ~found).sum()),
        }
    result.eval_samples = samples
    if oracles:
        o_user = np.concatenate([o.user for o in oracles])
        o_found = np.concatenate([o.found for o in oracles])
        treated = (world.branch[o_user] == TREATMENT) & o_found
        o_chars = np.concatenate([o.chars_typed for o in oracles])[treated]
        o_rank = np.concatenate([o.selected_rank for o in oracles])[treated]
        result.oracle = {
            "chars_typed_mean": float(o_chars.mean()) if o_chars.size else float("nan"),
            "selected_rank_mean": float(o_rank.mean()) if o_rank.size else float("nan"),
            "n": int(treated.sum()),
        }


def _compare(seed: np.random.SeedSequence, result: StudyResult) -> None:
    """:func:`evaluate_phase`'s user-level tests of the evaluation searches."""
    samples = result.eval_samples
    table = compare_branches_by_user(
        samples, alpha=0.05, rng=np.random.default_rng(seed.spawn(1)[0])
    )
    result.all_tests = table
    result.bonferroni_alpha = 0.05 / len(table)
    result.intra_user_correlation = {
        metric: intra_user_correlation(
            np.concatenate([s[metric] for s in samples.values()]),
            np.concatenate([s["user"] for s in samples.values()]),
        )
        for metric in ("chars_typed", "selected_rank")
    }
    for row in table:
        if row["a"] == "treatment":
            suffix = "" if row["metric"] == "chars_typed" else "_rank"
            key = f"treatment_vs_{row['b'].replace('-', '_')}{suffix}"
            result.tests[key] = {
                "pvalue": row["pvalue"],
                "statistic": row["statistic"],
                "unit": row["unit"],
                "significant": row["significant"],
                "diff": row["diff"],
                "diff_ci95": row["diff_ci95"],
                "n_users_a": row["n_users_a"],
                "n_users_b": row["n_users_b"],
                "pooled_pvalue": row["pooled_pvalue"],
            }


def compare_messages(
    config: FrecencyStudyConfig,
    seeds: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Full-precision vs sign-only messages (Sec. 5.3), paired by seed.

    For every seed the study runs twice, identical but for the message kind (same users,
    same evaluation searches' intents). The *final loss* of a run is the mean SVM loss of
    the treatment users' evaluation-phase searches under the final model (held-out data);
    the last-5-iterations training loss is reported too. ``ratio`` is the sign-only final
    loss over the full-precision one, for the mean over seeds and per seed.
    """
    if not seeds:
        raise ConfigError("compare_messages needs at least one seed")
    rows = []
    done = 0
    for seed in seeds:
        row: dict[str, Any] = {"seed": int(seed)}
        for kind in ("full", "sign"):
            result = run_study(replace(config, seed=int(seed), message=kind))
            row[kind] = {
                "final_loss": result.eval["treatment"]["loss_mean"],
                "last5_training_loss": float(np.mean(result.loss_per_iteration[-5:])),
                "chars_typed_mean": result.eval["treatment"]["chars_typed_mean"],
            }
            done += 1
            if progress is not None:
                progress(done, 2 * len(seeds))
        row["ratio"] = row["sign"]["final_loss"] / row["full"]["final_loss"]
        rows.append(row)
    full = float(np.mean([r["full"]["final_loss"] for r in rows]))
    sign = float(np.mean([r["sign"]["final_loss"] for r in rows]))
    return {
        "config": asdict(config.resolved()),
        "seeds": [int(s) for s in seeds],
        "per_seed": rows,
        "full_final_loss_mean": full,
        "sign_final_loss_mean": sign,
        "ratio": sign / full,
    }
