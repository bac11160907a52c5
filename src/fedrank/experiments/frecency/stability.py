"""Update stability (Mozilla paper, Section 6.4, Figure 7).

The paper compares the update actually used in an iteration with updates that 2,000
randomly sampled reports would have given: the L1 distance between the two, mean and
standard deviation over 50 draws per iteration. Small distances mean the iteration could
have been closed with fewer reports.
"""

from __future__ import annotations

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.core.protocols import Aggregator
from fedrank.errors import ConfigError


def subsample_l1_distances(
    aggregator: Aggregator,
    updates: np.ndarray,
    n: np.ndarray,
    full_update: np.ndarray,
    *,
    sample: int = 2000,
    draws: int = 50,
    rng: np.random.Generator,
) -> dict[str, float]:
    """L1 distance between ``full_update`` and the aggregate of ``sample`` reports drawn
    without replacement, over ``draws`` draws.

    Returns ``{"mean", "std", "relative_mean", "sign_agreement", "n_reports", "sample"}``:
    ``relative_mean`` is the mean distance over the L1 norm of ``full_update`` (the
    gradient's scale depends on the loss, so the raw distance is hard to read), and
    ``sign_agreement`` the mean share of weights whose sign the subsample gets right (what
    Rprop uses). With no more than ``sample`` reports every draw is the full set and the
    distance is 0.
    """
    if sample < 1 or draws < 1:
        raise ConfigError(f"sample and draws must be >= 1, got {sample} and {draws}")
    n_reports = int(updates.shape[0])
    size = min(sample, n_reports)
    distances = np.empty(draws)
    agreement = np.empty(draws)
    for i in range(draws):  # 50 draws, each one vectorized over its reports
        idx = rng.choice(n_reports, size=size, replace=False)
        sub = aggregator.finalize(
            aggregator.accumulate_batch(
                aggregator.zero(), MessageBatch.of_vectors(updates[idx], n[idx])
            )
        )
        distances[i] = np.abs(sub - full_update).sum()
        agreement[i] = np.mean(np.sign(sub) == np.sign(full_update))
    norm = float(np.abs(full_update).sum())
    return {
        "mean": float(distances.mean()),
        "std": float(distances.std()),
        "relative_mean": float(distances.mean() / norm) if norm > 0 else 0.0,
        "sign_agreement": float(agreement.mean()),
        "n_reports": n_reports,
        "sample": size,
    }
