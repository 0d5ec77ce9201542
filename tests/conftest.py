"""Shared fixtures: the real-process harness lives in tests/support."""

import gc
from collections.abc import Generator

import pytest

from tests.support.machine_share import machine_share

pytest_plugins = ["tests.support.redis_server"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (the router, litellm, scikit-learn: some 470,000 objects)
    lives as long as the test process, so the collector stops scanning it, as the router does
    at start-up: a full collection would otherwise pause this process 150-270 ms, and the
    tests that measure latencies send from it."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Every test shares the machine with the other xdist workers' tests, from its setup to
    its teardown; one marked `exclusive` has it to itself (tests/support/machine_share.py)."""
    with machine_share(whole=item.get_closest_marker("exclusive") is not None):
        return (yield)
