"""The building blocks of the PEPS ranker (:mod:`fedrank.models.peps`; FedPS Sec. 3.3.1):
one user's personal word embeddings, K-NRM kernel pooling, the self-attention layer of the
contextual representations and the fixed encoding of the click-history features.

K-NRM (Xiong et al. 2017): ``M_ij = cos(q_i, d_j)``; ``K_k(M_i) = sum_j exp(-(M_ij -
mu_k)^2 / (2 sigma_k^2))`` over the non-padding document words; ``phi_k = sum_i
log(1 + K_k(M_i))`` over the non-padding query words; kernels ``mu = 1, 0.9, 0.7, ..., -0.9``
with ``sigma = 0.1`` and the exact-match kernel ``mu = 1, sigma = 1e-3``. The soft-TF is
pooled with ``log1p`` rather than the paper's ``log`` (as MatchZoo's K-NRM does): a kernel
without any match then contributes 0 instead of ``log(1e-10)`` and the gradient of the
sharp exact-match kernel stays bounded. Kernel values below ``exp(-30)`` are set to 0
(:data:`KERNEL_FLOOR`).

Every layer works on packed tokens (:class:`~fedrank.models.peps.batch.PackedBatch`): only
real words, with explicit (query word, document word) pairs and attention edges.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.peps.batch import PAD_ID, shape_of

__all__ = [
    "KERNEL_FLOOR",
    "KERNEL_MUS",
    "KERNEL_SIGMAS",
    "KernelPooling",
    "PersonalEmbeddings",
    "PiecewiseLinearEncoding",
    "SelfAttention",
    "segment_softmax",
]

KERNEL_MUS: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9)
"""K-NRM kernel centres: exact match, then 10 soft-match kernels (Xiong et al. 2017)."""
KERNEL_SIGMAS: tuple[float, ...] = (1e-3,) + (0.1,) * 10
"""K-NRM kernel widths: 1e-3 for the exact-match kernel, 0.1 for the others."""
KERNEL_FLOOR: float = -30.0
"""Kernel values below ``exp(KERNEL_FLOOR)`` (~1e-13) are 0: each kernel is computed as
``exp(max(x, -30)) - exp(-30)``, continuous, within 1e-13 of the exact value, and free of
subnormal floats (which make CPU arithmetic, and the optimizer state they leak into, many
times slower)."""


def segment_softmax(logits: torch.Tensor, segment: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Softmax of ``logits`` ``(P, ...)`` within each group of entries sharing a
    ``segment`` id ``(P,)`` in ``[0, n_segments)``."""
    index = segment.reshape(-1, *([1] * (logits.dim() - 1))).expand_as(logits)
    peak = logits.new_zeros(n_segments, *logits.shape[1:]).scatter_reduce(
        0, index, logits.detach(), reduce="amax", include_self=False
    )
    exp = torch.exp(logits - peak.index_select(0, segment))
    total = exp.new_zeros(n_segments, *logits.shape[1:]).index_add(0, segment, exp)
    return exp / total.index_select(0, segment)


class PersonalEmbeddings(nn.Module):
    """One user's personal word embeddings (PEPS; FedPS Sec. 3.3.1, "Word embedding
    layer"): rows only for the words the user has used, so a client stores
    ``n_words x dim`` floats, not ``V x dim``.

    Attributes:
        word_ids: ``(n_words,)`` int64 buffer, sorted unique global word ids (no padding
            id 0).
        weight: ``(n_words, dim)`` parameter, row ``k`` is the vector of ``word_ids[k]``.

    :meth:`lookup` maps global ids to local rows with ``torch.searchsorted`` (no Python
    dict); ids without a row take the (detached) global vector. A user costs ``n_words *
    (4 * dim + 8)`` bytes (:meth:`nbytes`; an Adam state adds ``8 * dim`` per word). The
    module's ``state_dict`` (``word_ids``, ``weight``) is the client's whole personal state:
    ``PersonalEmbeddings(state["word_ids"].numpy(), state["weight"])`` restores it.
    """

    def __init__(self, word_ids: np.ndarray, vectors: np.ndarray | torch.Tensor) -> None:
        super().__init__()
        ids = np.asarray(word_ids)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise DataFormatError(
                f"word_ids must be a 1-d integer array, got {ids.dtype} of shape {ids.shape}"
            )
        if ids.size and (ids[0] <= PAD_ID or np.any(np.diff(ids) <= 0)):
            raise DataFormatError(
                "word_ids must be sorted, unique and > 0 (0 is the padding id, which has no "
                "personal vector)"
            )
        vec = torch.as_tensor(np.asarray(vectors, dtype=np.float32))
        if vec.dim() != 2 or vec.shape[0] != ids.size:
            raise DataFormatError(
                f"expected vectors of shape ({ids.size}, dim), got {shape_of(vec)}"
            )
        self.register_buffer("word_ids", torch.as_tensor(ids.astype(np.int64)))
        self.weight = nn.Parameter(vec.clone())

    @classmethod
    def from_global(
        cls, word_ids: np.ndarray, global_vectors: np.ndarray | torch.Tensor
    ) -> PersonalEmbeddings:
        """Personal embeddings of the words ``word_ids`` initialized from their rows of the
        global matrix ``(V, dim)`` (FedPS: "we use the global word2vec model ... for
        initialization")."""
        ids = np.asarray(word_ids)
        if isinstance(global_vectors, torch.Tensor):
            table = global_vectors.detach().to("cpu", torch.float32).numpy()
        else:
            table = np.asarray(global_vectors, dtype=np.float32)
        if table.ndim != 2:
            raise DataFormatError(f"expected global vectors (V, dim), got {table.shape}")
        if ids.size and (ids.min() < 1 or ids.max() >= table.shape[0]):
            raise DataFormatError(
                f"word ids must lie in [1, {table.shape[0]}), got {ids.min()}..{ids.max()}"
            )
        return cls(ids, table[ids.astype(np.int64)])

    @property
    def n_words(self) -> int:
        return int(self.word_ids.shape[0])

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    def nbytes(self) -> int:
        """Bytes of the user's state (vectors and ids; optimizer state not included)."""
        return self.weight.numel() * self.weight.element_size() + self.word_ids.numel() * 8

    def rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(row, has_row)`` of global ids ``ids`` (any shape): ``has_row`` is True where
        the user has a personal vector, and then ``weight[row]`` is it."""
        if self.n_words == 0:
            zeros = torch.zeros_like(ids, dtype=torch.int64)
            return zeros, torch.zeros_like(ids, dtype=torch.bool)
        row = torch.searchsorted(self.word_ids, ids.to(torch.int64)).clamp_max(self.n_words - 1)
        return row, self.word_ids[row] == ids

    def lookup(self, ids: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
        """``(*ids.shape, dim)`` personal vectors of ``ids``; ids without a personal row take
        their row of ``fallback`` (the global matrix ``(V, dim)``), detached."""
        if fallback.dim() != 2 or fallback.shape[1] != self.dim:
            raise DataFormatError(
                f"expected fallback vectors (V, {self.dim}), got {shape_of(fallback)}"
            )
        shared = F.embedding(ids, fallback.detach())
        if self.n_words == 0:
            return shared
        row, has_row = self.rows(ids)
        return torch.where(has_row[..., None], F.embedding(row, self.weight), shared)


class KernelPooling(nn.Module):
    """K-NRM kernel pooling (Xiong et al. 2017) over packed (query word, document word)
    cosines; see the module docstring for the kernels and the ``log1p``."""

    def __init__(
        self, mus: tuple[float, ...] = KERNEL_MUS, sigmas: tuple[float, ...] = KERNEL_SIGMAS
    ) -> None:
        super().__init__()
        if len(mus) != len(sigmas) or not mus or min(sigmas) <= 0:
            raise ConfigError(
                f"need as many kernel sigmas (> 0) as mus, got {len(sigmas)} and {len(mus)}"
            )
        self.register_buffer("mus", torch.tensor(mus, dtype=torch.float32), persistent=False)
        inv_two_var = 1.0 / (2.0 * torch.tensor(sigmas, dtype=torch.float64) ** 2)
        self.register_buffer("inv_two_var", inv_two_var.float(), persistent=False)

    @property
    def n_kernels(self) -> int:
        return int(self.mus.shape[0])

    def forward(
        self, cosine: torch.Tensor, slot: torch.Tensor, slot_cell: torch.Tensor, n_cells: int
    ) -> torch.Tensor:
        """``(R, n_cells, K)`` kernel features ``phi`` of every (query, candidate) cell.

        Args:
            cosine: ``(R, P)`` cosine of each (query word, document word) pair under ``R``
                representations; only pairs of two real words are listed.
            slot: ``(P,)`` the pair's (query word, candidate) slot: pairs sharing a slot
                are summed into one soft-TF.
            slot_cell: ``(S,)`` the (query, candidate) cell of every slot, in
                ``[0, n_cells)``: the log soft-TFs of a cell's slots are summed.
            n_cells: number of (query, candidate) cells.
        """
        if cosine.dim() != 2 or slot.shape != cosine.shape[1:]:
            raise DataFormatError(
                f"expected cosine (R, P) and slot (P,), got {shape_of(cosine)} and {shape_of(slot)}"
            )
        n_reps = cosine.shape[0]
        exponent = -((cosine[..., None] - self.mus) ** 2) * self.inv_two_var
        kernels = torch.exp(exponent.clamp_min(KERNEL_FLOOR)) - math.exp(KERNEL_FLOOR)
        soft_tf = kernels.new_zeros(n_reps, slot_cell.shape[0], self.n_kernels)
        soft_tf = soft_tf.index_add(1, slot, kernels)  # sum over document words
        # A slot without pairs (e.g. a query word and an empty candidate) has soft-TF 0 and
        # log1p(0) = 0, so it adds nothing.
        phi = kernels.new_zeros(n_reps, n_cells, self.n_kernels)
        return phi.index_add(1, slot_cell, torch.log1p(soft_tf))  # sum over query words


class PiecewiseLinearEncoding(nn.Module):
    """A fixed (not learned) encoding of numeric features for an MLP: for each feature
    ``x`` with bin edges ``e_0 < e_1 < ... < e_m``, the raw value, the indicator ``x >
    e_0`` and the piecewise-linear code ``clamp((x - e_k) / (e_{k+1} - e_k), 0, 1)`` of every
    bin (Gorishniy et al., "On Embeddings for Numerical Features in Tabular Deep Learning",
    NeurIPS 2022, Sec. 3.2). Sharp thresholds (a count going from 0 to 1) and
    non-linear shapes over wide ranges are then one linear layer away, which a plain MLP
    on the raw values learns slowly. The edges are constants of the model (public, the same
    for every client), not statistics of anyone's data.

    Args:
        edges: per feature, its strictly increasing bin edges (at least two).
    """

    def __init__(self, edges: tuple[tuple[float, ...], ...]) -> None:
        super().__init__()
        if not edges:
            raise ConfigError("need bin edges for at least one feature")
        lows: list[float] = []
        widths: list[float] = []
        owner: list[int] = []
        for j, e in enumerate(edges):
            e_arr = np.asarray(e, dtype=np.float64)
            if e_arr.ndim != 1 or e_arr.size < 2 or not np.all(np.diff(e_arr) > 0):
                raise ConfigError(
                    f"feature {j}: bin edges must be at least two strictly increasing "
                    f"numbers, got {tuple(e)}"
                )
            lows += e_arr[:-1].tolist()
            widths += np.diff(e_arr).tolist()
            owner += [j] * (e_arr.size - 1)
        self.n_features = len(edges)
        first = [float(e[0]) for e in edges]
        self.register_buffer("first", torch.tensor(first), persistent=False)
        self.register_buffer("lows", torch.tensor(lows), persistent=False)
        self.register_buffer("widths", torch.tensor(widths), persistent=False)
        self.register_buffer("owner", torch.tensor(owner, dtype=torch.int64), persistent=False)

    @property
    def out_features(self) -> int:
        return 2 * self.n_features + int(self.lows.shape[0])

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``(..., F)`` -> ``(..., 2 F + bins)``: raw values, indicators, bin codes."""
        if features.shape[-1] != self.n_features:
            raise DataFormatError(
                f"expected {self.n_features} features in the last axis, got {shape_of(features)}"
            )
        above = (features > self.first).to(features.dtype)
        codes = ((features[..., self.owner] - self.lows) / self.widths).clamp(0.0, 1.0)
        return torch.cat([features, above, codes], dim=-1)


class SelfAttention(nn.Module):
    """One multi-head self-attention layer with a residual connection, ``x + MHA(x)``
    (PEPS' contextual representations ``PCW`` / ``GCW``; FedPS Sec. 3.3.1), over packed
    tokens: attention runs along explicit (attending, attended) edges between the words of
    one text, the softmax over each word's edges."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        if n_heads < 1 or dim % n_heads:
            raise ConfigError(f"n_heads={n_heads} must be >= 1 and divide dim={dim}")
        self.n_heads = n_heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(
        self, tokens: torch.Tensor, attending: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        """``(n, dim)`` contextual vectors of the token vectors ``tokens`` ``(n, dim)``;
        token ``attending[e]`` attends to token ``attended[e]`` (every token must have at
        least one edge, e.g. to itself)."""
        n_tokens, dim = tokens.shape
        heads = self.n_heads
        head_dim = dim // heads
        q, k, v = self.in_proj(tokens).reshape(n_tokens, 3, heads, head_dim).unbind(1)
        logits = (q.index_select(0, attending) * k.index_select(0, attended)).sum(-1)
        weights = segment_softmax(logits * head_dim**-0.5, attending, n_tokens)  # (A, H)
        mixed = v.new_zeros(n_tokens, heads, head_dim).index_add(
            0, attending, weights[..., None] * v.index_select(0, attended)
        )
        return tokens + self.out_proj(mixed.reshape(n_tokens, dim))
