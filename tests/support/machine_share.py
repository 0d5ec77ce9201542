"""The machine shared between pytest-xdist workers, and taken whole by a measurement.

Each test runs holding a shared lock; a test marked `exclusive` (or a fixture measuring inside
`machine_to_itself`) waits for the other workers' tests in progress to end and keeps new ones
from starting until it is done, so that a latency it compares with another is not the other
worker's load. A turnstile lock in front keeps a stream of shared holders from starving it.
Without xdist (one process) nothing is locked. The lock files live in the run's temporary
directory, which every worker of one run shares.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run_dir(factory: pytest.TempPathFactory) -> Path | None:
    """The run's directory every worker shares (`.../pytest-N`), or None outside xdist."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return factory.getbasetemp().parent


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def machine_share(factory: pytest.TempPathFactory, whole: bool) -> Iterator[None]:
    """Hold the machine shared with the other workers, or (`whole`) to this worker alone."""
    run_dir = _run_dir(factory)
    if run_dir is None:
        yield
        return
    turnstile, share = run_dir / "machine.turnstile", run_dir / "machine.share"
    if whole:
        with _locked(turnstile, fcntl.LOCK_EX), _locked(share, fcntl.LOCK_EX):
            yield
        return
    with _locked(turnstile, fcntl.LOCK_EX):
        pass  # waits while a measurement is waiting for, or holding, the machine
    with _locked(share, fcntl.LOCK_SH):
        yield


def machine_to_itself(factory: pytest.TempPathFactory) -> contextlib.AbstractContextManager[None]:
    """For a module fixture that measures: no other worker's test runs meanwhile."""
    return machine_share(factory, whole=True)
