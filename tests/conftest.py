"""Shared fixtures: the real-process harness lives in tests/support."""

import gc
import uuid
from collections.abc import Generator

import pytest

from tests.support.machine_share import machine_share, remove_lock_files

pytest_plugins = ["tests.support.redis_server"]


def _is_controller(config: pytest.Config) -> bool:
    """The process pytest was started as (an xdist worker is handed `workerinput`)."""
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The controller names the xdist run unless `--testrunuid` did (xdist would draw the
    same kind of id), so that it can remove the run's machine-share lock files at the end."""
    if _is_controller(config) and hasattr(config.option, "testrunuid"):
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    run_id = getattr(config.option, "testrunuid", None)
    if _is_controller(config) and run_id:
        remove_lock_files(run_id)


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
