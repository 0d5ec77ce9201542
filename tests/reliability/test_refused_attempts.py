"""An attempt that was due and not made is on the request's record, with why.

A hedge: the hedge budget had no token (`hedge_budget_exhausted`), the alternate had its
`max_in_flight` attempts in flight (`deployment_saturated`) or its circuit was open
(`circuit_open`). A retry or fallback after a failure: the retry budget had no token
(`retry_budget_exhausted`), and the client gets the failure's own error. Telemetry counts those
records (`slorouter.hedges.skipped`, `slorouter.retry_budget.refusals`); without them a
starved budget was invisible (a tail hedging did not cut, errors with the upstream's code).

The real `Runner`, breakers and budgets; the fake upstreams of the bulkhead and runner tests.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from router.errors import ProviderUnavailableError
from router.execution.attempt import AttemptRecord
from router.execution.breaker import BreakerPolicy, BreakerRegistry
from router.execution.plan import ExecutionState
from router.execution.retry_budget import BudgetPolicy, hedge_budget, retry_budget
from router.execution.runner import Runner
from tests.reliability.fakes import FakeClock, fail_until_open
from tests.reliability.test_bulkhead import Upstream, _deployment, _plan, _runner
from tests.reliability.test_runner_errors import ScriptedProvider
from tests.reliability.test_runner_errors import _plan as _failing_plan

HEDGE_AFTER_S = 0.01
PRIMARY_S = 0.2  # the primary answers this long after it started: the hedge is due before


async def _hedgeable(runner: Runner, cap: int | None = None) -> list[AttemptRecord]:
    attempts: list[AttemptRecord] = []
    deployment, _ = await runner.complete(
        _plan(_deployment("a"), _deployment("b", cap), hedge_delay_s=HEDGE_AFTER_S), attempts)
    assert deployment.name == "a"  # the primary answered: nothing else was sent
    return attempts


def _skip(attempts: list[AttemptRecord]) -> tuple[str, str, str, str | None]:
    [primary, hedge] = attempts
    assert (primary.deployment, primary.outcome, primary.kind) == ("a", "won", "first")
    assert hedge.started_at == hedge.ended_at and hedge.number == 2
    return hedge.deployment, hedge.kind, hedge.outcome, getattr(hedge.error, "code", None)


async def test_a_hedge_the_budget_refuses_is_recorded_as_skipped() -> None:
    upstream, clock = Upstream(delay_s={"a": PRIMARY_S}), FakeClock()
    runner, _ = _runner(upstream, clock, BudgetPolicy(share=0.0, floor_per_s=0.0))
    attempts = await _hedgeable(runner)
    assert upstream.calls == ["a"]
    assert _skip(attempts) == ("b", "hedge", "skipped", "hedge_budget_exhausted")


async def test_a_hedge_onto_a_full_alternate_is_recorded_as_skipped() -> None:
    upstream, clock = Upstream(delay_s={"a": PRIMARY_S}), FakeClock()
    runner, state = _runner(upstream, clock)
    state.watch.begin("b", 0.0)  # `b` holds its one attempt
    attempts = await _hedgeable(runner, cap=1)
    assert upstream.calls == ["a"]
    assert _skip(attempts) == ("b", "hedge", "skipped", "deployment_saturated")
    assert state.hedges.snapshot().spent == 0  # no token spent on a hedge not sent


async def test_a_hedge_onto_an_open_circuit_is_recorded_as_skipped() -> None:
    upstream, clock = Upstream(delay_s={"a": PRIMARY_S}), FakeClock()
    runner, state = _runner(upstream, clock)
    breaker = state.breakers.get("b")
    fail_until_open(breaker)
    attempts = await _hedgeable(runner)
    assert upstream.calls == ["a"]
    assert _skip(attempts) == ("b", "hedge", "skipped", "circuit_open")
    assert state.hedges.snapshot().spent == 0


async def test_a_hedge_sent_leaves_no_skip() -> None:
    """The same race with a budget to spend: the hedge is sent (and loses), no skip record."""
    upstream, clock = Upstream(delay_s={"a": 0.05, "b": 1.0}), FakeClock()
    runner, state = _runner(upstream, clock, BudgetPolicy(share=1.0, floor_per_s=1.0))
    attempts = await _hedgeable(runner)
    assert upstream.calls == ["a", "b"]
    assert [(a.deployment, a.kind, a.outcome) for a in attempts] == [
        ("a", "first", "won"), ("b", "hedge", "cancelled")]
    assert state.hedges.snapshot().spent == 1


def _empty_retry_budget(failing: str) -> tuple[Runner, ScriptedProvider, FakeClock]:
    clock = FakeClock()
    provider = ScriptedProvider({failing: ProviderUnavailableError(
        "upstream returned 503", code="upstream_unavailable")})
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock),
                           retry_budget(clock, BudgetPolicy(share=0.0, floor_per_s=0.0)),
                           hedge_budget(clock))
    return Runner({"openai_passthrough": provider}, state, clock=clock), provider, clock


@pytest.mark.parametrize(("deployments", "refused"), [
    (("first", "second"), ("second", "fallback")),  # moving on to the next deployment
    (("first",), ("first", "retry")),  # the last deployment tries again
])
async def test_an_attempt_the_retry_budget_refuses_is_recorded_as_skipped(
        deployments: tuple[str, ...], refused: tuple[str, str]) -> None:
    """`first` answers 503 and the retry budget is empty: the attempt that was due is not
    made, its record says why, and the client gets the 503's own error."""
    runner, provider, clock = _empty_retry_budget("first")
    attempts: list[AttemptRecord] = []
    with pytest.raises(ProviderUnavailableError) as caught:
        await runner.complete(_failing_plan(clock, *deployments), attempts)
    assert provider.calls == ["first"]
    assert caught.value.code == "upstream_unavailable"
    assert caught.value.message.startswith("retry budget exhausted: all 1 attempts failed")
    assert [(a.deployment, a.kind, a.outcome, getattr(a.error, "code", None))
            for a in attempts] == [("first", "first", "failed", "upstream_unavailable"),
                                   (*refused, "skipped", "retry_budget_exhausted")]


async def test_a_hedge_due_after_the_request_s_time_is_neither_sent_nor_recorded() -> None:
    """The hedge's timer fires once the time for the first content has passed (the process
    stood still, its timers late): no hedge is made, and none is on the record. It was, as an
    attempt failed with `deadline_exceeded`, listed in the access log though never sent."""
    upstream, clock = Upstream(delay_s={"a": PRIMARY_S}), FakeClock()
    state = ExecutionState(BreakerRegistry(BreakerPolicy(), clock), retry_budget(clock),
                           hedge_budget(clock, BudgetPolicy(share=1.0, floor_per_s=1.0)))
    paused = {"s": 0.0}  # how far the runner's clock is ahead of the real one
    runner = Runner({"openai_passthrough": upstream}, state,
                    clock=lambda: time.perf_counter() + paused["s"])
    plan = replace(_plan(_deployment("a"), _deployment("b"), hedge_delay_s=HEDGE_AFTER_S),
                   deadline=time.perf_counter() + 1.0)

    async def pause() -> None:
        await asyncio.sleep(HEDGE_AFTER_S / 2)
        paused["s"] = 2.0  # past the deadline when the hedge's timer fires

    attempts: list[AttemptRecord] = []
    pausing = asyncio.ensure_future(pause())
    deployment, _ = await runner.complete(plan, attempts)
    await pausing
    assert deployment.name == "a" and upstream.calls == ["a"]
    assert [(a.deployment, a.kind, a.outcome) for a in attempts] == [("a", "first", "won")]
    assert state.hedges.snapshot().spent == 0
