"""A custom click model in FOLtR-ES, through the library.

FOLtR-ES (Kharitonov, WSDM 2019) trains a ranker from simulated users' clicks: each client
perturbs the model with its own seed, ranks its queries, and reports the MaxRR of the
clicks it made (privatized by randomized response). The clicks come from a click model; the
built-in ones are the paper's cascade models (``perfect``, ``navigational``,
``informational``) and a position-based one. This script defines another, *impatient
users*: a position-based model (:class:`fedrank.models.click_models.PositionBasedModel`)
whose examination falls as ``1 / rank**2``, so that almost only the top results are seen,
and trains with it through the same pieces ``fedrank foltr train`` uses: the FOLtR-ES
client half and estimator (:class:`fedrank.systems.foltr_es.client.FoltrEsClient`), the
strategy (:class:`fedrank.systems.foltr_es.strategy.FoltrEsStrategy`) and the round loop
(:class:`fedrank.federation.round.Round`). It then prints the test nDCG@10 of that model
beside the built-in navigational click model's (:func:`fedrank.experiments.foltr.run.
run_foltr`), both with the same seed and budget, on MQ2008 (LETOR 4.0) fold 1.

Run::

    python examples/foltr_custom_ranker.py --data PATH/TO/MQ2008 --interactions 400000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedrank.core.client_random import ClientRandom
from fedrank.core.message import MessageBatch
from fedrank.data.letor.folds import load_fold
from fedrank.data.query_bank import QueryBank
from fedrank.experiments.foltr.clients import LocalESClients
from fedrank.experiments.foltr.run import FoltrConfig, run_foltr
from fedrank.federation.round import Round
from fedrank.metrics.evaluate import evaluate
from fedrank.models.click_models import PositionBasedModel, click_model
from fedrank.models.linear import LinearRanker
from fedrank.systems.foltr_es.client import FoltrEsClient
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy


def impatient_users(depth: int = 10) -> PositionBasedModel:
    """Position-based clicks: the navigational model's attraction per grade (0, 1, 2) and
    an examination of ``1 / rank**2`` over the top ``depth``."""
    navigational = click_model("navigational")
    attraction = np.asarray(navigational.click_prob, dtype=np.float64)
    examination = 1.0 / np.arange(1, depth + 1, dtype=np.float64) ** 2
    return PositionBasedModel("impatient", attraction, examination)


def train_with(config: FoltrConfig, bank: QueryBank, clicks: PositionBasedModel) -> np.ndarray:
    """FOLtR-ES training with the click model ``clicks``: ``config.iterations`` rounds of
    ``config.clients`` clients; the final linear ranker's parameters."""
    section = config.strategy_config(bank.n_features)
    estimator = FoltrEsClient(section).estimator(clicks)
    clients = LocalESClients(estimator, bank)
    round_ = Round(FoltrEsStrategy(section))
    ids = np.arange(config.clients)
    for iteration in range(config.iterations):
        reports = clients.interact(round_.params, ClientRandom(config.seed, iteration, ids))
        round_.fold(MessageBatch.of_es(reports.seeds, reports.metric, reports.antithetic_metric))
        round_.close()
    return round_.params


def main() -> None:
    """Parse the arguments, train with both click models, print their test nDCG@10."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the MQ2008 directory")
    parser.add_argument("--interactions", type=int, default=400_000, help="in all")
    parser.add_argument("--clients", type=int, default=200, help="clients per iteration")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed")
    args = parser.parse_args()
    fold = load_fold(args.data, 1)
    config = FoltrConfig(
        click_model="navigational",
        clients=args.clients,
        interactions=args.interactions,
        seed=args.seed,
    )
    builtin = run_foltr(config, fold)
    train, test = QueryBank(fold.train), QueryBank(fold.test)
    clicks = impatient_users()
    params = train_with(config, train, clicks)
    ranker = LinearRanker(train.n_features)
    quality = evaluate(test, lambda x: ranker.score(params, x), {clicks.name: clicks})
    start = evaluate(test, lambda x: ranker.score(ranker.init_params(), x), {clicks.name: clicks})
    print(f"iterations {config.iterations} x {config.clients} clients, seed {config.seed}")
    print(f"untrained (zero weights) test nDCG@10 {start['ndcg']:.4f}")
    print(f"navigational (built in)  test nDCG@10 {builtin.ndcg10['test']:.4f}")
    print(f"impatient (custom)       test nDCG@10 {quality['ndcg']:.4f}")


if __name__ == "__main__":
    main()
