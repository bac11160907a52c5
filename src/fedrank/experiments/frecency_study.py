"""The federated frecency study, simulated end to end (Mozilla paper, Sections 5-6).

The tuned model is Firefox's classic frecency (22 weights, as in the paper; default) or
today's modern frecency (5 parameters): ``FrecencyStudyConfig.model``.

Users are split into treatment / control / control-no-decay (60/20/20). In the optimization
phase, every iteration ("30 minutes") each user performs a Poisson number of URL-bar
searches; treatment users search with the current model and send a finite-difference
gradient of the SVM loss (full precision, or signs only); the server aggregates the reports
(weighted mean, or sign-majority vote), steps with Rprop and applies the safeguards; every
branch reports its loss. Then an evaluation phase measures, on fresh searches, the
characters typed and the rank selected per branch, compared with two-sided Mann-Whitney U
tests at a Bonferroni-corrected level of 0.05/6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from fedrank.aggregators.gated_mean import GatedMean
from fedrank.aggregators.sign_vote import SignVote
from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.experiments.frecency_presets import hidden_weights
from fedrank.experiments.stability import subsample_l1_distances
from fedrank.experiments.stats import compare_branches
from fedrank.losses.pointwise_svm import SCORE_SCALES
from fedrank.optim.adam import Adam
from fedrank.optim.rprop import Rprop
from fedrank.optim.sgd import SGD
from fedrank.privacy.sign import SignCompressor
from fedrank.simulation.frecency_world import (
    BRANCHES,
    MODELS,
    TREATMENT,
    FrecencyWorld,
    page_scorer,
)
from fedrank.simulation.intent import INTENT_MODELS

MessageKind = Literal["full", "sign"]
OptimizerKind = Literal["rprop", "sgd", "adam"]


@dataclass(frozen=True)
class FrecencyStudyConfig:
    """Every knob of the study, with the paper's names and defaults where it has them.

    Attributes:
        model: the frecency model tuned: ``classic`` (the paper's 22 weights, default) or
            ``modern`` (Firefox 128+: four class weights and ``halfLifeDays``); see
            :mod:`fedrank.simulation.frecency_world`.
        preset: hidden preference of the users (``paper`` or ``shifted``), see
            :func:`fedrank.experiments.frecency_presets.hidden_weights`.
        n_users: users enrolled (split 60/20/20).
        iterations: optimization iterations (paper: 137 of 30 minutes; 40 shown to suffice).
        seed: seed of every random choice in the study.
        searches_per_iteration: mean (Poisson) URL-bar searches per user per iteration.
        eval_searches_per_user: searches per user in the evaluation phase (20; the paper's
            evaluation phase ran 10 days).
        k: suggestions shown by the URL bar.
        delta: SVM margin ``Delta`` (Sec. 5.2), on the ``score_scale`` (a log-ratio for
            ``log``; for ``raw``, frecency points for classic, days for modern). ``None``
            (default): the model's default for the scale, 0.1 for classic, 6.0 days for
            modern on its ``raw`` scale (a smaller margin rewards shortening
            ``halfLifeDays`` without improving the ranking; see
            :class:`~fedrank.simulation.frecency_world.ModernScorer`).
        score_scale: ``log`` or ``raw``; ``None`` (default): the model's default. Classic
            uses ``log`` (scale-free; the paper's ``raw`` loss on classic frecency has a
            minimizer that shrinks every weight: see ``docs/frecency.md``). Modern uses
            ``raw``: a modern score is a day number plus ``ln(s) / lambda``, so a common
            factor on the class weights only shifts every score and the raw loss is already
            free of their scale (``log1p`` of ~20,000 would squash the differences).
            :meth:`resolved` fills both in; ``StudyResult.to_json`` shows resolved values.
        attention_depth: suggestions the simulated user scans after each keystroke (3).
        intent: how a search's wanted page is chosen: ``first-letter`` (the paper's mock
            selection rule, default), ``topic`` or ``proportional``; see
            :func:`fedrank.simulation.intent.sample_intents`.
        eps: finite-difference ``epsilon`` (Sec. 5.4), in weight units.
        scheme: ``central`` (paper) or ``forward`` differences.
        message: ``full`` float vectors with a weighted mean, or ``sign`` (2 bits per weight)
            with a sign-majority vote (Sec. 5.3).
        optimizer: ``rprop`` (paper), ``sgd`` or ``adam``.
        significance_z: the aggregator's per-weight significance gate in standard errors
            (2; 0 = the paper's plain mean / majority vote): a weight whose aggregate is not
            significantly non-zero is not moved (see :mod:`fedrank.aggregators.gated_mean`).
        eta_plus, eta_minus, step_init, step_min, step_max: Rprop (Eq. 2).
        learning_rate: SGD / Adam learning rate.
        max_change: safeguard bound on the change of any weight per iteration (3).
        decay_rate: Firefox's daily frecency decay in the control branch (0.975; classic
            only: modern frecency has no decay job, and both its control branches use the
            default parameters).
        noise_var: variance of the noise on the users' preference (paper: 30).
        track_stability: also run the Fig. 7 analysis every iteration.
        stability_sample, stability_draws: subsample size (2,000) and draws (50) of Fig. 7;
            an iteration with fewer than twice ``stability_sample`` reports draws half of
            them (the sample size used is recorded per iteration).
    """

    preset: str = "shifted"
    model: str = "classic"
    n_users: int = 3000
    iterations: int = 40
    seed: int = 0
    searches_per_iteration: float = 1.0
    eval_searches_per_user: int = 20
    k: int = 10
    delta: float | None = None
    score_scale: Literal["log", "raw"] | None = None
    attention_depth: int = 3
    intent: str = "first-letter"
    eps: float = 1.0
    scheme: Literal["central", "forward"] = "central"
    message: MessageKind = "full"
    optimizer: OptimizerKind = "rprop"
    significance_z: float = 2.0
    eta_plus: float = 1.2
    eta_minus: float = 0.5
    step_init: float = 1.0
    step_min: float = 1e-3
    step_max: float = 3.0
    learning_rate: float = 1.0
    max_change: float = 3.0
    decay_rate: float = 0.975
    noise_var: float = 30.0
    track_stability: bool = False
    stability_sample: int = 2000
    stability_draws: int = 50

    def __post_init__(self) -> None:
        if self.n_users < 3:
            raise ConfigError(f"n_users must be >= 3 (one per branch), got {self.n_users}")
        if self.iterations < 1:
            raise ConfigError(f"iterations must be >= 1, got {self.iterations}")
        if self.searches_per_iteration <= 0:
            raise ConfigError("searches_per_iteration must be > 0")
        if self.eval_searches_per_user < 1:
            raise ConfigError("eval_searches_per_user must be >= 1")
        if self.message not in ("full", "sign"):
            raise ConfigError(f"message must be 'full' or 'sign', got {self.message!r}")
        if self.optimizer not in ("rprop", "sgd", "adam"):
            raise ConfigError(f"optimizer must be rprop, sgd or adam, got {self.optimizer!r}")
        if self.model not in MODELS:
            raise ConfigError(
                f"model must be one of {', '.join(MODELS)} (the frecency algorithm tuned), "
                f"got {self.model!r}"
            )
        hidden_weights(self.preset, self.model)  # validates the preset name
        if self.intent not in INTENT_MODELS:
            raise ConfigError(
                f"intent must be one of {', '.join(INTENT_MODELS)}, got {self.intent!r}"
            )
        if self.score_scale is not None and self.score_scale not in SCORE_SCALES:
            raise ConfigError(
                f"score_scale must be one of {', '.join(SCORE_SCALES)}, got {self.score_scale!r}"
            )
        if not 1 <= self.attention_depth <= self.k:
            raise ConfigError(
                f"attention_depth must be in 1..k={self.k}, got {self.attention_depth}"
            )
        if not (np.isfinite(self.significance_z) and self.significance_z >= 0):
            raise ConfigError(f"significance_z must be finite and >= 0, got {self.significance_z}")
        if self.delta is not None and not (np.isfinite(self.delta) and self.delta >= 0):
            raise ConfigError(
                f"delta (the SVM margin) must be a finite number >= 0, got {self.delta}"
            )

    def resolved(self) -> FrecencyStudyConfig:
        """This configuration with ``score_scale`` and ``delta`` set: ``None`` becomes the
        model's default (classic: ``log``, 0.1; modern: ``raw``, 6.0 days; an explicit
        scale gets the model's margin for that scale). The one place where those defaults
        are applied."""
        scorer = page_scorer(self.model)
        scale = scorer.default_score_scale if self.score_scale is None else self.score_scale
        delta = scorer.default_delta(scale) if self.delta is None else float(self.delta)
        return replace(self, score_scale=scale, delta=delta)


def build_optimizer(config: FrecencyStudyConfig) -> Rprop | SGD | Adam:
    """The server's optimizer for ``config``."""
    if config.optimizer == "rprop":
        return Rprop(
            eta_plus=config.eta_plus,
            eta_minus=config.eta_minus,
            step_init=config.step_init,
            step_min=config.step_min,
            step_max=config.step_max,
        )
    if config.optimizer == "sgd":
        return SGD(learning_rate=config.learning_rate)
    return Adam(learning_rate=config.learning_rate)


def build_aggregator(config: FrecencyStudyConfig, dim: int) -> GatedMean | SignVote:
    """The server's aggregator: the (gated) weighted mean of full-precision updates, or the
    (gated) sign-majority vote of sign-only ones; ``significance_z = 0`` gives the paper's
    plain mean / majority."""
    if config.message == "full":
        return GatedMean(dim, z=config.significance_z)
    return SignVote(dim, z=config.significance_z)


@dataclass
class StudyResult:
    """What a study run produced (``to_json`` gives the documented JSON)."""

    config: FrecencyStudyConfig
    loss_per_iteration: list[float] = field(default_factory=list)
    branch_loss_per_iteration: dict[str, list[float]] = field(default_factory=dict)
    weights_per_iteration: list[dict[str, float]] = field(default_factory=list)
    final_weights: dict[str, float] = field(default_factory=dict)
    reports_per_iteration: list[int] = field(default_factory=list)
    constraints_held: bool = True
    eval: dict[str, dict[str, float]] = field(default_factory=dict)
    oracle: dict[str, float] = field(default_factory=dict)
    tests: dict[str, dict[str, float]] = field(default_factory=dict)
    all_tests: list[dict[str, Any]] = field(default_factory=list)
    bonferroni_alpha: float = 0.05 / 6
    stability: list[dict[str, float]] = field(default_factory=list)
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
            "weights_per_iteration": self.weights_per_iteration,
            "final_weights": self.final_weights,
            "reports_per_iteration": self.reports_per_iteration,
            "constraints_held": self.constraints_held,
            "eval": self.eval,
            "oracle": self.oracle,
            "tests": self.tests,
            "all_tests": self.all_tests,
            "bonferroni_alpha": self.bonferroni_alpha,
            "stability": self.stability,
        }


def _nanmean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def run_study(
    config: FrecencyStudyConfig,
    progress: Callable[[int, int], None] | None = None,
) -> StudyResult:
    """Run the optimization and evaluation phases; ``progress(done, total)`` is called after
    every iteration."""
    # Independent streams: the world (population, branches), the optimization phase, and
    # the evaluation phase. Runs that differ only in how they learn (message kind,
    # optimizer, ...) share the world and the evaluation searches' intents (paired).
    world_seed, train_seed, eval_seed = np.random.SeedSequence(config.seed).spawn(3)
    rng = np.random.default_rng(world_seed)
    loss = config.resolved()
    scorer = page_scorer(config.model)
    world = FrecencyWorld(
        config.n_users,
        hidden_weights(config.preset, config.model),
        rng,
        k=config.k,
        noise_var=config.noise_var,
        decay_rate=config.decay_rate,
        delta=loss.delta,
        score_scale=loss.score_scale,
        attention_depth=config.attention_depth,
        intent=config.intent,
        model=scorer,
    )
    estimator = FiniteDifferenceEstimator(eps=config.eps, scheme=config.scheme)
    dim = len(scorer.names)
    aggregator = build_aggregator(config, dim)
    compressor = SignCompressor(with_zero=True) if config.message == "sign" else None
    optimizer = build_optimizer(config)
    safeguards = scorer.safeguards(max_change=config.max_change)

    theta = scorer.defaults()  # safeguard: start from Firefox's weights (Sec. 5.6)
    opt_state = optimizer.init(theta)
    rng = np.random.default_rng(train_seed)
    result = StudyResult(config=config)
    result.branch_loss_per_iteration = {name: [] for name in BRANCHES}

    for iteration in range(config.iterations):
        counts = rng.poisson(config.searches_per_iteration, size=world.n_users)
        users = np.repeat(np.arange(world.n_users), counts)
        batch, scores = world.search(users, theta, rng)
        losses = world.branch_losses(batch, scores)
        branch_of_search = world.branch[batch.user]
        for b, name in enumerate(BRANCHES):
            result.branch_loss_per_iteration[name].append(_nanmean(losses[branch_of_search == b]))

        reports = world.client_reports(batch, theta, estimator, TREATMENT)
        updates = reports.updates
        if compressor is not None:
            updates = compressor.privatize_batch(updates, rng)
        state = aggregator.accumulate_batch(aggregator.zero(), updates, reports.n)
        update = aggregator.finalize(state)
        if config.track_stability:
            result.stability.append(
                subsample_l1_distances(
                    aggregator,
                    updates,
                    reports.n,
                    update,
                    # Fig. 7 draws 2,000 of many more reports; a smaller study draws half.
                    sample=min(config.stability_sample, max(1, updates.shape[0] // 2)),
                    draws=config.stability_draws,
                    rng=rng,
                )
            )

        result.weights_per_iteration.append(scorer.to_dict(theta))
        result.loss_per_iteration.append(
            float(np.sum(reports.loss * reports.n) / max(reports.n.sum(), 1))
        )
        result.reports_per_iteration.append(int(reports.users.size))

        step, opt_state = optimizer.update(update, opt_state, theta)
        proposal = theta + step
        new_theta = safeguards.project(proposal, theta)
        held = safeguards.holds(new_theta, theta)
        result.constraints_held = result.constraints_held and held
        theta = new_theta
        if progress is not None:
            progress(iteration + 1, config.iterations)

    result.final_weights = scorer.to_dict(theta)
    _evaluate(world, theta, config, eval_seed, result)
    return result


def _evaluate(
    world: FrecencyWorld,
    theta: np.ndarray,
    config: FrecencyStudyConfig,
    seed: np.random.SeedSequence,
    result: StudyResult,
) -> None:
    """Evaluation phase (Sec. 6.3): fresh searches by every user with the final models.

    ``oracle`` (not a branch, not tested) is the treatment users' searches ranked by
    the hidden weights themselves, drawn with the same seed: the best any model could do.
    """
    users = np.repeat(np.arange(world.n_users), config.eval_searches_per_user)
    batch, scores = world.search(users, theta, np.random.default_rng(seed))
    oracle, _ = world.search(users, world.hidden, np.random.default_rng(seed))
    losses = world.branch_losses(batch, scores)
    branch_of_search = world.branch[batch.user]
    samples: dict[str, dict[str, np.ndarray]] = {}
    for b, name in enumerate(BRANCHES):
        mask = branch_of_search == b
        chars = batch.chars_typed[mask].astype(np.float64)
        rank = batch.selected_rank[mask].astype(np.float64)
        samples[name] = {"chars_typed": chars, "selected_rank": rank}
        result.eval[name] = {
            "chars_typed_mean": float(chars.mean()) if chars.size else float("nan"),
            "selected_rank_mean": float(rank.mean()) if rank.size else float("nan"),
            "loss_mean": _nanmean(losses[mask]),
            "n": int(mask.sum()),
        }
    result.eval_samples = samples
    treated = world.branch[oracle.user] == TREATMENT
    result.oracle = {
        "chars_typed_mean": float(oracle.chars_typed[treated].mean())
        if treated.any()
        else float("nan"),
        "selected_rank_mean": float(oracle.selected_rank[treated].mean())
        if treated.any()
        else float("nan"),
        "n": int(treated.sum()),
    }
    table = compare_branches(samples, alpha=0.05)
    result.all_tests = table
    result.bonferroni_alpha = 0.05 / len(table)
    for row in table:
        if row["metric"] == "chars_typed" and row["a"] == "treatment":
            key = f"treatment_vs_{row['b'].replace('-', '_')}"
            result.tests[key] = {
                "pvalue": row["pvalue"],
                "statistic": row["statistic"],
                "significant": row["significant"],
            }


def compare_messages(
    config: FrecencyStudyConfig,
    seeds: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Full-precision vs sign-only messages (Sec. 5.3), paired by seed.

    For every seed the study runs twice, identical but for the message kind (same users,
    same evaluation searches' intents). The *final loss* of a run is the mean SVM loss of
    the treatment users' evaluation-phase searches under the final model (held-out data,
    ``eval_searches_per_user`` per user); the last-5-iterations training loss is reported
    too. ``ratio`` is the sign-only final loss over the full-precision one, for the mean
    over seeds and per seed.
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
