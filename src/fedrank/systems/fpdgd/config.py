"""FPDGD's settings (Wang, Lin, Zuccon et al., *Effective and Privacy-preserving Federated
Online Learning to Rank*, ICTIR 2021): the server's ``[fpdgd]`` table, and what ``fedrank
foltr train --algorithm fpdgd`` builds from its run settings
(:meth:`fedrank.experiments.foltr.run.FoltrConfig.fpdgd_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from fedrank.core.validation import Interval, Options, Validated
from fedrank.models.rankers import RANKER_NAMES
from fedrank.strategies.base import AGGREGATION_RULES, ROBUST_AGGREGATORS, aggregation_accepts
from fedrank.systems.fedavg.config import FedAvgConfig

#: FPDGD's optional Laplace mechanism on the clients' deltas (:mod:`fedrank.privacy.laplace`).
LAPLACE_MODES: tuple[str, ...] = ("none", "local", "distributed")
#: ``mean`` (FedAvg's weighted mean of the deltas) or a robust statistic of them.
AGGREGATORS: tuple[str, ...] = ("mean", *ROBUST_AGGREGATORS)


@dataclass(frozen=True)
class FpdgdConfig(Validated):
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

    ACCEPTS = {
        "ranker": Options(*RANKER_NAMES),
        "n_features": Interval(Integral, 1, None),
        "batch": Interval(Integral, 1, None),
        "learning_rate": Interval(Real, 0, None, closed="neither"),
        "server_learning_rate": Interval(Real, 0, None, closed="neither"),
        "laplace": Options(*LAPLACE_MODES),
        "laplace_epsilon": Interval(Real, 0, None, closed="neither"),
        "laplace_clip": Interval(Real, 0, None, closed="neither"),
        "laplace_shares": Interval(Integral, 1, None),
        **aggregation_accepts(AGGREGATORS),
        "seed": Interval(Integral, 0, 2**63 - 1),
    }
    RULES = AGGREGATION_RULES

    def fedavg(self, dim: int) -> FedAvgConfig:
        """The server half's settings: FedAvg of ``dim`` parameters."""
        return FedAvgConfig(
            dim=dim,
            server_learning_rate=self.server_learning_rate,
            aggregator=self.aggregator,
            trim=self.trim,
            norm_bound=self.norm_bound,
            norm_quantile=self.norm_quantile,
            max_rows=self.max_rows,
        )
