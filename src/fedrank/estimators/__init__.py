"""Client-side estimators: what a device computes from its own data."""
