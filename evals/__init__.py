"""Offline evaluation: datasets, graders, replay of routing strategies, calibration, reports.

Nothing in the running service imports this package; the router reads eval *reports* (files).
"""
