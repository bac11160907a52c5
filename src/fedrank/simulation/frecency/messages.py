"""What the treatment clients of the frecency study hold and send (Mozilla paper, Sec.
5.4): the searches they made, as the client half computes its message from them
(:class:`ClientSearches`), and every client's message (:class:`ClientReports`), vectorized
over clients. The world hands them out (:meth:`~fedrank.simulation.frecency.world.
FrecencyWorld.client_searches`); the clients compute the messages in this process or on
Dask workers (:mod:`fedrank.experiments.frecency.clients`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.history import PageHistories
from fedrank.models.frecency.scorer import PageScorer

__all__ = ["ClientReports", "ClientSearches"]


@dataclass(frozen=True)
class ClientReports:
    """The messages of the clients that searched in one iteration (vectorized form)."""

    users: np.ndarray  # (C,) user ids
    updates: np.ndarray  # (C, d) mean gradient per client
    n: np.ndarray  # (C,) searches behind each update
    loss: np.ndarray  # (C,) mean loss per client

    @classmethod
    def concat(cls, parts: list[ClientReports]) -> ClientReports:
        """Reports of consecutive client blocks as one (client order kept)."""
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _REPORT_FIELDS))


_REPORT_FIELDS: tuple[str, ...] = ("users", "updates", "n", "loss")


@dataclass(frozen=True)
class ClientSearches:
    """One iteration's searches as their clients hold them: the client half's whole input
    (Sec. 5.4). For every search, the histories of the ``k`` pages it showed (``-1`` padded
    rows invalid) and the rank the user selected; the scorer, loss scale and margin the
    clients compute the SVM loss with. A client's message depends on its own searches only,
    so any block of clients reports what it reports among all (:meth:`block`).

    Attributes:
        users: ``(C,)`` the clients' user ids, ascending.
        client: ``(S,)`` each search's client (an index into ``users``).
        selected: ``(S,)`` the selected rank of each search.
        valid: bool ``(S, k)``: which shown rows are pages.
        pages: the shown pages' histories, ``S * k`` rows, search-major.
        now: the clients' clock (days).
    """

    users: np.ndarray
    client: np.ndarray
    selected: np.ndarray
    valid: np.ndarray
    pages: PageHistories
    now: float
    scorer: PageScorer
    score_scale: str
    delta: float

    @property
    def n_clients(self) -> int:
        return int(self.users.size)

    def work(self) -> np.ndarray:
        """``(C,)`` searches per client (to balance blocks)."""
        return np.bincount(self.client, minlength=self.n_clients)

    def block(self, lo: int, hi: int) -> ClientSearches:
        """Clients ``lo .. hi - 1`` and their searches, in the same order."""
        rows = np.flatnonzero((self.client >= lo) & (self.client < hi))
        k = self.valid.shape[1]
        return replace(
            self,
            users=self.users[lo:hi],
            client=self.client[rows] - lo,
            selected=self.selected[rows],
            valid=self.valid[rows],
            pages=self.pages.take(rows[:, None] * k + np.arange(k)),
        )

    def reports(self, theta: np.ndarray, estimator: FiniteDifferenceEstimator) -> ClientReports:
        """Every client's message: the mean finite-difference gradient of the SVM loss over
        its own searches, with their number as its weight ``n_i``, and its mean loss."""
        n_searches, k = self.valid.shape

        def objective(rows: np.ndarray) -> np.ndarray:
            scores = scaled_scores(self.scorer.fresh(rows, self.pages, self.now), self.score_scale)
            return pointwise_svm_loss(
                scores.reshape(rows.shape[0], n_searches, k), self.selected, self.valid, self.delta
            )

        updates, n, loss = estimator.estimate_clients(theta, objective, self.client, self.n_clients)
        return ClientReports(users=self.users, updates=updates, n=n, loss=loss)
