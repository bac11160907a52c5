"""FPDGD's server half (Wang et al., ICTIR 2021, Algorithm 1): FedAvg of the clients' model
deltas, each weighted by its interactions, on a ranker's parameters; the first model is the
ranker's, drawn from the config's seed."""

from __future__ import annotations

import numpy as np

from fedrank.models.rankers import Ranker, make_ranker
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.fpdgd.config import FpdgdConfig


def initial_model(ranker: Ranker, seed: int) -> np.ndarray:
    """The ranker's first parameters, from a generator seeded by ``seed``."""
    return ranker.init_params(np.random.default_rng(np.random.SeedSequence(seed)))


class FpdgdStrategy(FedAvgStrategy):
    """FedAvg of FPDGD's deltas for one :class:`FpdgdConfig` (module docstring)."""

    name = "fpdgd"

    def __init__(self, config: FpdgdConfig) -> None:
        self.ranker: Ranker = make_ranker(config.ranker, config.n_features)
        super().__init__(
            config.fedavg(self.ranker.dim), initial=initial_model(self.ranker, config.seed)
        )
        self.fpdgd = config
