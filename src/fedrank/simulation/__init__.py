"""Simulators of the papers' studies: the federated frecency study's users and their URL bar
(:mod:`~fedrank.simulation.frecency`), poisoning attacks on every system
(:mod:`~fedrank.simulation.attacks`), and FOLtR-ES as a per-client loop, the vectorized
simulator's speed baseline and test oracle (:mod:`~fedrank.simulation.per_client_loop`)."""
