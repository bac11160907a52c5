"""FOLtR-ES's settings (Kharitonov, *Federated Online Learning to Rank with Evolution
Strategies*, WSDM 2019; the defaults of its Section 6.3): the server's ``[foltr_es]`` table;
the simulator builds the same section from its run settings
(:meth:`fedrank.experiments.foltr.run.FoltrConfig.strategy_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

from fedrank.core.validation import Accepts, Interval, Options, Rule, Validated
from fedrank.models.rankers import RANKER_NAMES

#: Values of MaxRR at depth 10: 0 and 1/1 .. 1/10 (randomized response over ``n = 11``).
MAXRR_VALUES = 11
#: What ``p`` accepts: randomized response's probability of the true value beats a uniform
#: draw of the ``n`` values (above ``1/n``), and 1 sends the true value.
TRUTH_PROBABILITY = Interval(Real, Fraction(1, MAXRR_VALUES), 1, closed="right")


@dataclass(frozen=True)
class FoltrEsConfig(Validated):
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

    ACCEPTS = {
        "ranker": Options(*RANKER_NAMES),
        "n_features": Interval(Integral, 1, None),
        "sigma": Interval(Real, 0, None, closed="neither"),
        "batch": Interval(Integral, 1, None),
        "antithetic": bool,
        "p": Accepts(TRUTH_PROBABILITY, note="MaxRR at depth 10 has n = 11 values"),
        "learning_rate": Interval(Real, 0, None, closed="neither"),
        "difference_bound": Accepts(Interval(Real, 0, None), note="0: off"),
        "server_seeds": bool,
    }
    RULES = (
        Rule(
            lambda c: not c.antithetic or c.batch % 2 == 0,
            "batch must be even with antithetic = true, got {batch}",
        ),
        Rule(
            lambda c: c.antithetic or not c.difference_bound,
            "difference_bound clips the antithetic difference: it needs antithetic = true",
        ),
    )
