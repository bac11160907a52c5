"""The federated ranking systems, one folder each (:mod:`fedrank.systems.system` says what a
folder holds); :data:`fedrank.federation.registry.SYSTEMS` lists them."""
