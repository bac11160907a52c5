"""fedrank: privacy-preserving federated learning to rank.

Every system follows one data flow (docs/architecture.md): estimator -> privatizer -> wire
-> aggregator -> optimizer chain -> constraints -> the next model, its round driven by
:class:`fedrank.federation.round.Round` and its parts listed in
:data:`fedrank.federation.registry.SYSTEMS`.
"""

__version__ = "0.1.0"
