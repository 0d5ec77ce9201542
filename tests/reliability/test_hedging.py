"""Hedging: only idempotent requests are hedged; the first content wins, the loser is closed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.labels import RISKS, TASKS
from router.errors import ProviderUnavailableError
from router.execution.hedging import HedgeInputs, RaceFailed, plan_hedge, race_first

NEVER = 3600.0  # a hedge delay no test waits for
ROLE_ONLY = ""  # a chunk with no content (e.g. the role delta)


class Scripted:
    """An attempt whose chunks are yielded after `gate` opens; records whether it was closed."""

    def __init__(self, chunks: list[str], *, gate: asyncio.Event | None = None,
                 fail: Exception | None = None) -> None:
        self.chunks = chunks
        self.gate = gate
        self.fail = fail
        self.started = False
        self.closed = False

    def __call__(self) -> AsyncGenerator[str, None]:
        self.started = True
        return self._run()

    async def _run(self) -> AsyncGenerator[str, None]:
        try:
            yield ROLE_ONLY
            if self.gate is not None:
                await self.gate.wait()
            if self.fail is not None:
                raise self.fail
            for chunk in self.chunks:
                yield chunk
        finally:
            self.closed = True


def is_content(chunk: str) -> bool:
    return chunk != ROLE_ONLY


def hedgeable(**changes: object) -> HedgeInputs:
    base = dict(policy_allows=True, task="chat", risk="low", side_effecting=False,
                has_alternate=True, predicted_ttft_s=0.8, remaining_s=30.0)
    base.update(changes)
    return HedgeInputs(**base)  # type: ignore[arg-type]


@given(
    allows=st.booleans(), task=st.sampled_from(TASKS), risk=st.sampled_from(RISKS),
    side_effecting=st.booleans(), alternate=st.booleans(),
    ttft=st.one_of(st.none(), st.floats(0, 100)), remaining=st.floats(0, 100),
)
def test_only_idempotent_requests_are_hedged(
    allows: bool, task: str, risk: str, side_effecting: bool, alternate: bool,
    ttft: float | None, remaining: float,
) -> None:
    """A hedge is planned only if allowed, not side-effecting (an action taken to act is), not
    high risk, with an alternate and a prediction, and only if it would start before the
    deadline."""
    plan = plan_hedge(hedgeable(policy_allows=allows, task=task, risk=risk,
                                side_effecting=side_effecting, has_alternate=alternate,
                                predicted_ttft_s=ttft, remaining_s=remaining))
    eligible = (allows and not side_effecting and risk != "high"
                and alternate and ttft is not None and ttft < remaining)
    assert plan.hedge == eligible
    if plan.delay_s is not None:
        assert plan.delay_s == ttft


def test_action_is_never_hedged_and_says_why() -> None:
    """An `action` request taken to act gets no hedge, with the reason stated; one the model
    called an action on too little evidence to act ("hey", `Labels.acts`) is hedged as a read."""
    plan = plan_hedge(hedgeable(task="action", side_effecting=True))
    assert not plan.hedge
    assert "action" in plan.reason
    assert plan_hedge(hedgeable(task="action", side_effecting=False)).hedge


async def test_fast_primary_wins_and_hedge_never_starts() -> None:
    """A primary with content before the delay wins; the hedge is not started."""
    primary, hedge = Scripted(["a", "b"]), Scripted(["x"])
    result = await race_first(primary, hedge, delay_s=NEVER, may_hedge=lambda: True,
                              is_content=is_content, clock=time.monotonic)
    assert result.winner == 0
    assert result.prefix == (ROLE_ONLY, "a")
    assert [chunk async for chunk in result.rest] == ["b"]
    assert not hedge.started
    assert not result.hedge_started
    assert result.attempts[1].outcome == "not_started"


async def test_slow_primary_loses_to_hedge_and_is_closed() -> None:
    """When the primary hangs, the hedge's first content wins and the primary is cancelled."""
    primary = Scripted(["late"], gate=asyncio.Event())
    hedge = Scripted(["fast", "more"])
    result = await race_first(primary, hedge, delay_s=0.0, may_hedge=lambda: True,
                              is_content=is_content, clock=time.monotonic)
    assert result.winner == 1
    assert result.prefix == (ROLE_ONLY, "fast")
    assert primary.closed
    assert [a.outcome for a in result.attempts] == ["cancelled", "won"]
    assert all(a.started_at is not None for a in result.attempts)  # both costs recorded
    assert result.attempts[1].first_content_at is not None
    assert result.attempts[0].ended_at is not None  # the loser's record is closed too
    assert [chunk async for chunk in result.rest] == ["more"]


async def test_hedge_budget_refusal_leaves_primary_alone() -> None:
    """If `may_hedge` refuses (budget spent), no hedge starts and the primary still wins."""
    gate = asyncio.Event()
    primary, hedge = Scripted(["a"], gate=gate), Scripted(["x"])

    def refuse_and_release() -> bool:
        gate.set()
        return False

    result = await race_first(primary, hedge, delay_s=0.0, may_hedge=refuse_and_release,
                              is_content=is_content, clock=time.monotonic)
    assert result.winner == 0
    assert not hedge.started


async def test_primary_failure_waits_for_running_hedge() -> None:
    """A primary failing after the hedge started does not end the race: the hedge wins."""
    hedge_gate = asyncio.Event()
    primary = Scripted([], gate=asyncio.Event(), fail=ProviderUnavailableError("503"))
    hedge = Scripted(["h"], gate=hedge_gate)

    def start_and_fail_primary() -> bool:
        assert primary.gate is not None
        primary.gate.set()
        asyncio.get_running_loop().call_later(0.01, hedge_gate.set)
        return True

    result = await race_first(primary, hedge, delay_s=0.0, may_hedge=start_and_fail_primary,
                              is_content=is_content, clock=time.monotonic)
    assert result.winner == 1
    assert result.attempts[0].outcome == "failed"
    assert isinstance(result.attempts[0].error, ProviderUnavailableError)


async def test_primary_failure_before_hedge_ends_the_race() -> None:
    """A primary failing before the hedge delay raises; falling back is the caller's job."""
    primary = Scripted([], fail=ProviderUnavailableError("503"))
    hedge = Scripted(["x"])
    with pytest.raises(RaceFailed) as caught:
        await race_first(primary, hedge, delay_s=NEVER, may_hedge=lambda: True,
                         is_content=is_content, clock=time.monotonic)
    assert isinstance(caught.value.error, ProviderUnavailableError)
    assert not hedge.started


async def test_both_failing_raises_with_both_recorded() -> None:
    """When both attempts fail before content, RaceFailed records both failures."""
    primary = Scripted([], gate=asyncio.Event(), fail=ProviderUnavailableError("p"))
    hedge = Scripted([], fail=ProviderUnavailableError("h"))
    released: list[asyncio.Task[None]] = []

    async def fail_primary_after_the_hedge() -> None:
        # the primary fails once the hedge has (it failed on a timer of 10 ms, which a loaded
        # machine let pass before the hedge ran: the two failed together, either one last)
        while not hedge.closed:
            await asyncio.sleep(0)
        for _ in range(20):  # loop turns, not time: the race closes the hedge's stream and
            await asyncio.sleep(0)  # records its failure within a few
        assert primary.gate is not None
        primary.gate.set()

    def start_then_fail_primary() -> bool:
        released.append(asyncio.ensure_future(fail_primary_after_the_hedge()))
        return True

    with pytest.raises(RaceFailed) as caught:
        await race_first(primary, hedge, delay_s=0.0, may_hedge=start_then_fail_primary,
                         is_content=is_content, clock=time.monotonic)
    assert [a.outcome for a in caught.value.attempts] == ["failed", "failed"]
    assert str(caught.value.error) == "p"
    await asyncio.gather(*released)


async def test_cancelling_the_race_closes_both_attempts() -> None:
    """A client disconnect (cancellation) closes every running attempt's stream."""
    primary = Scripted(["a"], gate=asyncio.Event())
    hedge = Scripted(["b"], gate=asyncio.Event())
    task = asyncio.ensure_future(race_first(primary, hedge, delay_s=0.0, may_hedge=lambda: True,
                                            is_content=is_content, clock=time.monotonic))
    while not hedge.started:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert primary.closed and hedge.closed


async def test_cancelled_while_the_loser_closes_closes_the_winner_too() -> None:
    """A cancel that lands while the loser's stream is still closing closes the winner's stream
    before the race ends, rather than leaving it to the event loop's finaliser."""
    closing, closing_may_end = asyncio.Event(), asyncio.Event()

    class SlowToClose(Scripted):
        async def _run(self) -> AsyncGenerator[str, None]:
            try:
                yield ROLE_ONLY
                await asyncio.Event().wait()  # never answers
                yield "late"
            finally:
                closing.set()
                try:
                    await closing_may_end.wait()
                finally:
                    self.closed = True

    primary, hedge = SlowToClose([]), Scripted(["fast", "more"])
    task = asyncio.ensure_future(race_first(primary, hedge, delay_s=0.0, may_hedge=lambda: True,
                                            is_content=is_content, clock=time.monotonic))
    await closing.wait()  # the hedge won; the primary is being closed
    assert not hedge.closed
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert hedge.closed
    assert primary.closed
