"""The FedPS personalized search model: a compact PEPS ranker (FedPS Sec. 3.3.1, Eq. 1;
PEPS, Yao et al. 2020 [47]) and its K-NRM baseline (Xiong et al. 2017 [46]).

Scoring a candidate document ``d`` for a query ``q`` of one user (FedPS Eq. 1):

    F(q, d) = MLP(F^PW, F^PCW, F^GW, F^GCW, F^PQ, F^r)

* **Word embedding layer.** A *global* embedding matrix ``(V, dim)`` (row 0 = padding, kept
  at zero), initialized from word2vec vectors trained on the document collection and shared
  by all users; and a *personal* matrix per user (:class:`PersonalEmbeddings`) that holds
  rows only for the words that user has used, initialized from the global vectors of those
  words and trained on that user's log only.
* **Representations.** Personal word vectors ``PW`` and global word vectors ``GW`` of the
  query and document words; contextual vectors ``PCW`` / ``GCW`` from one multi-head
  self-attention layer (shared by the personal and the global channel, and by queries and
  documents) with a residual connection, ``x + MHA(x)``, over the words of the query and,
  separately, of each document.
* **Matching.** K-NRM on each of the four representations (``F^PW``, ``F^PCW``, ``F^GW``,
  ``F^GCW``), each with its own linear layer from the 11 kernel features to a score.
  ``F^PQ`` is the cosine between a personalized query vector (attention-pooled personal
  query word vectors through a linear layer) and the mean global word vector of the
  document. ``F^r`` is a small MLP on the click-history features. A final MLP (one tanh
  hidden layer) combines the six scores.

K-NRM (Xiong et al. 2017): ``M_ij = cos(q_i, d_j)``; ``K_k(M_i) = sum_j exp(-(M_ij -
mu_k)^2 / (2 sigma_k^2))`` over the non-padding document words; ``phi_k = sum_i
log(1 + K_k(M_i))`` over the non-padding query words; kernels ``mu = 1, 0.9, 0.7, ..., -0.9``
with ``sigma = 0.1`` and the exact-match kernel ``mu = 1, sigma = 1e-3``. The soft-TF is
pooled with ``log1p`` rather than the paper's ``log`` (as MatchZoo's K-NRM does): a kernel
without any match then contributes 0 instead of ``log(1e-10)`` and the gradient of the
sharp exact-match kernel stays bounded. Kernel values below ``exp(-30)`` are set to 0
(:data:`KERNEL_FLOOR`).

The **K-NRM baseline** (FedPS Table 3, "KNRM") is ``PEPSConfig(..., personalized=False)``:
global embeddings and one K-NRM on the global word vectors only; the score is its linear
layer's output; no attention, no features, no personal module.

**Shared versus personal parameters** (FedPS Sec. 3.3.2). The :class:`PEPSRanker` module
holds only shared parameters: personal embeddings are passed to ``forward`` and are never a
submodule, so ``state_dict``, :meth:`PEPSRanker.shared_state_dict`, the flat vector and
:meth:`PEPSRanker.shared_parameters` can never contain them. The global embedding is one
named slice of the flat vector (:data:`GLOBAL_EMBEDDING`) so that the federated code can
upload all of its update (case 1), only the rows of frequent words
(:meth:`PEPSRanker.embedding_row_indices`, case 2) or none of it (case 3, where
:meth:`PEPSRanker.set_global_embedding_trainable` also freezes it locally).

**Personal lookups of other words.** A word the user has no personal row for (a word first
seen in a candidate document, say) takes its *global* vector in the personal channels,
**detached**: the personal channels then see that word with its global meaning, and the
update of the shared global embedding comes only from the global channels, so the part of
the update a client uploads does not depend on its personal module. With ``personal=None``
every word falls back this way (a new user without history).

**Seeds.** ``PEPSRanker(config, word_vectors, seed=s)`` initializes every parameter from a
private ``torch.Generator`` seeded with ``s``; the modules are constructed inside
``torch.random.fork_rng`` so building a model neither reads nor advances torch's global
RNG. Two models built with the same config, vectors and seed are identical. The forward
pass is deterministic in evaluation mode (``model.eval()``); in training mode the only
randomness is text dropout (``config.text_dropout``), drawn from the generator passed to
``forward`` (a FedPS client passes its own, so a client's update does not depend on which
other clients trained before it in the same process) or else from the model's own generator
seeded with ``s + 1``, so training is reproducible too.

**Text dropout** (``config.text_dropout = p``): in training mode, each query's five text
scores (``F^PW .. F^PQ``) are zeroed with probability ``p`` and the others scaled by
``1 / (1 - p)`` (inverted dropout, Srivastava et al. 2014, applied to a whole input group),
so the model must also rank with the click features alone. Without it the text channels,
which memorize the training lists within an epoch, learn to override the click history
and lose on queries whose document the user clicked before (docs/fedps.md).

**Click-feature warm-up** (:meth:`PEPSRanker.set_features_only`): in this mode the text
channels are not computed and score 0 (as when text dropout drops them), so only the
click-feature MLP and the final MLP take part. The full model overfits its text channels
within one or two epochs, long before the feature tower has learnt what a GBDT on the same
six features knows (the feature tower alone keeps improving for about six epochs); training
it first in this cheap mode, then the full model from there, gives the text channels a
well-trained click history to add to (docs/fedps.md, "Model").

Masked candidates score ``-inf`` (:data:`MASKED_SCORE`); every computation is per
(query, candidate), so padded candidates and padded words never change the scores of the
valid ones.

**Speed.** Everything runs on a :class:`PackedBatch`: only real words are embedded,
attended and matched (no work on padding), each distinct candidate text is encoded once,
and there is no Python loop over queries or documents. The model uses whatever
``torch.get_num_threads()`` the caller has set; the per-batch work is small, so a
simulation running several clients (or other jobs) on one machine does better with one
thread per process (OpenMP threads that compete for cores slow down by an order of
magnitude). With a 60k x 64 global embedding, ``torch.optim.Adam(..., fused=True)`` steps
about 7x faster than the default implementation on CPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedrank.errors import ConfigError, DataFormatError

KERNEL_MUS: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9)
"""K-NRM kernel centres: exact match, then 10 soft-match kernels (Xiong et al. 2017)."""
KERNEL_SIGMAS: tuple[float, ...] = (1e-3,) + (0.1,) * 10
"""K-NRM kernel widths: 1e-3 for the exact-match kernel, 0.1 for the others."""
KERNEL_FLOOR: float = -30.0
"""Kernel values below ``exp(KERNEL_FLOOR)`` (~1e-13) are 0: each kernel is computed as
``exp(max(x, -30)) - exp(-30)``, continuous, within 1e-13 of the exact value, and free of
subnormal floats (which make CPU arithmetic, and the optimizer state they leak into, many
times slower)."""
MASKED_SCORE: float = float("-inf")
"""Score of padded candidates."""
GLOBAL_EMBEDDING: str = "global_embedding.weight"
"""Name of the global word-embedding matrix in the shared state and the flat layout."""
SCORE_NAMES: tuple[str, ...] = ("PW", "PCW", "GW", "GCW", "PQ", "r")
"""The six inputs of the final MLP (FedPS Eq. 1), in order."""
PAD_ID: int = 0


def _shape(t: torch.Tensor | np.ndarray) -> tuple[int, ...]:
    return tuple(int(n) for n in t.shape)


def _segment_softmax(logits: torch.Tensor, segment: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Softmax of ``logits`` ``(P, ...)`` within each group of entries sharing a
    ``segment`` id ``(P,)`` in ``[0, n_segments)``."""
    index = segment.reshape(-1, *([1] * (logits.dim() - 1))).expand_as(logits)
    peak = logits.new_zeros(n_segments, *logits.shape[1:]).scatter_reduce(
        0, index, logits.detach(), reduce="amax", include_self=False
    )
    exp = torch.exp(logits - peak.index_select(0, segment))
    total = exp.new_zeros(n_segments, *logits.shape[1:]).index_add(0, segment, exp)
    return exp / total.index_select(0, segment)


def _unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(unique, inverse)`` of the rows of an integer matrix ``(N, L)``: the distinct rows
    in lexicographic order and, for every row, its index among them
    (``unique[inverse] == rows``). A stable sort per column, last column first (LSD radix
    order); ``torch.unique(dim=0)`` is several times slower on short rows."""
    n_rows, length = rows.shape
    order = torch.arange(n_rows, device=rows.device)
    for column in range(length - 1, -1, -1):
        order = order[torch.sort(rows[order, column], stable=True).indices]
    ordered = rows[order]
    starts = torch.ones(n_rows, dtype=torch.bool, device=rows.device)
    if n_rows > 1:
        starts[1:] = (ordered[1:] != ordered[:-1]).any(dim=1)
    inverse = torch.empty_like(order)
    inverse[order] = torch.cumsum(starts, dim=0) - 1
    return ordered[starts], inverse


@dataclass(frozen=True)
class PackedBatch:
    """Index structure of a batch in *packed* form: only real (non-padding) words become
    tokens, so every per-word computation costs what the real text lengths cost (AOL
    queries and URL titles average ~3 words, padded to 12). Candidate texts are
    deduplicated first: each distinct document is encoded once.

    Tokens are numbered queries first (``0 .. n_query_tokens - 1``, row-major over
    ``(Q, Lq)``), then the words of the distinct documents (row-major over ``(U, Ld)``).

    Attributes:
        ids: ``(n_tokens,)`` word id of every token.
        n_query_tokens: how many of the tokens are query words.
        query_of_token: ``(n_query_tokens,)`` query of each query token.
        unique_docs: ``(U, Ld)`` the distinct candidate texts.
        doc_index: ``(Q, C)`` row of ``unique_docs`` holding candidate ``(q, c)``.
        doc_of_token: ``(n_tokens - n_query_tokens,)`` distinct document of each document
            token.
        attending, attended: ``(A,)`` token pairs of the same text (self-attention edges,
            each token with itself included): ``attending`` attends to ``attended``.
        pair_query, pair_doc: ``(P,)`` the K-NRM pairs: a query token and a document
            token of one of the query's candidates (token numbers).
        pair_slot: ``(P,)`` the pair's (query word, candidate) slot, ``t * C + c`` for
            query token ``t`` and candidate ``c`` of its query.
        slot_cell: ``(n_query_tokens * C,)`` the (query, candidate) cell ``q * C + c`` of
            every slot.
        shape: ``(Q, C)``.
    """

    ids: torch.Tensor
    n_query_tokens: int
    query_of_token: torch.Tensor
    unique_docs: torch.Tensor
    doc_index: torch.Tensor
    doc_of_token: torch.Tensor
    attending: torch.Tensor
    attended: torch.Tensor
    pair_query: torch.Tensor
    pair_doc: torch.Tensor
    pair_slot: torch.Tensor
    slot_cell: torch.Tensor
    shape: tuple[int, int]

    @classmethod
    def build(cls, query: torch.Tensor, docs: torch.Tensor) -> PackedBatch:
        """Pack ``query`` ``(Q, Lq)`` and ``docs`` ``(Q, C, Ld)`` (int64 ids, 0 = padding)."""
        n_queries, query_len = query.shape
        _, width, doc_len = docs.shape
        unique_docs, doc_index = _unique_rows(docs.reshape(n_queries * width, doc_len))
        doc_index = doc_index.reshape(n_queries, width)
        query_words = query != PAD_ID
        doc_words = unique_docs != PAD_ID
        query_pos = query_words.reshape(-1).nonzero().squeeze(1)
        doc_pos = doc_words.reshape(-1).nonzero().squeeze(1)
        n_query_tokens = int(query_pos.shape[0])
        ids = torch.cat([query.reshape(-1)[query_pos], unique_docs.reshape(-1)[doc_pos]])
        query_token = torch.zeros(query.numel(), dtype=torch.int64, device=query.device)
        query_token[query_pos] = torch.arange(n_query_tokens, device=query.device)
        doc_token = torch.zeros(unique_docs.numel(), dtype=torch.int64, device=query.device)
        doc_token[doc_pos] = torch.arange(
            n_query_tokens, n_query_tokens + doc_pos.shape[0], device=query.device
        )

        def text_pairs(words: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, ...]:
            edge = (words[:, :, None] & words[:, None, :]).nonzero()  # (A, 3): text, i, j
            row = edge[:, 0] * words.shape[1]
            return token[row + edge[:, 1]], token[row + edge[:, 2]]

        q_from, q_to = text_pairs(query_words, query_token)
        d_from, d_to = text_pairs(doc_words, doc_token)
        candidate_words = doc_words.index_select(0, doc_index.reshape(-1))
        pairs = (
            query_words[:, None, :, None] & candidate_words.reshape(n_queries, width, 1, doc_len)
        ).nonzero()  # (P, 4): q, c, i, j
        cell = pairs[:, 0] * width + pairs[:, 1]
        pair_query = query_token[pairs[:, 0] * query_len + pairs[:, 2]]
        query_of_token = torch.div(query_pos, query_len, rounding_mode="floor")
        candidates = torch.arange(width, device=query.device)
        return cls(
            ids=ids,
            n_query_tokens=n_query_tokens,
            query_of_token=query_of_token,
            unique_docs=unique_docs,
            doc_index=doc_index,
            doc_of_token=torch.div(doc_pos, doc_len, rounding_mode="floor"),
            attending=torch.cat([q_from, d_from]),
            attended=torch.cat([q_to, d_to]),
            pair_query=pair_query,
            pair_doc=doc_token[doc_index.reshape(-1)[cell] * doc_len + pairs[:, 3]],
            pair_slot=pair_query * width + pairs[:, 1],
            slot_cell=(query_of_token[:, None] * width + candidates).reshape(-1),
            shape=(n_queries, width),
        )


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
            raise DataFormatError(f"expected vectors of shape ({ids.size}, dim), got {_shape(vec)}")
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
                f"expected fallback vectors (V, {self.dim}), got {_shape(fallback)}"
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
                f"expected cosine (R, P) and slot (P,), got {_shape(cosine)} and {_shape(slot)}"
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
                f"expected {self.n_features} features in the last axis, got {_shape(features)}"
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
        weights = _segment_softmax(logits * head_dim**-0.5, attending, n_tokens)  # (A, H)
        mixed = v.new_zeros(n_tokens, heads, head_dim).index_add(
            0, attending, weights[..., None] * v.index_select(0, attended)
        )
        return tokens + self.out_proj(mixed.reshape(n_tokens, dim))


@dataclass(frozen=True)
class PEPSConfig:
    """Hyper-parameters of :class:`PEPSRanker`.

    Attributes:
        vocab_size: ``V``, word ids lie in ``[0, V)``; 0 is padding.
        dim: word-embedding dimension (FedPS: 100).
        n_features: ``F``, click-history features per candidate (required >= 1 when
            personalized; ignored by the K-NRM baseline).
        personalized: False for the K-NRM baseline (global K-NRM only).
        n_heads: heads of the self-attention layer (must divide ``dim``).
        feature_hidden: hidden units of each hidden layer of the click-feature MLP
            (``F^r``).
        feature_layers: hidden layers of the click-feature MLP (ReLU).
        feature_edges: per feature, fixed bin edges of a :class:`PiecewiseLinearEncoding`
            of the features before the MLP; ``()``: the raw features.
        combine_hidden: hidden units of the final MLP (FedPS Eq. 1).
        combine_sees_features: the final MLP (ReLU) also takes the last hidden layer of the
            click-feature MLP, so that it can weigh the text scores by the click history
            (off: the six scores only, tanh, as Eq. 1).
        text_dropout: in training mode, the probability that a query's five text scores
            are dropped (see the module docstring); 0: never.
    """

    vocab_size: int
    dim: int = 100
    n_features: int = 0
    personalized: bool = True
    n_heads: int = 4
    feature_hidden: int = 16
    feature_layers: int = 1
    feature_edges: tuple[tuple[float, ...], ...] = ()
    combine_hidden: int = 16
    combine_sees_features: bool = False
    text_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.vocab_size < 2 or self.dim < 1:
            raise ConfigError(
                f"need vocab_size >= 2 and dim >= 1, got {self.vocab_size} and {self.dim}"
            )
        if self.personalized:
            if self.n_features < 1:
                raise ConfigError(
                    f"the personalized model needs n_features >= 1, got {self.n_features}"
                )
            if self.n_heads < 1 or self.dim % self.n_heads:
                raise ConfigError(f"n_heads={self.n_heads} must be >= 1 and divide dim={self.dim}")
            if min(self.feature_hidden, self.feature_layers, self.combine_hidden) < 1:
                raise ConfigError(
                    "feature_hidden, feature_layers and combine_hidden must be >= 1, got "
                    f"{self.feature_hidden}, {self.feature_layers} and {self.combine_hidden}"
                )
            if not 0.0 <= self.text_dropout < 1.0:
                raise ConfigError(f"text_dropout must be in [0, 1), got {self.text_dropout}")
            if self.feature_edges and len(self.feature_edges) != self.n_features:
                raise ConfigError(
                    f"feature_edges has bin edges for {len(self.feature_edges)} features, "
                    f"the model takes n_features={self.n_features}"
                )


@dataclass(frozen=True)
class LayoutEntry:
    """One shared parameter's place in the flat vector: ``flat[start:stop]`` reshaped to
    ``shape`` (row-major)."""

    name: str
    start: int
    stop: int
    shape: tuple[int, ...]

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)


@dataclass(frozen=True)
class ParameterLayout:
    """Where each shared parameter lies in the flat float32 vector of
    :meth:`PEPSRanker.get_flat_parameters`, in ``named_parameters`` order."""

    entries: tuple[LayoutEntry, ...]

    @property
    def size(self) -> int:
        return self.entries[-1].stop if self.entries else 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def __getitem__(self, name: str) -> LayoutEntry:
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise KeyError(f"no shared parameter named {name!r}; the layout has {self.names}")

    def slice_of(self, name: str) -> slice:
        return self[name].slice


def _feature_mlp(config: PEPSConfig) -> nn.Sequential:
    """``F^r``: the click-history features (encoded when ``config.feature_edges``) through
    ``feature_layers`` hidden layers to one score. One hidden layer is tanh (the original
    compact model); deeper towers use ReLU."""
    layers: list[nn.Module] = []
    width = config.n_features
    if config.feature_edges:
        encoding = PiecewiseLinearEncoding(config.feature_edges)
        layers.append(encoding)
        width = encoding.out_features
    activation = nn.Tanh if config.feature_layers == 1 else nn.ReLU
    for _ in range(config.feature_layers):
        layers += [nn.Linear(width, config.feature_hidden), activation()]
        width = config.feature_hidden
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class PEPSRanker(nn.Module):
    """Compact PEPS personalized ranker (FedPS Sec. 3.3.1, Eq. 1), or the K-NRM baseline
    with ``config.personalized = False``; see the module docstring.

    Args:
        config: the hyper-parameters.
        word_vectors: ``(V, dim)`` initial global word vectors (word2vec on the document
            collection; row 0 is set to zero). ``None``: ``N(0, 1)`` from the seed.
        seed: seeds every parameter initialization (a private generator; torch's global
            RNG is neither read nor advanced).
    """

    def __init__(
        self, config: PEPSConfig, word_vectors: np.ndarray | None = None, *, seed: int = 0
    ) -> None:
        super().__init__()
        self.config = config
        v, dim = config.vocab_size, config.dim
        if word_vectors is not None and np.shape(word_vectors) != (v, dim):
            raise DataFormatError(
                f"expected word_vectors of shape ({v}, {dim}), got {np.shape(word_vectors)}"
            )
        with torch.random.fork_rng(devices=[]):
            self.global_embedding = nn.Embedding(v, dim, padding_idx=PAD_ID)
            self.kernels = KernelPooling()
            k = self.kernels.n_kernels
            self.knrm_gw = nn.Linear(k, 1)
            if config.personalized:
                self.knrm_pw = nn.Linear(k, 1)
                self.knrm_pcw = nn.Linear(k, 1)
                self.knrm_gcw = nn.Linear(k, 1)
                self.attention = SelfAttention(dim, config.n_heads)
                self.query_pool = nn.Parameter(torch.zeros(dim))
                self.query_proj = nn.Linear(dim, dim)
                self.feature_mlp = _feature_mlp(config)
                extra = config.feature_hidden if config.combine_sees_features else 0
                self.combine = nn.Sequential(
                    nn.Linear(len(SCORE_NAMES) + extra, config.combine_hidden),
                    nn.ReLU() if config.combine_sees_features else nn.Tanh(),
                    nn.Linear(config.combine_hidden, 1),
                )
        self._initialize(word_vectors, seed)
        self._layout = self._build_layout()
        self._dropout_generator = torch.Generator().manual_seed(int(seed) + 1)
        self.features_only = False

    # ----------------------------------------------------------------- initialization

    def _initialize(self, word_vectors: np.ndarray | None, seed: int) -> None:
        gen = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            emb = self.global_embedding.weight
            if word_vectors is None:
                emb.normal_(0.0, 1.0, generator=gen)
            else:
                emb.copy_(torch.as_tensor(np.asarray(word_vectors, dtype=np.float32)))
            emb[PAD_ID].zero_()
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    bound = 1.0 / math.sqrt(module.in_features)
                    module.weight.uniform_(-bound, bound, generator=gen)
                    module.bias.uniform_(-bound, bound, generator=gen)
            if self.config.personalized:
                nn.init.xavier_uniform_(self.attention.in_proj.weight, generator=gen)
                self.attention.in_proj.bias.zero_()
                self.attention.out_proj.bias.zero_()
                self.query_pool.zero_()

    # ----------------------------------------------------------------- scoring

    def _check_inputs(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        features: torch.Tensor | None,
        mask: torch.Tensor,
    ) -> torch.Tensor | None:
        """Validate the batch; the features (the personalized model needs them)."""
        if query.dim() != 2:
            raise DataFormatError(f"expected query of shape (Q, Lq), got {_shape(query)}")
        n_queries = query.shape[0]
        if docs.dim() != 3 or docs.shape[0] != n_queries:
            raise DataFormatError(
                f"expected docs of shape ({n_queries}, C, Ld), got {_shape(docs)}"
            )
        width = docs.shape[1]
        if mask.shape != (n_queries, width) or mask.dtype != torch.bool:
            raise DataFormatError(
                f"expected a bool mask of shape ({n_queries}, {width}), got {mask.dtype} "
                f"{_shape(mask)}"
            )
        for name, ids in (("query", query), ("docs", docs)):
            if ids.dtype != torch.int64:
                raise DataFormatError(f"{name} must be an int64 (LongTensor), got {ids.dtype}")
            if ids.numel() and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
                raise DataFormatError(
                    f"{name} word ids must lie in [0, {self.config.vocab_size}), got "
                    f"{int(ids.min())}..{int(ids.max())}"
                )
        if self.config.personalized:
            expected = (n_queries, width, self.config.n_features)
            if features is None or features.shape != expected:
                got = None if features is None else _shape(features)
                raise DataFormatError(f"expected features of shape {expected}, got {got}")
            return features
        return None

    def score_components(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        features: torch.Tensor | None,
        mask: torch.Tensor,
        personal: PersonalEmbeddings | None = None,
    ) -> torch.Tensor:
        """``(Q, C, 6)`` the inputs ``F^PW, F^PCW, F^GW, F^GCW, F^PQ, F^r`` of the final
        MLP (FedPS Eq. 1) for the personalized model; ``(Q, C, 1)`` (``F^GW``) for the
        K-NRM baseline. Padded candidates hold unspecified finite values. Computed on the
        :class:`PackedBatch` of ``query`` and ``docs``."""
        checked_features = self._check_inputs(query, docs, features, mask)
        cfg = self.config
        if personal is not None:
            if not cfg.personalized:
                raise ConfigError(
                    "the K-NRM baseline (personalized=False) takes no personal module"
                )
            if personal.dim != cfg.dim:
                raise DataFormatError(
                    f"personal embeddings have dim {personal.dim}, the model {cfg.dim}"
                )
        batch = PackedBatch.build(query, docs)
        n_queries, width = batch.shape
        n_cells = n_queries * width
        split = batch.n_query_tokens
        table = self.global_embedding.weight
        global_vectors = F.embedding(batch.ids, table, padding_idx=PAD_ID)  # (n_tokens, dim)

        def knrm(reps: torch.Tensor) -> torch.Tensor:
            unit = F.normalize(reps, dim=-1)  # (R, n_tokens, dim)
            cosine = (
                unit.index_select(1, batch.pair_query) * unit.index_select(1, batch.pair_doc)
            ).sum(-1)
            phi = self.kernels(cosine, batch.pair_slot, batch.slot_cell, n_cells)
            return phi.reshape(reps.shape[0], n_queries, width, -1)

        if checked_features is None:  # the K-NRM baseline
            return self.knrm_gw(knrm(global_vectors[None])[0])

        if personal is None:
            personal_vectors = F.embedding(batch.ids, table.detach())
        else:
            personal_vectors = personal.lookup(batch.ids, table)
        n_tokens = batch.ids.shape[0]
        contextual = self.attention(
            torch.cat([personal_vectors, global_vectors]),
            torch.cat([batch.attending, batch.attending + n_tokens]),
            torch.cat([batch.attended, batch.attended + n_tokens]),
        )
        reps = torch.stack(
            [personal_vectors, contextual[:n_tokens], global_vectors, contextual[n_tokens:]]
        )
        phi = knrm(reps)  # (4, Q, C, K)
        f_pw = self.knrm_pw(phi[0])
        f_pcw = self.knrm_pcw(phi[1])
        f_gw = self.knrm_gw(phi[2])
        f_gcw = self.knrm_gcw(phi[3])

        # F^PQ: attention-pooled personal query word vectors vs mean global doc vector.
        query_tokens = personal_vectors[:split]
        pool = _segment_softmax(query_tokens @ self.query_pool, batch.query_of_token, n_queries)
        pooled = query_tokens.new_zeros(n_queries, cfg.dim).index_add(
            0, batch.query_of_token, pool[:, None] * query_tokens
        )
        personal_query = F.normalize(self.query_proj(pooled), dim=-1)  # (Q, dim)
        n_unique = batch.unique_docs.shape[0]
        doc_sum = table.new_zeros(n_unique, cfg.dim).index_add(
            0, batch.doc_of_token, global_vectors[split:]
        )
        doc_vector = F.normalize(doc_sum, dim=-1)  # direction of the mean
        doc_vector = doc_vector.index_select(0, batch.doc_index.reshape(-1))
        f_pq = (personal_query[:, None, :] * doc_vector.reshape(n_queries, width, -1)).sum(
            dim=-1, keepdim=True
        )
        f_r = self.feature_mlp(checked_features.to(table.dtype))
        return torch.cat([f_pw, f_pcw, f_gw, f_gcw, f_pq, f_r], dim=-1)

    def forward(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        features: torch.Tensor | None,
        mask: torch.Tensor,
        personal: PersonalEmbeddings | None = None,
        dropout_generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """``(Q, C)`` scores ``F(q, d)`` (FedPS Eq. 1); :data:`MASKED_SCORE` where ``mask``
        is False.

        Args:
            query: ``(Q, Lq)`` int64 word ids, 0 = padding.
            docs: ``(Q, C, Ld)`` int64 word ids of the candidates, 0 = padding.
            features: ``(Q, C, F)`` float click-history features (``None`` is accepted by
                the K-NRM baseline, which ignores them).
            mask: ``(Q, C)`` bool, valid candidates.
            personal: the user's :class:`PersonalEmbeddings` (all ``Q`` queries are that
                user's); ``None``: every word takes its detached global vector in the
                personal channels.
            dropout_generator: draws the text dropout in training mode (``None``: the
                model's own generator).
        """
        if self.features_only:
            components = self._feature_components(features, mask)
        else:
            components = self.score_components(query, docs, features, mask, personal)
        if self.config.personalized:
            p = self.config.text_dropout
            if self.training and p > 0 and not self.features_only:
                gen = self._dropout_generator if dropout_generator is None else dropout_generator
                draw = torch.rand(
                    components.shape[0],
                    1,
                    1,
                    generator=gen,
                )
                keep = (draw >= p).to(components.dtype) / (1.0 - p)
                text = len(SCORE_NAMES) - 1  # every score but F^r
                components = torch.cat(
                    [components[..., :text] * keep, components[..., text:]], dim=-1
                )
            if self.config.combine_sees_features:
                assert features is not None  # checked by score_components
                hidden = self.feature_mlp[:-1](features.to(components.dtype))
                components = torch.cat([components, hidden], dim=-1)
            scores = self.combine(components).squeeze(-1)
        else:
            scores = components.squeeze(-1)
        return scores.masked_fill(~mask, MASKED_SCORE)

    def _feature_components(
        self, features: torch.Tensor | None, mask: torch.Tensor
    ) -> torch.Tensor:
        """``(Q, C, 6)`` the components of :meth:`score_components` in the features-only
        mode: the five text scores 0, then ``F^r``."""
        if features is None or features.shape[:2] != mask.shape:
            raise DataFormatError(
                f"the features-only mode needs features of shape (Q, C, F) for a mask of "
                f"shape {_shape(mask)}, got {None if features is None else _shape(features)}"
            )
        f_r = self.feature_mlp(features.to(torch.float32))
        text = f_r.new_zeros(*f_r.shape[:-1], len(SCORE_NAMES) - 1)
        return torch.cat([text, f_r], dim=-1)

    def set_features_only(self, on: bool) -> None:
        """Switch the click-feature warm-up mode (module docstring) on or off: while on,
        :meth:`forward` scores with the click features alone (the text scores are 0, no
        word is embedded), so a training step changes only the click-feature MLP and the
        final MLP. Only the personalized model has a feature tower."""
        if on and not self.config.personalized:
            raise ConfigError("the K-NRM baseline (personalized=False) has no feature tower")
        self.features_only = bool(on)

    # ----------------------------------------------------------------- personal module

    def new_personal_embeddings(self, word_ids: np.ndarray) -> PersonalEmbeddings:
        """A user's personal embeddings for the words ``word_ids`` (sorted unique, > 0),
        initialized from the current global vectors of those words."""
        if not self.config.personalized:
            raise ConfigError("the K-NRM baseline (personalized=False) has no personal module")
        return PersonalEmbeddings.from_global(word_ids, self.global_embedding.weight)

    # ----------------------------------------------------------------- shared state

    def shared_parameters(self) -> list[nn.Parameter]:
        """Every parameter of the model (all shared; personal embeddings are never part of
        the module), in layout order, frozen ones included."""
        return [p for _, p in self.named_parameters()]

    def shared_state_dict(self) -> dict[str, torch.Tensor]:
        """Copies of every shared parameter, by name (the kernel constants are not state)."""
        return {name: p.detach().clone() for name, p in self.named_parameters()}

    def load_shared_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Copy ``state`` (as :meth:`shared_state_dict` returns it) into the model; every
        name must be present with its shape, and no other name."""
        own = dict(self.named_parameters())
        if set(state) != set(own):
            missing = sorted(set(own) - set(state))
            extra = sorted(set(state) - set(own))
            raise DataFormatError(f"shared state mismatch: missing {missing}, unexpected {extra}")
        with torch.no_grad():
            for name, param in own.items():
                value = torch.as_tensor(state[name])
                if value.shape != param.shape:
                    raise DataFormatError(
                        f"{name}: expected shape {_shape(param)}, got {_shape(value)}"
                    )
                param.copy_(value)

    def _build_layout(self) -> ParameterLayout:
        entries: list[LayoutEntry] = []
        start = 0
        for name, param in self.named_parameters():
            stop = start + param.numel()
            entries.append(LayoutEntry(name, start, stop, _shape(param)))
            start = stop
        return ParameterLayout(tuple(entries))

    @property
    def layout(self) -> ParameterLayout:
        """The flat-vector layout of the shared parameters."""
        return self._layout

    def get_flat_parameters(self) -> np.ndarray:
        """``(layout.size,)`` float32 copy of every shared parameter, concatenated in layout
        order (row-major within each)."""
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in self.shared_parameters()])
        return flat.to(torch.float32).numpy().copy()

    def set_flat_parameters(self, flat: np.ndarray) -> None:
        """Load a flat vector (as :meth:`get_flat_parameters` returns it; cast to float32)
        into the shared parameters."""
        vec = np.asarray(flat)
        if vec.shape != (self.layout.size,):
            raise DataFormatError(
                f"expected a flat vector of shape ({self.layout.size},), got {vec.shape}"
            )
        source = torch.from_numpy(np.ascontiguousarray(vec, dtype=np.float32))
        with torch.no_grad():
            for entry, param in zip(self.layout.entries, self.shared_parameters(), strict=True):
                param.copy_(source[entry.slice].reshape(entry.shape))

    def global_embedding_slice(self) -> slice:
        """The global word-embedding matrix's slice of the flat vector (row-major ``(V,
        dim)``: row ``w`` is ``[start + w * dim, start + (w + 1) * dim)``)."""
        return self.layout.slice_of(GLOBAL_EMBEDDING)

    def embedding_row_indices(self, word_ids: np.ndarray) -> np.ndarray:
        """``(len(word_ids) * dim,)`` int64 flat-vector positions of the global-embedding
        rows ``word_ids`` (row by row): the part of an update to upload when only the rows
        of frequent words are shared (FedPS Sec. 3.3.2, case 2)."""
        ids = np.asarray(word_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise DataFormatError(
                f"word ids must lie in [0, {self.config.vocab_size}), got {ids.min()}..{ids.max()}"
            )
        dim = self.config.dim
        start = self.global_embedding_slice().start
        return (start + ids[:, None] * dim + np.arange(dim, dtype=np.int64)).reshape(-1)

    def set_global_embedding_trainable(self, trainable: bool) -> None:
        """Freeze (False) or unfreeze the global embedding matrix: case 3 of FedPS Sec.
        3.3.2 keeps the pre-trained global word embeddings fixed. A frozen matrix stays in
        the shared state and the flat vector (its update is then exactly zero)."""
        self.global_embedding.weight.requires_grad_(trainable)

    def n_shared_parameters(self) -> int:
        return self.layout.size
