"""Shared fixtures: the real-process harness lives in tests/support."""

pytest_plugins = ["tests.support.redis_server"]
