"""A custom aggregator in a federated run: each client counts once.

fedrank's :class:`~fedrank.aggregators.WeightedMean` is FedAvg's mean, every update weighted
by the client's ``n`` (its number of training queries). A client that claims a large ``n``
then pulls the model its way. :class:`UnweightedMean` below ignores ``n``: the plain mean of
the clients' updates. It implements the aggregator protocol of
:class:`fedrank.core.protocols.Aggregator` (a commutative monoid with an exact JSON state)
and passes the project's conformance suite (``tests/conformance``; the test of this example
runs it on this class).

The run: clients hold the queries of MQ2008 (fold 1, LETOR 4.0), each computes the gradient
of a pointwise squared loss for a linear ranker on its own queries, and the server folds the
updates with the aggregator and steps with SGD through :class:`fedrank.federation.round.
Round`, the round loop every learner in fedrank uses. The script prints the test nDCG@10
of both aggregators.

Run::

    python examples/custom_aggregator.py --data PATH/TO/MQ2008 --rounds 30 --clients 40
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.aggregators import WeightedMean
from fedrank.aggregators.mean import check_dim, check_update, vector_columns
from fedrank.core.message import Message, MessageBatch
from fedrank.core.state_json import decode_state, encode_state
from fedrank.data.letor.folds import load_fold
from fedrank.data.letor.split import LetorSplit
from fedrank.errors import ConfigError, DataFormatError
from fedrank.federation.round import Round
from fedrank.metrics.ndcg import ndcg_at_k
from fedrank.optim.sgd import SGD
from fedrank.strategies.base import Strategy


class UnweightedMeanState(NamedTuple):
    """Partial aggregate of :class:`UnweightedMean`: the sum of the updates folded in and
    how many there were."""

    total: npt.NDArray[np.float64]
    count: int


class UnweightedMean:
    """The plain mean of the clients' updates (every client weighs 1, whatever its ``n``).

    Args:
        dim: length of the update vectors.
    """

    def __init__(self, dim: int) -> None:
        self.dim = check_dim(dim)

    def __repr__(self) -> str:
        return f"UnweightedMean(dim={self.dim})"

    def _check(self, state: UnweightedMeanState) -> None:
        if state.total.shape != (self.dim,):
            raise ConfigError(
                f"expected a state of dimension {self.dim}, got shape {state.total.shape}"
            )

    def zero(self) -> UnweightedMeanState:
        """The empty aggregate."""
        return UnweightedMeanState(np.zeros(self.dim, dtype=np.float64), 0)

    def accumulate(self, state: UnweightedMeanState, message: Message) -> UnweightedMeanState:
        """Fold one message in (its weight ``n`` is not used)."""
        self._check(state)
        update = check_update(message.update, self.dim).astype(np.float64, copy=False)
        return UnweightedMeanState(state.total + update, state.count + 1)

    def accumulate_batch(
        self, state: UnweightedMeanState, batch: MessageBatch
    ) -> UnweightedMeanState:
        """Fold a batch of vector messages at once (rows of ``batch.vector``)."""
        self._check(state)
        updates, _ = vector_columns(batch, self.dim)
        rows = updates.astype(np.float64, copy=False)
        return UnweightedMeanState(state.total + rows.sum(axis=0), state.count + rows.shape[0])

    def merge(self, a: UnweightedMeanState, b: UnweightedMeanState) -> UnweightedMeanState:
        """Combine two partial aggregates."""
        self._check(a)
        self._check(b)
        return UnweightedMeanState(a.total + b.total, a.count + b.count)

    def finalize(self, state: UnweightedMeanState) -> np.ndarray:
        """The mean update (zeros when nothing was folded in: no information, no step)."""
        self._check(state)
        if state.count == 0:
            return np.zeros(self.dim, dtype=np.float64)
        return state.total / state.count

    def check_consistent(self, state: UnweightedMeanState) -> None:
        """Refuse a state no sequence of messages produces (a server checks the merged
        states proxies send with it)."""
        self._check(state)
        if not np.isfinite(state.total).all():
            raise DataFormatError("the state holds non-finite values")
        if state.count < 0:
            raise DataFormatError("the count must be >= 0")
        if state.count == 0 and np.any(state.total):
            raise DataFormatError("a state of 0 messages must be all zeros")

    def state_to_json(self, state: UnweightedMeanState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check(state)
        return encode_state(state, "UnweightedMean", settings={"dim": self.dim})

    def state_from_json(self, data: dict[str, Any]) -> UnweightedMeanState:
        """Inverse of :meth:`state_to_json`."""
        state = decode_state(
            data, UnweightedMeanState, "UnweightedMean", settings={"dim": self.dim}
        )
        self._check(state)
        return state


class LinearRankerStrategy(Strategy):
    """A linear ranker's server chain: the given aggregator, then SGD on the mean gradient
    (an uphill update, as fedrank's optimizers take it)."""

    name = "linear-ranker"

    def __init__(self, dim: int, aggregator: Any, learning_rate: float) -> None:
        self.dim = dim
        self.aggregator = aggregator
        self.optimizer = SGD(learning_rate)

    def initial_params(self) -> np.ndarray:
        return np.zeros(self.dim, dtype=np.float64)


def _queries(split: LetorSplit) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each query's (features, grades)."""
    offsets = split.query_offsets
    return [
        (
            split.features[a:b].astype(np.float64),
            split.labels[a:b].astype(np.float64),
        )
        for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]


def client_update(params: np.ndarray, queries: list[tuple[np.ndarray, np.ndarray]]) -> Message:
    """One client's message: the gradient of the mean squared error of ``features @
    params`` against the grades over its own queries, weighted by its number of queries."""
    features = np.concatenate([f for f, _ in queries])
    grades = np.concatenate([g for _, g in queries])
    residual = features @ params - grades
    gradient = 2.0 * features.T @ residual / len(grades)
    return Message(update=gradient, n=len(queries))


def mean_ndcg10(params: np.ndarray, queries: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean nDCG@10 of the ranker ``params`` over ``queries`` (queries without a relevant
    document left out, as LETOR's evaluation does)."""
    values = []
    for features, grades in queries:
        order = np.argsort(-(features @ params), kind="stable")
        ranked = np.full((1, 10), -1)
        top = grades[order][:10].astype(np.int64)
        ranked[0, : top.size] = top
        values.append(ndcg_at_k(ranked, grades.astype(np.int64)[None, :], 10)[0])
    return float(np.nanmean(values))


def federated_run(
    aggregator: Any,
    clients: list[list[tuple[np.ndarray, np.ndarray]]],
    rounds: int,
    per_round: int,
    learning_rate: float,
    seed: int,
) -> np.ndarray:
    """``rounds`` rounds of ``per_round`` clients drawn with ``seed``; the final model."""
    dim = clients[0][0][0].shape[1]
    round_ = Round(LinearRankerStrategy(dim, aggregator, learning_rate))
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        chosen = rng.choice(len(clients), size=min(per_round, len(clients)), replace=False)
        messages = [client_update(round_.params, clients[c]) for c in chosen]
        batch = MessageBatch.of_vectors(
            np.stack([m.update for m in messages]), np.array([m.n for m in messages])
        )
        round_.fold(batch)
        round_.close()
    return round_.params


def main() -> None:
    """Parse the arguments, run both aggregators on the same clients, print nDCG@10."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the MQ2008 directory")
    parser.add_argument("--clients", type=int, default=40, help="clients the queries go to")
    parser.add_argument("--rounds", type=int, default=30, help="federated rounds")
    parser.add_argument("--per-round", type=int, default=10, help="clients per round")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="SGD step size")
    parser.add_argument("--seed", type=int, default=0, help="client split and draws")
    args = parser.parse_args()
    fold = load_fold(args.data, 1)
    train, test = _queries(fold.train), _queries(fold.test)
    # an uneven split: client i holds a share of the queries that grows with i
    rng = np.random.default_rng(args.seed)
    owner = rng.choice(args.clients, size=len(train), p=_shares(args.clients))
    clients = [[train[q] for q in np.flatnonzero(owner == c)] for c in range(args.clients)]
    clients = [c for c in clients if c]
    dim = train[0][0].shape[1]
    for label, aggregator in (
        ("WeightedMean (built in)", WeightedMean(dim)),
        ("UnweightedMean (custom)", UnweightedMean(dim)),
    ):
        params = federated_run(
            aggregator, clients, args.rounds, args.per_round, args.learning_rate, args.seed
        )
        print(f"{label:24s} test nDCG@10 {mean_ndcg10(params, test):.4f}")


def _shares(n: int) -> np.ndarray:
    weights = np.arange(1, n + 1, dtype=np.float64)
    return weights / weights.sum()


if __name__ == "__main__":
    main()
