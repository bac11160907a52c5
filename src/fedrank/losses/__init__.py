"""Ranking losses computed on the client from what the user did."""
