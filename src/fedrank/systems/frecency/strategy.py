"""Federated frecency's server half (Hartmann et al., *Federated Learning for Ranking Browser
History Suggestions*, Sections 4-5), built once from its config.

* The server aggregates the clients' finite-difference gradients with the gated weighted
  mean (:class:`~fedrank.aggregators.gated_mean.GatedMean`) or their signs with the sign
  vote (:class:`~fedrank.aggregators.sign_vote.SignVote`), steps Rprop (Sec. 5.3; SGD and
  Adam as the paper's foils) on the aggregate -- the clients' gradients point uphill, as
  every optimizer here expects -- and applies the safeguards (Sec. 5.6).
* Against poisoning (beyond the paper): full gradients can instead be aggregated by the
  coordinate-wise median or trimmed mean (Yin et al. 2018), and bounded in L2 norm, fixed
  or adaptively (Andrew et al. 2021): ``aggregator``, ``trim``, ``norm_bound``,
  ``norm_quantile`` (:func:`~fedrank.strategies.base.build_aggregator`). Sign messages
  are votes already (one per client and weight) and keep the sign vote.
"""

from __future__ import annotations

import numpy as np

from fedrank.aggregators.gated_mean import GatedMean
from fedrank.aggregators.sign_vote import SignVote
from fedrank.models.frecency.safeguards import deployed_frecency_safeguards, publish_integers
from fedrank.models.frecency.scorer import PageScorer, page_scorer
from fedrank.optim.adam import Adam
from fedrank.optim.rprop import Rprop
from fedrank.optim.sgd import SGD
from fedrank.strategies.base import Strategy, build_aggregator
from fedrank.systems.frecency.config import FrecencyConfig


class FrecencyStrategy(Strategy):
    """The federated frecency chain for one :class:`FrecencyConfig` (module docstring)."""

    name = "frecency"

    def __init__(self, config: FrecencyConfig) -> None:
        c = config.resolved()
        self.config = c
        self.scorer: type[PageScorer] = page_scorer(c.model)
        self.dim = len(self.scorer.names)
        z = float(c.significance_z)
        if c.message == "full":
            self.aggregator = build_aggregator(
                GatedMean(self.dim, z=z), c.aggregator, self.dim, c.trim, c.norm_bound,
                c.norm_quantile, c.max_rows,
            )  # fmt: skip
        else:
            self.aggregator = SignVote(self.dim, z=z)
        if c.optimizer == "rprop":
            self.optimizer = Rprop(c.eta_plus, c.eta_minus, c.step_init, c.step_min, c.step_max)
        elif c.optimizer == "sgd":
            self.optimizer = SGD(learning_rate=c.learning_rate)
        else:
            self.optimizer = Adam(learning_rate=c.learning_rate)
        if c.setting == "mozilla-deployed":
            self.constraints = deployed_frecency_safeguards()
        else:
            self.constraints = self.scorer.safeguards(max_change=c.max_change)

    def initial_params(self) -> np.ndarray:
        """Firefox's default weights (a safeguard of Sec. 5.6: start from what ships)."""
        return self.scorer.defaults()

    def parameter_names(self) -> list[str]:
        return list(self.scorer.names)

    def publish(self, params: np.ndarray) -> np.ndarray:
        """Integer weights under ``mozilla-deployed`` (the Scala sink's rounding), the
        server's own weights otherwise."""
        return publish_integers(params) if self.config.setting == "mozilla-deployed" else params
