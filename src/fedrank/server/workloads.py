"""The workload a server runs: a system of the registry (:data:`fedrank.federation.registry.
SYSTEMS`) with the server's settings -- its strategy (wrapped for central DP by
``[privacy]``) and its wire formats, parsed with the server's ``max_n``.

The wire formats are the system's own (``systems/<name>/wire.py``), the same code clients
encode with. Payloads are parsed as sent: a norm bound (``norm_bound``) is the
aggregator's (:class:`~fedrank.aggregators.norm_bounded.NormBounded`), applied when the
writer folds an update in, so a restart or a recovery that replays the stored payloads
bounds them the same way again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedrank.server.config import ServerConfig
from fedrank.strategies.base import Strategy
from fedrank.systems.system import System
from fedrank.systems.wire import Wire


@dataclass
class Workload:
    """A server's system: its record, wire formats and (possibly private) strategy."""

    system: System
    wire: Wire
    strategy: Strategy

    @property
    def name(self) -> str:
        return self.system.name

    @property
    def dim(self) -> int:
        return self.strategy.dim

    def initial_params(self) -> np.ndarray:
        """The published model of version 0."""
        return self.strategy.initial_params()

    def parameter_names(self) -> list[str] | None:
        return self.strategy.parameter_names()


def make_workload(
    config: ServerConfig, wrap: Callable[[Strategy], Strategy] | None = None
) -> Workload:
    """The workload of ``config``; ``wrap`` replaces its strategy by a wrapper of it (the
    central-DP strategy of ``[privacy]``, :mod:`fedrank.server.privacy`)."""
    system, section = config.system, config.system_config
    strategy = system.strategy(section)
    return Workload(
        system,
        system.wire(section, config.max_n),
        strategy if wrap is None else wrap(strategy),
    )
