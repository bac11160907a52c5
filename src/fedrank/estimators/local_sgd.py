"""A FedPS client: one user's device (FedPS Sec. 3.2-3.3, Algorithm 1 ``ClientUpdate``).

The client holds everything private: the user's search log turned into ranking samples
(:class:`~fedrank.retrieval.candidates.UserData`: queries, candidates, clicks and the
click-history features of the user profile), the user's personal word embeddings and their
optimizer state. They live in name-mangled attributes and no method returns them; the only
thing that leaves the client is the :class:`~fedrank.core.message.Message` of
:meth:`FedPSClient.local_update`: the change of the *shared* parameters and the number of
training queries ``n_j`` (the FedAvg weight); the local training loss goes with it only when
the user turns metrics on (:attr:`LocalTraining.report_loss`).

Local training (Algorithm 1, ``ClientUpdate``): load the broadcast model ``M_t``, run ``E``
epochs of minibatches of ``B`` training queries (shuffled, and with text dropout drawn, by
the client's own seeded generators) with Adam at learning rate ``eta`` on the pairwise
LambdaRank loss, updating the shared parameters and the personal embeddings together; send
``M_t' - M_t`` for the shared parameters, masked by the upload policy
(:class:`UploadPolicy`, Sec. 3.3.2):

* case 1, ``"all"``: every shared parameter, the global word-embedding rows included;
* case 2, ``"frequent"``: the global-embedding rows only for a public list of frequent words
  (the other rows' changes stay on the device and are discarded);
* case 3, ``"frozen"``: the global embeddings are not trained at all (their delta is zero).

Adam's moments for the shared parameters start from zero at every local update (the server
sends parameters, not optimizer state); the personal embeddings' Adam state persists on the
client across rounds.

Document texts (``doc_tokens``) are public: they are the search engine's own index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from fedrank.core.message import Message
from fedrank.errors import ConfigError
from fedrank.losses.lambdarank import lambdarank_loss
from fedrank.metrics.relevance import per_query_table
from fedrank.models.peps.layers import PersonalEmbeddings
from fedrank.models.peps.ranker import PEPSRanker
from fedrank.retrieval.candidates import RankingSamples, UserData

UploadCase = Literal["all", "frequent", "frozen"]
UPLOAD_CASES: tuple[str, ...] = ("all", "frequent", "frozen")


@dataclass(frozen=True)
class UploadPolicy:
    """Which shared parameters a client uploads (FedPS Sec. 3.3.2).

    Attributes:
        case: ``"all"`` (case 1), ``"frequent"`` (case 2) or ``"frozen"`` (case 3).
        frequent_words: for case 2, the sorted word ids whose global-embedding rows are
            uploaded (a public list, e.g. the most frequent words of the document
            collection).
    """

    case: UploadCase = "all"
    frequent_words: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.case not in UPLOAD_CASES:
            raise ConfigError(f"upload case must be one of {UPLOAD_CASES}, got {self.case!r}")
        if (self.case == "frequent") != (self.frequent_words is not None):
            raise ConfigError(
                "frequent_words is required for upload case 'frequent' and only for it"
            )

    @classmethod
    def most_frequent(cls, doc_tokens: np.ndarray, vocab_size: int, n_words: int) -> UploadPolicy:
        """Case 2 with the ``n_words`` most frequent words of the document texts."""
        counts = np.bincount(doc_tokens.reshape(-1), minlength=vocab_size)
        counts[:2] = 0  # padding and out-of-vocabulary
        top = np.argsort(-counts, kind="stable")[:n_words]
        return cls("frequent", np.sort(top[counts[top] > 0]).astype(np.int64))

    def upload_mask(self, model: PEPSRanker) -> np.ndarray | None:
        """``(layout.size,)`` bool of the flat positions that are uploaded, or ``None`` for
        all of them."""
        if self.case != "frequent":
            return None
        mask = np.ones(model.layout.size, dtype=bool)
        mask[model.global_embedding_slice()] = False
        assert self.frequent_words is not None
        mask[model.embedding_row_indices(self.frequent_words)] = True
        return mask


@dataclass(frozen=True)
class LocalTraining:
    """Algorithm 1's client hyper-parameters.

    Attributes:
        epochs: ``E``, local passes over the client's training queries.
        batch_size: ``B``, queries per minibatch.
        learning_rate: ``eta``, Adam's step size.
        upload: the :class:`UploadPolicy`.
        report_loss: also send the local training loss (``metrics["train_loss"]``). Off by
            default: it is information about the client's data beyond the update, sent only
            when the user turns metrics on.
    """

    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 1e-3
    upload: UploadPolicy = UploadPolicy()
    report_loss: bool = False

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ConfigError(
                f"epochs and batch_size must be >= 1, got {self.epochs} and {self.batch_size}"
            )
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}")


@dataclass(frozen=True, eq=False)
class SampleTensors:
    """One split's samples as the tensors :meth:`PEPSRanker.forward` takes."""

    query: torch.Tensor
    docs: torch.Tensor
    features: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor

    @classmethod
    def build(cls, samples: RankingSamples, doc_tokens: np.ndarray) -> SampleTensors:
        """Candidate ``-1`` (padding) gets an all-padding text."""
        texts = np.where(
            samples.mask[..., None], doc_tokens[np.maximum(samples.candidates, 0)], 0
        ).astype(np.int64)
        return cls(
            query=torch.from_numpy(samples.query.astype(np.int64)),
            docs=torch.from_numpy(texts),
            features=torch.from_numpy(samples.features),
            mask=torch.from_numpy(samples.mask),
            labels=torch.from_numpy(samples.labels),
        )

    @property
    def n_queries(self) -> int:
        return int(self.query.shape[0])

    def rows(self, index: torch.Tensor | slice) -> SampleTensors:
        return SampleTensors(
            self.query[index],
            self.docs[index],
            self.features[index],
            self.mask[index],
            self.labels[index],
        )


def score_samples(
    model: PEPSRanker,
    tensors: SampleTensors,
    personal: PersonalEmbeddings | None,
    batch_size: int = 256,
) -> np.ndarray:
    """``(Q, C)`` float64 scores of every sample (``-inf`` at padding), without gradients,
    in evaluation mode (no text dropout); the model's mode is restored afterwards."""
    out = np.empty(tuple(tensors.mask.shape), dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, tensors.n_queries, batch_size):
                part = tensors.rows(slice(start, start + batch_size))
                scores = model(part.query, part.docs, part.features, part.mask, personal)
                out[start : start + batch_size] = scores.numpy()
    finally:
        model.train(was_training)
    return out


def shuffled_batches(
    n_queries: int, batch_size: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """One epoch's minibatches: a permutation of ``range(n_queries)`` cut into pieces of
    ``batch_size`` (the last may be smaller)."""
    if n_queries == 0:
        return []
    order = torch.randperm(n_queries, generator=generator)
    return list(order.split(batch_size))


def train_step(
    model: PEPSRanker,
    batch: SampleTensors,
    personal: PersonalEmbeddings | None,
    optimizers: Sequence[torch.optim.Optimizer],
    dropout_generator: torch.Generator | None = None,
) -> float:
    """One minibatch of LambdaRank in training mode; returns the loss. ``dropout_generator``
    draws the model's text dropout (``None``: the model's own generator)."""
    model.train()
    scores = model(batch.query, batch.docs, batch.features, batch.mask, personal, dropout_generator)
    loss = lambdarank_loss(scores, batch.labels, batch.mask)
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
    return float(loss.detach())


class UserWorkspace:
    """One user's samples as tensors, personal embeddings and their optimizer: what a
    client keeps on its device, and what central training keeps per user on the server.

    Args:
        data: the user's samples and vocabulary.
        doc_tokens: ``(D, Ld)`` int64 public document texts.
        initial_vectors: ``(V, dim)`` initial word vectors (word2vec); the personal
            embeddings of the user's words start from them (Sec. 4.3).
        seed: seeds the user's minibatch order and, in federated training, the text
            dropout of the user's local updates (per client, so an update is the same
            whichever process runs it and whichever clients ran before it).
        personalized: False for a model without a personal module (K-NRM).
        learning_rate: Adam's step size for the personal embeddings.
    """

    def __init__(
        self,
        data: UserData,
        doc_tokens: np.ndarray,
        initial_vectors: np.ndarray,
        *,
        seed: int,
        personalized: bool = True,
        learning_rate: float = 1e-3,
    ) -> None:
        self.user_id = data.user_id
        self.train = SampleTensors.build(data.train, doc_tokens)
        self.valid = SampleTensors.build(data.valid, doc_tokens)
        self.test = SampleTensors.build(data.test, doc_tokens)
        self.personal = (
            PersonalEmbeddings.from_global(data.vocab_ids, initial_vectors)
            if personalized
            else None
        )
        self.optimizers: list[torch.optim.Optimizer] = (
            [torch.optim.Adam(self.personal.parameters(), lr=learning_rate)]
            if self.personal is not None
            else []
        )
        self.generator = torch.Generator().manual_seed(int(seed))
        dropout_seed = np.random.SeedSequence([int(seed), 1]).generate_state(1)[0]
        self.dropout_generator = torch.Generator().manual_seed(int(dropout_seed))

    def batches(self, batch_size: int) -> list[SampleTensors]:
        """One epoch of shuffled training minibatches."""
        return [
            self.train.rows(index)
            for index in shuffled_batches(self.train.n_queries, batch_size, self.generator)
        ]

    def evaluate(self, model: PEPSRanker, split: str) -> np.ndarray:
        """Per-query ``(Q, 3)`` AP, RR and P@1 of ``split`` (``"valid"`` or ``"test"``)
        under ``model`` with this user's personal embeddings."""
        tensors = {"valid": self.valid, "test": self.test}.get(split)
        if tensors is None:
            raise ConfigError(f"split must be 'valid' or 'test', got {split!r}")
        scores = score_samples(model, tensors, self.personal)
        return per_query_table(scores, tensors.labels.numpy(), tensors.mask.numpy())


class FedPSClient:
    """One user's device (see the module docstring): a private :class:`UserWorkspace`
    and the Algorithm 1 client step.

    Args:
        data: the user's private samples and vocabulary (taken over by the client).
        doc_tokens: ``(D, Ld)`` int64 public document texts.
        initial_vectors: ``(V, dim)`` public initial word vectors (word2vec).
        seed: seeds the client's minibatch order and text dropout.
        personalized: False for a model without a personal module (the K-NRM baseline).
        learning_rate: ``eta`` of the personal embeddings' Adam.
    """

    def __init__(
        self,
        data: UserData,
        doc_tokens: np.ndarray,
        initial_vectors: np.ndarray,
        *,
        seed: int,
        personalized: bool = True,
        learning_rate: float = 1e-3,
    ) -> None:
        self.user_id = data.user_id
        self.__workspace = UserWorkspace(
            data,
            doc_tokens,
            initial_vectors,
            seed=seed,
            personalized=personalized,
            learning_rate=learning_rate,
        )

    def __repr__(self) -> str:
        return f"FedPSClient(user_id={self.user_id})"

    @property
    def n_train(self) -> int:
        """``n_j``: the client's number of training queries (its FedAvg weight)."""
        return self.__workspace.train.n_queries

    def local_update(
        self,
        model: PEPSRanker,
        global_parameters: np.ndarray,
        training: LocalTraining,
        version: int = 0,
    ) -> Message:
        """Algorithm 1 ``ClientUpdate``: train the broadcast model on the local data and
        return the shared-parameter update (new minus broadcast, float32, masked by the
        upload policy) with ``n`` = training queries, and nothing else unless
        ``training.report_loss`` (then also the mean training loss). ``model`` is a
        workspace: its shared parameters are overwritten with ``global_parameters``."""
        user = self.__workspace
        model.set_flat_parameters(global_parameters)
        frozen = training.upload.case == "frozen"
        model.set_global_embedding_trainable(not frozen)
        shared = [p for p in model.shared_parameters() if p.requires_grad]
        optimizers = [torch.optim.Adam(shared, lr=training.learning_rate, fused=True)]
        optimizers += user.optimizers
        losses = [
            train_step(model, batch, user.personal, optimizers, user.dropout_generator)
            for _ in range(training.epochs)
            for batch in user.batches(training.batch_size)
        ]
        model.set_global_embedding_trainable(True)
        delta = model.get_flat_parameters() - np.asarray(global_parameters, dtype=np.float32)
        mask = training.upload.upload_mask(model)
        if mask is not None:
            delta[~mask] = 0.0
        if frozen:
            delta[model.global_embedding_slice()] = 0.0
        metrics = {}
        if training.report_loss:
            metrics["train_loss"] = float(np.mean(losses)) if losses else float("nan")
        return Message(update=delta, n=self.n_train, model_version=version, metrics=metrics)

    def evaluate(self, model: PEPSRanker, split: str) -> np.ndarray:
        """Per-query ``(Q, 3)`` AP, RR and P@1 of ``split`` under ``model`` with this
        user's personal embeddings: only these metrics leave the client (what an on-device
        evaluation would report)."""
        return self.__workspace.evaluate(model, split)
