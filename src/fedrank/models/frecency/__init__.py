"""Firefox frecency as a tunable, vectorized black-box scorer (paper Section 4)."""
