"""Where the clients of a federated FedPS run live: in this process, or in blocks on the
workers of a Dask cluster (FedPS Algorithm 1, client side, scaled out).

A FedPS client is stateful: its personal embeddings and their Adam state persist across
rounds (:class:`~fedrank.estimators.local_sgd.FedPSClient`). So the clients do not travel;
the model does. :class:`LocalClients` holds a contiguous block of the run's clients and a
model workspace; :class:`DaskClients` splits the clients into one block per Dask worker,
each a Dask *actor* (created once on its worker, with the public document texts and word
vectors scattered once to every worker; blocks are contiguous and balanced by the
candidates their evaluations score, see :func:`evaluation_work`), and each step sends the
broadcast parameters to the blocks that hold sampled clients. Updates travel back as their
non-zero entries (a client's update touches only its own words' embedding rows).

Results are the same bit for bit wherever the clients run: every client's randomness
(minibatch order, text dropout) is its own, seeded from the run seed and its index, torch
runs one thread everywhere, and the blocks return the clients' messages, which the driver
folds in the order the clients were sampled -- the same float summation as in one process.
(Returning one merged state per block would send less, but change that order.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from fedrank.core.message import Message
from fedrank.errors import ConfigError
from fedrank.estimators.local_sgd import FedPSClient, LocalTraining
from fedrank.experiments.executors import blocks, cluster_workers
from fedrank.experiments.fedps.settings import MODEL_VARIANTS
from fedrank.models.peps.ranker import PEPSConfig, PEPSRanker
from fedrank.retrieval.candidates import FEATURE_NAMES, UserData

if TYPE_CHECKING:
    from distributed import Client


def new_model(
    word_vectors: np.ndarray,
    *,
    vocab_size: int,
    personalized: bool,
    seed: int,
    model: str,
    text_dropout: float,
) -> PEPSRanker:
    """The PEPS ranker of a run (K-NRM when not ``personalized``), initialized from
    ``seed`` and the word vectors."""
    variant = MODEL_VARIANTS[model] if personalized else {}
    config = PEPSConfig(
        vocab_size=vocab_size,
        dim=int(word_vectors.shape[1]),
        n_features=len(FEATURE_NAMES),
        personalized=personalized,
        text_dropout=text_dropout if personalized else 0.0,
        **variant,
    )
    return PEPSRanker(config, word_vectors, seed=seed)


class ClientPool(Protocol):
    """The clients of a federated run, wherever they are."""

    n_clients: int

    def local_updates(
        self, parameters: np.ndarray, sampled: Sequence[int], version: int
    ) -> list[Message]:
        """The messages of the ``sampled`` clients (run indices), in that order."""
        ...

    def evaluate(self, parameters: np.ndarray, split: str) -> np.ndarray:
        """Per-query ``(Q, 3)`` metrics of ``split`` for every client, in client order."""
        ...

    def set_features_only(self, on: bool) -> None:
        """Train and evaluate in the click-feature warm-up mode (on) or the full model."""
        ...


class LocalClients:
    """Clients ``first .. first + len(users) - 1`` of a run, and a model workspace.

    Args:
        users: the block's users' private samples.
        doc_tokens, word_vectors: the public document texts and initial word vectors.
        training: Algorithm 1's client hyper-parameters.
        model_kwargs: :func:`new_model`'s arguments (the run's model).
        client_seed: client ``i`` of the run is seeded with ``client_seed + i``.
        first: the run index of the block's first client.
    """

    def __init__(
        self,
        users: Sequence[UserData],
        doc_tokens: np.ndarray,
        word_vectors: np.ndarray,
        training: LocalTraining,
        model_kwargs: dict[str, Any],
        client_seed: int,
        first: int = 0,
    ) -> None:
        torch.set_num_threads(1)  # as in one process: the same float results everywhere
        self.first = first
        self.n_clients = len(users)
        self.training = training
        self.model = new_model(word_vectors, **model_kwargs)
        self._clients = [
            FedPSClient(
                u,
                doc_tokens,
                word_vectors,
                seed=client_seed + first + i,
                learning_rate=training.learning_rate,
            )
            for i, u in enumerate(users)
        ]

    def local_updates(
        self, parameters: np.ndarray, sampled: Sequence[int], version: int
    ) -> list[Message]:
        out = []
        for c in sampled:
            if not self.first <= c < self.first + self.n_clients:
                last = self.first + self.n_clients - 1
                raise ConfigError(f"client {c} is not in this block ({self.first}..{last})")
            client = self._clients[c - self.first]
            out.append(client.local_update(self.model, parameters, self.training, version))
        return out

    def local_updates_sparse(
        self, parameters: np.ndarray, sampled: Sequence[int], version: int
    ) -> list[tuple[np.ndarray, np.ndarray, Message]]:
        """:meth:`local_updates` packed for the network (:func:`_sparse`)."""
        return [_sparse(m) for m in self.local_updates(parameters, sampled, version)]

    def evaluate(self, parameters: np.ndarray, split: str) -> np.ndarray:
        self.model.set_flat_parameters(parameters)
        return np.concatenate([c.evaluate(self.model, split) for c in self._clients])

    def set_features_only(self, on: bool) -> None:
        self.model.set_features_only(on)


def evaluation_work(users: Sequence[UserData]) -> np.ndarray:
    """Each user's validation and test candidates: what one evaluation of the run scores
    for that user. Evaluations are most of a run's client work (two thirds of a 100-user
    round, measured) and every block takes part in each of them, so balancing the blocks
    by this makes each evaluation end nearly at once on every worker. (A step's local
    updates cannot be balanced in advance: which clients a step samples is random.)"""
    return np.array(
        [sum(int(u.samples(s).n_candidates.sum()) for s in ("valid", "test")) for u in users],
        dtype=np.float64,
    )


def _sparse(message: Message) -> tuple[np.ndarray, np.ndarray, Message]:
    """A message for the trip back from a worker: the update's non-zero entries (an update
    touches the embedding rows of the client's own words only) and the rest."""
    nonzero = np.flatnonzero(message.update)
    hollow = Message(np.zeros(0, np.float32), message.n, message.model_version, message.metrics)
    return nonzero, message.update[nonzero], hollow


def _dense(packed: tuple[np.ndarray, np.ndarray, Message], dim: int) -> Message:
    nonzero, values, hollow = packed
    update = np.zeros(dim, dtype=np.float32)
    update[nonzero] = values
    return Message(update, hollow.n, hollow.model_version, hollow.metrics)


class DaskClients:
    """The clients in one :class:`LocalClients` actor per Dask worker (module docstring).

    Args:
        client: a connected ``distributed.Client``.
        users, doc_tokens, word_vectors, training, model_kwargs, client_seed: as for
            :class:`LocalClients`, for the whole run.
    """

    def __init__(
        self,
        client: Client,
        users: Sequence[UserData],
        doc_tokens: np.ndarray,
        word_vectors: np.ndarray,
        training: LocalTraining,
        model_kwargs: dict[str, Any],
        client_seed: int,
    ) -> None:
        workers = cluster_workers(client)
        self.n_clients = len(users)
        self._blocks = blocks(evaluation_work(users), len(workers))
        tokens, vectors = client.scatter([doc_tokens, word_vectors], broadcast=True, hash=False)
        futures = [
            client.submit(
                LocalClients,
                list(users[b.start : b.stop]),
                tokens,
                vectors,
                training,
                model_kwargs,
                client_seed,
                b.start,
                actor=True,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for b, worker in zip(self._blocks, workers, strict=False)
        ]
        with client.as_current():  # an actor handle talks through the current client
            self._actors = [f.result() for f in futures]
        self._owner = np.repeat(np.arange(len(self._blocks)), [len(b) for b in self._blocks])

    def local_updates(
        self, parameters: np.ndarray, sampled: Sequence[int], version: int
    ) -> list[Message]:
        index = np.asarray(sampled, dtype=np.int64)
        owner = self._owner[index]
        calls = {
            int(k): self._actors[k].local_updates_sparse(
                parameters, index[owner == k].tolist(), version
            )
            for k in np.unique(owner)
        }
        answers = {k: iter(call.result()) for k, call in calls.items()}
        return [_dense(next(answers[int(k)]), parameters.size) for k in owner]

    def evaluate(self, parameters: np.ndarray, split: str) -> np.ndarray:
        calls = [actor.evaluate(parameters, split) for actor in self._actors]
        return np.concatenate([call.result() for call in calls])

    def set_features_only(self, on: bool) -> None:
        for call in [actor.set_features_only(on) for actor in self._actors]:
            call.result()
