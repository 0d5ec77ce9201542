"""A stream still writing when the deployment's timeout cuts it was long, not broken.

Its client chose the length (prompt, `max_tokens`), so the cut is no breaker failure and no
error in the deployment's statistics; the client's error event is unchanged. A stream the cut
finds silent (stalled mid-answer) still counts. Six such long streams from one tenant opened
the breaker for everyone (the security audit).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from router.errors import ProviderTimeoutError
from router.execution.attempt import AttemptRecord
from router.execution.breaker import BreakerPolicy, BreakerRegistry
from router.execution.classify_error import STREAM_STALL_GAP_S, progressing
from router.execution.plan import ExecutionState, Plan
from router.execution.retry_budget import hedge_budget, retry_budget
from router.execution.runner import Runner
from router.feedback import StatsSink
from router.outcomes import Outcome
from router.providers.base import Completion, Deployment, StreamEvent, UpstreamCall
from router.slo import SloTracker
from tests.reliability.fakes import FakeClock
from tests.stats.sim import RecordingStore

DEPLOYMENT = Deployment(name="a", model="openai/a", adapter="openai_passthrough",
                        api_base="http://127.0.0.1:9/v1", api_key=None, input_price_per_mtok=1.0,
                        output_price_per_mtok=2.0, context_window=None)
CUT = ProviderTimeoutError("the upstream's answer did not come, or did not end, within the "
                          "deployment's timeout", code="upstream_read_timeout")


class Writing:
    """A provider whose streams begin at once (what follows is the test's to say)."""

    async def complete(self, call: UpstreamCall) -> Completion:
        raise NotImplementedError

    async def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]:
        yield StreamEvent(data=b'{"choices": []}', has_content=True)

    async def aclose(self) -> None:
        return None


def test_a_gap_under_the_stall_threshold_is_progress() -> None:
    assert progressing(0.05, None)
    assert not progressing(STREAM_STALL_GAP_S, None)  # silent that long: stalled
    assert not progressing(None, None)  # not known: judged as before
    assert not progressing(0.5, 0.4)  # the task's own threshold, when shorter
    assert not progressing(3.0, 60.0)  # never longer than STREAM_STALL_GAP_S


async def _cut_streams(idle_s: float, times: int) -> tuple[ExecutionState, list[AttemptRecord]]:
    clock = FakeClock()
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock), retry_budget(clock),
                           hedge_budget(clock))
    runner = Runner({"openai_passthrough": Writing()}, state, clock=clock)
    winners = []
    for _ in range(times):
        attempts: list[AttemptRecord] = []
        committed = await runner.open_stream(
            Plan(deployments=[DEPLOYMENT], body={}, deadline=clock() + 30, principal="t"),
            attempts)
        committed.release(CUT, idle_s=idle_s)
        winners.append(attempts[-1])
    return state, winners


async def test_streams_cut_while_writing_are_no_breaker_failures() -> None:
    state, winners = await _cut_streams(idle_s=0.05, times=6)
    health = state.breakers.snapshot().deployments[0]
    assert health.state == "closed" and health.window_failures == 0
    assert all(w.outlasted and w.error is CUT for w in winners)


async def test_streams_cut_after_stalling_mid_answer_still_open_the_breaker() -> None:
    state, winners = await _cut_streams(idle_s=STREAM_STALL_GAP_S + 1, times=5)
    assert state.breakers.snapshot().deployments[0].state == "open"
    assert not any(w.outlasted for w in winners)


def _won_and_cut(outlasted: bool) -> Outcome:
    start = time.perf_counter()
    won = AttemptRecord("A", 1, start, "first", "won", first_content_at=start + 0.1,
                        ended_at=start + 1.0, error=CUT, outlasted=outlasted)
    return Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                   arrived_at=start, task="chat", deployment="A", first_content_at=start + 0.1,
                   first_token_at=start + 0.1, last_token_at=start + 0.99,
                   ended_at=start + 1.0, prompt_tokens=5, completion_tokens=40,
                   status=CUT.status_code, error_type="ProviderTimeoutError",
                   error_code=CUT.code, attempts=[won])


def test_a_stream_cut_while_writing_is_no_error_of_its_deployment_and_not_whole() -> None:
    """Its TTFT and TPOT stand; its length and E2E are where the cut came (not whole); the
    deployment's statistics count no error. A stalled one's cut still is its error."""
    store = RecordingStore()
    StatsSink(store, SloTracker({})).record(_won_and_cut(outlasted=True))
    StatsSink(store, SloTracker({})).record(_won_and_cut(outlasted=False))
    (long, stalled) = store.seen
    assert (long.error, long.whole, long.tpot_s is not None) == (None, False, True)
    assert stalled.error == "ProviderTimeoutError"
