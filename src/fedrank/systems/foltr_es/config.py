"""FOLtR-ES's settings (Kharitonov, *Federated Online Learning to Rank with Evolution
Strategies*, WSDM 2019; the defaults of its Section 6.3): the server's ``[foltr_es]`` table;
the simulator builds the same section from its run settings
(:meth:`fedrank.experiments.foltr.run.FoltrConfig.strategy_config`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.rankers import RANKER_NAMES

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
            (:class:`~fedrank.aggregators.es_gradient.ESGradient`; against metric lies);
            0 (default): as reported, the paper.
        server_seeds: the server issues each selected client's seed at check-in and an
            update carries the seed's token (:mod:`fedrank.server.seeds`; a setting of the
            service, against seed shopping); off (the paper): clients draw their own.
    """

    ranker: str = "linear"
    n_features: int = 46
    sigma: float = 0.01
    batch: int = 4
    antithetic: bool = True
    p: float = 0.9
    learning_rate: float = 0.001
    difference_bound: float = 0.0
    server_seeds: bool = False

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
