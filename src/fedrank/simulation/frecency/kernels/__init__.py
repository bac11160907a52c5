"""The frecency simulator's compiled loops (numba), each module imported on first use so
that processes that never simulate start without numba: classic frecency of the stored
pages (:mod:`~fedrank.simulation.frecency.kernels.classic`), the URL bar
(:mod:`~fedrank.simulation.frecency.kernels.urlbar`), the searches' targets
(:mod:`~fedrank.simulation.frecency.kernels.intent`), the visit store
(:mod:`~fedrank.simulation.frecency.kernels.store`) and the kept scores
(:mod:`~fedrank.simulation.frecency.kernels.score_cache`). The large passes read their
arrays as named tuples (numba takes them as they are) rather than as dozens of positional
arguments."""
