"""Failed attempts that say nothing of their deployment stay out of its statistics: the
provider refusing the request itself (a 400: the caller's to fix) and the router failing to make
the attempt (out of file descriptors). An upstream's own failure still counts as its error."""

from __future__ import annotations

import time

import pytest

from router import errors
from router.execution.attempt import AttemptRecord
from router.feedback import StatsSink
from router.outcomes import Outcome
from router.slo import SloTracker
from tests.stats.sim import RecordingStore


def _failed(error: errors.SlorouterError) -> Outcome:
    start = time.perf_counter()
    attempt = AttemptRecord("A", 1, start, "first", "failed", ended_at=start + 0.01, error=error)
    return Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                   arrived_at=start, task="chat", ended_at=start + 0.02,
                   status=error.status_code, error_type=type(error).__name__,
                   attempts=[attempt])


@pytest.mark.parametrize(("error", "counted"), [
    (errors.ProviderRejectedError("temperature: too high", code="upstream_rejected"), False),
    (errors.OverloadedError("out of files", code="router_out_of_files"), False),
    (errors.ProviderUnavailableError("upstream returned 500", code="upstream_unavailable"),
     True),
])
def test_only_the_deployment_s_own_failures_are_its_errors(error: errors.SlorouterError,
                                                           counted: bool) -> None:
    store = RecordingStore()
    StatsSink(store, SloTracker({})).record(_failed(error))
    assert [obs.error for obs in store.seen] == ([type(error).__name__] if counted else [])
