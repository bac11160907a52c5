"""Privatizers defined on batches: one message is the one-row case of ``privatize_batch``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace

import numpy as np

from fedrank.core.message import Message
from fedrank.errors import ConfigError


class BatchPrivatizer(ABC):
    """Base of a :class:`~fedrank.core.protocols.Privatizer` defined on batches: a subclass
    implements :meth:`privatize_batch`; :meth:`privatize` is its one-row case."""

    @abstractmethod
    def privatize_batch(self, updates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The privatized ``(C, d)`` matrix of ``updates``; row ``i`` draws from ``rng`` what
        row ``i`` alone would draw after rows ``0..i-1``."""

    def privatize(self, message: Message, rng: np.random.Generator) -> Message:
        """A copy of ``message`` with its update privatized (``message`` is not changed)."""
        update = np.asarray(message.update)
        if update.ndim != 1:
            raise ConfigError(f"expected a 1-D update vector, got shape {update.shape}")
        out = self.privatize_batch(update[None, :], rng)[0]
        return replace(message, update=out, metrics=dict(message.metrics))
