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


def test_a_refusal_another_deployment_answered_is_the_refusing_deployment_s_error() -> None:
    """`A` refuses with a 400 what `B` then answers: `A` refuses what its peers take, and counts
    it (a deployment that refused every request stayed first in the ranking, its breaker and
    statistics clean, each request paying a refused attempt first)."""
    start = time.perf_counter()
    refused = AttemptRecord("A", 1, start, "first", "failed", ended_at=start + 0.01,
                            error=errors.ProviderRejectedError("unsupported_parameter",
                                                               code="upstream_rejected"))
    answered = AttemptRecord("B", 2, start + 0.01, "fallback", "won",
                             first_content_at=start + 0.1, ended_at=start + 0.2)
    outcome = Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                      arrived_at=start, task="chat", deployment="B",
                      first_content_at=start + 0.1, first_token_at=start + 0.1,
                      last_token_at=start + 0.2, ended_at=start + 0.2, prompt_tokens=5,
                      completion_tokens=3, attempts=[refused, answered])
    store = RecordingStore()
    StatsSink(store, SloTracker({})).record(outcome)
    assert [(obs.deployment, obs.error) for obs in store.seen] == [
        ("A", "ProviderRejectedError"), ("B", None)]
