"""LambdaRank: |delta NDCG| weights against swapping positions by hand, gradient
direction, masking, queries without pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrank.losses.lambdarank import lambdarank_loss, lambdarank_weights


def _ndcg(order: list[int], labels: list[float]) -> float:
    dcg = sum((2.0 ** labels[d] - 1.0) / math.log2(r + 2) for r, d in enumerate(order))
    ideal = sorted(labels, reverse=True)
    idcg = sum((2.0**g - 1.0) / math.log2(r + 2) for r, g in enumerate(ideal))
    return dcg / idcg


def _brute_force_weights(scores: list[float], labels: list[float], valid: list[bool]) -> np.ndarray:
    width = len(scores)
    idx = [i for i in range(width) if valid[i]]
    out = np.zeros((width, width))
    lab = [labels[i] for i in idx]
    if not any(g > 0 for g in lab):
        return out
    # stable descending sort: ties keep candidate order
    order = sorted(range(len(idx)), key=lambda k: -scores[idx[k]])
    base = _ndcg(order, lab)
    for a in range(len(idx)):
        for b in range(len(idx)):
            if lab[a] > lab[b]:
                swapped = list(order)
                pa, pb = swapped.index(a), swapped.index(b)
                swapped[pa], swapped[pb] = swapped[pb], swapped[pa]
                out[idx[a], idx[b]] = abs(_ndcg(swapped, lab) - base)
    return out


@settings(max_examples=80, deadline=None)
@given(data=st.data(), width=st.integers(1, 6))
def test_weights_equal_brute_force_delta_ndcg(data: st.DataObject, width: int) -> None:
    scores = data.draw(st.lists(st.integers(-3, 3), min_size=width, max_size=width))
    labels = data.draw(st.lists(st.integers(0, 2), min_size=width, max_size=width))
    valid = data.draw(st.lists(st.booleans(), min_size=width, max_size=width))
    got = lambdarank_weights(
        torch.tensor([scores], dtype=torch.float64),
        torch.tensor([labels], dtype=torch.float64),
        torch.tensor([valid]),
    )[0].numpy()
    want = _brute_force_weights([float(s) for s in scores], [float(g) for g in labels], valid)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_raising_a_positive_lowers_the_loss() -> None:
    scores = torch.tensor([[0.5, 1.0, -0.2, 0.3]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss = lambdarank_loss(scores, labels, mask)
    loss.backward()
    assert scores.grad is not None
    assert scores.grad[0, 0] < 0 and scores.grad[0, 3] < 0  # positives pushed up
    assert scores.grad[0, 1] > 0 and scores.grad[0, 2] > 0  # negatives pushed down
    with torch.no_grad():
        raised = scores.detach().clone()
        raised[0, 0] += 0.1
        assert lambdarank_loss(raised, labels, mask) < loss


def test_correct_order_has_lower_loss_than_reversed() -> None:
    labels = torch.tensor([[1.0, 0.0, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    good = lambdarank_loss(torch.tensor([[2.0, 0.0, -1.0]]), labels, mask)
    bad = lambdarank_loss(torch.tensor([[-2.0, 0.0, 1.0]]), labels, mask)
    assert good < bad


def test_masked_candidates_have_no_effect() -> None:
    labels = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    mask = torch.tensor([[True, True, True, False]])
    a = torch.tensor([[0.1, 0.4, -0.3, float("-inf")]], requires_grad=True)
    b = torch.tensor([[0.1, 0.4, -0.3, 50.0]], requires_grad=True)
    la = lambdarank_loss(a, labels, mask)
    lb = lambdarank_loss(b, torch.tensor([[1.0, 0.0, 0.0, 0.0]]), mask)
    la.backward()
    lb.backward()
    assert torch.isfinite(la) and la.item() == pytest.approx(lb.item(), abs=1e-7)
    assert a.grad is not None and b.grad is not None
    torch.testing.assert_close(a.grad[:, :3], b.grad[:, :3])
    assert a.grad[0, 3] == 0 and b.grad[0, 3] == 0
    # the same list without the padded slot at all
    c = torch.tensor([[0.1, 0.4, -0.3]])
    lc = lambdarank_loss(c, labels[:, :3], torch.ones(1, 3, dtype=torch.bool))
    assert la.item() == pytest.approx(lc.item(), abs=1e-7)


def test_queries_without_pairs_give_zero_and_finite_gradients() -> None:
    scores = torch.randn(3, 4, requires_grad=True)
    labels = torch.tensor([[0.0, 0, 0, 0], [1.0, 1, 1, 1], [1.0, 0, 0, 0]])
    mask = torch.tensor([[True] * 4, [True] * 4, [True, False, False, False]])
    loss = lambdarank_loss(scores, labels, mask)
    loss.backward()
    assert loss.item() == 0.0
    assert scores.grad is not None
    assert torch.isfinite(scores.grad).all() and (scores.grad == 0).all()


def test_inactive_queries_do_not_dilute_the_mean() -> None:
    torch.manual_seed(0)
    active = torch.randn(1, 5)
    labels = torch.tensor([[0.0, 1.0, 0.0, 0.0, 1.0]])
    mask = torch.ones(1, 5, dtype=torch.bool)
    alone = lambdarank_loss(active, labels, mask)
    padded = lambdarank_loss(
        torch.cat([active, torch.randn(2, 5)]),
        torch.cat([labels, torch.zeros(2, 5)]),
        torch.ones(3, 5, dtype=torch.bool),
    )
    assert alone.item() == pytest.approx(padded.item(), rel=1e-6)


def test_per_query_normalization_is_a_weighted_mean() -> None:
    # every pair scored with margin 0: each pair loss is log 2, so the mean is log 2
    scores = torch.zeros(2, 5)
    labels = torch.tensor([[1.0, 0, 0, 0, 0], [1.0, 1, 0, 0, 0]])
    loss = lambdarank_loss(scores, labels, torch.ones(2, 5, dtype=torch.bool))
    assert loss.item() == pytest.approx(math.log(2.0), rel=1e-6)


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"expected scores, labels and mask of one shape"):
        lambdarank_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        lambdarank_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="sigma"):
        lambdarank_loss(
            torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), sigma=0
        )
