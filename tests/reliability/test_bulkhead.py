"""The bulkhead in the execution loop: a deployment with `max_in_flight` attempts in flight is
skipped (fallback to the next, no hedge onto it, a 503 `deployment_saturated` when none is
left), and the in-flight count it reads never keeps an attempt that ended, whatever ended it.

The real `Runner`, `BreakerRegistry`, budgets, `InFlight` count and `StreamRelay`; a fake
provider stands in for the upstream (the service-level tests are `tests/faults/test_bulkhead.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

import pytest

from cache.keys import CacheScope
from cache.policy import CacheDecision, CacheRule
from router.api.relay import StreamRelay
from router.api.settle import Settle
from router.caching import CachePlan, ResultCaching
from router.errors import ProviderUnavailableError
from router.execution.attempt import AttemptRecord
from router.execution.breaker import BreakerPolicy, BreakerRegistry
from router.execution.events import close_quietly
from router.execution.plan import ExecutionState, Plan
from router.execution.retry_budget import (
    HEDGE_BUDGET_DEFAULTS,
    BudgetPolicy,
    hedge_budget,
    retry_budget,
)
from router.execution.runner import Runner
from router.outcomes import Outcome
from router.providers.base import Completion, Deployment, StreamEvent, UpstreamCall
from tests.reliability.fakes import FakeClock, fail_until_open

ANSWER = b'{"object": "chat.completion", "choices": []}'


def _deployment(name: str, cap: int | None = None) -> Deployment:
    return Deployment(name=name, model=f"openai/{name}", adapter="openai_passthrough",
                      api_base="http://127.0.0.1:9/v1", api_key=None, input_price_per_mtok=1.0,
                      output_price_per_mtok=2.0, context_window=None, max_in_flight=cap)


class Upstream:
    """Answers at once, after `delay_s[name]`, or raises `bug` (an unmapped exception); its
    streams close slowly when `slow_close` (an upstream connection that takes long to shut)."""

    def __init__(self, delay_s: dict[str, float] | None = None,
                 bug: Exception | None = None, slow_close: bool = False) -> None:
        self.delay_s = delay_s or {}
        self.bug = bug
        self.slow_close = slow_close
        self.closed = asyncio.Event()  # set: a slow close finishes
        self.calls: list[str] = []

    async def complete(self, call: UpstreamCall) -> Completion:
        self.calls.append(call.deployment.name)
        await asyncio.sleep(self.delay_s.get(call.deployment.name, 0.0))
        if self.bug is not None:
            raise self.bug
        return Completion(body=ANSWER, usage=None)

    async def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]:
        completion = await self.complete(call)
        try:
            yield StreamEvent(data=completion.body, has_content=True)
            yield StreamEvent(data=completion.body, has_content=True)
        finally:
            if self.slow_close:
                await self.closed.wait()

    async def aclose(self) -> None:
        return None


def _runner(upstream: Upstream, clock: FakeClock | None = None,
            hedges: BudgetPolicy = HEDGE_BUDGET_DEFAULTS) -> tuple[Runner, ExecutionState]:
    """The runner's own clock is real (the upstream's delays are); the breakers' is `clock`."""
    clock = clock if clock is not None else FakeClock()
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock), retry_budget(clock),
                           hedge_budget(clock, hedges))
    return Runner({"openai_passthrough": upstream}, state), state


def _plan(*deployments: Deployment, hedge_delay_s: float | None = None) -> Plan:
    return Plan(deployments=deployments, body={"messages": []},
                deadline=time.perf_counter() + 30.0, hedge_delay_s=hedge_delay_s)


async def test_a_full_deployment_is_skipped_for_the_next() -> None:
    """`a` has its one attempt in flight: the request goes to `b` without calling `a`, and the
    skip is recorded with its own code."""
    upstream = Upstream()
    runner, state = _runner(upstream)
    state.watch.begin("a", 0.0)  # an attempt still running on `a`
    attempts: list[AttemptRecord] = []
    deployment, _ = await runner.complete(_plan(_deployment("a", 1), _deployment("b")), attempts)
    assert deployment.name == "b" and upstream.calls == ["b"]
    assert attempts[0].outcome == "skipped" and attempts[0].error.code == "deployment_saturated"
    assert dict(state.watch.load) == {"a": 1}  # `b`'s attempt ended; `a`'s own is untouched


async def test_every_deployment_full_is_a_503_with_retry_after() -> None:
    """No deployment with room: a 503 `deployment_saturated` with `Retry-After` 1 s, and no
    upstream call."""
    upstream = Upstream()
    runner, state = _runner(upstream)
    for name in ("a", "b"):
        state.watch.begin(name, 0.0)
    with pytest.raises(ProviderUnavailableError) as refused:
        await runner.complete(_plan(_deployment("a", 1), _deployment("b", 1)), [])
    assert (refused.value.status_code, refused.value.code, refused.value.retry_after) == (
        503, "deployment_saturated", 1.0)
    assert upstream.calls == []


async def test_a_full_deployment_keeps_its_breakers_half_open_probe() -> None:
    """Skipped for its cap, a half-open deployment's probe slot stays free for an attempt
    that is made."""
    clock, upstream = FakeClock(), Upstream()
    runner, state = _runner(upstream, clock)
    breaker = state.breakers.get("a")
    fail_until_open(breaker)
    clock.advance(BreakerPolicy().cool_down_s)
    assert breaker.state() == "half_open"
    state.watch.begin("a", 0.0)
    await runner.complete(_plan(_deployment("a", 1), _deployment("b")), [])
    assert upstream.calls == ["b"]
    assert breaker.snapshot("a").probes_in_flight == 0


async def test_no_hedge_onto_a_full_alternate() -> None:
    """The primary is slow and the hedge delay passes, but the alternate is full: no hedge."""
    upstream = Upstream(delay_s={"a": 0.2})
    runner, state = _runner(upstream)
    state.watch.begin("b", 0.0)
    deployment, _ = await runner.complete(
        _plan(_deployment("a"), _deployment("b", 1), hedge_delay_s=0.01), [])
    assert deployment.name == "a" and upstream.calls == ["a"]


async def test_an_unexpected_exception_in_an_attempt_leaves_no_attempt_in_flight() -> None:
    """A bug (an exception that is not the project's) ends the attempt too: a count left
    behind would hold a slot of the bulkhead for good."""
    runner, state = _runner(Upstream(bug=RuntimeError("a bug")))
    with pytest.raises(RuntimeError):
        await runner.complete(_plan(_deployment("a", 1)), [])
    assert dict(state.watch.load) == {}


async def test_a_relay_cancelled_while_closing_the_upstream_still_frees_the_attempt() -> None:
    """The server's own cut (shutdown) may cancel a stream's finish while it waits for the
    upstream to close: the attempt must still leave the in-flight count."""
    upstream = Upstream(slow_close=True)
    runner, state = _runner(upstream)
    outcome = Outcome(request_id="r", tenant="t", requested_model="m", stream=True,
                      arrived_at=0.0)
    committed = await runner.open_stream(_plan(_deployment("a", 1)), outcome.attempts)
    try:
        assert dict(state.watch.load) == {"a": 1}
        plan = CachePlan(None, CacheDecision(False, False, "disabled"),
                         CacheScope("t", frozenset(), "en", "v", frozenset()))
        settle = Settle(None, ResultCaching(None, CacheRule(False)), plan, {},
                        side_effecting=False)
        relay = StreamRelay(committed, outcome, settle, lambda _: None, lambda: 0.0, 0)
        finishing = asyncio.ensure_future(relay.finish(client_gone=True))
        await asyncio.sleep(0.01)  # it now waits on the upstream's close
        finishing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await finishing
        assert dict(state.watch.load) == {}
    finally:  # let the upstream's close finish, so that the event loop can end
        upstream.closed.set()
        await close_quietly(committed.tail)


def test_the_cap_is_a_positive_whole_number() -> None:
    """`max_in_flight` below 1 is refused when the configuration loads."""
    from pydantic import ValidationError

    from policies.schema import DeploymentSpec
    with pytest.raises(ValidationError):
        DeploymentSpec(name="a", model="openai/a", max_in_flight=0)
    assert DeploymentSpec(name="a", model="openai/a").max_in_flight is None
