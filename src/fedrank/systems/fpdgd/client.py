"""FPDGD's client half (Wang et al., ICTIR 2021, Algorithm 1): a device starts from the
served model, learns from its own user's ``B`` interactions by Pairwise Differentiable
Gradient Descent (Oosterhuis & de Rijke 2018; a step of ``learning_rate`` after every
interaction, :class:`~fedrank.estimators.pdgd.PDGDClients`), and sends the change of its
parameters, clipped and noised by the Laplace mechanism when ``laplace`` is set
(:mod:`fedrank.privacy.laplace`), with weight ``B``.

The simulator runs every client of an iteration at once (:meth:`FpdgdClient.estimator`,
with a click model standing in for the users); a device runs the same code on its own
queries, as one client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.core.client_random import ClientRandom, Stream
from fedrank.core.message import MessageBatch
from fedrank.data.query_bank import QueryBank
from fedrank.estimators.pdgd import PDGDClients
from fedrank.models.click_models import ClickModel
from fedrank.models.rankers import Ranker, make_ranker
from fedrank.privacy.laplace import DistributedLaplace, LocalLaplace
from fedrank.systems.fpdgd.config import FpdgdConfig


@dataclass(frozen=True)
class FPDGDReports:
    """What FPDGD's clients of one round send and what their users saw."""

    deltas: np.ndarray  # (C, dim) privatized local change of the parameters
    maxrr: np.ndarray  # (C, B) MaxRR of each displayed list

    def messages(self, batch: int) -> MessageBatch:
        """The clients' messages: their deltas, each of weight ``B`` (its interactions)."""
        return MessageBatch.of_vectors(self.deltas, np.full(len(self.deltas), batch))


@dataclass(frozen=True)
class FPDGDUpdate:
    """An FPDGD client's round: ``batch`` PDGD interactions from the global model, each
    followed by a step of ``learning_rate``, then the change of its parameters, clipped and
    noised by ``privatizer`` (from the client's own :attr:`~fedrank.core.client_random.
    Stream.NOISE` numbers) when there is one."""

    pdgd: PDGDClients
    batch: int
    learning_rate: float
    privatizer: LocalLaplace | DistributedLaplace | None = None

    def run(self, theta: np.ndarray, bank: QueryBank, random: ClientRandom) -> FPDGDReports:
        local, maxrr = self.pdgd.train(theta, bank, random, self.batch, self.learning_rate)
        deltas = local - theta
        if self.privatizer is not None:
            shape = self.privatizer.uniform_shape(deltas.shape)
            slots = np.arange(shape[1] * shape[2]).reshape(1, shape[1], shape[2])
            u = random.uniform(np.arange(random.size)[:, None, None], Stream.NOISE, slots)
            deltas = self.privatizer.privatize_uniforms(deltas, u)
        return FPDGDReports(deltas, maxrr)


class FpdgdClient:
    """The client half for one :class:`FpdgdConfig` (module docstring)."""

    def __init__(self, config: FpdgdConfig) -> None:
        self.config = config
        self.ranker: Ranker = make_ranker(config.ranker, config.n_features)
        self.privatizer: LocalLaplace | DistributedLaplace | None = None
        if config.laplace == "local":
            self.privatizer = LocalLaplace(config.laplace_clip, config.laplace_epsilon)
        elif config.laplace == "distributed":
            self.privatizer = DistributedLaplace(
                config.laplace_clip, config.laplace_epsilon, config.laplace_shares
            )

    def estimator(self, click_model: ClickModel) -> FPDGDUpdate:
        """Every client of a round at once, its users' clicks drawn from ``click_model``."""
        c = self.config
        return FPDGDUpdate(
            PDGDClients(self.ranker, click_model), c.batch, c.learning_rate, self.privatizer
        )

    def message_epsilon(self) -> float | None:
        """``laplace_epsilon`` for the local mechanism (each message on its own); ``None``
        otherwise (a distributed share alone guarantees nothing)."""
        return self.config.laplace_epsilon if self.config.laplace == "local" else None
