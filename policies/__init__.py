"""Routing policies: the policy model, loading and versioning, decision strategies, experiments.

This package never imports `router` or `evals`; the router uses it through its protocols.
"""
