"""Pairwise Differentiable Gradient Descent (PDGD; Oosterhuis and de Rijke, CIKM 2018), run
by many clients at once: the local learner of FPDGD (Wang, Liu, Zhuang and Zuccon,
"Effective and Privacy-preserving Federated Online Learning to Rank", ICTIR 2021).

One PDGD interaction of a client with model ``theta``:

1. Score the query's documents and *sample* the displayed ranking from the Plackett-Luce
   distribution ``P(d at t) = exp(s_d) / sum_{d' not yet placed} exp(s_d')`` (temperature
   1): sorting ``s + Gumbel noise`` is an exact sample of it (the Gumbel-max trick). The top
   10 are displayed.
2. Simulate clicks on the displayed list (the click model, stops included).
3. Infer preferences: a clicked document is preferred over every unclicked document
   ranked above the last click and over the one right after it.
4. For each such pair ``(k preferred over l)`` at positions ``i`` and ``j``, the gradient
   contribution is ``rho * P(k > l) P(l > k) (grad f(x_k) - grad f(x_l))`` with
   ``P(k > l) = exp(s_k) / (exp(s_k) + exp(s_l))`` and the debiasing weight
   ``rho = P(R*) / (P(R) + P(R*))``, ``R*`` being the ranking with ``k`` and ``l`` swapped.
   Only the Plackett-Luce factors at positions ``upper = min(i, j)`` to ``lower = max(i,
   j)`` differ between ``R`` and ``R*``. Their numerators are the same multiset; with
   ``a`` the document at ``upper`` and ``b`` the one at ``lower``, the denominator at each
   position ``upper < t <= lower`` changes from ``den_t`` to ``den_t + exp(s_a) -
   exp(s_b)`` (``b`` instead of ``a`` is already placed), so

       P(R*) / P(R) = prod_{t = upper + 1}^{lower} den_t / (den_t + exp(s_a) - exp(s_b)).

5. ``theta += learning_rate * gradient`` (gradient *ascent*: PDGD maximizes the pairwise
   preference probabilities), before the client's next interaction.

:class:`PDGDClients` runs step ``b`` of every client's ``B`` interactions as one numpy pass
(a loop over the ``B`` steps and the query-size buckets, none over clients or pairs);
each client keeps its own parameter row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.core.client_random import ClientRandom, Stream
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError
from fedrank.metrics.maxrr import maxrr_index_from_clicks, maxrr_values
from fedrank.models.click_models import ClickModel, coin_shape
from fedrank.models.rankers import Ranker

#: Documents displayed (and clickable) per interaction.
DISPLAYED = 10


def sample_plackett_luce(scores: np.ndarray, valid: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``(I, W)`` full rankings (slot indices, best first; padding slots last) sampled from
    the Plackett-Luce distribution of each row's scores (Gumbel-max trick), given one
    uniform per slot ``u`` ``(I, W)``."""
    gumbel = -np.log(-np.log(u))
    keys = np.where(valid, scores.astype(np.float64) + gumbel, -np.inf)
    return np.argsort(-keys, axis=1, kind="stable")


def inferred_pairs(clicks: np.ndarray, present: np.ndarray) -> np.ndarray:
    """``(I, K, K)`` bool: ``[n, i, j]`` is True when the document at displayed position
    ``i`` is preferred over the one at position ``j`` (``i`` clicked; ``j`` unclicked and
    at most one position below the last click)."""
    k = clicks.shape[1]
    any_click = clicks.any(axis=1)
    last = np.where(any_click, k - 1 - np.argmax(clicks[:, ::-1], axis=1), -1)
    included = (np.arange(k)[None, :] <= last[:, None] + 1) & present
    negative = included & ~clicks
    return clicks[:, :, None] & negative[:, None, :]


def document_weights(
    shown_scores: np.ndarray, suffix_den: np.ndarray, pairs: np.ndarray
) -> np.ndarray:
    """``(I, K)``: each displayed document's PDGD weight, the sum of ``rho * P(k > l) P(l >
    k)`` over the inferred pairs where it is preferred minus the sum over those where it is
    not (its gradient coefficient).

    Args:
        shown_scores: ``(I, K)`` scores of the displayed documents, shifted per row (any
            per-row constant cancels) so that ``exp`` does not overflow.
        suffix_den: ``(I, K)`` Plackett-Luce denominators at the displayed positions: the
            sum of ``exp(score)`` over the documents not placed above (same shift).
        pairs: from :func:`inferred_pairs`.

    Works on the inferred pairs only (a few per click), not on all ``K x K`` position pairs.
    """
    n, i, j = np.nonzero(pairs)
    weights = np.zeros(shown_scores.shape)
    if n.size == 0:
        return weights
    d = shown_scores[n, i] - shown_scores[n, j]
    tail = np.exp(-np.abs(d))
    symmetric = tail / (1.0 + tail) ** 2  # P(k > l) P(l > k), stable for any d
    upper, lower = np.minimum(i, j), np.maximum(i, j)
    e = np.exp(shown_scores)
    shift = e[n, upper] - e[n, lower]  # exp(s_a) - exp(s_b)
    t = np.arange(shown_scores.shape[1])[None, :]
    in_range = (t > upper[:, None]) & (t <= lower[:, None])
    # Floors keep underflowed denominators finite: both rankings are then equally
    # (im)probable in float64 and rho is the neutral 1/2.
    tiny = np.finfo(np.float64).tiny
    den = np.maximum(suffix_den[n], tiny)
    log_factor = np.log(den) - np.log(np.maximum(den + shift[:, None], tiny))
    log_ratio = np.where(in_range, log_factor, 0.0).sum(axis=1)  # log P(R*) / P(R)
    with np.errstate(over="ignore"):  # exp overflows to inf where rho's limit is exactly 0
        rho = 1.0 / (1.0 + np.exp(-log_ratio))  # ratio / (1 + ratio)
    w = rho * symmetric
    k = shown_scores.shape[1]
    flat = weights.reshape(-1)
    flat += np.bincount(n * k + i, weights=w, minlength=flat.size)
    flat -= np.bincount(n * k + j, weights=w, minlength=flat.size)
    return weights


@dataclass(frozen=True)
class PDGDStep:
    """One interaction of each client: the gradients and what the users experienced."""

    gradients: np.ndarray  # (C, dim)
    maxrr: np.ndarray  # (C,) true MaxRR of the displayed list


class PDGDClients:
    """PDGD interactions of many clients at once.

    Args:
        ranker: the model family; each client scores with its own parameter row.
        click_model: the simulated users.
    """

    def __init__(self, ranker: Ranker, click_model: ClickModel) -> None:
        if click_model.depth > DISPLAYED:
            raise ConfigError(
                f"PDGD displays {DISPLAYED} documents; the click model examines {click_model.depth}"
            )
        self.ranker = ranker
        self.click_model = click_model

    def train(
        self,
        theta: np.ndarray,
        bank: QueryBank,
        random: ClientRandom,
        batch: int,
        learning_rate: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every client of ``random`` starts from ``theta`` and learns from its ``batch``
        interactions in turn (step 5); returns the ``(C, dim)`` final parameters and the
        ``(C, batch)`` MaxRR its users saw. Interaction ``b`` of a client draws its query,
        ranking and clicks from the client's own numbers (counter ``b``), so a client
        trains the same alone, in any block, or on any worker."""
        rows = np.arange(random.size)
        local = np.tile(np.asarray(theta, dtype=np.float64), (random.size, 1))
        maxrr = np.zeros((random.size, batch))
        for b in range(batch):
            queries = random.integers(rows, Stream.QUERY, np.full(rows.size, b), bank.n_queries)
            step = self.step(local, bank, queries, random, b)
            local += learning_rate * step.gradients
            maxrr[:, b] = step.maxrr
        return local, maxrr

    def step(
        self,
        params: np.ndarray,
        bank: QueryBank,
        queries: np.ndarray,
        random: ClientRandom,
        counter: int,
    ) -> PDGDStep:
        """Client ``c`` (parameters ``params[c]``, random numbers ``random`` row ``c``)
        issues query ``queries[c]``; returns the PDGD gradient of each client and the MaxRR
        of the list it was shown. ``counter`` numbers the interaction in the client's
        streams (its Gumbel keys and click coins)."""
        n_clients = params.shape[0]
        gradients = np.zeros((n_clients, self.ranker.dim))
        maxrr = np.zeros(n_clients)
        values = maxrr_values(self.click_model.depth)
        for group in bank.group(queries):
            c = group.interactions
            features, labels = group.features(), group.labels()
            valid = labels >= 0
            scores = self.ranker.score_rows(params[c], features).astype(np.float64)
            scores = np.where(valid, scores, -np.inf)
            scores -= scores.max(axis=1, keepdims=True)  # exp(0) = 1 at the top: no overflow
            at = np.full(c.size, counter)
            ranking = sample_plackett_luce(
                scores, valid, random.uniform_slots(c, Stream.GUMBEL, at, scores.shape[1])
            )
            ranked_scores = np.take_along_axis(scores, ranking, axis=1)
            suffix = np.cumsum(np.exp(ranked_scores)[:, ::-1], axis=1)[:, ::-1]
            k = min(DISPLAYED, labels.shape[1])
            shown = ranking[:, :k]
            shown_labels = np.take_along_axis(labels, shown, axis=1).astype(np.int64)
            present = shown_labels >= 0
            shape = coin_shape(self.click_model, shown_labels)
            coins = random.uniform_slots(c, Stream.CLICK, at, shape[1] * shape[2])
            clicks = self.click_model.clicks_from_coins(shown_labels, coins.reshape(shape))
            maxrr[c] = values[maxrr_index_from_clicks(clicks, self.click_model.depth)]
            pairs = inferred_pairs(clicks, present)
            if not pairs.any():
                continue
            shown_scores = np.where(present, ranked_scores[:, :k], 0.0)
            doc_weight = document_weights(
                shown_scores, np.where(present, suffix[:, :k], 1.0), pairs
            )
            slot_weight = np.zeros(labels.shape)
            np.put_along_axis(slot_weight, shown, doc_weight, axis=1)
            gradients[c] = self.ranker.vjp_rows(params[c], features, slot_weight)
        return PDGDStep(gradients, maxrr)
