"""Paper reproductions and study analysis (statistics, plots, reports)."""
