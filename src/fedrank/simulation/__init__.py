"""Simulated users and their URL bar (Mozilla paper Sec. 4 and 6.1-6.2): what users want
(:mod:`~fedrank.simulation.intent`), the history Firefox keeps for them
(:mod:`~fedrank.simulation.history_store`, :mod:`~fedrank.simulation.input_history`) and
what they type, see and select (:mod:`~fedrank.simulation.urlbar`)."""
