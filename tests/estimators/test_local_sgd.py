"""The FedPS client: Algorithm 1's local update and the upload policies (Sec. 3.3.2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedrank.errors import ConfigError
from fedrank.estimators.local_sgd import (
    FedPSClient,
    LocalTraining,
    UploadPolicy,
    shuffled_batches,
)
from fedrank.experiments.fedps.data import FedPSData, prepare_aol
from fedrank.models.peps.ranker import PEPSConfig, PEPSRanker
from fedrank.retrieval.candidates import FEATURE_NAMES


@pytest.fixture(scope="module")
def small(data_dir: Path) -> FedPSData:
    path = data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the AOL sample is needed")
    return prepare_aol(path, users=6, seed=2, dim=8, word2vec_epochs=1)


def _model(data: FedPSData) -> PEPSRanker:
    config = PEPSConfig(data.vocab_size, dim=8, n_features=len(FEATURE_NAMES), n_heads=2)
    return PEPSRanker(config, data.word_vectors, seed=0)


def test_local_update_is_the_change_of_the_shared_parameters(small: FedPSData) -> None:
    model = _model(small)
    start = model.get_flat_parameters()
    client = FedPSClient(small.users[0], small.doc_tokens, small.word_vectors, seed=1)
    message = client.local_update(model, start, LocalTraining(epochs=2, batch_size=8), 7)
    np.testing.assert_allclose(start + message.update, model.get_flat_parameters(), atol=1e-6)
    assert message.n == small.users[0].train.n_queries == client.n_train
    assert message.model_version == 7
    # By default the message is the update and its count, nothing about the client's data.
    assert message.metrics == {}
    again = FedPSClient(small.users[0], small.doc_tokens, small.word_vectors, seed=1)
    reported = again.local_update(
        _model(small), start, LocalTraining(epochs=2, batch_size=8, report_loss=True), 7
    )
    assert set(reported.metrics) == {"train_loss"} and np.isfinite(reported.metrics["train_loss"])
    np.testing.assert_allclose(reported.update, message.update, atol=1e-6)


def test_same_seed_same_update_and_the_model_is_only_a_workspace(small: FedPSData) -> None:
    start = _model(small).get_flat_parameters()
    updates = []
    for _ in range(2):
        model = _model(small)
        model.set_flat_parameters(np.zeros_like(start))  # overwritten by the broadcast
        client = FedPSClient(small.users[1], small.doc_tokens, small.word_vectors, seed=4)
        updates.append(client.local_update(model, start, LocalTraining(batch_size=8)).update)
    np.testing.assert_array_equal(updates[0], updates[1])


def test_personal_embeddings_train_locally_and_persist(small: FedPSData) -> None:
    """White-box: the client's private personal embeddings move with local training and
    carry over to the next round."""
    model = _model(small)
    start = model.get_flat_parameters()
    user = small.users[2]
    client = FedPSClient(user, small.doc_tokens, small.word_vectors, seed=0)
    personal = client._FedPSClient__workspace.personal  # type: ignore[attr-defined]
    initial = small.word_vectors[user.vocab_ids]
    np.testing.assert_array_equal(personal.weight.detach().numpy(), initial)
    client.local_update(model, start, LocalTraining(batch_size=8))
    after_one = personal.weight.detach().numpy().copy()
    assert not np.array_equal(after_one, initial)
    client.local_update(model, start, LocalTraining(batch_size=8))
    assert client._FedPSClient__workspace.personal is personal  # type: ignore[attr-defined]
    assert not np.array_equal(personal.weight.detach().numpy(), after_one)


def test_a_client_without_training_queries_sends_an_empty_update(small: FedPSData) -> None:
    import dataclasses

    user = small.users[0]
    rows = ("events", "event_ids", "query", "candidates", "mask", "labels", "features", "bm25")
    empty_train = dataclasses.replace(
        user.train, **{name: getattr(user.train, name)[:0] for name in (*rows, "ranks")}
    )
    client = FedPSClient(
        dataclasses.replace(user, train=empty_train), small.doc_tokens, small.word_vectors, seed=0
    )
    model = _model(small)
    message = client.local_update(model, model.get_flat_parameters(), LocalTraining())
    assert message.n == 0 and not np.any(message.update)
    assert shuffled_batches(0, 4, torch.Generator()) == []


def test_upload_policy_validation_and_most_frequent(small: FedPSData) -> None:
    with pytest.raises(ConfigError, match="upload case"):
        UploadPolicy("none")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="frequent_words"):
        UploadPolicy("frequent")
    with pytest.raises(ConfigError, match="frequent_words"):
        UploadPolicy("all", np.array([2]))
    policy = UploadPolicy.most_frequent(small.doc_tokens, small.vocab_size, 10)
    counts = np.bincount(small.doc_tokens.ravel(), minlength=small.vocab_size)
    counts[:2] = 0
    assert policy.frequent_words is not None and policy.frequent_words.size == 10
    assert counts[policy.frequent_words].min() >= np.sort(counts)[-10]
    mask = policy.upload_mask(_model(small))
    assert (
        mask is not None and mask.sum() == _model(small).layout.size - (small.vocab_size - 10) * 8
    )
    with pytest.raises(ConfigError, match="epochs"):
        LocalTraining(epochs=0)
    with pytest.raises(ConfigError, match="learning_rate"):
        LocalTraining(learning_rate=0.0)
