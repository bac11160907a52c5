"""The frecency simulator's compiled loops (numba), each module imported on first use so
that processes that never simulate start without numba: classic frecency of the stored
pages (:mod:`~fedrank.simulation.frecency.kernels.classic`), the URL bar
(:mod:`~fedrank.simulation.frecency.kernels.urlbar`), the searches' targets
(:mod:`~fedrank.simulation.frecency.kernels.intent`), the visit store
(:mod:`~fedrank.simulation.frecency.kernels.store`) and the kept scores
(:mod:`~fedrank.simulation.frecency.kernels.score_cache`). The large passes take their
arrays as named tuples (numba takes them as they are) rather than as dozens of positional
arguments, and unpack them once at their start: their loops and per-page helpers work on
the arrays themselves, which numba compiles to faster code than reading a tuple's field
inside a hot loop."""
