"""The machine shared between pytest-xdist workers, and taken whole by a measurement.

Each test runs (its setup, module fixtures included, its call and its teardown) holding a
shared lock; a test marked `exclusive` waits for the other workers' tests in progress to end and
keeps new ones from starting until it is done, so that a latency it compares with another is
not the other worker's load. A turnstile lock in front keeps a stream of shared holders from
starving it. Without xdist (one process) nothing is locked. The two lock files are named by the
run's id, which every worker of one run shares.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def machine_share(whole: bool) -> Iterator[None]:
    """Hold the machine shared with the other workers, or (`whole`) to this worker alone."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        yield
        return
    prefix = Path(tempfile.gettempdir()) / f"slorouter-tests-{run_id}"
    turnstile, share = Path(f"{prefix}.turnstile"), Path(f"{prefix}.share")
    if whole:
        with _locked(turnstile, fcntl.LOCK_EX), _locked(share, fcntl.LOCK_EX):
            yield
        return
    with _locked(turnstile, fcntl.LOCK_EX):
        pass  # waits while a measurement is waiting for, or holding, the machine
    with _locked(share, fcntl.LOCK_SH):
        yield
