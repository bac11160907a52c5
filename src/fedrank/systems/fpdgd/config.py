"""FPDGD's settings (Wang, Lin, Zuccon et al., *Effective and Privacy-preserving Federated
Online Learning to Rank*, ICTIR 2021): the server's ``[fpdgd]`` table, and what ``fedrank
foltr train --algorithm fpdgd`` builds from its run settings
(:meth:`fedrank.experiments.foltr.run.FoltrConfig.fpdgd_config`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.rankers import RANKER_NAMES
from fedrank.strategies.base import ROBUST_AGGREGATORS, check_aggregation
from fedrank.systems.fedavg.config import FedAvgConfig

#: FPDGD's optional Laplace mechanism on the clients' deltas (:mod:`fedrank.privacy.laplace`).
LAPLACE_MODES: tuple[str, ...] = ("none", "local", "distributed")
#: ``mean`` (FedAvg's weighted mean of the deltas) or a robust statistic of them.
AGGREGATORS: tuple[str, ...] = ("mean", *ROBUST_AGGREGATORS)


@dataclass(frozen=True)
class FpdgdConfig:
    """FPDGD settings (defaults: the FPDGD paper's local step, FOLtR-ES's ``B``).

    Attributes:
        ranker: ``linear`` or ``two-layer`` (:mod:`fedrank.models.rankers`).
        n_features: features per document (MQ2007/MQ2008: 46).
        batch: interactions per client and round, ``B`` (4); each is a PDGD step on the
            client, and ``B`` is its message's weight.
        learning_rate: the clients' local PDGD step size (0.1, the FPDGD paper's).
        server_learning_rate: the server's step on the weighted mean delta (1: FedAvg).
        laplace: ``none``, ``local`` (every message ``laplace_epsilon``-LDP,
            :class:`~fedrank.privacy.laplace.LocalLaplace`) or ``distributed`` (FPDGD's
            mechanism: ``laplace_shares`` clients' noise shares add up to one Laplace draw,
            :class:`~fedrank.privacy.laplace.DistributedLaplace`).
        laplace_epsilon: the Laplace mechanism's epsilon per round (FPDGD's paper: 1.2 to
            10).
        laplace_clip: the L1 radius every delta is clipped to before the noise.
        laplace_shares: ``distributed``: the clients of a round whose shares add up, ``K``.
        aggregator, trim, norm_bound, norm_quantile, max_rows: the server's aggregation of
            the deltas, as FedAvg's (:class:`~fedrank.systems.fedavg.config.FedAvgConfig`).
        seed: the seed of the first model (a two-layer ranker's random weights).
    """

    ranker: str = "linear"
    n_features: int = 46
    batch: int = 4
    learning_rate: float = 0.1
    server_learning_rate: float = 1.0
    laplace: str = "none"
    laplace_epsilon: float = 4.5
    laplace_clip: float = 1.0
    laplace_shares: int = 1
    aggregator: str = "mean"
    trim: float = 0.1
    norm_bound: float = 0.0
    norm_quantile: float | None = None
    max_rows: int = 100_000
    seed: int = 0

    def __post_init__(self) -> None:
        rules = [
            (self.ranker in RANKER_NAMES, f"ranker must be one of {', '.join(RANKER_NAMES)}"),
            (self.n_features >= 1, "n_features must be >= 1"),
            (self.batch >= 1, "batch must be >= 1"),
            (np.isfinite(self.learning_rate) and self.learning_rate > 0,
             "learning_rate must be > 0"),
            (self.laplace in LAPLACE_MODES,
             f"laplace must be one of {', '.join(LAPLACE_MODES)}, got {self.laplace!r}"),
            (np.isfinite(self.laplace_epsilon) and self.laplace_epsilon > 0,
             "laplace_epsilon must be > 0"),
            (np.isfinite(self.laplace_clip) and self.laplace_clip > 0, "laplace_clip must be > 0"),
            (self.laplace_shares >= 1, "laplace_shares must be >= 1"),
            (0 <= self.seed < 2**63, f"seed must be in 0..2**63-1, got {self.seed}"),
        ]  # fmt: skip
        for ok, message in rules:
            if not ok:
                raise ConfigError(message)
        self.fedavg(1)  # the server's aggregation settings

    def fedavg(self, dim: int) -> FedAvgConfig:
        """The server half's settings: FedAvg of ``dim`` parameters."""
        check_aggregation(
            self.aggregator, AGGREGATORS, self.trim, self.norm_bound, self.norm_quantile,
            self.max_rows,
        )  # fmt: skip
        return FedAvgConfig(
            dim=dim,
            server_learning_rate=self.server_learning_rate,
            aggregator=self.aggregator,
            trim=self.trim,
            norm_bound=self.norm_bound,
            norm_quantile=self.norm_quantile,
            max_rows=self.max_rows,
        )
