"""FedAvg's settings (McMahan et al. 2017; FedPS, Yao et al., Algorithm 1): the server's
``[fedavg]`` table.

The service bounds FedAvg's deltas by default (:meth:`FedAvgConfig.with_default_bound`):
without a bound one delta of -1e100 with ``n = 100,000`` among 101 honest ones made every
published parameter -9.5e99. The default is Andrew et al.'s adaptive bound ("Differentially
Private Learning with Adaptive Clipping", NeurIPS 2021; the project's
:class:`~fedrank.aggregators.norm_bounded.NormBounded`): every delta is scaled down to the
bound, which starts at :data:`DEFAULT_NORM_BOUND` and follows the
:data:`DEFAULT_NORM_QUANTILE`-quantile of the delta norms by their geometric update, within
a factor 1000 of the start either way. The weighted mean of deltas of norm at most ``C``
has norm at most ``C``, so one client moves the model by at most ``eta_s C`` per iteration
whatever its ``n``. ``unbounded = true`` turns the default off (a warning is logged);
``norm_bound > 0`` sets one's own. Simulations (``FedAvgConfig`` built in code) keep the
paper's unbounded mean.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from numbers import Integral, Real

from fedrank.core.validation import Interval, Validated
from fedrank.strategies.base import AGGREGATION_RULES, ROBUST_AGGREGATORS, aggregation_accepts

log = logging.getLogger(__name__)

#: ``mean`` (FedAvg's weighted mean, Algorithm 1) or a robust statistic of the deltas.
AGGREGATORS: tuple[str, ...] = ("mean", *ROBUST_AGGREGATORS)
#: The service's default norm bound: its start and the quantile it follows (module
#: docstring).
DEFAULT_NORM_BOUND = 1.0
DEFAULT_NORM_QUANTILE = 0.9


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
        unbounded: the service applies no default norm bound when ``norm_bound`` is 0
            (:meth:`with_default_bound`; a warning is logged).
    """

    dim: int = 100
    server_learning_rate: float = 1.0
    aggregator: str = "mean"
    trim: float = 0.1
    norm_bound: float = 0.0
    norm_quantile: float | None = None
    max_rows: int = 100_000
    unbounded: bool = False

    ACCEPTS = {
        "dim": Interval(Integral, 1, None),
        "server_learning_rate": Interval(Real, 0, None, closed="neither"),
        **aggregation_accepts(AGGREGATORS),
        "unbounded": bool,
    }
    RULES = AGGREGATION_RULES

    def with_default_bound(self) -> FedAvgConfig:
        """The service's FedAvg: this config, with the default adaptive norm bound when it
        sets none (module docstring); without one, when ``unbounded``, after a warning."""
        if self.norm_bound > 0:
            return self
        if self.unbounded:
            log.warning(
                "[fedavg] unbounded = true: deltas are averaged as sent, so one client with a "
                "huge delta or n decides the model (docs/service.md, Robust aggregation)"
            )
            return self
        return dataclasses.replace(
            self, norm_bound=DEFAULT_NORM_BOUND, norm_quantile=DEFAULT_NORM_QUANTILE
        )
