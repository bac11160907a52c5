"""Ranking quality measures: MaxRR and its exact expectation under a click model
(FOLtR-ES, Section 5), nDCG@k, and the evaluation of a ranker over every query of a split."""
