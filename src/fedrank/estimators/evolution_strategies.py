"""The FOLtR-ES client: perturb the model from a seed, rank, observe clicks, report the
privatized metric (Kharitonov, WSDM 2019, Sections 3.2-3.3 and 5).

Each client ``u`` (a) draws a seed ``s``, (b) perturbs the model, ``theta_s = phi + sigma
v_s`` with ``v_s ~ N(0, I)`` regenerated from ``s``
(:func:`fedrank.core.seeded_noise.gaussian_noise`), (c) serves ``B`` interactions -- each a
query drawn uniformly from the data, ranked by the perturbed model, and a simulated user's
clicks on the top 10 -- and averages their (privatized) MaxRR, (d) sends ``(s, f)``. With
antithetic variates the first ``B / 2`` interactions use ``phi + sigma v_s`` and the last
``B / 2`` use ``phi - sigma v_s``, and the message carries both means.

:class:`ESEstimator` runs this for *all* clients of an iteration at once: one noise matrix,
one batch of queries, ranking and clicks as row-wise numpy operations on the padded query
blocks of a :class:`~fedrank.data.query_bank.QueryBank`. There is no Python loop over
clients or interactions (only over the handful of query-size buckets).

The first click without sorting. MaxRR depends only on the first click. Under a cascade
model the probability that a position is clicked, given no click above it, depends only on
the document there (:attr:`~fedrank.models.click_models.CascadeClickModel.
position_free_hazard`). So each document gets one coin ``u < P(click | r)``, drawn before
ranking, and the first click is on the best-ranked document whose coin came up: the
clickable document with the highest score (ties: the earlier document, as in the stable
ranking). Its rank is the number of documents ranked above it, one comparison per
document. Coins attached to documents instead of positions have the same joint law because
the ranking does not depend on them; :mod:`tests.estimators.test_evolution_strategies`
checks the result against full rankings and sequential click simulation. Other click
models (the position-based one) take the general path: sort, then sample the first click
from the per-position hazard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedrank.core.client_random import ClientRandom, Stream
from fedrank.core.message import ESMessage
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.data.query_bank import InteractionGroup, QueryBank
from fedrank.errors import ConfigError
from fedrank.metrics.maxrr import maxrr_values
from fedrank.metrics.ranking import ranked_labels
from fedrank.models.click_models import ClickModel
from fedrank.models.rankers import Ranker
from fedrank.privacy.randomized_response import RandomizedResponse


@dataclass(frozen=True)
class ESReports:
    """What the clients of one iteration produced.

    Attributes:
        seeds: ``(C,)`` uint32 seeds.
        metric: ``(C,)`` float32 mean privatized MaxRR of the ``+sigma v`` interactions (of
            all ``B`` interactions without antithetic variates), as sent.
        antithetic_metric: ``(C,)`` float32 the same for ``-sigma v``, or ``None``.
        maxrr: ``(C, B)`` true (non-privatized) MaxRR of every interaction, client-major:
            what users experienced.
    """

    seeds: np.ndarray
    metric: np.ndarray
    antithetic_metric: np.ndarray | None
    maxrr: np.ndarray

    def messages(self, model_version: int = 0) -> list[ESMessage]:
        """One :class:`~fedrank.core.message.ESMessage` per client (for the wire)."""
        anti = self.antithetic_metric
        return [
            ESMessage(int(s), float(m), None if anti is None else float(anti[i]), model_version)
            for i, (s, m) in enumerate(zip(self.seeds.tolist(), self.metric.tolist(), strict=True))
        ]


def first_clickable_rank(
    scores: np.ndarray, valid: np.ndarray, clickable: np.ndarray
) -> np.ndarray:
    """``(I,)`` rank (0-based) in the stable ranking by score of the best-ranked clickable
    document of each row, or ``-1`` if no document is clickable. Equals sorting each row
    with :func:`fedrank.metrics.ranking.rank_order` and taking the first clickable
    position, in ``O(W)`` per row instead of ``O(W log W)``."""
    best = np.where(clickable, scores, -np.inf).max(axis=1)
    at_best = clickable & (scores == best[:, None])
    best_slot = np.argmax(at_best, axis=1)
    slot = np.arange(scores.shape[1])[None, :]
    higher = scores > best[:, None]
    tied_before = (scores == best[:, None]) & (slot < best_slot[:, None])
    rank = (valid & (higher | tied_before)).sum(axis=1)
    return np.where(clickable.any(axis=1), rank, -1)


def first_click_index(
    group: InteractionGroup,
    scores: np.ndarray,
    model: ClickModel,
    coins: Callable[[int], np.ndarray],
) -> np.ndarray:
    """``(I_b,)`` MaxRR value index (0 = no click in the top ``depth``, ``v`` = first click
    at position ``v - 1``) of one bucket's interactions, given their ``(I_b, W)`` scores;
    ``coins(n)`` gives ``(I_b, n)`` uniforms (one per document slot, or per position)."""
    labels = group.labels()
    valid = labels >= 0
    if model.position_free_hazard:
        clickable = coins(labels.shape[1]) < model.attraction(labels)
        rank = first_clickable_rank(scores, valid, clickable)
        return np.where((rank >= 0) & (rank < model.depth), rank + 1, 0)
    ranked = ranked_labels(np.where(valid, scores, -np.inf), labels, model.depth)
    hazard = model.hazard(ranked)
    success = coins(hazard.shape[1]) < hazard
    return np.where(success.any(axis=1), np.argmax(success, axis=1) + 1, 0)


class ESEstimator:
    """FOLtR-ES clients, vectorized (Section 3.2).

    Args:
        ranker: the model family (:mod:`fedrank.models.rankers`).
        click_model: the simulated users (Section 5; Table 1).
        sigma: perturbation scale (the paper fixes 0.01).
        batch: interactions per client and message, ``B`` (4); even with antithetic variates.
        antithetic: use antithetic variates (the paper's default from Section 6.2 on).
        privatizer: randomized response over MaxRR's values (Section 3.3), or ``None`` to
            send true values.
    """

    def __init__(
        self,
        ranker: Ranker,
        click_model: ClickModel,
        sigma: float = 0.01,
        batch: int = 4,
        antithetic: bool = True,
        privatizer: RandomizedResponse | None = None,
    ) -> None:
        if not (np.isfinite(sigma) and sigma > 0):
            raise ConfigError(f"sigma must be a finite number > 0, got {sigma}")
        if batch < 1:
            raise ConfigError(f"batch (B) must be >= 1, got {batch}")
        if antithetic and batch % 2:
            raise ConfigError(
                f"with antithetic variates B must be even (B/2 interactions per direction), "
                f"got B = {batch}"
            )
        if privatizer is not None and privatizer.n != click_model.depth + 1:
            raise ConfigError(
                f"the privatizer covers {privatizer.n} values but MaxRR at depth "
                f"{click_model.depth} takes {click_model.depth + 1}"
            )
        self.ranker = ranker
        self.click_model = click_model
        self.sigma = float(sigma)
        self.batch = int(batch)
        self.antithetic = bool(antithetic)
        self.privatizer = privatizer

    def signs(self) -> np.ndarray:
        """``(B,)`` direction of each of a client's interactions: ``+1``, or ``+1`` for the
        first half and ``-1`` for the second with antithetic variates."""
        signs = np.ones(self.batch, dtype=np.float32)
        if self.antithetic:
            signs[self.batch // 2 :] = -1.0
        return signs

    def interact(self, params: np.ndarray, bank: QueryBank, random: ClientRandom) -> ESReports:
        """Run ``B`` interactions for each client of ``random`` against the model
        ``params``. Every random number (seed, queries, clicks, privatization coins) is the
        client's own (:class:`~fedrank.core.client_random.ClientRandom`), so a client's
        report does not depend on which other clients run in the same call."""
        theta = np.asarray(params, dtype=np.float64)
        if theta.shape != (self.ranker.dim,):
            raise ConfigError(f"expected {self.ranker.dim} parameters, got shape {theta.shape}")
        if bank.n_features != getattr(self.ranker, "n_features", bank.n_features):
            raise ConfigError(
                f"the ranker expects {self.ranker.n_features} features, the data has "
                f"{bank.n_features}"
            )
        seeds = random.seeds()
        n_clients, b = seeds.size, self.batch
        noise = gaussian_noise(seeds, self.ranker.dim)  # (C, d) float32
        client = np.repeat(np.arange(n_clients), b)  # interactions are client-major
        step = np.tile(np.arange(b), n_clients)  # the interaction's number at its client
        queries = random.integers(client, Stream.QUERY, step, bank.n_queries)
        scale = np.tile(self.signs(), n_clients) * np.float32(self.sigma)
        theta32 = theta.astype(np.float32)
        index = np.zeros(n_clients * b, dtype=np.int64)
        for group in bank.group(queries):
            i = group.interactions
            rows = theta32 + scale[i, None] * noise[client[i]]
            scores = self.ranker.score_rows(rows, group.features())

            def coins(n: int, i: np.ndarray = i) -> np.ndarray:
                return random.uniform_slots(client[i], Stream.CLICK, step[i], n)

            index[i] = first_click_index(group, scores, self.click_model, coins)
        values = maxrr_values(self.click_model.depth)
        true = values[index].reshape(n_clients, b)
        if self.privatizer is None:
            sent = index
        else:
            sent = self.privatizer.respond(
                index,
                random.uniform(client, Stream.KEEP, step),
                random.uniform(client, Stream.SHIFT, step),
            )
        sent_values = values[sent].reshape(n_clients, b)
        if self.antithetic:
            half = b // 2
            metric = sent_values[:, :half].mean(axis=1).astype(np.float32)
            anti = sent_values[:, half:].mean(axis=1).astype(np.float32)
        else:
            metric, anti = sent_values.mean(axis=1).astype(np.float32), None
        return ESReports(seeds, metric, anti, true)

    def estimate(
        self, params: np.ndarray, local_data: QueryBank, rng: np.random.Generator
    ) -> ESMessage:
        """One client's message (the :class:`~fedrank.core.protocols.Estimator` protocol):
        its random numbers are keyed by a run seed drawn from ``rng``."""
        run_seed = int(rng.integers(2**63))
        reports = self.interact(params, local_data, ClientRandom(run_seed, 0, np.zeros(1, int)))
        return reports.messages()[0]
