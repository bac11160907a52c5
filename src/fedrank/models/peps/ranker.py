"""The PEPS ranker (:mod:`fedrank.models.peps`; FedPS Sec. 3.3.1, Eq. 1), its
hyper-parameters and its shared state as one flat parameter vector.

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
six features knows; training it first in this cheap mode, then the full model from there,
gives the text channels a well-trained click history to add to (docs/fedps.md, "Model").

Masked candidates score ``-inf`` (:data:`MASKED_SCORE`); every computation is per
(query, candidate), so padded candidates and padded words never change the scores of the
valid ones.

**Threads.** Everything runs on a :class:`~fedrank.models.peps.batch.PackedBatch`. The
model uses whatever ``torch.get_num_threads()`` the caller has set; the per-batch work is
small, so a simulation running several clients (or other jobs) on one machine does better
with one thread per process (OpenMP threads that compete for cores slow each other down).
With a large global embedding, ``torch.optim.Adam(..., fused=True)`` steps much faster than
the default implementation on CPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedrank.core.validation import Accepts, Interval, Rule, Validated
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.peps.batch import PAD_ID, PackedBatch, shape_of
from fedrank.models.peps.layers import (
    KernelPooling,
    PersonalEmbeddings,
    PiecewiseLinearEncoding,
    SelfAttention,
    segment_softmax,
)

__all__ = [
    "GLOBAL_EMBEDDING",
    "MASKED_SCORE",
    "SCORE_NAMES",
    "LayoutEntry",
    "PEPSConfig",
    "PEPSRanker",
    "ParameterLayout",
]

MASKED_SCORE: float = float("-inf")
"""Score of padded candidates."""
GLOBAL_EMBEDDING: str = "global_embedding.weight"
"""Name of the global word-embedding matrix in the shared state and the flat layout."""
SCORE_NAMES: tuple[str, ...] = ("PW", "PCW", "GW", "GCW", "PQ", "r")
"""The six inputs of the final MLP (FedPS Eq. 1), in order."""


@dataclass(frozen=True)
class PEPSConfig(Validated):
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

    ACCEPTS = {
        "vocab_size": Accepts(Interval(Integral, 2, None), note="word ids, 0 the padding"),
        "dim": Interval(Integral, 1, None),
        "n_features": Interval(Integral, 0, None),
        "personalized": bool,
        "n_heads": Interval(Integral, 1, None),
        "feature_hidden": Interval(Integral, 1, None),
        "feature_layers": Interval(Integral, 1, None),
        "feature_edges": tuple,
        "combine_hidden": Interval(Integral, 1, None),
        "combine_sees_features": bool,
        "text_dropout": Interval(Real, 0, 1, closed="left"),
    }
    RULES = (
        Rule(
            lambda c: not c.personalized or c.n_features >= 1,
            "the personalized model needs n_features >= 1, got {n_features}",
        ),
        Rule(
            lambda c: not c.personalized or c.dim % c.n_heads == 0,
            "n_heads={n_heads} must divide dim={dim}",
        ),
        Rule(
            lambda c: (
                not (c.personalized and c.feature_edges) or len(c.feature_edges) == c.n_features
            ),
            lambda c: (
                f"feature_edges has bin edges for {len(c.feature_edges)} features, the "
                f"model takes n_features={c.n_features}"
            ),
        ),
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
    with ``config.personalized = False``; see :mod:`fedrank.models.peps` and the module
    docstring.

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
            raise DataFormatError(f"expected query of shape (Q, Lq), got {shape_of(query)}")
        n_queries = query.shape[0]
        if docs.dim() != 3 or docs.shape[0] != n_queries:
            raise DataFormatError(
                f"expected docs of shape ({n_queries}, C, Ld), got {shape_of(docs)}"
            )
        width = docs.shape[1]
        if mask.shape != (n_queries, width) or mask.dtype != torch.bool:
            raise DataFormatError(
                f"expected a bool mask of shape ({n_queries}, {width}), got {mask.dtype} "
                f"{shape_of(mask)}"
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
                got = None if features is None else shape_of(features)
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
        pool = segment_softmax(query_tokens @ self.query_pool, batch.query_of_token, n_queries)
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
                f"shape {shape_of(mask)}, got {None if features is None else shape_of(features)}"
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
                        f"{name}: expected shape {shape_of(param)}, got {shape_of(value)}"
                    )
                param.copy_(value)

    def _build_layout(self) -> ParameterLayout:
        entries: list[LayoutEntry] = []
        start = 0
        for name, param in self.named_parameters():
            stop = start + param.numel()
            entries.append(LayoutEntry(name, start, stop, shape_of(param)))
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
