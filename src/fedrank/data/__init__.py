"""Data sources: Firefox profiles, LETOR, query logs, synthetic generators."""
