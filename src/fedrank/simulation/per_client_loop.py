"""FOLtR-ES written as a plain loop, one client at a time and one query at a time, the way
the paper's reference implementation (facebookresearch/foltr-es) works.

It exists for two reasons and is not used for training:

* the speed baseline of ``benchmarks/bench_foltr.py``: what the vectorized simulator
  (:mod:`fedrank.estimators.evolution_strategies`) is measured against, side by side;
* an independent oracle in the tests: it sorts every result list and walks the cascade
  position by position with per-interaction Python code, sharing no ranking or click code
  with the vectorized path, so agreement of the two in distribution checks the fast path.

Semantics are FOLtR-ES Section 3 exactly as in the vectorized simulator: each client draws
a seed, perturbs the model with the seeded noise (``+sigma v`` for the first ``B / 2``
interactions and ``-sigma v`` for the rest with antithetic variates), samples each query
uniformly, ranks by score (stable ties), clicks by the cascade model on the top 10,
privatizes each interaction's MaxRR by randomized response and sends the two means; the
server rebuilds each noise vector from its seed, forms Eq. (6) and steps Adam.
"""

from __future__ import annotations

import numpy as np

from fedrank.core.seeded_noise import gaussian_noise
from fedrank.data.letor.split import LetorSplit
from fedrank.metrics.maxrr import maxrr_values
from fedrank.models.click_models import CascadeClickModel
from fedrank.models.rankers import Ranker
from fedrank.optim.adam import Adam
from fedrank.privacy.randomized_response import RandomizedResponse


def loop_interaction(
    params: np.ndarray,
    ranker: Ranker,
    split: LetorSplit,
    query: int,
    model: CascadeClickModel,
    rng: np.random.Generator,
) -> int:
    """One interaction: the MaxRR value index (0 = no click in the top ``depth``)."""
    features, labels = split.query(query)
    order = np.argsort(-ranker.score(params, features), kind="stable")
    ranked = labels[order]
    for position in range(min(model.depth, ranked.size)):
        grade = int(ranked[position])
        if rng.random() < model.click_prob[grade]:
            return position + 1  # the first click decides MaxRR; later ones do not matter
    return 0


def loop_client(
    theta: np.ndarray,
    ranker: Ranker,
    split: LetorSplit,
    model: CascadeClickModel,
    seed: int,
    batch: int,
    sigma: float,
    privatizer: RandomizedResponse | None,
    rng: np.random.Generator,
) -> tuple[float, float, list[int]]:
    """One client's antithetic message ``(metric, antithetic_metric)`` and the true value
    index of each of its interactions."""
    noise = gaussian_noise(seed, ranker.dim).astype(np.float64)
    values = maxrr_values(model.depth)
    plus: list[float] = []
    minus: list[float] = []
    true: list[int] = []
    for b in range(batch):
        forward = b < batch // 2
        params = theta + (sigma if forward else -sigma) * noise
        query = int(rng.integers(split.n_queries))
        index = loop_interaction(params, ranker, split, query, model, rng)
        true.append(index)
        if privatizer is not None:
            index = int(privatizer.privatize_indices(np.array(index), rng))
        (plus if forward else minus).append(float(values[index]))
    return float(np.mean(plus)), float(np.mean(minus)), true


def loop_train(
    ranker: Ranker,
    split: LetorSplit,
    model: CascadeClickModel,
    clients: int,
    batch: int,
    iterations: int,
    rng: np.random.Generator,
    sigma: float = 0.01,
    p: float | None = 0.9,
    learning_rate: float = 1e-3,
) -> tuple[np.ndarray, list[float]]:
    """Antithetic FOLtR-ES, a client and a query at a time; returns the final parameters
    and the mean true MaxRR of every iteration."""
    privatizer = None if p is None else RandomizedResponse(maxrr_values(model.depth), p)
    values = maxrr_values(model.depth)
    optimizer = Adam(learning_rate=learning_rate)
    theta = ranker.init_params()
    state = optimizer.init(theta)
    curve = []
    for _ in range(iterations):
        grad = np.zeros(ranker.dim)
        experienced = []
        for _client in range(clients):
            seed = int(rng.integers(2**32))
            plus, minus, true = loop_client(
                theta, ranker, split, model, seed, batch, sigma, privatizer, rng
            )
            experienced.extend(values[true])
            grad += (np.float32(plus) - np.float32(minus)) * gaussian_noise(seed, ranker.dim)
        grad /= 2.0 * clients * sigma
        step, state = optimizer.update(-grad, state, theta)
        theta = theta + step
        curve.append(float(np.mean(experienced)))
    return theta, curve
