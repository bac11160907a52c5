"""FOLtR-ES's server half (Kharitonov, WSDM 2019, Section 3), built once from its config.

The server rebuilds every client's noise from its seed and averages ``metric * noise``
(Eq. 6, :class:`~fedrank.aggregators.es_gradient.ESGradient`): an estimate of the gradient
of the metric, which is *maximized*. The optimizer chain is ``Chain(Scale(-1), Adam)``: the
ascent direction turned into the uphill update Adam descends. No constraints.
"""

from __future__ import annotations

import numpy as np

from fedrank.aggregators.es_gradient import ESGradient
from fedrank.models.rankers import Ranker, make_ranker
from fedrank.optim.adam import Adam
from fedrank.optim.chain import Chain, Scale
from fedrank.strategies.base import Strategy
from fedrank.systems.foltr_es.config import FoltrEsConfig


class FoltrEsStrategy(Strategy):
    """The FOLtR-ES chain for one :class:`FoltrEsConfig` (module docstring)."""

    name = "foltr-es"

    def __init__(self, config: FoltrEsConfig) -> None:
        self.config = config
        self.ranker: Ranker = make_ranker(config.ranker, config.n_features)
        self.dim = self.ranker.dim
        self.aggregator = ESGradient(
            self.dim, config.sigma, config.antithetic, config.difference_bound
        )
        self.optimizer = Chain(Scale(-1.0), Adam(learning_rate=config.learning_rate))

    def initial_params(self) -> np.ndarray:
        return self.ranker.init_params()
