"""Federated frecency experiments (Hartmann et al.): the study, its presets, calibration,
power, iteration policies, stability, plots, reports and the demo through the service."""
