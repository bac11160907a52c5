"""Which clients answer a training step after ``T_max`` (FedPS Sec. 3.2, 3.4, 4.3).

"To prevent the server from waiting too long for the clients with a poor connection or
computation, we set maximum response time T_max, and ignore the model updates of those
clients without response during this period" (Sec. 3.2); "We assume 10% of the clients are
in poor communication during training" (Sec. 4.3). FedPSFlat drops the late updates;
FedPSProxy's stragglers "offload their computing tasks to the proxies" (Sec. 3.4).

:class:`ResponseTimes` draws the time a sampled client takes to answer a step: local
training, which grows with the client's data, plus a model exchange, each scaled by
log-normal factors::

    t_j = E * n_j * c * s_j * u + L * v,   s_j ~ LogNormal(0, device_sigma) per device,
                                           u, v ~ LogNormal(0, step_sigma) per step

with ``n_j`` the client's training queries, ``E`` local epochs, ``c`` seconds per query on
a typical device, ``L`` the exchange latency. ``s_j`` is fixed per device (a slow phone
stays slow), ``u`` and ``v`` change every step (load, network). So lateness is partly
persistent and partly chance, and clients with much data are late more often: what a
deadline drops is worth more than its share of clients. ``T_max`` defaults to the time
that a fraction ``ratio`` of all responses exceed (:meth:`ResponseTimes.calibrate`, the
paper's 10%), estimated by simulation with the run's own generator.

The constants are ours (the paper gives only the 10%); they are chosen so that a typical
client (140 training queries) spends about as long training as exchanging the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError

__all__ = ["ResponseTimes"]


@dataclass(frozen=True)
class ResponseTimes:
    """Response-time model of the clients (see the module docstring).

    Attributes:
        n_train: ``(N,)`` training queries of every client.
        slowness: ``(N,)`` the per-device factor ``s_j``.
        epochs: ``E``, local epochs per step.
        seconds_per_query: ``c``.
        latency: ``L``, seconds of one model exchange.
        step_sigma: log-scale spread of the per-step factors.
        t_max: the deadline in seconds.
    """

    n_train: np.ndarray
    slowness: np.ndarray
    epochs: int
    seconds_per_query: float
    latency: float
    step_sigma: float
    t_max: float

    @classmethod
    def build(
        cls,
        n_train: np.ndarray,
        rng: np.random.Generator,
        *,
        ratio: float = 0.1,
        t_max: float | None = None,
        epochs: int = 1,
        seconds_per_query: float = 0.01,
        latency: float = 1.5,
        device_sigma: float = 1.0,
        step_sigma: float = 0.5,
    ) -> ResponseTimes:
        """Draw the devices' slowness and set ``T_max``: given, or calibrated so that a
        fraction ``ratio`` of responses is late (0 gives an infinite deadline)."""
        n = np.asarray(n_train, dtype=np.float64)
        if n.ndim != 1 or n.size == 0 or np.any(n < 0):
            raise ConfigError("n_train must be a non-empty 1-D array of counts >= 0")
        if not 0.0 <= ratio < 1.0:
            raise ConfigError(f"ratio (the share of late responses) must be in [0, 1), got {ratio}")
        for name, value in (
            ("epochs", epochs),
            ("seconds_per_query", seconds_per_query),
            ("latency", latency),
        ):
            if not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value}")
        if device_sigma < 0 or step_sigma < 0:
            raise ConfigError(
                f"device_sigma and step_sigma must be >= 0, got {device_sigma}, {step_sigma}"
            )
        if t_max is not None and not t_max > 0:
            raise ConfigError(f"T_max must be > 0 seconds, got {t_max}")
        slowness = rng.lognormal(0.0, device_sigma, size=n.size)
        model = cls(n, slowness, int(epochs), float(seconds_per_query), float(latency),
                    float(step_sigma), np.inf)  # fmt: skip
        if t_max is None:
            t_max = model.calibrate(ratio, rng) if ratio > 0 else np.inf
        return cls(n, slowness, int(epochs), float(seconds_per_query), float(latency),
                   float(step_sigma), float(t_max))  # fmt: skip

    def draw(self, clients: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(len(clients),)`` response times of the sampled ``clients`` in one step."""
        c = np.asarray(clients, dtype=np.int64)
        u = rng.lognormal(0.0, self.step_sigma, size=c.size)
        v = rng.lognormal(0.0, self.step_sigma, size=c.size)
        compute = self.epochs * self.n_train[c] * self.seconds_per_query * self.slowness[c]
        return compute * u + self.latency * v

    def late(self, clients: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(len(clients),)`` bool: the clients answering after ``T_max`` in one step."""
        return self.draw(clients, rng) > self.t_max

    def calibrate(self, ratio: float, rng: np.random.Generator, draws: int = 50) -> float:
        """The ``1 - ratio`` quantile of the response times of every client over ``draws``
        simulated steps: the ``T_max`` at which a fraction ``ratio`` of responses is late
        (every client answers once per round, so each counts equally)."""
        everyone = np.tile(np.arange(self.n_train.size), draws)
        return float(np.quantile(self.draw(everyone, rng), 1.0 - ratio))
