"""Pairwise LambdaRank loss (Burges 2010, "From RankNet to LambdaRank to LambdaMART"), the
training objective of the FedPS personalized search model (FedPS Sec. 3.3.1: "We use the
pairwise learning-to-rank algorithm LambdaRank [12] to train the model").

For every query and every pair ``(i, j)`` of valid candidates with ``label_i > label_j``:

    loss_ij = |delta NDCG_ij| * log(1 + exp(-sigma * (s_i - s_j)))

where ``|delta NDCG_ij|`` is the change of the query's NDCG (over the whole candidate list,
gains ``2**label - 1``, discounts ``1 / log2(1 + rank)``) when ``i`` and ``j`` swap places
in the ranking the current scores induce. The weights are constants of the step (no
gradient flows through the ranking), so the gradient of ``loss_ij`` with respect to ``s_i``
is Burges' lambda ``-sigma |delta NDCG_ij| / (1 + exp(sigma (s_i - s_j)))``.

Normalization: a query's loss is the weighted *mean* of its pairwise losses,
``sum_ij w_ij loss_ij / sum_ij w_ij`` (so every query counts the same whatever its number
of candidates and clicks), and the batch loss is the mean over the queries that have at
least one pair. A query without a positive or without a negative (or with fewer than two
valid candidates) has no pair: it contributes exactly 0 and a zero gradient, never NaN.

Ranking ties in the current scores (used only for the weights) keep candidate order; padded
slots are ranked last and take no part in any pair.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrank.errors import ConfigError, DataFormatError


def _check(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
    if scores.dim() != 2 or labels.shape != scores.shape or mask.shape != scores.shape:
        raise DataFormatError(
            "expected scores, labels and mask of one shape (Q, C), got scores "
            f"{tuple(scores.shape)}, labels {tuple(labels.shape)}, mask {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        raise DataFormatError(f"mask must be a bool tensor, got {mask.dtype}")


def lambdarank_weights(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``(Q, C, C)`` ``|delta NDCG_ij|`` of swapping ``i`` and ``j`` in the ranking induced
    by ``scores`` for the pairs with ``label_i > label_j`` (both valid), 0 elsewhere.
    Computed without gradient."""
    _check(scores, labels, mask)
    with torch.no_grad():
        n_queries, width = scores.shape
        dtype = scores.dtype if scores.is_floating_point() else torch.float32
        ranked = scores.detach().to(dtype).masked_fill(~mask, float("-inf"))
        order = torch.sort(ranked, dim=1, descending=True, stable=True).indices
        positions = torch.arange(width, device=scores.device).expand(n_queries, width)
        ranks = torch.empty_like(order).scatter_(1, order, positions)
        position_discount = 1.0 / torch.log2(
            torch.arange(width, device=scores.device, dtype=dtype) + 2.0
        )
        discount = position_discount[ranks]
        lab = labels.detach().to(dtype)
        gains = torch.where(mask, torch.exp2(lab) - 1.0, torch.zeros_like(lab))
        ideal = torch.sort(gains, dim=1, descending=True).values
        idcg = (ideal * position_discount).sum(dim=1)
        pairs = (
            mask[:, :, None]
            & mask[:, None, :]
            & (lab[:, :, None] > lab[:, None, :])
            & (idcg > 0)[:, None, None]
        )
        delta = (
            (gains[:, :, None] - gains[:, None, :]).abs()
            * (discount[:, :, None] - discount[:, None, :]).abs()
            / idcg.clamp_min(torch.finfo(dtype).tiny)[:, None, None]
        )
        return torch.where(pairs, delta, torch.zeros_like(delta))


def lambdarank_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, sigma: float = 1.0
) -> torch.Tensor:
    """Scalar LambdaRank loss of a batch of candidate lists (see the module docstring).

    Args:
        scores: ``(Q, C)`` model scores; values in padded slots are ignored (``-inf`` is
            fine: no gradient reaches them).
        labels: ``(Q, C)`` relevance labels (1 = clicked, 0 = not; graded labels work too).
        mask: ``(Q, C)`` bool, valid candidates.
        sigma: Burges' ``sigma``, the steepness of the pairwise logistic loss (> 0).
    """
    if not sigma > 0:
        raise ConfigError(f"sigma must be > 0, got {sigma}")
    weights = lambdarank_weights(scores, labels, mask)
    s = scores.masked_fill(~mask, 0.0)
    pair_losses = F.softplus(-sigma * (s[:, :, None] - s[:, None, :]))
    total_weight = weights.sum(dim=(1, 2))
    per_query = (weights * pair_losses).sum(dim=(1, 2)) / total_weight.clamp_min(
        torch.finfo(weights.dtype).tiny
    )
    n_active = (total_weight > 0).sum().clamp_min(1)
    return per_query.sum() / n_active
