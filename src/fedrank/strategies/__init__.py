"""One strategy per system (ARCHITECTURE.md, Section 2): the chain of each system -- the
server half (aggregator, optimizer chain, constraints: :meth:`~fedrank.strategies.base.
Strategy.server_step`) and the client-side pieces -- built once from its config section and
called by the HTTP server, every simulation runner and every experiment:
:mod:`~fedrank.strategies.frecency`, :mod:`~fedrank.strategies.foltr_es`,
:mod:`~fedrank.strategies.fedavg`."""
