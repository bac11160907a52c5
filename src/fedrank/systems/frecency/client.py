"""Federated frecency's client half (Hartmann et al., Sections 5.3-5.4): what a browser
computes from its own history before anything leaves it.

* The estimator: central (or forward) finite differences of the pointwise SVM loss of the
  URL-bar searches the client made, over the served weights
  (:class:`~fedrank.estimators.finite_difference.FiniteDifferenceEstimator`).
* The privatizer: none (full gradients), the signs with zeros kept (2 bits per weight,
  :class:`~fedrank.privacy.sign.SignCompressor`), or randomized response on every sign
  (``sign_epsilon``-LDP per weight, :class:`~fedrank.privacy.sign.RandomizedSigns`).

The real device (:mod:`fedrank.client.frecency_update`, a ``places.sqlite``) and the
simulated clients of the study (:mod:`fedrank.experiments.frecency.clients`) both run it.
"""

from __future__ import annotations

import numpy as np

from fedrank.core.client_random import ClientRandom, Stream
from fedrank.estimators.finite_difference import FiniteDifferenceEstimator
from fedrank.models.frecency.scorer import page_scorer
from fedrank.privacy.sign import RandomizedSigns, SignCompressor
from fedrank.systems.frecency.config import FrecencyConfig


class FrecencyClient:
    """The client half for one :class:`FrecencyConfig` (module docstring)."""

    def __init__(self, config: FrecencyConfig) -> None:
        c = config.resolved()
        self.config = c
        self.dim = len(page_scorer(c.model).names)
        self.estimator = FiniteDifferenceEstimator(eps=c.eps, scheme=c.scheme)
        self.privatizer: SignCompressor | RandomizedSigns | None = None
        if c.message == "sign":
            self.privatizer = (
                SignCompressor(with_zero=True)
                if c.sign_epsilon is None
                else RandomizedSigns(c.sign_epsilon)
            )

    def privatize(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The clients' messages from their ``(m, d)`` gradients: unchanged, their signs, or
        their randomized signs (``sign_epsilon``, coins from ``rng``: a device's own)."""
        if self.privatizer is None:
            return updates
        return self.privatizer.privatize_batch(updates, rng)

    def privatize_clients(self, updates: np.ndarray, random: ClientRandom) -> np.ndarray:
        """:meth:`privatize` for simulated clients whose coins are their own: row ``i`` is
        client ``random.ids[i]``, whose randomized signs draw from its own
        :attr:`~fedrank.core.client_random.Stream.NOISE` numbers, so a client's message does
        not depend on which others it is computed with (a block on a cluster worker)."""
        if not isinstance(self.privatizer, RandomizedSigns):
            return self.privatize(updates, np.random.default_rng(0))  # draws nothing
        rows = np.arange(random.size)[:, None]
        u = random.uniform(rows, Stream.NOISE, np.arange(updates.shape[1])[None, :])
        return self.privatizer.privatize_uniforms(updates, u)

    def message_epsilon(self) -> float | None:
        """The local DP of one client message: ``sign_epsilon`` per weight, composed over
        the message's weights (basic composition, as the privacy report counts it);
        ``None`` without randomized signs."""
        if self.config.sign_epsilon is None:
            return None
        return float(self.config.sign_epsilon) * self.dim
