"""Protocols and message types shared by every federated learner."""
