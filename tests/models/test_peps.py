"""The PEPS ranker (FedPS Sec. 3.3.1, Eq. 1) and its K-NRM baseline: shapes, masking, the
packed computation against dense reference loops, personal versus shared state, the flat
vector, determinism, and learning on synthetic tasks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedrank.losses.lambdarank import lambdarank_loss
from fedrank.metrics.relevance import map_mrr_p1
from fedrank.models.peps.batch import _unique_rows
from fedrank.models.peps.layers import (
    KERNEL_MUS,
    KERNEL_SIGMAS,
    KernelPooling,
    PersonalEmbeddings,
    PiecewiseLinearEncoding,
)
from fedrank.models.peps.ranker import GLOBAL_EMBEDDING, MASKED_SCORE, PEPSConfig, PEPSRanker

V, DIM, N_FEATURES = 60, 8, 3


def _batch(
    seed: int, n_queries: int = 5, width: int = 4, query_len: int = 5, doc_len: int = 6
) -> tuple[torch.Tensor, ...]:
    """Random ids with random padding lengths (some empty texts), repeated candidate
    texts, a padded candidate per query, and query words copied into some documents."""
    rng = np.random.default_rng(seed)
    query = np.zeros((n_queries, query_len), dtype=np.int64)
    for q in range(n_queries):
        n = rng.integers(1, query_len + 1)
        query[q, :n] = rng.integers(1, V, size=n)
    pool = np.zeros((7, doc_len), dtype=np.int64)
    for d in range(1, 7):  # pool[0] stays empty
        n = rng.integers(1, doc_len + 1)
        pool[d, :n] = rng.integers(1, V, size=n)
    docs = pool[rng.integers(0, 7, size=(n_queries, width))].copy()
    docs[:, 0, 0] = query[:, 0]  # an exact match in every first candidate
    features = rng.normal(size=(n_queries, width, N_FEATURES)).astype(np.float32)
    mask = np.ones((n_queries, width), dtype=bool)
    mask[:, -1] = False
    labels = np.zeros((n_queries, width), dtype=np.float32)
    labels[:, 0] = 1
    return tuple(torch.from_numpy(a) for a in (query, docs, features, mask, labels))


def _model(personalized: bool = True, seed: int = 0, **kwargs: object) -> PEPSRanker:
    config = PEPSConfig(
        vocab_size=V,
        dim=DIM,
        n_features=N_FEATURES if personalized else 0,
        personalized=personalized,
        n_heads=2,
        **kwargs,
    )
    return PEPSRanker(config, seed=seed)


def _user_words(query: torch.Tensor, docs: torch.Tensor, drop: int = 3) -> np.ndarray:
    words = np.unique(np.concatenate([query.numpy().ravel(), docs.numpy().ravel()]))
    return words[words > 0][drop:]  # the user lacks a few words: they fall back to global


# ----------------------------------------------------------------------- dense references


def _knrm_reference(q_vecs: list[np.ndarray], d_vecs: list[list[np.ndarray]]) -> np.ndarray:
    """K-NRM phi (Xiong et al. 2017, with log1p) by loops: ``q_vecs[q]`` (n_q, dim) real
    query word vectors, ``d_vecs[q][c]`` (n_d, dim) real document word vectors."""
    mus, sigmas = np.array(KERNEL_MUS), np.array(KERNEL_SIGMAS)
    out = np.zeros((len(q_vecs), len(d_vecs[0]), len(mus)))
    for q, qv in enumerate(q_vecs):
        for c, dv in enumerate(d_vecs[q]):
            for qi in qv:
                soft = np.zeros(len(mus))
                for dj in dv:
                    cos = (
                        qi @ dj / (max(np.linalg.norm(qi), 1e-12) * max(np.linalg.norm(dj), 1e-12))
                    )
                    soft += np.exp(-((cos - mus) ** 2) / (2 * sigmas**2))
                out[q, c] += np.log1p(soft)
    return out


def _attention_reference(model: PEPSRanker, x: np.ndarray) -> np.ndarray:
    """``x + MHA(x)`` over one text's real word vectors ``x`` (n, dim), by the book."""
    att = model.attention
    w_in = att.in_proj.weight.detach().double().numpy()
    b_in = att.in_proj.bias.detach().double().numpy()
    w_out = att.out_proj.weight.detach().double().numpy()
    b_out = att.out_proj.bias.detach().double().numpy()
    heads, head_dim = att.n_heads, DIM // att.n_heads
    if x.shape[0] == 0:
        return x
    qkv = x @ w_in.T + b_in
    q, k, v = qkv[:, :DIM], qkv[:, DIM : 2 * DIM], qkv[:, 2 * DIM :]
    mixed = np.zeros_like(x)
    for h in range(heads):
        sl = slice(h * head_dim, (h + 1) * head_dim)
        logits = q[:, sl] @ k[:, sl].T / math.sqrt(head_dim)
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        mixed[:, sl] = weights @ v[:, sl]
    return x + mixed @ w_out.T + b_out


def _capture_inputs(model: PEPSRanker, names: list[str]) -> dict[str, torch.Tensor]:
    captured: dict[str, torch.Tensor] = {}
    for name in names:
        module = getattr(model, name)
        module.register_forward_hook(
            lambda _m, args, _out, name=name: captured.__setitem__(name, args[0].detach())
        )
    return captured


def test_knrm_baseline_matches_dense_reference() -> None:
    model = _model(personalized=False)
    query, docs, _, mask, _ = _batch(1)
    captured = _capture_inputs(model, ["knrm_gw"])
    scores = model(query, docs, None, mask)
    table = model.global_embedding.weight.detach().double().numpy()
    q_vecs = [table[row[row > 0].numpy()] for row in query]
    d_vecs = [[table[d[d > 0].numpy()] for d in qdocs] for qdocs in docs]
    want = _knrm_reference(q_vecs, d_vecs)
    np.testing.assert_allclose(captured["knrm_gw"].numpy(), want, rtol=1e-4, atol=1e-4)
    linear = model.knrm_gw(torch.from_numpy(want).float()).squeeze(-1).detach()
    torch.testing.assert_close(scores[mask], linear[mask], rtol=1e-4, atol=1e-4)


def test_personalized_components_match_dense_reference() -> None:
    model = _model()
    query, docs, features, mask, _ = _batch(2)
    personal = model.new_personal_embeddings(_user_words(query, docs))
    with torch.no_grad():  # make personal vectors differ from the global ones
        personal.weight.add_(
            torch.randn(personal.weight.shape, generator=torch.Generator().manual_seed(0))
        )
    captured = _capture_inputs(model, ["knrm_pw", "knrm_pcw", "knrm_gw", "knrm_gcw"])
    components = model.score_components(query, docs, features, mask, personal).detach()

    table = model.global_embedding.weight.detach().double().numpy()
    own = dict(
        zip(personal.word_ids.tolist(), personal.weight.detach().double().numpy(), strict=True)
    )

    def personal_vectors(ids: np.ndarray) -> np.ndarray:
        return np.array([own.get(int(w), table[w]) for w in ids]).reshape(len(ids), DIM)

    real_q = [row[row > 0].numpy() for row in query]
    real_d = [[d[d > 0].numpy() for d in qdocs] for qdocs in docs]
    reps = {
        "knrm_pw": personal_vectors,
        "knrm_gw": lambda ids: table[ids].reshape(len(ids), DIM),
        "knrm_pcw": lambda ids: _attention_reference(model, personal_vectors(ids)),
        "knrm_gcw": lambda ids: _attention_reference(model, table[ids].reshape(len(ids), DIM)),
    }
    for name, rep in reps.items():
        want = _knrm_reference([rep(q) for q in real_q], [[rep(d) for d in qd] for qd in real_d])
        np.testing.assert_allclose(captured[name].numpy(), want, rtol=1e-4, atol=1e-4)

    # F^PQ: query_pool starts at zero, so the pooling is the mean of the personal vectors.
    w = model.query_proj.weight.detach().double().numpy()
    b = model.query_proj.bias.detach().double().numpy()
    for q in range(query.shape[0]):
        pq = personal_vectors(real_q[q]).mean(axis=0) @ w.T + b
        for c in range(docs.shape[1]):
            if not mask[q, c]:
                continue
            ids = real_d[q][c]
            doc = table[ids].mean(axis=0) if ids.size else np.zeros(DIM)
            denom = max(np.linalg.norm(pq), 1e-12) * max(np.linalg.norm(doc), 1e-12)
            assert components[q, c, 4].item() == pytest.approx(pq @ doc / denom, abs=1e-5)
    f_r = model.feature_mlp(features).squeeze(-1).detach()
    torch.testing.assert_close(components[..., 5], f_r)


# ----------------------------------------------------------------------- shapes, masking


@pytest.mark.parametrize("personalized", [True, False])
def test_shapes_and_masked_scores(personalized: bool) -> None:
    model = _model(personalized)
    query, docs, features, mask, _ = _batch(3, n_queries=7, width=5)
    scores = model(query, docs, features if personalized else None, mask)
    assert scores.shape == (7, 5)
    assert (scores[~mask] == MASKED_SCORE).all()
    assert torch.isfinite(scores[mask]).all()
    components = model.score_components(query, docs, features, mask)
    assert components.shape == (7, 5, 6 if personalized else 1)


def test_padded_candidates_padding_columns_and_other_queries_do_not_matter() -> None:
    model = _model()
    query, docs, features, mask, _ = _batch(4)
    personal = model.new_personal_embeddings(_user_words(query, docs))
    base = model(query, docs, features, mask, personal).detach()

    changed_docs, changed_features = docs.clone(), features.clone()
    changed_docs[:, -1] = torch.randint(1, V, changed_docs[:, -1].shape)  # padded candidates
    changed_features[:, -1] = 100.0
    other = model(query, changed_docs, changed_features, mask, personal).detach()
    torch.testing.assert_close(other[mask], base[mask], rtol=1e-5, atol=1e-5)

    wider_query = torch.cat([query, torch.zeros(query.shape[0], 3, dtype=torch.int64)], 1)
    wider_docs = torch.cat([docs, torch.zeros(*docs.shape[:2], 4, dtype=torch.int64)], 2)
    wider = model(wider_query, wider_docs, features, mask, personal).detach()
    torch.testing.assert_close(wider[mask], base[mask], rtol=1e-5, atol=1e-5)

    single = model(query[2:3], docs[2:3], features[2:3], mask[2:3], personal).detach()
    torch.testing.assert_close(single[mask[2:3]], base[2:3][mask[2:3]], rtol=1e-5, atol=1e-5)


def test_empty_texts_give_finite_scores_and_gradients() -> None:
    model = _model()
    query, docs, features, mask, labels = _batch(5)
    query[1] = 0
    docs[2] = 0
    scores = model(query, docs, features, mask)
    assert torch.isfinite(scores[mask]).all()
    lambdarank_loss(scores, labels, mask).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_exact_match_kernel_fires_on_identical_words() -> None:
    pooling = KernelPooling()
    # one cell, one query word; document words: identical, identical, unrelated (cos 0.3)
    cosine = torch.tensor([[1.0, 1.0, 0.3]])
    zero = torch.zeros(3, dtype=torch.int64)
    phi = pooling(cosine, zero, slot_cell=zero[:1], n_cells=1)[0, 0]
    assert phi[0].item() == pytest.approx(math.log1p(2.0), rel=1e-6)  # exact-match kernel
    assert phi[KERNEL_MUS.index(0.3)].item() == pytest.approx(math.log1p(1.0), rel=1e-5)
    near = pooling(torch.tensor([[0.99]]), zero[:1], zero[:1], 1)[0, 0]
    assert near[0].item() < 1e-10  # a near match is not an exact match

    model = _model(personalized=False)
    query = torch.tensor([[5, 0]])
    docs = torch.tensor([[[7, 5, 0], [8, 9, 0]]])
    captured = _capture_inputs(model, ["knrm_gw"])
    model(query, docs, None, torch.ones(1, 2, dtype=torch.bool))
    exact = captured["knrm_gw"][0, :, 0]
    assert exact[0].item() == pytest.approx(math.log(2.0), rel=1e-5) and exact[1].item() < 1e-6


def test_unique_rows() -> None:
    rows = torch.tensor([[3, 1, 0], [1, 2, 0], [3, 1, 0], [0, 0, 0], [1, 2, 0], [1, 0, 0]])
    unique, inverse = _unique_rows(rows)
    want, want_inverse = torch.unique(rows, dim=0, return_inverse=True)
    torch.testing.assert_close(unique, want)
    torch.testing.assert_close(inverse, want_inverse)


def test_bad_shapes_are_rejected_with_expected_and_actual() -> None:
    model = _model()
    query, docs, features, mask, _ = _batch(6)
    with pytest.raises(ValueError, match=r"expected query of shape \(Q, Lq\), got \(5,\)"):
        model(query[:, 0], docs, features, mask)
    with pytest.raises(ValueError, match=r"expected docs of shape \(5, C, Ld\), got \(4, 4, 6\)"):
        model(query, docs[:4], features, mask)
    with pytest.raises(
        ValueError, match=r"expected features of shape \(5, 4, 3\), got \(5, 4, 2\)"
    ):
        model(query, docs, features[..., :2], mask)
    with pytest.raises(ValueError, match=r"expected a bool mask of shape \(5, 4\)"):
        model(query, docs, features, mask[:, :2])
    with pytest.raises(ValueError, match=r"word ids must lie in \[0, 60\)"):
        model(query + V, docs, features, mask)
    with pytest.raises(ValueError, match="int64"):
        model(query.int(), docs, features, mask)
    with pytest.raises(ValueError, match="takes no personal module"):
        _model(personalized=False)(
            query, docs, None, mask, PersonalEmbeddings(np.array([1]), np.ones((1, DIM)))
        )
    with pytest.raises(ValueError, match=r"expected word_vectors of shape \(60, 8\)"):
        PEPSRanker(PEPSConfig(vocab_size=V, dim=DIM, n_features=1), np.zeros((V, 4)))
    with pytest.raises(ValueError, match="n_features"):
        PEPSConfig(vocab_size=V, dim=DIM)
    with pytest.raises(ValueError, match="divide"):
        PEPSConfig(vocab_size=V, dim=DIM, n_features=1, n_heads=3)


# ----------------------------------------------------------------------- personal state


def test_personal_embeddings_hold_only_the_users_words() -> None:
    model = _model()
    words = np.array([3, 7, 11, 40])
    personal = model.new_personal_embeddings(words)
    assert personal.word_ids.tolist() == words.tolist()
    assert personal.weight.shape == (4, DIM)
    assert personal.nbytes() == 4 * (DIM * 4 + 8)
    table = model.global_embedding.weight
    torch.testing.assert_close(personal.weight.detach(), table[torch.from_numpy(words)].detach())

    with torch.no_grad():
        personal.weight.mul_(2.0)
    ids = torch.tensor([[3, 4], [40, 0]])
    looked_up = personal.lookup(ids, table)
    torch.testing.assert_close(looked_up[0, 0], 2 * table[3].detach())
    torch.testing.assert_close(looked_up[0, 1], table[4].detach())  # not the user's: global
    torch.testing.assert_close(looked_up[1, 0], 2 * table[40].detach())
    assert (looked_up[1, 1] == 0).all()  # padding

    looked_up.sum().backward()
    assert table.grad is None  # the fallback is detached
    assert personal.weight.grad is not None
    assert personal.weight.grad[:, 0].tolist() == [1.0, 0.0, 0.0, 1.0]  # rows 3 and 40 used

    empty = PersonalEmbeddings.from_global(np.zeros(0, dtype=np.int64), table)
    torch.testing.assert_close(empty.lookup(ids, table), table[ids].detach())


@pytest.mark.parametrize(
    "word_ids", [np.array([3, 2]), np.array([2, 2]), np.array([0, 4]), np.array([[1, 2]])]
)
def test_personal_word_ids_must_be_sorted_unique_and_positive(word_ids: np.ndarray) -> None:
    with pytest.raises(ValueError, match="word_ids"):
        PersonalEmbeddings(word_ids, np.zeros((word_ids.size, DIM)))


def test_personal_embeddings_are_not_shared_state() -> None:
    model = _model()
    query, docs, features, mask, labels = _batch(7)
    personal = model.new_personal_embeddings(_user_words(query, docs))
    assert all(not name.startswith("personal") for name in model.shared_state_dict())
    shared_ids = {id(p) for p in model.shared_parameters()}
    assert id(personal.weight) not in shared_ids
    assert model.layout.size == sum(p.numel() for p in model.parameters())
    assert model.get_flat_parameters().size == model.layout.size

    before = personal.weight.detach().clone()
    flat_before = model.get_flat_parameters()
    optimizer = torch.optim.Adam([*model.parameters(), *personal.parameters()], lr=1e-2)
    loss = lambdarank_loss(model(query, docs, features, mask, personal), labels, mask)
    loss.backward()
    optimizer.step()
    assert not torch.equal(personal.weight.detach(), before)  # trained locally
    assert model.get_flat_parameters().size == flat_before.size  # nothing new to share


# ----------------------------------------------------------------------- flat vector, state


def test_flat_vector_round_trip_is_exact() -> None:
    a, b = _model(seed=1), _model(seed=2)
    flat = a.get_flat_parameters()
    assert flat.dtype == np.float32
    b.set_flat_parameters(flat)
    np.testing.assert_array_equal(b.get_flat_parameters(), flat)
    for name, value in a.shared_state_dict().items():
        assert torch.equal(b.shared_state_dict()[name], value)
    query, docs, features, mask, _ = _batch(8)
    assert torch.equal(a(query, docs, features, mask), b(query, docs, features, mask))

    entry = a.layout[GLOBAL_EMBEDDING]
    assert entry.shape == (V, DIM)
    assert a.global_embedding_slice() == entry.slice
    np.testing.assert_array_equal(
        flat[entry.slice], a.global_embedding.weight.detach().numpy().ravel()
    )
    rows = np.array([5, 2])
    np.testing.assert_array_equal(
        flat[a.embedding_row_indices(rows)],
        a.global_embedding.weight.detach().numpy()[rows].ravel(),
    )
    with pytest.raises(ValueError, match=r"expected a flat vector of shape"):
        b.set_flat_parameters(flat[:-1])


def test_shared_state_dict_round_trip_and_mismatch() -> None:
    a, b = _model(seed=1), _model(seed=2)
    b.load_shared_state_dict(a.shared_state_dict())
    np.testing.assert_array_equal(a.get_flat_parameters(), b.get_flat_parameters())
    state = a.shared_state_dict()
    state.pop("combine.0.bias")
    with pytest.raises(ValueError, match="missing"):
        b.load_shared_state_dict(state)
    baseline = _model(personalized=False)
    assert set(baseline.shared_state_dict()) == {
        GLOBAL_EMBEDDING,
        "knrm_gw.weight",
        "knrm_gw.bias",
    }


def test_frozen_global_embedding_and_padding_row_stay_fixed() -> None:
    model = _model()
    query, docs, features, mask, labels = _batch(9)
    model.set_global_embedding_trainable(False)
    emb = model.layout.slice_of(GLOBAL_EMBEDDING)
    before = model.get_flat_parameters()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        lambdarank_loss(model(query, docs, features, mask), labels, mask).backward()
        optimizer.step()
    after = model.get_flat_parameters()
    np.testing.assert_array_equal(after[emb], before[emb])
    assert not np.array_equal(after, before)

    model.set_global_embedding_trainable(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    lambdarank_loss(model(query, docs, features, mask), labels, mask).backward()
    optimizer.step()
    assert (model.global_embedding.weight[0] == 0).all()


# ----------------------------------------------------------------------- determinism


def test_deterministic_init_without_touching_global_rng() -> None:
    state = torch.get_rng_state()
    a, b, c = _model(seed=3), _model(seed=3), _model(seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    np.testing.assert_array_equal(a.get_flat_parameters(), b.get_flat_parameters())
    assert not np.array_equal(a.get_flat_parameters(), c.get_flat_parameters())
    vectors = np.random.default_rng(0).normal(size=(V, DIM)).astype(np.float32)
    config = PEPSConfig(vocab_size=V, dim=DIM, n_features=N_FEATURES, n_heads=2)
    d = PEPSRanker(config, vectors, seed=3)
    np.testing.assert_array_equal(d.global_embedding.weight[1:].detach().numpy(), vectors[1:])
    assert (d.global_embedding.weight[0] == 0).all()


def _train(model: PEPSRanker, batch: tuple[torch.Tensor, ...], steps: int) -> np.ndarray:
    query, docs, features, mask, labels = batch
    personal = model.new_personal_embeddings(_user_words(query, docs))
    optimizer = torch.optim.Adam([*model.parameters(), *personal.parameters()], lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        lambdarank_loss(model(query, docs, features, mask, personal), labels, mask).backward()
        optimizer.step()
    return model.get_flat_parameters()


def test_training_is_deterministic() -> None:
    batch = _batch(10)
    np.testing.assert_array_equal(
        _train(_model(seed=5), batch, 5), _train(_model(seed=5), batch, 5)
    )


# ----------------------------------------------------------------------- learning


def _synthetic_task(
    rng: np.random.Generator, n_queries: int, signal: str
) -> tuple[torch.Tensor, ...]:
    """Queries of 1-3 words, 6 candidates of 2-4 words, candidate 0..5 shuffled; the
    clicked one shares a query word (``signal="text"``) or has the highest P-Click feature
    (``signal="click"``); the others are random words."""
    width, length = 6, 6
    query = np.zeros((n_queries, length), dtype=np.int64)
    docs = np.zeros((n_queries, width, length), dtype=np.int64)
    features = rng.normal(size=(n_queries, width, N_FEATURES)).astype(np.float32)
    labels = np.zeros((n_queries, width), dtype=np.float32)
    for q in range(n_queries):
        n = rng.integers(1, 4)
        query[q, :n] = rng.integers(1, V, size=n)
        for c in range(width):
            m = rng.integers(2, 5)
            docs[q, c, :m] = rng.integers(1, V, size=m)
        target = rng.integers(width)
        labels[q, target] = 1
        if signal == "text":
            docs[q, target, 0] = query[q, rng.integers(n)]
        else:
            features[q, target, 0] = features[q, :, 0].max() + 1.0
    mask = np.ones((n_queries, width), dtype=bool)
    return tuple(torch.from_numpy(a) for a in (query, docs, features, mask, labels))


@pytest.mark.parametrize(
    ("personalized", "signal"), [(True, "text"), (True, "click"), (False, "text")]
)
def test_map_rises_clearly_above_random(personalized: bool, signal: str) -> None:
    rng = np.random.default_rng(11)
    train = _synthetic_task(rng, 256, signal)
    test = _synthetic_task(rng, 256, signal)
    model = _model(personalized, seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def evaluate() -> float:
        query, docs, features, mask, labels = test
        with torch.no_grad():
            scores = model(query, docs, features if personalized else None, mask)
        return map_mrr_p1(scores.numpy(), labels.numpy(), mask.numpy())["map"]

    random_map = np.mean([1 / r for r in range(1, 7)])  # 0.408: one click among 6
    for step in range(150):
        rows = torch.from_numpy(rng.choice(256, size=64, replace=False))
        query, docs, features, mask, labels = (t[rows] for t in train)
        optimizer.zero_grad()
        scores = model(query, docs, features if personalized else None, mask)
        lambdarank_loss(scores, labels, mask).backward()
        optimizer.step()
        if step % 50 == 49 and evaluate() > 0.8:
            break
    assert evaluate() > random_map + 0.3


# ----------------------------------------------------------------------- feature encoding


def test_piecewise_linear_encoding_by_hand() -> None:
    encoding = PiecewiseLinearEncoding(((0.0, 1.0, 3.0), (0.0, 1.0)))
    x = torch.tensor([[-1.0, 0.0], [0.5, 1.0], [2.0, 0.25], [5.0, 7.0]])
    # raw (2), indicators x > first edge (2), codes of bins [0,1], [1,3] and [0,1]
    want = torch.tensor(
        [
            [-1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [0.5, 1.0, 1.0, 1.0, 0.5, 0.0, 1.0],
            [2.0, 0.25, 1.0, 1.0, 1.0, 0.5, 0.25],
            [5.0, 7.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        ]
    )
    assert encoding.out_features == 7
    torch.testing.assert_close(encoding(x), want)
    torch.testing.assert_close(encoding(x[None])[0], want)  # any leading axes


def test_piecewise_linear_encoding_rejects_bad_edges_and_inputs() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        PiecewiseLinearEncoding(((0.0, 0.0),))
    with pytest.raises(ValueError, match="at least two"):
        PiecewiseLinearEncoding(((1.0,),))
    with pytest.raises(ValueError, match="at least one feature"):
        PiecewiseLinearEncoding(())
    with pytest.raises(ValueError, match=r"expected 1 features in the last axis, got \(3, 2\)"):
        PiecewiseLinearEncoding(((0.0, 1.0),))(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="feature_edges has bin edges for 1 features"):
        PEPSConfig(vocab_size=V, dim=DIM, n_features=2, feature_edges=((0.0, 1.0),))
    with pytest.raises(ValueError, match="feature_layers"):
        PEPSConfig(vocab_size=V, dim=DIM, n_features=2, feature_layers=0)


def _band_task(rng: np.random.Generator, n_queries: int) -> tuple[torch.Tensor, ...]:
    """The clicked candidate is the one whose count feature lies in a middle band (2, 3]:
    neither more nor fewer earlier clicks is better, a shape the raw value gives a linear
    layer no handle on."""
    width = 6
    counts = rng.choice([0.0, 1.0, 4.0, 6.0], size=(n_queries, width))
    target = rng.integers(width, size=n_queries)
    counts[np.arange(n_queries), target] = rng.uniform(2.1, 3.0, size=n_queries)
    features = np.stack([counts, rng.normal(size=counts.shape)], axis=-1).astype(np.float32)
    labels = np.zeros((n_queries, width), np.float32)
    labels[np.arange(n_queries), target] = 1
    query = rng.integers(1, V, size=(n_queries, 2))
    docs = rng.integers(1, V, size=(n_queries, width, 3))
    mask = np.ones((n_queries, width), dtype=bool)
    return tuple(torch.from_numpy(a) for a in (query, docs, features, mask, labels))


def test_encoded_feature_tower_learns_a_band_on_a_count() -> None:
    """With bin edges the click-feature tower learns "2 < count <= 3 is relevant" in a few
    steps; the tanh tower on the raw values, on the same budget, is still far from it."""
    rng = np.random.default_rng(5)
    train, test = _band_task(rng, 512), _band_task(rng, 256)

    def trained_map(**kwargs: object) -> float:
        config = PEPSConfig(vocab_size=V, dim=DIM, n_features=2, n_heads=2, **kwargs)
        model = PEPSRanker(config, seed=0)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = np.random.default_rng(0)
        for _ in range(20):
            rows = torch.from_numpy(gen.choice(512, size=64, replace=False))
            query, docs, features, mask, labels = (t[rows] for t in train)
            optimizer.zero_grad()
            lambdarank_loss(model(query, docs, features, mask), labels, mask).backward()
            optimizer.step()
        query, docs, features, mask, labels = test
        with torch.no_grad():
            scores = model(query, docs, features, mask)
        return map_mrr_p1(scores.numpy(), labels.numpy(), mask.numpy())["map"]

    edges = ((0.0, 1.0, 2.0, 3.0, 5.0, 7.0), (-3.0, 0.0, 3.0))
    encoded = trained_map(feature_edges=edges, feature_hidden=32, feature_layers=2)
    raw = trained_map()
    assert encoded > 0.95
    assert encoded > raw + 0.2


def test_text_dropout_drops_whole_queries_in_training_mode_only() -> None:
    query, docs, features, mask, _ = _batch(3, n_queries=40)
    model = _model(seed=4, text_dropout=0.5)
    reference = _model(seed=4)  # the same parameters, no dropout
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            model(query, docs, features, mask), reference(query, docs, features, mask)
        )
        components = model.score_components(query, docs, features, mask)
        model.train()
        trained = model(query, docs, features, mask)
        again = _model(seed=4, text_dropout=0.5).train()(query, docs, features, mask)
    torch.testing.assert_close(trained, again)  # the draws come from the model's seed
    kept = torch.cat([components[..., :5] * 2.0, components[..., 5:]], dim=-1)
    dropped = torch.cat([torch.zeros_like(components[..., :5]), components[..., 5:]], dim=-1)
    as_kept = model.combine(kept).squeeze(-1).masked_fill(~mask, MASKED_SCORE)
    as_dropped = model.combine(dropped).squeeze(-1).masked_fill(~mask, MASKED_SCORE)
    is_kept = torch.isclose(trained, as_kept).all(dim=1)
    is_dropped = torch.isclose(trained, as_dropped).all(dim=1)
    assert bool((is_kept ^ is_dropped).all())  # each query: one or the other
    assert 10 <= int(is_dropped.sum()) <= 30  # about half of 40
    with pytest.raises(ValueError, match="text_dropout"):
        _model(text_dropout=1.0)


@pytest.mark.parametrize("sees_features", [False, True])
def test_features_only_mode_scores_and_trains_the_click_features_alone(
    sees_features: bool,
) -> None:
    """The click-feature warm-up: the text scores are 0 (whatever the texts), and a
    training step changes the feature MLP and the final MLP only -- no text layer, no
    word embedding, no personal embedding."""
    query, docs, features, mask, labels = _batch(5, n_queries=12)
    model = _model(
        seed=6, text_dropout=0.3, feature_layers=2, feature_hidden=8,
        combine_sees_features=sees_features,
    )  # fmt: skip
    personal = model.new_personal_embeddings(_user_words(query, docs, drop=0))
    model.set_features_only(True)
    model.eval()
    with torch.no_grad():
        scores = model(query, docs, features, mask, personal)
        other_texts = model(query.flip(0), docs.flip(0), features, mask, personal)
        f_r = model.feature_mlp(features)
        parts = [torch.zeros(*f_r.shape[:-1], 5), f_r]
        if sees_features:
            parts.append(model.feature_mlp[:-1](features))
        expected = model.combine(torch.cat(parts, dim=-1)).squeeze(-1)
    torch.testing.assert_close(scores, expected.masked_fill(~mask, MASKED_SCORE))
    torch.testing.assert_close(scores, other_texts)  # the texts play no part

    before = model.shared_state_dict()
    personal_before = personal.weight.detach().clone()
    model.train()
    shared = torch.optim.Adam(model.parameters(), lr=1e-2)
    own = torch.optim.Adam(personal.parameters(), lr=1e-2)
    loss = lambdarank_loss(model(query, docs, features, mask, personal), labels, mask)
    loss.backward()
    shared.step()
    own.step()
    after = model.shared_state_dict()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all(n.startswith(("feature_mlp.", "combine.")) for n in changed)
    assert any(n.startswith("feature_mlp.") for n in changed)
    torch.testing.assert_close(personal.weight.detach(), personal_before, rtol=0, atol=0)

    model.set_features_only(False)  # the text channels count again
    model.eval()
    with torch.no_grad():
        full = model(query, docs, features, mask, personal)
        full_other_texts = model(query.flip(0), docs.flip(0), features, mask, personal)
    assert not torch.allclose(full, full_other_texts)
    with pytest.raises(ValueError, match="no feature tower"):
        _model(personalized=False).set_features_only(True)
