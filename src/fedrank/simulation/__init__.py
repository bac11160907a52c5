"""Simulated users and their URL bar (Mozilla paper Sec. 4 and 6.1-6.2): what users want
(:mod:`~fedrank.simulation.intent`) and what they type, see and select
(:mod:`~fedrank.simulation.urlbar`)."""

from fedrank.simulation.intent import sample_targets
from fedrank.simulation.urlbar import SearchBatch, simulate_searches

__all__ = ["SearchBatch", "sample_targets", "simulate_searches"]
