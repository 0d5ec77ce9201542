"""Shared fixtures: the real-process harness lives in tests/support."""

from collections.abc import Generator

import pytest

from tests.support.machine_share import machine_share

pytest_plugins = ["tests.support.redis_server"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Every test shares the machine with the other xdist workers' tests, from its setup to
    its teardown; one marked `exclusive` has it to itself (tests/support/machine_share.py)."""
    with machine_share(whole=item.get_closest_marker("exclusive") is not None):
        return (yield)
