"""Skip-gram word2vec with negative sampling (Mikolov et al. 2013 [31]), to initialize the
global word embeddings of the FedPS ranker (FedPS Sec. 3.3.1: "we initialize the global
word embeddings with the word2vec model trained on the document collection"; Sec. 4.2:
"a 100-dim word2vec model on the document set").

Training, as in the reference word2vec, with large minibatches instead of one pair at a
time:

* **Pairs.** For every token (padding ids 0 dropped) and a window ``b`` drawn uniformly
  from ``1 .. window`` per token (word2vec's dynamic window), every other token of the same
  sequence at distance ``<= b`` is a context: the pair (centre, context).
* **Subsampling** of frequent words: a token of relative frequency ``f`` is kept with
  probability ``min(1, (sqrt(f / t) + 1) * t / f)`` (``t`` = ``subsample``; 0 keeps all).
  Subsampling and windows are redrawn every epoch.
* **Loss** per pair: ``-log sigma(u_c . v_o) - sum_{n} log sigma(-u_c . v_n)`` over
  ``negatives`` noise words drawn from the unigram distribution raised to 0.75 (through
  a table of 2**22 slots, as word2vec's ``unigram_table``).
* **Updates**: mean loss over a minibatch of pairs, lazy Adam on the rows the minibatch
  touches (as ``torch.optim.SparseAdam``, with the gradients written out); the learning
  rate decays linearly to ``1e-4`` of its start over the run, as word2vec's does.

Input vectors start uniform in ``[-0.5 / dim, 0.5 / dim]`` and output vectors at zero
(word2vec's initialization); the result is the input vectors. Rows of ids that never occur
in the corpus (and the padding row 0) would stay at their tiny initial values: row 0 is set
to zero and the never-seen rows are rescaled to the median norm of the trained rows, so that
every word has a vector of the usual length (their directions stay random, so their cosine
with every other word is near 0 while the exact-match K-NRM kernel still fires on them).

Randomness: every random draw (initialization, windows, subsampling, shuffling, negatives)
comes from the ``numpy.random.Generator`` passed in; the torch computation itself is
deterministic on CPU, so the result is a function of the inputs and the generator's state
(and of torch's thread count, through floating-point summation order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedrank.errors import ConfigError, DataFormatError

PAD_ID = 0


def _flatten(
    sequences: np.ndarray | Sequence[Sequence[int]], vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, sequence_of_token)`` of every non-padding token, in order."""
    if isinstance(sequences, np.ndarray) and sequences.ndim == 2:
        rows = np.asarray(sequences)
        keep = rows != PAD_ID
        tokens = rows[keep].astype(np.int64)
        owner = np.nonzero(keep)[0].astype(np.int64)
    else:
        parts = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
        lengths = np.array([p.size for p in parts], dtype=np.int64)
        tokens = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(parts), dtype=np.int64), lengths)
        keep = tokens != PAD_ID
        tokens, owner = tokens[keep], owner[keep]
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise DataFormatError(
            f"word ids must lie in [0, {vocab_size}), got {tokens.min()}..{tokens.max()}"
        )
    return tokens, owner


NOISE_TABLE_SIZE = 1 << 22


def unigram_table(counts: np.ndarray, size: int = NOISE_TABLE_SIZE) -> np.ndarray:
    """``(size,)`` int64 table in which word ``w`` fills a share ``counts[w]**0.75 /
    sum(counts**0.75)`` of the slots (cumulative rounding), so that a uniform slot is a
    draw from word2vec's noise distribution (word2vec's own ``unigram_table``). Words
    rarer than ``1 / size`` get at most one slot."""
    weights = np.asarray(counts, dtype=np.float64) ** 0.75
    total = weights.sum()
    if total <= 0:
        raise DataFormatError("the corpus has no token: no noise distribution")
    bounds = np.rint(np.cumsum(weights) / total * size).astype(np.int64)
    return np.repeat(np.arange(weights.size, dtype=np.int64), np.diff(bounds, prepend=0))


def skipgram_pairs(
    tokens: np.ndarray, owner: np.ndarray, window: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(centre, context)`` word ids of every skip-gram pair: tokens of the same sequence
    (``owner``) at distance ``<= b``, ``b`` drawn uniformly in ``1 .. window`` per centre
    token. ``tokens`` and ``owner`` list the (kept) tokens in sequence order."""
    n = tokens.size
    reach = rng.integers(1, window + 1, size=n)
    centres: list[np.ndarray] = []
    contexts: list[np.ndarray] = []
    for offset in range(1, window + 1):
        if offset >= n:
            break
        same = owner[offset:] == owner[:-offset]
        left = np.nonzero(same & (reach[:-offset] >= offset))[0]  # centre i, context i + o
        right = np.nonzero(same & (reach[offset:] >= offset))[0]  # centre i + o, context i
        centres += [tokens[left], tokens[right + offset]]
        contexts += [tokens[left + offset], tokens[right]]
    if not centres:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(centres), np.concatenate(contexts)


class _RowAdam:
    """A table of vectors updated by Adam one minibatch of rows at a time (lazy Adam, as
    ``torch.optim.SparseAdam``: only the rows a minibatch touches move; bias correction by
    the global step count), with explicit gradients instead of autograd's sparse tensors,
    which are several times slower here."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.first = torch.zeros_like(weight)
        self.second = torch.zeros_like(weight)
        self.steps = 0

    def update(self, rows: torch.Tensor, grads: torch.Tensor, lr: float) -> None:
        """Apply the summed gradient ``grads`` ``(B, dim)`` of the rows ``rows`` ``(B,)``."""
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        self.steps += 1
        touched, slot = torch.unique(rows, return_inverse=True)
        grad = grads.new_zeros(touched.shape[0], grads.shape[1]).index_add_(0, slot, grads)
        first = self.first.index_select(0, touched).mul_(beta1).add_(grad, alpha=1 - beta1)
        second = self.second.index_select(0, touched).mul_(beta2)
        second.addcmul_(grad, grad, value=1 - beta2)
        self.first.index_copy_(0, touched, first)
        self.second.index_copy_(0, touched, second)
        step_size = lr * (1 - beta2**self.steps) ** 0.5 / (1 - beta1**self.steps)
        moved = self.weight.index_select(0, touched)
        moved.addcdiv_(first, second.sqrt_().add_(eps), value=-step_size)
        self.weight.index_copy_(0, touched, moved)


def _sgns_step(
    centre: _RowAdam, context: _RowAdam, words: torch.Tensor, targets: torch.Tensor, lr: float
) -> None:
    """One minibatch of skip-gram negative sampling: ``words`` ``(B,)`` centre ids,
    ``targets`` ``(B, 1 + negatives)`` the true context then the noise words. The gradients
    of the mean loss ``-log sigma(u . v_o) - sum_n log sigma(-u . v_n)`` are written out:
    ``d/d logit = sigma(logit) - label``."""
    u = centre.weight.index_select(0, words)  # (B, dim)
    v = context.weight.index_select(0, targets.reshape(-1)).reshape(*targets.shape, -1)
    logits = torch.einsum("bd,bkd->bk", u, v)
    coeff = torch.sigmoid(logits)
    coeff[:, 0] -= 1.0
    coeff /= words.shape[0]
    grad_u = torch.einsum("bk,bkd->bd", coeff, v)
    grad_v = coeff[..., None] * u[:, None, :]
    centre.update(words, grad_u, lr)
    context.update(targets.reshape(-1), grad_v.reshape(-1, grad_v.shape[-1]), lr)


def train_word2vec(
    sequences: np.ndarray | Sequence[Sequence[int]],
    vocab_size: int,
    dim: int = 100,
    *,
    rng: np.random.Generator,
    window: int = 5,
    negatives: int = 5,
    epochs: int = 5,
    batch_size: int = 4096,
    learning_rate: float = 0.01,
    subsample: float = 1e-3,
) -> np.ndarray:
    """Skip-gram with negative sampling on ``sequences``; ``(vocab_size, dim)`` float32
    word vectors, row 0 (padding) zero. See the module docstring.

    Args:
        sequences: the token sequences (document texts): a padded int matrix ``(N, L)``
            (0 = padding, e.g. ``DocumentPool.tokens``) or a list of id sequences.
        vocab_size: ``V``; ids lie in ``[0, V)``.
        dim: vector dimension (FedPS: 100).
        rng: the source of every random draw.
        window: maximum distance between centre and context (dynamic window).
        negatives: noise words per pair.
        epochs: passes over the corpus.
        batch_size: pairs per update.
        learning_rate: initial Adam step size (decays linearly to 1e-4 of it).
        subsample: frequent-word subsampling threshold ``t`` (0 disables).
    """
    if vocab_size < 2 or dim < 1:
        raise ConfigError(f"need vocab_size >= 2 and dim >= 1, got {vocab_size} and {dim}")
    if window < 1 or negatives < 1 or epochs < 1 or batch_size < 1:
        raise ConfigError(
            "window, negatives, epochs and batch_size must be >= 1, got "
            f"{window}, {negatives}, {epochs}, {batch_size}"
        )
    if not learning_rate > 0 or subsample < 0:
        raise ConfigError(
            f"need learning_rate > 0 and subsample >= 0, got {learning_rate} and {subsample}"
        )
    tokens, owner = _flatten(sequences, vocab_size)
    if tokens.size == 0:
        raise DataFormatError("the corpus has no (non-padding) token to train on")
    counts = np.bincount(tokens, minlength=vocab_size).astype(np.float64)
    noise_table = unigram_table(counts)
    keep_prob = np.ones(vocab_size)
    if subsample > 0:
        seen = counts > 0
        frequency = counts[seen] / tokens.size
        keep_prob[seen] = np.minimum(
            1.0, (np.sqrt(frequency / subsample) + 1.0) * subsample / frequency
        )

    init = (rng.random((vocab_size, dim), dtype=np.float32) - 0.5) / dim
    centre_table = _RowAdam(torch.from_numpy(init))
    context_table = _RowAdam(torch.zeros(vocab_size, dim))

    total_steps = 0
    step = 0
    for epoch in range(epochs):
        kept = rng.random(tokens.size) < keep_prob[tokens]
        centre, context = skipgram_pairs(tokens[kept], owner[kept], window, rng)
        order = rng.permutation(centre.size)
        centre, context = centre[order], context[order]
        if epoch == 0:
            # The schedule needs the run's length; later epochs have about as many pairs.
            total_steps = max(1, epochs * -(-centre.size // batch_size))
        for start in range(0, centre.size, batch_size):
            c = torch.from_numpy(centre[start : start + batch_size])
            o = context[start : start + batch_size]
            noise = noise_table[rng.integers(0, noise_table.size, size=(o.size, negatives))]
            targets = torch.from_numpy(np.concatenate([o[:, None], noise], axis=1))
            lr = learning_rate * max(1.0 - step / total_steps, 1e-4)
            _sgns_step(centre_table, context_table, c, targets, lr)
            step += 1

    vectors = centre_table.weight.numpy().astype(np.float32, copy=True)
    vectors[PAD_ID] = 0.0
    seen = counts > 0
    unseen = ~seen
    unseen[PAD_ID] = False
    if unseen.any():
        target = float(np.median(np.linalg.norm(vectors[seen], axis=1)))
        norms = np.linalg.norm(vectors[unseen], axis=1, keepdims=True)
        vectors[unseen] *= target / np.maximum(norms, np.finfo(np.float32).tiny)
    return vectors
