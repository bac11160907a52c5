"""The server side of FOLtR-ES: rebuild each client's noise from its seed and average
``metric * noise`` into a gradient estimate (Kharitonov, WSDM 2019, Eq. (4)-(6)).

With ``theta_s = phi + sigma v_s`` (Eq. 4, ``(theta - phi) / sigma^2 = v_s / sigma``) the
estimate over ``N`` clients is

    g = 1 / (N sigma) * sum_s f_s v_s

and with antithetic variates, each client reporting ``f_s+`` for ``phi + sigma v_s`` and
``f_s-`` for ``phi - sigma v_s``,

    g = 1 / (2 N sigma) * sum_s (f_s+ - f_s-) v_s.

``g`` points *uphill* of the metric (MaxRR is maximized). As a monoid (docs/architecture.md)
the state is ``sum_s c_s v_s`` (``c_s`` the metric or the antithetic difference) and the
number of messages, so proxies can pre-aggregate and merge. The noise is regenerated from
the seed (:func:`fedrank.core.seeded_noise.gaussian_noise`), never sent.

**A bound on a report's weight** (``difference_bound = b > 0``, antithetic only): each
report's difference ``f_s+ - f_s-`` is clipped to ``[-b, b]`` before it is folded in, so
one report moves the sum by at most ``b |v_s|``: the ES counterpart of an L2 norm bound
(:class:`~fedrank.aggregators.norm_bounded.NormBounded`). A client that lies about its
metrics (it picks the difference's sign from the noise it was given, to push the model its
way: docs/service.md, Poisoning) reports the largest difference, 1; honest differences
under randomized response are mostly smaller (MQ2008, p = 0.9, B = 4: median 0.26, 90th
percentile 0.65; a run's ``report_differences``), so a bound below 1 takes more from the
liar than from the honest. The clip is per report, before the sum: states still merge
exactly (a proxy must clip with the same bound).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedrank.aggregators.mean import check_dim
from fedrank.core.message import ESMessage, MessageBatch
from fedrank.core.seeded_noise import check_seeds, gaussian_noise
from fedrank.core.state_json import decode_state, encode_state
from fedrank.errors import ConfigError, DataFormatError
from fedrank.optim.serialization import check_hyperparameter


class ESGradientState(NamedTuple):
    """Partial aggregate of :class:`ESGradient`.

    Attributes:
        weighted_noise: ``sum_s c_s v_s`` (float64, ``(dim,)``).
        count: messages folded in (``N``).
    """

    weighted_noise: npt.NDArray[np.float64]
    count: int


class ESGradient:
    """FOLtR-ES gradient estimate from ``(seed, metric[, antithetic metric])`` reports.

    Args:
        dim: number of model parameters.
        sigma: the perturbation scale the clients used (0.01).
        antithetic: whether messages carry the antithetic metric (all must, or none).
        difference_bound: ``b``: every report's antithetic difference is clipped to
            ``[-b, b]`` (module docstring); 0 (default): as reported.

    ``finalize`` of an empty state is ``zeros(dim)``.
    """

    def __init__(
        self, dim: int, sigma: float = 0.01, antithetic: bool = True, difference_bound: float = 0.0
    ) -> None:
        self.dim = check_dim(dim)
        self.sigma = check_hyperparameter("sigma", sigma, low=0.0)
        self.antithetic = bool(antithetic)
        if difference_bound:
            check_hyperparameter("difference_bound (the bound on f+ - f-)", difference_bound)
            if not self.antithetic:
                raise ConfigError(
                    "difference_bound clips the antithetic difference f+ - f-; plain reports "
                    "are metrics in [0, 1] already: use antithetic reports or set it to 0"
                )
        elif difference_bound != 0:
            raise ConfigError(f"difference_bound must be >= 0 (0: off), got {difference_bound}")
        self.difference_bound = float(difference_bound)

    def __repr__(self) -> str:
        bound = f", difference_bound={self.difference_bound:g}" if self.difference_bound else ""
        return (
            f"ESGradient(dim={self.dim}, sigma={self.sigma}, antithetic={self.antithetic}{bound})"
        )

    def zero(self) -> ESGradientState:
        return ESGradientState(np.zeros(self.dim), 0)

    def _coefficients(self, metric: np.ndarray, anti: np.ndarray | None) -> np.ndarray:
        m = np.asarray(metric, dtype=np.float64)
        if self.antithetic and anti is None:
            raise DataFormatError(
                "this aggregator expects antithetic reports (seed, metric, antithetic_metric); "
                "got a report without the antithetic metric"
            )
        if not self.antithetic and anti is not None:
            raise DataFormatError(
                "this aggregator expects plain reports (seed, metric); got an antithetic one"
            )
        c = m - np.asarray(anti, dtype=np.float64) if anti is not None else m
        if not np.all(np.isfinite(c)):
            raise DataFormatError("ES metrics must be finite")
        if self.difference_bound:
            return np.clip(c, -self.difference_bound, self.difference_bound)
        return c

    def _check_state(self, state: ESGradientState) -> None:
        if state.weighted_noise.shape != (self.dim,):
            raise ConfigError(
                f"expected a state of dimension {self.dim}, got {state.weighted_noise.shape}"
            )

    def check_consistent(self, state: ESGradientState) -> None:
        """Refuse a state no sequence of reports can produce: non-finite sums, a negative
        count, or a non-zero sum of no reports. Raises
        :class:`~fedrank.errors.DataFormatError`."""
        self._check_state(state)
        if not np.isfinite(state.weighted_noise).all():
            raise DataFormatError("the state holds non-finite values")
        if state.count < 0 or (state.count == 0 and np.any(state.weighted_noise)):
            raise DataFormatError("a state of 0 reports must be all zeros, and counts >= 0")

    def accumulate(self, state: ESGradientState, message: ESMessage) -> ESGradientState:
        """Fold one report in (regenerating its noise from the seed)."""
        anti = None if message.antithetic_metric is None else [message.antithetic_metric]
        batch = MessageBatch.of_es(np.array([message.seed]), [message.metric], anti)
        return self.accumulate_batch(state, batch)

    def accumulate_batch(self, state: ESGradientState, batch: MessageBatch) -> ESGradientState:
        """Fold ``C`` reports at once (columns ``seed``, ``metric`` and, antithetic,
        ``antithetic``; one noise matrix for all of them)."""
        self._check_state(state)
        if batch.size == 0:
            return state
        if batch.seed is None or batch.metric is None:
            used = [f for f in MessageBatch.FIELDS if getattr(batch, f) is not None]
            raise DataFormatError(
                f"the ES aggregator folds ES reports (columns seed and metric); the batch has "
                f"columns {used}"
            )
        s = check_seeds(batch.seed)
        c = self._coefficients(batch.metric, batch.antithetic)
        if c.shape != s.shape:
            raise ConfigError(f"got {s.size} seeds but {c.size} metrics")
        if s.size == 0:
            return state
        noise = gaussian_noise(s, self.dim)
        return ESGradientState(
            state.weighted_noise + c @ noise.astype(np.float64), state.count + s.size
        )

    def merge(self, a: ESGradientState, b: ESGradientState) -> ESGradientState:
        self._check_state(a)
        self._check_state(b)
        return ESGradientState(a.weighted_noise + b.weighted_noise, a.count + b.count)

    def finalize(self, state: ESGradientState) -> np.ndarray:
        """The gradient estimate ``g`` (ascent direction of the metric)."""
        self._check_state(state)
        if state.count == 0:
            return np.zeros(self.dim)
        scale = (2.0 if self.antithetic else 1.0) * state.count * self.sigma
        return state.weighted_noise / scale

    def state_to_json(self, state: ESGradientState) -> dict[str, Any]:
        """A JSON-compatible dict that :meth:`state_from_json` restores exactly."""
        self._check_state(state)
        return encode_state(state, "ESGradient", settings={"dim": self.dim})

    def state_from_json(self, data: dict[str, Any]) -> ESGradientState:
        """Inverse of :meth:`state_to_json`."""
        state = decode_state(data, ESGradientState, "ESGradient", settings={"dim": self.dim})
        self._check_state(state)
        return state
