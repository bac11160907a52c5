"""fedrank: privacy-preserving federated learning to rank.

The package follows one data flow for every system (see docs/ and ARCHITECTURE):
estimator -> privatizer -> message -> aggregator -> optimizer -> constraints -> registry.
"""

__version__ = "0.1.0"
