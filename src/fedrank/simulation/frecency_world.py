"""The simulated world of the frecency study (Mozilla paper, Sections 6.1-6.2).

A :class:`FrecencyWorld` holds the users (their synthetic histories and hidden
preferences), their study branch, and the URL bar. It turns a model's weights into searches
(what each user typed, saw and chose) and turns the treatment users' searches into client
messages with the finite-difference estimator. Everything is vectorized over users and
searches: one call simulates every search of an iteration.

Branches (paper Sec. 6.2): ``treatment`` uses the model being trained, recomputed every
iteration; ``control`` uses Firefox's default weights with the cached, daily-decayed scores;
``control-no-decay`` uses the default weights recomputed without decay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.data.synthetic_history import HistoryConfig, Population, generate_population
from fedrank.errors import ConfigError
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.classic import ClassicFrecency
from fedrank.models.frecency.weights import classic_defaults
from fedrank.simulation.intent import sample_intents
from fedrank.simulation.urlbar import SearchBatch, simulate_searches

BRANCHES: tuple[str, ...] = ("treatment", "control", "control-no-decay")
TREATMENT, CONTROL, CONTROL_NO_DECAY = range(3)


def assign_branches(
    n_users: int, shares: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """Branch index of every user: an exact split by ``shares`` (paper: 60/20/20), in random
    order."""
    if len(shares) != 3 or min(shares) < 0 or not np.isclose(sum(shares), 1.0):
        raise ConfigError(
            f"branch shares must be three non-negative numbers summing to 1, got {shares}"
        )
    counts = np.floor(np.asarray(shares) * n_users).astype(np.int64)
    counts[0] += n_users - counts.sum()
    return rng.permutation(np.repeat(np.arange(3), counts))


@dataclass(frozen=True)
class ClientReports:
    """The messages of the clients that searched in one iteration (vectorized form)."""

    users: np.ndarray  # (C,) user ids
    updates: np.ndarray  # (C, d) mean gradient per client
    n: np.ndarray  # (C,) searches behind each update
    loss: np.ndarray  # (C,) mean loss per client


class FrecencyWorld:
    """Users, their histories and preferences, their branches, and the URL bar.

    Args:
        n_users: number of users.
        hidden: the hidden weights of the users' true preference.
        rng: randomness for the population and branch assignment.
        history: synthetic history configuration.
        shares: treatment / control / control-no-decay shares.
        k: suggestions shown (``k``, default 10).
        noise_var: variance of the Gaussian noise on the users' preference (paper: 30).
        decay_rate: Firefox's daily frecency decay for the control branch (0.975).
        delta: the SVM margin ``Delta`` (on the ``score_scale``).
        score_scale: ``"log"`` (scale-free loss, default) or ``"raw"`` (the paper's loss on
            raw frecency points), see :func:`fedrank.losses.pointwise_svm.scaled_scores`.
        attention_depth: suggestions the simulated user scans after every keystroke.
        intent: how the wanted page is chosen (``first-letter``, ``topic`` or ``proportional``, see
            :func:`fedrank.simulation.intent.sample_intents`).
        model: the frecency scorer (classic, Firefox's integer rounding by default).
    """

    def __init__(
        self,
        n_users: int,
        hidden: np.ndarray,
        rng: np.random.Generator,
        *,
        history: HistoryConfig | None = None,
        shares: tuple[float, float, float] = (0.6, 0.2, 0.2),
        k: int = 10,
        noise_var: float = 30.0,
        decay_rate: float = 0.975,
        delta: float = 0.1,
        score_scale: str = "log",
        attention_depth: int | None = 3,
        intent: str = "first-letter",
        model: ClassicFrecency | None = None,
    ) -> None:
        if n_users < 3:
            raise ConfigError(f"the study needs at least 3 users (one per branch), got {n_users}")
        self.model = model or ClassicFrecency()
        self.population: Population = generate_population(n_users, rng, history or HistoryConfig())
        self.branch = assign_branches(n_users, shares, rng)
        self.k = k
        self.noise_var = noise_var
        self.delta = delta
        scaled_scores(np.zeros(1), score_scale)  # validates the name
        self.score_scale = score_scale
        self.attention_depth = attention_depth
        self.intent = intent
        pages = self.population.pages
        self.hidden = np.asarray(hidden, dtype=np.float64)
        self.true_scores = np.asarray(self.model.score(hidden, pages), dtype=np.float64)
        defaults = classic_defaults()
        self.control_scores = np.asarray(
            self.model.decayed_score(defaults, pages, decay_rate=decay_rate), dtype=np.float64
        )
        self.no_decay_scores = np.asarray(self.model.score(defaults, pages), dtype=np.float64)
        self.page_branch = self.branch[self.population.page_user]

    @property
    def n_users(self) -> int:
        return int(self.branch.size)

    def users_of(self, branch: int) -> np.ndarray:
        return np.flatnonzero(self.branch == branch)

    def page_scores(self, theta: np.ndarray) -> np.ndarray:
        """The score every page has in its owner's URL bar when treatment uses ``theta``."""
        treatment = np.asarray(self.model.score(theta, self.population.pages), dtype=np.float64)
        return np.select(
            [self.page_branch == TREATMENT, self.page_branch == CONTROL],
            [treatment, self.control_scores],
            self.no_decay_scores,
        )

    def search(
        self, users: np.ndarray, theta: np.ndarray, rng: np.random.Generator
    ) -> tuple[SearchBatch, np.ndarray]:
        """One search per entry of ``users``: each wants a page (drawn from the hidden
        preference) and types until the URL bar shows it. Returns the batch and the score
        of every page under its owner's branch model."""
        scores = self.page_scores(theta)
        targets, first_slot = sample_intents(
            self.population, users, self.true_scores, rng, self.noise_var, self.intent
        )
        batch = simulate_searches(
            self.population, users, targets, scores,
            k=self.k, attention_depth=self.attention_depth, first_slot=first_slot,
        )  # fmt: skip
        return batch, scores

    def branch_losses(self, batch: SearchBatch, scores: np.ndarray) -> np.ndarray:
        """SVM loss of every search under the model its user's branch ran (NaN where the
        target was never shown)."""
        valid = batch.shown >= 0
        shown_scores = scaled_scores(scores[np.where(valid, batch.shown, 0)], self.score_scale)
        selected = np.where(batch.found, batch.selected_rank, 0)
        loss = pointwise_svm_loss(shown_scores, selected, valid | ~batch.found[:, None], self.delta)
        return np.where(batch.found, loss, np.nan)

    def client_reports(
        self,
        batch: SearchBatch,
        theta: np.ndarray,
        estimator: FiniteDifferenceEstimator,
        branch: int = TREATMENT,
    ) -> ClientReports:
        """The finite-difference messages of the ``branch`` users who searched in ``batch``.

        Each client sends the mean gradient of the SVM loss over its own searches (in which
        the target was shown), with the number of those searches as its weight ``n_i``.
        """
        keep = batch.found & (self.branch[batch.user] == branch)
        shown = batch.shown[keep]
        valid = shown >= 0
        selected = batch.selected_rank[keep]
        users, client = np.unique(batch.user[keep], return_inverse=True)
        flat_pages = self.population.pages.take(np.where(valid, shown, 0).reshape(-1))
        n_searches, k = shown.shape

        def objective(rows: np.ndarray) -> np.ndarray:
            scores = scaled_scores(self.model.score(rows, flat_pages), self.score_scale)
            return pointwise_svm_loss(
                scores.reshape(rows.shape[0], n_searches, k), selected, valid, self.delta
            )

        updates, n, loss = estimator.estimate_clients(theta, objective, client, users.size)
        return ClientReports(users=users, updates=updates, n=n, loss=loss)
