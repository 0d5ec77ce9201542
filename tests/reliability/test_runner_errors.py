"""The execution loop's answers when deployments fail: whose fault, which breaker, what status.

A fake provider raises the project's own errors (as the adapters do after mapping), clocks are
injected, and the real `Runner`, `BreakerRegistry` and budgets decide.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Mapping

import pytest

from router.errors import (
    ProviderMisconfiguredError,
    ProviderRateLimitedError,
    ProviderRejectedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    SlorouterError,
)
from router.execution.attempt import AttemptRecord
from router.execution.breaker import REGULAR, BreakerPolicy, BreakerRegistry
from router.execution.plan import CommittedStream, ExecutionState, Plan
from router.execution.retry_budget import BudgetPolicy, hedge_budget, retry_budget
from router.execution.runner import Runner
from router.providers.base import Completion, Deployment, StreamEvent, UpstreamCall
from tests.reliability.fakes import FakeClock

ANSWER = b'{"object": "chat.completion", "choices": []}'


def _deployment(name: str) -> Deployment:
    return Deployment(name=name, model=f"openai/{name}", adapter="openai_passthrough",
                      api_base="http://127.0.0.1:9/v1", api_key=None, input_price_per_mtok=1.0,
                      output_price_per_mtok=2.0, context_window=None)


class ScriptedProvider:
    """Raises the error scripted for a deployment, else answers; records every call."""

    def __init__(self, failures: Mapping[str, SlorouterError]) -> None:
        self.failures = dict(failures)
        self.calls: list[str] = []

    async def complete(self, call: UpstreamCall) -> Completion:
        self.calls.append(call.deployment.name)
        failure = self.failures.get(call.deployment.name)
        if failure is not None:
            raise failure
        return Completion(body=ANSWER, usage=None)

    async def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]:
        completion = await self.complete(call)
        yield StreamEvent(data=completion.body, has_content=True)

    async def aclose(self) -> None:
        return None


def _runner(failures: Mapping[str, SlorouterError], clock: FakeClock
            ) -> tuple[Runner, ScriptedProvider, ExecutionState]:
    provider = ScriptedProvider(failures)
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock), retry_budget(clock),
                           hedge_budget(clock))
    return Runner({"openai_passthrough": provider}, state, clock=clock), provider, state


def _plan(clock: FakeClock, *names: str, deadline_s: float = 30.0) -> Plan:
    return Plan(deployments=[_deployment(n) for n in names], body={"messages": []},
                deadline=clock() + deadline_s)


def _not_found() -> ProviderMisconfiguredError:
    return ProviderMisconfiguredError("the provider does not know this deployment's model",
                                      code="upstream_not_found")


async def test_misconfigured_deployment_falls_back_and_counts_against_its_breaker() -> None:
    """An upstream 404 (mapped) moves the request to the next deployment, which answers; the
    broken deployment's breaker records a failure, the healthy one a success."""
    clock = FakeClock()
    runner, provider, state = _runner({"broken": _not_found()}, clock)
    attempts: list[AttemptRecord] = []
    deployment, completion = await runner.complete(_plan(clock, "broken", "healthy"), attempts)
    assert deployment.name == "healthy" and completion.body == ANSWER
    assert provider.calls == ["broken", "healthy"]  # no retry of the broken one
    health = {d.deployment: d for d in state.breakers.snapshot().deployments}
    assert health["broken"].window_failures == 1 and health["broken"].consecutive_failures == 1
    assert health["healthy"].window_failures == 0


async def test_moving_past_a_misconfigured_deployment_spends_no_retry_budget() -> None:
    """With the retry budget empty, a request whose first deployment refuses its key (401)
    still reaches the healthy next one: a wrong or revoked key says nothing of load, and a
    burst that drained the budget on it failed with `upstream_auth` while the fallback stood
    idle (the ops audit: 12 of 12). A load-related failure (503) still draws on the budget."""
    clock = FakeClock()
    refused = ProviderMisconfiguredError("refused", code="upstream_auth")
    overloaded = ProviderUnavailableError("upstream returned 503", code="upstream_unavailable")
    for failure, answered in ((refused, True), (overloaded, False)):
        provider = ScriptedProvider({"first": failure})
        state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock),
                               retry_budget(clock, BudgetPolicy(share=0.0, floor_per_s=0.0)),
                               hedge_budget(clock))
        runner = Runner({"openai_passthrough": provider}, state, clock=clock)
        if answered:
            deployment, _ = await runner.complete(_plan(clock, "first", "second"), [])
            assert deployment.name == "second" and provider.calls == ["first", "second"]
        else:
            with pytest.raises(ProviderUnavailableError) as caught:
                await runner.complete(_plan(clock, "first", "second"), [])
            assert "retry budget exhausted" in caught.value.message
            assert provider.calls == ["first"]


async def test_misconfigured_only_deployment_is_a_502_with_its_code() -> None:
    """With nothing to fall back to, the client gets the 502 `upstream_not_found`, not a 400."""
    clock = FakeClock()
    runner, provider, _ = _runner({"broken": _not_found()}, clock)
    with pytest.raises(ProviderMisconfiguredError) as caught:
        await runner.complete(_plan(clock, "broken"), [])
    assert caught.value.status_code == 502 and caught.value.error_type == "upstream_error"
    assert caught.value.code == "upstream_not_found"
    assert provider.calls == ["broken"]


async def test_misconfiguration_opens_the_breaker_after_consecutive_failures() -> None:
    """Five requests to a deployment whose key is refused open its breaker; the sixth is not
    sent upstream at all."""
    clock = FakeClock()
    refused = ProviderMisconfiguredError("refused", code="upstream_auth")
    runner, provider, state = _runner({"broken": refused}, clock)
    for _ in range(5):
        with pytest.raises(ProviderMisconfiguredError):
            await runner.complete(_plan(clock, "broken"), [])
    assert state.breakers.state("broken") == "open"
    with pytest.raises(ProviderUnavailableError) as caught:
        await runner.complete(_plan(clock, "broken"), [])
    assert caught.value.code == "circuit_open"
    assert provider.calls == ["broken"] * 5


async def test_request_fault_keeps_the_upstream_code_and_param_and_spares_the_breaker() -> None:
    """A context-length rejection reaches the client as a 400 with the upstream's code and
    param, and does not count against the deployment."""
    clock = FakeClock()
    rejected = ProviderRejectedError("upstream returned 400: too long", param="max_tokens",
                                     code="context_length_exceeded")
    runner, _, state = _runner({"only": rejected}, clock)
    with pytest.raises(ProviderRejectedError) as caught:
        await runner.complete(_plan(clock, "only"), [])
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "max_tokens"
    health = state.breakers.snapshot().deployments[0]
    assert health.window_failures == 0 and health.consecutive_failures == 0


async def test_circuit_open_retry_after_is_the_soonest_remaining_hold() -> None:
    """While 429 holds keep both breakers open, the 503 `circuit_open` carries the smaller
    remaining hold, rounded up to whole seconds (not a fixed 1 s)."""
    clock = FakeClock()
    runner, _, state = _runner({}, clock)
    for _ in range(2):  # throttled twice in a row: held (`BreakerPolicy.holds_after`)
        state.breakers.get("a").on_failure(REGULAR, retry_after_s=30.0)
        state.breakers.get("b").on_failure(REGULAR, retry_after_s=7.0)
    clock.advance(2.5)  # b: 4.5 s left, a: 27.5 s left
    with pytest.raises(ProviderUnavailableError) as caught:
        await runner.complete(_plan(clock, "a", "b"), [])
    assert caught.value.code == "circuit_open"
    assert caught.value.retry_after == 5.0


async def test_circuit_open_retry_after_is_at_least_one_second() -> None:
    """A hold about to end still says `retry-after: 1`, never 0."""
    clock = FakeClock()
    runner, _, state = _runner({}, clock)
    for _ in range(2):
        state.breakers.get("a").on_failure(REGULAR, retry_after_s=2.0)
    clock.advance(1.9)
    with pytest.raises(ProviderUnavailableError) as caught:
        await runner.complete(_plan(clock, "a"), [])
    assert caught.value.retry_after == 1.0


async def test_deadline_passed_before_the_first_attempt_is_a_504() -> None:
    """A deadline that ran out before any attempt is a 504 `deadline_exceeded`, nothing is
    sent upstream, and no half-open probe slot is taken and leaked."""
    clock = FakeClock()
    runner, provider, state = _runner({}, clock)
    for _ in range(2):
        state.breakers.get("a").on_failure(REGULAR, retry_after_s=1.0)
    clock.advance(1.5)  # a is half-open: one probe allowed
    plan = _plan(clock, "a", "b", deadline_s=0.001)
    clock.advance(0.01)
    attempts: list[AttemptRecord] = []
    with pytest.raises(ProviderTimeoutError) as caught:
        await runner.complete(plan, attempts)
    assert caught.value.status_code == 504 and caught.value.code == "deadline_exceeded"
    assert provider.calls == [] and attempts == []
    assert state.breakers.get("a").allow() is not None  # the probe slot is still free


async def test_side_effecting_request_past_its_deadline_is_not_an_unknown_commit() -> None:
    """Nothing was sent, so a side-effecting request past its deadline is a plain 504."""
    clock = FakeClock()
    runner, _, _ = _runner({}, clock)
    plan = Plan(deployments=[_deployment("a")], body={}, deadline=clock() - 1,
                side_effecting=True)
    with pytest.raises(ProviderTimeoutError) as caught:
        await runner.complete(plan, [])
    assert caught.value.code == "deadline_exceeded"


async def test_deadline_passed_after_a_failure_reports_that_failure() -> None:
    """When an attempt failed and the deadline then ran out, the client learns of the failure
    (here a 429 with its Retry-After) rather than a bare timeout."""
    clock = FakeClock()
    limited = ProviderRateLimitedError("upstream returned 429: slow down", code="rate_limited",
                                       retry_after=3.0)

    class Slow(ScriptedProvider):
        async def complete(self, call: UpstreamCall) -> Completion:
            clock.advance(10.0)  # the failing attempt used up the whole deadline
            return await super().complete(call)

    provider = Slow({"a": limited})
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock), retry_budget(clock),
                           hedge_budget(clock))
    runner = Runner({"openai_passthrough": provider}, state, clock=clock)
    with pytest.raises(ProviderRateLimitedError) as caught:
        await runner.complete(_plan(clock, "a", "b", deadline_s=5.0), [])
    assert caught.value.retry_after == 3.0
    assert "deadline exceeded" in caught.value.message
    assert provider.calls == ["a"]


class Hanging(ScriptedProvider):
    """Never answers (until cancelled)."""

    async def complete(self, call: UpstreamCall) -> Completion:
        self.calls.append(call.deployment.name)
        await asyncio.sleep(30)
        raise AssertionError("not cancelled")


def _hanging_runner(deployment_timeout_s: float, deadline_s: float, from_client: bool = True
                    ) -> tuple[Runner, Plan, ExecutionState]:
    """A runner on the real clock (asyncio's timeouts are real) with one hanging deployment."""
    provider = Hanging({})
    breakers_clock = FakeClock()
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), breakers_clock),
                           retry_budget(breakers_clock), hedge_budget(breakers_clock))
    runner = Runner({"openai_passthrough": provider}, state, clock=time.perf_counter)
    deployment = dataclasses.replace(_deployment("slow"), timeout_s=deployment_timeout_s)
    plan = Plan(deployments=[deployment], body={"messages": []},
                deadline=time.perf_counter() + deadline_s, deadline_from_client=from_client)
    return runner, plan, state


async def test_attempt_cut_by_the_request_deadline_spares_the_breaker() -> None:
    """An attempt cut short by the client's own short deadline (not by the deployment's timeout)
    is a 504 `deadline_exceeded` and says nothing about the deployment's health."""
    runner, plan, state = _hanging_runner(deployment_timeout_s=10.0, deadline_s=0.05)
    attempts: list[AttemptRecord] = []
    with pytest.raises(ProviderTimeoutError) as caught:
        await runner.complete(plan, attempts)
    assert caught.value.code == "deadline_exceeded"
    assert [a.outcome for a in attempts] == ["failed"]
    health = state.breakers.snapshot().deployments[0]
    assert health.window_failures == 0 and health.consecutive_failures == 0


async def test_a_hang_cut_by_the_operators_deadline_counts_against_the_breaker() -> None:
    """A deadline the operator set (server or task policy timeout) shorter than the deployment's
    own timeout: a deployment that hangs through it is unhealthy, as with its own timeout (only
    a client's timeout header spares the breaker)."""
    runner, plan, state = _hanging_runner(deployment_timeout_s=10.0, deadline_s=0.05,
                                          from_client=False)
    with pytest.raises(ProviderTimeoutError) as caught:
        await runner.complete(plan, [])
    assert caught.value.code == "first_token_timeout"
    health = state.breakers.snapshot().deployments[0]
    assert health.window_failures >= 1 and health.consecutive_failures >= 1


async def test_attempt_cut_by_the_deployment_timeout_counts_against_the_breaker() -> None:
    """A deployment that does not answer within its own timeout is unhealthy: counted."""
    runner, plan, state = _hanging_runner(deployment_timeout_s=0.05, deadline_s=10.0)
    with pytest.raises(ProviderTimeoutError) as caught:
        await runner.complete(plan, [])
    assert caught.value.code == "first_token_timeout"
    health = state.breakers.snapshot().deployments[0]
    assert health.window_failures >= 1 and health.consecutive_failures >= 1


async def test_a_stream_is_judged_when_it_ends_not_at_its_first_token() -> None:
    """A committed stream gives its breaker no verdict until `release`: broken after content is
    a failure (five open the breaker), clean is a success, the client leaving is neither, and
    a timeout under the client's own deadline says nothing about the deployment."""
    clock = FakeClock()
    runner, _, state = _runner({}, clock)
    breaker = state.breakers.get("a")
    broke = ProviderTimeoutError("upstream stream broke", code="upstream_stream_cut")

    async def committed(plan: Plan) -> tuple[list[AttemptRecord], CommittedStream]:
        attempts: list[AttemptRecord] = []
        return attempts, await runner.open_stream(plan, attempts)

    attempts, stream = await committed(_plan(clock, "a"))
    assert breaker.snapshot("a").window_requests == 0  # first token: no verdict yet
    stream.release(abandoned=True)
    assert breaker.snapshot("a").window_requests == 0
    client_bound = dataclasses.replace(_plan(clock, "a"), deadline_from_client=True)
    _, stream = await committed(client_bound)
    stream.release(ProviderTimeoutError("deadline", code="upstream_timeout"))
    assert breaker.snapshot("a").window_failures == 0
    for _ in range(5):
        attempts, stream = await committed(_plan(clock, "a"))
        stream.release(broke)
        assert attempts[-1].error is broke and attempts[-1].outcome == "won"
    assert breaker.state() == "open"
    clock.advance(BreakerPolicy().cool_down_s)
    _, stream = await committed(_plan(clock, "a"))
    stream.release()
    assert breaker.state() == "closed"


async def test_every_deployment_throttled_says_when_the_first_may_answer() -> None:
    """Both candidates answer 429, asking for 30 s and 7 s: the client's 429 says 7 s, the
    soonest either may answer, whichever was tried last."""
    clock = FakeClock()
    for order in (("slow-30", "soon-7"), ("soon-7", "slow-30")):
        runner, _, _ = _runner({
            "slow-30": ProviderRateLimitedError("throttled", code="rate_limited",
                                                retry_after=30.0),
            "soon-7": ProviderRateLimitedError("throttled", code="rate_limited",
                                               retry_after=7.0)}, clock)
        with pytest.raises(ProviderRateLimitedError) as caught:
            await runner.complete(_plan(clock, *order), [])
        assert caught.value.code == "rate_limited" and caught.value.retry_after == 7.0


class SlowFirst(ScriptedProvider):
    """Answers after `delay_s` on the real clock (long enough for a hedge to be due)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__({})
        self.delay_s = delay_s

    async def complete(self, call: UpstreamCall) -> Completion:
        await asyncio.sleep(self.delay_s)
        return await super().complete(call)


async def test_a_hedge_the_budget_refuses_gives_back_the_alternates_probe_slot() -> None:
    """The alternate is half-open: asking its breaker takes the one probe slot. When the hedge
    budget then refuses the hedge, the slot must go back; kept, the breaker would stay half-open
    with a probe "in flight" that never ends, refusing the deployment until a restart."""
    breakers_clock = FakeClock()
    breakers = BreakerRegistry(BreakerPolicy(), breakers_clock)
    for _ in range(BreakerPolicy().consecutive_failures):
        breakers.get("b").on_failure(REGULAR)
    breakers_clock.advance(BreakerPolicy().cool_down_s + 1)
    assert breakers.get("b").state() == "half_open"
    empty = hedge_budget(breakers_clock, BudgetPolicy(share=0.0, floor_per_s=0.0))
    state = ExecutionState(breakers, retry_budget(breakers_clock), empty)
    runner = Runner({"openai_passthrough": SlowFirst(0.05)}, state, clock=time.perf_counter)
    plan = Plan(deployments=[_deployment("a"), _deployment("b")], body={"messages": []},
                deadline=time.perf_counter() + 10, hedge_delay_s=0.005)
    attempts: list[AttemptRecord] = []
    await runner.complete(plan, attempts)
    # no hedge was sent: its record says the budget refused it
    assert [(a.deployment, a.outcome, getattr(a.error, "code", None)) for a in attempts] == [
        ("a", "won", None), ("b", "skipped", "hedge_budget_exhausted")]
    b = next(d for d in breakers.snapshot().deployments if d.deployment == "b")
    assert (b.state, b.probes_in_flight) == ("half_open", 0)
    assert breakers.get("b").allow()  # the next request may probe it


def _unavailable() -> ProviderUnavailableError:
    return ProviderUnavailableError("upstream returned 500: it quoted the prompt",
                                    code="upstream_unavailable")


async def test_a_request_failing_alike_everywhere_counts_once_on_the_deployment_it_tried_first(
        ) -> None:
    """A prompt that makes every provider answer 500 fails on `first`, then on `backup`: one
    failure, on `first`. Five such requests open `first` (its own consecutive failures) and
    leave `backup` closed for the requests sent to it (each poisoned request used to count on
    both, and `backup`, which saw little other traffic, opened for everyone)."""
    clock = FakeClock()
    runner, provider, state = _runner({"first": _unavailable(), "backup": _unavailable()},
                                      clock)
    for _ in range(5):
        with pytest.raises(ProviderUnavailableError):
            await runner.complete(_plan(clock, "first", "backup"), [])
    health = {d.deployment: d for d in state.breakers.snapshot().deployments}
    assert health["first"].window_failures == 5 and state.breakers.state("first") == "open"
    assert health["backup"].window_failures == 0 and state.breakers.state("backup") == "closed"
    assert provider.calls.count("backup") >= 5  # each was tried there, and failed there
    del provider.failures["backup"]
    deployment, _ = await runner.complete(_plan(clock, "backup"), [])
    assert deployment.name == "backup"


async def test_different_failures_on_two_deployments_count_on_both() -> None:
    """A 500 on one deployment and a refused key on the next are two deployments' faults."""
    clock = FakeClock()
    refused = ProviderMisconfiguredError("refused", code="upstream_auth")
    runner, _, state = _runner({"first": _unavailable(), "backup": refused}, clock)
    with pytest.raises(SlorouterError):
        await runner.complete(_plan(clock, "first", "backup"), [])
    health = {d.deployment: d for d in state.breakers.snapshot().deployments}
    assert health["first"].window_failures == 1 and health["backup"].window_failures == 1


async def test_retries_of_one_request_on_one_deployment_count_one_failure() -> None:
    """The only deployment answers 500 to the first try and to each retry: the request is one
    failure of it, not one per attempt (three requests do not open it)."""
    clock = FakeClock()
    runner, provider, state = _runner({"only": _unavailable()}, clock)
    for _ in range(3):
        with pytest.raises(ProviderUnavailableError):
            await runner.complete(_plan(clock, "only"), [])
    assert len(provider.calls) > 3  # retried
    health = state.breakers.snapshot().deployments[0]
    assert health.window_failures == 3 and state.breakers.state("only") == "closed"


async def test_a_hang_the_clients_deadline_cuts_past_the_stall_threshold_counts() -> None:
    """Every client's timeout is shorter than the deployment's own, so only the client's
    deadline ever cuts a hang: past the plan's stall threshold (twice the task's target) the
    cut is a failure of the deployment, as with its own timeout; the client still gets its 504
    `deadline_exceeded`. Short of the threshold it says nothing, as without one."""
    for stall_after_s, counted in ((0.02, True), (5.0, False)):
        runner, plan, state = _hanging_runner(deployment_timeout_s=10.0, deadline_s=0.05)
        plan = dataclasses.replace(plan, stall_after_s=stall_after_s)
        with pytest.raises(ProviderTimeoutError) as caught:
            await runner.complete(plan, [])
        assert caught.value.code == "deadline_exceeded"
        health = state.breakers.snapshot().deployments[0]
        assert (health.consecutive_failures == 1) is counted
        assert health.window_failures == (1 if counted else 0)


async def test_five_stalls_open_the_breaker_so_the_fallback_serves() -> None:
    """The policy's candidate hangs and its fallback answers; clients time out at 50 ms, past
    a 20 ms stall threshold. Each request is a 504 that never reaches the fallback (the hang
    ate the deadline), until the fifth opens the candidate's breaker: the sixth goes straight
    to the fallback and is answered."""
    provider = Hanging({})

    class HangingFirst(ScriptedProvider):
        async def complete(self, call: UpstreamCall) -> Completion:
            if call.deployment.name == "slow":
                return await provider.complete(call)
            return await super().complete(call)

    answering = HangingFirst({})
    breakers_clock = FakeClock()
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), breakers_clock),
                           retry_budget(breakers_clock), hedge_budget(breakers_clock))
    runner = Runner({"openai_passthrough": answering}, state, clock=time.perf_counter)
    slow = dataclasses.replace(_deployment("slow"), timeout_s=10.0)

    def plan() -> Plan:
        return Plan(deployments=[slow, _deployment("fallback")], body={"messages": []},
                    deadline=time.perf_counter() + 0.05, deadline_from_client=True,
                    stall_after_s=0.02)

    for _ in range(5):
        with pytest.raises(ProviderTimeoutError):
            await runner.complete(plan(), [])
    assert state.breakers.state("slow") == "open"
    deployment, _ = await runner.complete(plan(), [])
    assert deployment.name == "fallback"
    assert provider.calls == ["slow"] * 5 and answering.calls == ["fallback"]


async def test_a_retry_the_budget_refuses_is_answered_without_waiting_out_its_backoff(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The last deployment answers 429 with a Retry-After of 0.9 s, and the retry budget is
    empty: the request gets its 429 at once, with no wait (it used to sleep the 0.9 s, holding
    the client and its slot, only to be refused). With budget left, it waits, then retries."""
    clock = FakeClock()
    limited = ProviderRateLimitedError("upstream returned 429", code="rate_limited",
                                       retry_after=0.9)
    waits: list[float] = []

    async def recorded(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr("router.execution.runner.asyncio.sleep", recorded)
    for policy, expected_calls in ((BudgetPolicy(share=0.0, floor_per_s=0.0), ["only"]),
                                   (BudgetPolicy(), ["only", "only"])):
        waits.clear()
        provider = ScriptedProvider({"only": limited})
        state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock),
                               retry_budget(clock, policy), hedge_budget(clock))
        runner = Runner({"openai_passthrough": provider}, state, clock=clock)
        with pytest.raises(ProviderRateLimitedError) as caught:
            await runner.complete(_plan(clock, "only"), [])
        assert provider.calls == expected_calls
        if len(expected_calls) == 1:
            assert waits == [] and "retry budget exhausted" in caught.value.message
        else:
            assert waits and min(waits) >= 0.9


async def test_a_deadline_that_runs_out_during_a_retry_is_a_504() -> None:
    """The only deployment fails (503) and its retry hangs until the client's deadline cuts
    it: the client is told its deadline passed (504 `deadline_exceeded`, naming both
    attempts), not that the attempts failed in different ways (502)."""
    first = [True]

    class FailsThenHangs(ScriptedProvider):
        async def complete(self, call: UpstreamCall) -> Completion:
            self.calls.append(call.deployment.name)
            if first[0]:
                first[0] = False
                raise _unavailable()
            await asyncio.sleep(30)
            raise AssertionError("not cancelled")

    provider = FailsThenHangs({})
    breakers_clock = FakeClock()
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), breakers_clock),
                           retry_budget(breakers_clock), hedge_budget(breakers_clock))
    runner = Runner({"openai_passthrough": provider}, state, clock=time.perf_counter)
    plan = Plan(deployments=[dataclasses.replace(_deployment("only"), timeout_s=10.0)],
                body={"messages": []}, deadline=time.perf_counter() + 0.3,
                deadline_from_client=True)
    with pytest.raises(ProviderTimeoutError) as caught:
        await runner.complete(plan, [])
    assert caught.value.code == "deadline_exceeded" and caught.value.status_code == 504
    assert "after 2 attempts" in caught.value.message
    assert provider.calls == ["only", "only"]


def test_an_unjudged_failure_does_not_hide_a_retry_s_alike_failure() -> None:
    """A first attempt's timeout that fired late after a pause is no verdict on its deployment;
    counted as `failed alike`, it also kept the retry's real timeout from counting, so repeated
    pauses kept a slow deployment's breaker closed (the second re-audit of 2026-12-06). Only a
    judged failure makes a later alike one a repeat."""
    from router.errors import ProviderTimeoutError
    from router.execution.failures import failed_alike_before

    def timed_out(number: int, judged: bool) -> AttemptRecord:
        record = AttemptRecord("slow", number, 0.0, outcome="failed",
                               error=ProviderTimeoutError("no first token",
                                                          code="first_token_timeout"))
        record.judged = judged
        return record

    paused, retry = timed_out(1, judged=False), timed_out(2, judged=False)
    assert not failed_alike_before(retry, [paused, retry])
    counted = timed_out(1, judged=True)
    assert failed_alike_before(retry, [counted, retry])


async def test_a_request_three_models_refuse_is_refused_without_walking_every_candidate() -> None:
    """Every candidate refusing the request (400): two servers of one model are tried, not its
    third, and the third model's refusal ends it. None of it draws on the retry budget all
    tenants share: one bad request made 11 calls on a policy of 17 deployments and left the
    next tenant's failures without failover (the scale audit of 2026-12-07)."""
    clock = FakeClock()
    replicas = [dataclasses.replace(_deployment(name), model="openai/shared")
                for name in ("shared-1", "shared-2", "shared-3")]
    others = [_deployment(name) for name in ("b", "c", "d", "e")]
    refusal = ProviderRejectedError("upstream returned 400: bad field", param="x",
                                    code="invalid_value")
    runner, provider, state = _runner({d.name: refusal for d in (*replicas, *others)}, clock)
    spent_before = state.retries.snapshot().spent
    plan = Plan(deployments=[*replicas, *others], body={"messages": []},
                deadline=clock() + 30.0)
    with pytest.raises(ProviderRejectedError) as caught:
        await runner.complete(plan, [])
    assert provider.calls == ["shared-1", "shared-2", "b", "c"]
    assert caught.value.code == "invalid_value" and caught.value.param == "x"
    assert state.retries.snapshot().spent == spent_before


async def test_what_one_server_refused_another_of_the_same_model_may_serve() -> None:
    """Two servers of one model string may take different lengths (a vLLM `max_model_len`):
    the first's refusal moves on to the second, which answers; a long prompt three replicas of
    a small model refuse reaches the large fallback after two of them, as one refused by a
    small and a middle model does (the re-audits)."""
    clock = FakeClock()
    refusal = ProviderRejectedError("upstream returned 400: maximum context length",
                                    code="context_length_exceeded")
    replicas = [dataclasses.replace(_deployment(name), model="openai/llama-70b")
                for name in ("short-window", "long-window")]
    runner, provider, _ = _runner({"short-window": refusal}, clock)
    plan = Plan(deployments=replicas, body={"messages": []}, deadline=clock() + 30.0)
    deployment, _ = await runner.complete(plan, [])
    assert (deployment.name, provider.calls) == ("long-window", ["short-window", "long-window"])
    small = [dataclasses.replace(_deployment(name), model="openai/small")
             for name in ("small-1", "small-2", "small-3")]
    runner, provider, _ = _runner({d.name: refusal for d in small}, clock)
    plan = Plan(deployments=[*small, _deployment("large")], body={"messages": []},
                deadline=clock() + 30.0)
    deployment, _ = await runner.complete(plan, [])
    assert (deployment.name, provider.calls) == ("large", ["small-1", "small-2", "large"])
    runner, provider, _ = _runner({"small": refusal, "middle": refusal}, clock)
    deployment, _ = await runner.complete(_plan(clock, "small", "middle", "large"), [])
    assert (deployment.name, provider.calls) == ("large", ["small", "middle", "large"])
