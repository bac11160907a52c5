"""An empirical audit of central DP (``fedrank privacy audit``): a lower bound on the
epsilon that the Gaussian mechanism of :class:`~fedrank.strategies.dp.DPStrategy` *actually*
gives, from many runs on two
neighbouring inputs, to hold against the accountant's upper bound (Jagielski, Ullman & Oprea
2020, "Auditing Differentially Private Machine Learning: How Private is Private SGD?",
NeurIPS; Nasr et al. 2021; the hypothesis-testing view of Kairouz, Oh & Viswanath 2015).

The audit runs the wrapper's own code path -- :meth:`DPStrategy.accumulate` (clipping, unit
weights) and :meth:`DPStrategy.noisy_aggregate` (the noise) -- ``trials`` times on each of two
neighbouring rounds: ``m`` background updates, and the same plus a *canary*, an update of
norm ``10 C`` along the first axis (clipped to ``C``). The attacker's statistic is the first
coordinate of the noisy sum (mean times the round's count), summed over ``rounds`` rounds in
which the canary takes part. It picks a threshold on the first half of the trials (the best
empirical bound) and measures the false-positive and false-negative rates on the second half.
Any ``(epsilon, delta)``-DP mechanism satisfies ``FPR + e^eps FNR >= 1 - delta`` and
``FNR + e^eps FPR >= 1 - delta``, so with Clopper-Pearson upper bounds on both rates (each at
confidence ``1 - alpha / 2``)

    epsilon >= max( ln((1 - delta - FPR_hi) / FNR_hi), ln((1 - delta - FNR_hi) / FPR_hi) )

holds with probability ``1 - alpha``. A correct implementation never gives a lower bound
above the accountant's epsilon; one whose noise is too small does (the tests break the noise
on purpose and see the audit catch it). The bound is loose by construction: far from tight
at large epsilon, because it needs error rates near ``e^-epsilon`` to be measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.strategies.dp import DPStrategy

#: The canary's norm, in clips: clipped to exactly ``C``, along the first axis.
CANARY_CLIPS = 10.0


@dataclass(frozen=True)
class AuditResult:
    """An audit's outcome: the lower bound ``epsilon_lower`` (at confidence ``1 - alpha``),
    the error rates it rests on and the trials."""

    epsilon_lower: float
    delta: float
    alpha: float
    trials: int
    rounds: int
    threshold: float
    false_positive_rate: float
    false_negative_rate: float

    def to_json(self) -> dict[str, Any]:
        return {
            "epsilon_lower": self.epsilon_lower,
            "delta": self.delta,
            "alpha": self.alpha,
            "trials": self.trials,
            "rounds": self.rounds,
            "threshold": self.threshold,
            "false_positive_rate": self.false_positive_rate,
            "false_negative_rate": self.false_negative_rate,
        }


def _upper(errors: int, n: int, confidence: float) -> float:
    """The one-sided Clopper-Pearson upper bound of a rate of ``errors`` in ``n``."""
    if errors >= n:
        return 1.0
    return float(beta.ppf(confidence, errors + 1, n - errors))


def _bound(fpr: float, fnr: float, delta: float) -> float:
    """``max(ln((1 - delta - fpr) / fnr), ln((1 - delta - fnr) / fpr))``, 0 if neither is
    positive."""
    best = 0.0
    for a, b in ((fpr, fnr), (fnr, fpr)):
        if b > 0 and 1 - delta - a > b:
            best = max(best, math.log((1 - delta - a) / b))
    return best


def _statistics(strategy: DPStrategy, updates: np.ndarray, trials: int, rounds: int) -> np.ndarray:
    """The attacker's statistic in each trial: the noisy sum's first coordinate, over
    ``rounds`` rounds of the same ``updates``."""
    state = strategy.accumulate(
        strategy.zero(), MessageBatch.of_vectors(updates, np.ones(len(updates)))
    )
    count = state.count
    out = np.empty(trials)
    for k in range(trials):
        out[k] = sum(strategy.noisy_aggregate(state)[0] * count for _ in range(rounds))
    return out


def _empirical(positive: np.ndarray, negative: np.ndarray, delta: float) -> tuple[float, float]:
    """The threshold whose empirical bound on ``(positive, negative)`` is largest, and it."""
    candidates = np.quantile(negative, np.linspace(0.5, 1.0, 201)[:-1])
    best, best_t = -1.0, float(candidates[0])
    for t in candidates:
        fpr = float(np.mean(negative > t))
        fnr = float(np.mean(positive <= t))
        b = _bound(fpr, fnr, delta)
        if b > best:
            best, best_t = b, float(t)
    return best_t, best


def audit_gaussian(
    strategy: DPStrategy,
    *,
    background: int = 9,
    trials: int = 20_000,
    rounds: int = 1,
    delta: float = 1e-5,
    alpha: float = 0.05,
    seed: int = 0,
) -> AuditResult:
    """Audit ``strategy``'s Gaussian mechanism (module docstring). ``background``: the
    round's other updates (random, within the clip); ``rounds``: rounds the canary takes
    part in; ``seed`` seeds the background and the noise (the strategy's generator is
    replaced by one from it). Each trial costs ``rounds`` draws per world."""
    if trials < 100 or rounds < 1 or background < 1:
        raise ConfigError(
            f"the audit needs trials >= 100, rounds >= 1 and background >= 1, got {trials}, "
            f"{rounds}, {background}"
        )
    if not 0 < delta < 1 or not 0 < alpha < 1:
        raise ConfigError(f"delta and alpha must lie in (0, 1), got {delta}, {alpha}")
    rng = np.random.default_rng(seed)
    dim = strategy.dim
    others = rng.normal(size=(background, dim))
    others *= rng.uniform(0, strategy.clip, (background, 1)) / np.linalg.norm(
        others, axis=1, keepdims=True
    )
    canary = np.zeros((1, dim))
    canary[0, 0] = CANARY_CLIPS * strategy.clip
    strategy.use_rng(np.random.default_rng(rng.integers(2**63)))
    with_canary = _statistics(strategy, np.vstack([others, canary]), trials, rounds)
    without = _statistics(strategy, others, trials, rounds)
    half = trials // 2
    threshold, _ = _empirical(with_canary[:half], without[:half], delta)
    n = trials - half
    fp = int(np.sum(without[half:] > threshold))
    fn = int(np.sum(with_canary[half:] <= threshold))
    confidence = 1 - alpha / 2
    lower = _bound(_upper(fp, n, confidence), _upper(fn, n, confidence), delta)
    return AuditResult(lower, delta, alpha, trials, rounds, threshold, fp / n, fn / n)
