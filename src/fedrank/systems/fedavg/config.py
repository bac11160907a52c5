"""FedAvg's settings (McMahan et al. 2017; FedPS, Yao et al., Algorithm 1): the server's
``[fedavg]`` table."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from fedrank.core.validation import Interval, Validated
from fedrank.strategies.base import AGGREGATION_RULES, ROBUST_AGGREGATORS, aggregation_accepts

#: ``mean`` (FedAvg's weighted mean, Algorithm 1) or a robust statistic of the deltas.
AGGREGATORS: tuple[str, ...] = ("mean", *ROBUST_AGGREGATORS)


@dataclass(frozen=True)
class FedAvgConfig(Validated):
    """FedAvg settings.

    Attributes:
        dim: number of shared parameters.
        server_learning_rate: ``eta_s`` (Algorithm 1: 1).
        aggregator: ``mean`` (default: the ``n_j``-weighted mean), ``median`` or
            ``trimmed-mean`` (coordinate-wise, unweighted: Yin et al. 2018).
        trim: the trimmed mean's fraction dropped from each end, in [0, 0.5) (0.1).
        norm_bound: every delta is scaled down to this L2 norm before aggregation (0, the
            default: not bounded); with ``norm_quantile`` the first iteration's bound.
        norm_quantile: adapt the bound every iteration towards this quantile of the delta
            norms, in (0, 1) (Andrew et al. 2021; ``None``: a fixed bound).
        max_rows: most deltas one iteration's median or trimmed mean holds (it keeps them
            all, exactly: memory ``max_rows x dim x 8`` bytes).
    """

    dim: int = 100
    server_learning_rate: float = 1.0
    aggregator: str = "mean"
    trim: float = 0.1
    norm_bound: float = 0.0
    norm_quantile: float | None = None
    max_rows: int = 100_000

    ACCEPTS = {
        "dim": Interval(Integral, 1, None),
        "server_learning_rate": Interval(Real, 0, None, closed="neither"),
        **aggregation_accepts(AGGREGATORS),
    }
    RULES = AGGREGATION_RULES
