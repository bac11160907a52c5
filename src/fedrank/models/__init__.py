"""Ranking models: frecency (classic, simplified, modern) and, later, linear / neural rankers."""
