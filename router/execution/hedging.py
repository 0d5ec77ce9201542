"""Hedged requests: whether a request may be hedged (pure) and the race between two attempts.

`plan_hedge` decides from plain inputs: only idempotent requests are hedged (not side-effecting:
no side-effecting tools, no `action` taken to act; risk not `high`, the policy allows it,
another deployment exists), and
the hedge starts once the first attempt has waited its deployment's predicted TTFT percentile
("The Tail at Scale", Dean & Barroso 2013: hedge after the p95-ish expected latency).

`race_first` runs the race: it starts the primary attempt, and after `delay_s` asks `may_hedge()`
(spend the hedge budget, check the alternate's breaker) before starting the hedge. The first
attempt to yield a *content* chunk wins; the other is cancelled and its stream closed. It works
on any `ChunkStream` (an async generator fits), so real provider streams plug in unchanged.
An attempt that fails before content does not end the race while the other is still running;
if the primary fails before the hedge started, the race ends (falling back is the caller's job).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Container
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from policies.labels import Risk, Task

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Clock = Callable[[], float]
Outcome = Literal["won", "cancelled", "failed", "not_started"]


@dataclass(frozen=True, slots=True)
class HedgeInputs:
    """What the hedging decision needs to know about one request."""

    policy_allows: bool
    task: Task
    risk: Risk
    side_effecting: bool  # `pipeline.is_side_effecting`: an action taken to act, or such tools
    has_alternate: bool
    predicted_ttft_s: float | None
    remaining_s: float


@dataclass(frozen=True, slots=True)
class HedgePlan:
    """`delay_s` is set only when the request may be hedged."""

    delay_s: float | None
    reason: str

    @property
    def hedge(self) -> bool:
        return self.delay_s is not None


NO_DEPLOYMENT = HedgePlan(None, "no deployment to run")
NO_POLICY = HedgePlan(None, "no task policy applies (a pinned model, or no policies)")
NO_STATISTICS = HedgePlan(None, "may hedge, but no live statistics time it (an offline "
                                "explanation)")
# The delay is read from answers only (`router.feedback.HedgeDelays`), never guessed.
NO_PREDICTION = ("too few answers to time a hedge by: 20 of the task's on the deployment, or "
                 "for a stream its TTFT model at this prompt size")


def plan_hedge(inputs: HedgeInputs, min_delay_s: float = 0.0) -> HedgePlan:
    """Whether and when to hedge: after the predicted TTFT percentile, if time remains."""
    refusal = _refusal(inputs)
    if refusal is not None:
        return HedgePlan(None, refusal)
    assert inputs.predicted_ttft_s is not None  # checked by _refusal
    delay = max(min_delay_s, inputs.predicted_ttft_s)
    if delay >= inputs.remaining_s:
        return HedgePlan(None, "no time left for a hedge")
    return HedgePlan(delay, "hedge after predicted TTFT percentile")


def _refusal(inputs: HedgeInputs) -> str | None:
    refused = refusal_before_prediction(inputs)
    if refused is None and inputs.predicted_ttft_s is None:
        return NO_PREDICTION
    return refused


def refusal_before_prediction(inputs: HedgeInputs) -> str | None:
    """Why the request is never hedged whatever its TTFT prediction says, or None: asked first,
    the caller need not read the prediction (a TTFT sketch) for a request that cannot hedge."""
    if not inputs.policy_allows:
        return "policy does not allow hedging"
    if inputs.side_effecting:
        return ("action requests are never hedged" if inputs.task == "action"
                else "side-effecting tools")
    if inputs.risk == "high":
        return "high risk"
    if not inputs.has_alternate:
        return "no alternate deployment"
    return None


class ChunkStream(Protocol[T_co]):
    """An attempt's stream of chunks: an async iterator that can be closed early."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def __anext__(self) -> T_co: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RaceAttempt:
    """One side of the race: 0 is the primary, 1 the hedge. Times are from the injected clock."""

    index: int
    outcome: Outcome
    started_at: float | None
    first_content_at: float | None
    ended_at: float | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class RaceResult(Generic[T]):
    """The winner's chunks up to and including its first content chunk, and the rest of it.

    `prefix` ends early (with no content chunk) only if the winner's stream finished without
    content. The caller must consume or `aclose()` `rest`.
    """

    winner: int
    prefix: tuple[T, ...]
    rest: ChunkStream[T]
    attempts: tuple[RaceAttempt, ...]

    @property
    def hedge_started(self) -> bool:
        return len(self.attempts) > 1 and self.attempts[1].outcome != "not_started"


class RaceFailed(Exception):
    """Every started attempt failed before content. `error` is the last failure."""

    def __init__(self, attempts: tuple[RaceAttempt, ...], error: BaseException) -> None:
        super().__init__(f"all {sum(a.started_at is not None for a in attempts)} attempts failed")
        self.attempts = attempts
        self.error = error


class _Side(Generic[T]):
    """One running attempt: reads until its first content chunk."""

    def __init__(self, index: int, factory: Callable[[], ChunkStream[T]], clock: Clock) -> None:
        self.index = index
        self.clock = clock
        self.started_at = clock()
        self.stream = factory()
        self.first_content_at: float | None = None
        self.ended_at: float | None = None
        self.error: BaseException | None = None

    async def until_content(self, is_content: Callable[[T], bool]) -> tuple[T, ...]:
        prefix: list[T] = []
        try:
            async for chunk in self.stream:
                prefix.append(chunk)
                if is_content(chunk):
                    self.first_content_at = self.clock()
                    return tuple(prefix)
        except BaseException:
            self.ended_at = self.clock()
            await _close_quietly(self.stream)
            raise
        return tuple(prefix)

    def record(self, outcome: Outcome) -> RaceAttempt:
        return RaceAttempt(self.index, outcome, self.started_at, self.first_content_at,
                           self.ended_at, self.error)


async def _close_quietly(stream: ChunkStream[T]) -> None:
    with contextlib.suppress(Exception):
        await stream.aclose()


async def race_first(
    primary: Callable[[], ChunkStream[T]],
    hedge: Callable[[], ChunkStream[T]],
    *,
    delay_s: float | None,
    may_hedge: Callable[[], bool],
    is_content: Callable[[T], bool],
    clock: Clock,
) -> RaceResult[T]:
    """Race `primary` against `hedge` started after `delay_s` (None: never); first content wins."""
    race = _Race(is_content, clock)
    try:
        race.start(0, primary)
        timer = asyncio.ensure_future(asyncio.sleep(delay_s)) if delay_s is not None else None
        while True:
            waiting = set(race.tasks) | ({timer} if timer is not None else set())
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if timer is not None and timer in done:
                timer = None
                if may_hedge():
                    race.start(1, hedge)
            winner = race.settle(done)
            if winner is not None:
                return await race.finish(winner)
            if not race.tasks:
                raise race.failed()
    finally:
        if timer is not None:
            timer.cancel()
        await race.cancel_all()


class _Race(Generic[T]):
    """The bookkeeping of `race_first`: tasks, sides, outcomes."""

    def __init__(self, is_content: Callable[[T], bool], clock: Clock) -> None:
        self.is_content = is_content
        self.clock = clock
        self.sides: dict[int, _Side[T]] = {}
        self.tasks: dict[asyncio.Task[tuple[T, ...]], _Side[T]] = {}
        self.outcomes: dict[int, Outcome] = {}
        self.last_error: BaseException | None = None

    def start(self, index: int, factory: Callable[[], ChunkStream[T]]) -> None:
        side = _Side(index, factory, self.clock)
        self.sides[index] = side
        self.tasks[asyncio.ensure_future(side.until_content(self.is_content))] = side

    def settle(self, done: Container[object]) -> asyncio.Task[tuple[T, ...]] | None:
        """Record failures among `done`; return a task that reached content, if any."""
        winner = None
        for task in [t for t in self.tasks if t in done]:
            side = self.tasks[task]
            error = task.exception()
            if error is None:
                winner = winner if winner is not None else task
                continue
            del self.tasks[task]
            side.error = error
            self.last_error = error
            self.outcomes[side.index] = "failed"
        return winner

    async def finish(self, winner: asyncio.Task[tuple[T, ...]]) -> RaceResult[T]:
        side = self.tasks.pop(winner)
        self.outcomes[side.index] = "won"
        try:
            await self.cancel_all()
        except BaseException:  # cancelled while the loser closes: no one will read the winner
            await _close_quietly(side.stream)
            raise
        return RaceResult(side.index, winner.result(), side.stream, self.records())

    def failed(self) -> RaceFailed:
        assert self.last_error is not None
        return RaceFailed(self.records(), self.last_error)

    async def cancel_all(self) -> None:
        """Cancel every still-running side, wait for it to close its stream, mark it."""
        pending = list(self.tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in pending:
            side = self.tasks.pop(task)
            if task.cancelled() or task.exception() is None:
                await _close_quietly(side.stream)
            side.ended_at = side.ended_at if side.ended_at is not None else self.clock()
            self.outcomes.setdefault(side.index, "cancelled")

    def records(self) -> tuple[RaceAttempt, ...]:
        return tuple(
            self.sides[i].record(self.outcomes.get(i, "cancelled")) if i in self.sides
            else RaceAttempt(i, "not_started", None, None, None, None)
            for i in (0, 1)
        )
