"""Result and prefix caches: key derivation, the `Cache` protocol, diskcache and Redis backends.

This package never imports `router` or `evals`.
"""
