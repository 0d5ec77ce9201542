"""The machine shared between pytest-xdist workers, and taken whole by a measurement.

Each test runs (its setup, module fixtures included, its call and its teardown) holding a
shared lock; a test marked `exclusive` waits for the other workers' tests in progress to end and
keeps new ones from starting until it is done, so that a latency it compares with another is
not the other worker's load. A turnstile lock in front keeps a stream of shared holders from
starving it. Without xdist (one process) nothing is locked. The two lock files are named by the
run's id, which every worker of one run shares; the controller removes them when the run ends.
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


def lock_files(run_id: str) -> tuple[Path, Path]:
    """The turnstile and the share lock of the xdist run `run_id`."""
    prefix = Path(tempfile.gettempdir()) / f"slorouter-tests-{run_id}"
    return Path(f"{prefix}.turnstile"), Path(f"{prefix}.share")


def remove_lock_files(run_id: str) -> None:
    for path in lock_files(run_id):
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def machine_share(whole: bool) -> Iterator[None]:
    """Hold the machine shared with the other workers, or (`whole`) to this worker alone."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        yield
        return
    turnstile, share = lock_files(run_id)
    if whole:
        with _locked(turnstile, fcntl.LOCK_EX), _locked(share, fcntl.LOCK_EX):
            yield
        return
    with _locked(turnstile, fcntl.LOCK_EX):
        pass  # waits while a measurement is waiting for, or holding, the machine
    with _locked(share, fcntl.LOCK_SH):
        yield
