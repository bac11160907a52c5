"""FOLtR-ES (Kharitonov, *Federated Online Learning to Rank with Evolution Strategies*, WSDM
2019, Section 3): the chain of the system, built once from its config section.

* A client perturbs the model with noise drawn from its own 32-bit seed (antithetic pairs,
  Sec. 3.2), ranks ``B`` of its queries with it, and reports only the seed and its mean
  MaxRR, privatized by randomized response (Sec. 3.3,
  :class:`~fedrank.privacy.randomized_response.RandomizedResponse`).
* The server rebuilds every client's noise from its seed and averages ``metric * noise``
  (Eq. 6, :class:`~fedrank.aggregators.es_gradient.ESGradient`): an estimate of the
  gradient of the metric, which is *maximized*. The optimizer chain is
  ``Chain(Scale(-1), Adam)``: the ascent direction turned into the uphill update Adam
  descends. No constraints.

:class:`FoltrEsConfig` is the one validated section: the server's ``[foltr_es]`` table; the
simulator builds the same strategy from its run settings
(:func:`fedrank.experiments.foltr.run.train_es`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.aggregators.es_gradient import ESGradient
from fedrank.errors import ConfigError
from fedrank.models.rankers import RANKER_NAMES, Ranker, make_ranker
from fedrank.optim.adam import Adam
from fedrank.optim.chain import Chain, Scale
from fedrank.strategies.base import Strategy

#: Values of MaxRR at depth 10: 0 and 1/1 .. 1/10 (randomized response over ``n = 11``).
MAXRR_VALUES = 11


@dataclass(frozen=True)
class FoltrEsConfig:
    """FOLtR-ES settings (the paper's Section 6.3 defaults).

    Attributes:
        ranker: ``linear`` or ``two-layer`` (:mod:`fedrank.models.rankers`).
        n_features: features per document (MQ2007/MQ2008: 46).
        sigma: the perturbation scale (0.01).
        batch: interactions per client and message, ``B`` (4; even with antithetic).
        antithetic: antithetic variates (on).
        p: randomized response's probability of the true value (0.9; 1: no privatization).
        learning_rate: the server's Adam step size (0.001).
        difference_bound: each report's antithetic difference is clipped to this bound
            (:class:`~fedrank.aggregators.es_gradient.ESGradient`; against metric lies,
            issue 15); 0 (default): as reported, the paper.
    """

    ranker: str = "linear"
    n_features: int = 46
    sigma: float = 0.01
    batch: int = 4
    antithetic: bool = True
    p: float = 0.9
    learning_rate: float = 0.001
    difference_bound: float = 0.0

    def __post_init__(self) -> None:
        rules = [
            (self.ranker in RANKER_NAMES, f"ranker must be one of {', '.join(RANKER_NAMES)}"),
            (self.n_features >= 1, "n_features must be >= 1"),
            (np.isfinite(self.sigma) and self.sigma > 0, "sigma must be > 0"),
            (self.batch >= 1, "batch must be >= 1"),
            (not self.antithetic or self.batch % 2 == 0, "batch must be even with antithetic"),
            (1 / MAXRR_VALUES < self.p <= 1, "p must lie in (1/11, 1] (MaxRR at depth 10: n = 11)"),
            (np.isfinite(self.learning_rate) and self.learning_rate > 0,
             "learning_rate must be > 0"),
            (np.isfinite(self.difference_bound) and self.difference_bound >= 0,
             "difference_bound must be >= 0 (0: off)"),
            (self.antithetic or not self.difference_bound,
             "difference_bound clips the antithetic difference: it needs antithetic = true"),
        ]  # fmt: skip
        for ok, message in rules:
            if not ok:
                raise ConfigError(message)


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
