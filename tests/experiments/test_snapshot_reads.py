"""A snapshot of the Redis outcome store is one instant, against a real redis-server.

Another replica's outcome is written between every two replies the snapshot's client reads
(`_WritesBetweenReplies`): a deterministic stand-in for the outcomes that land while a
guardrail pass reads. Each outcome carries every metric, the window and the reservoir are larger
than all outcomes written, so in a snapshot of one instant every metric of every arm has as
many values as its count says, and every metric the same count.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from router.experiments.outcomes import ExperimentData, Exposure, Feedback, Outcome
from router.experiments.outcomes_redis import RedisOutcomeStore

pytestmark = pytest.mark.integration
METRICS = ("error", "ttft_ms", "e2e_ms", "cost_usd")
Hook = Callable[[], Awaitable[None]]


class _HookedPipeline(Pipeline):
    """A pipeline that runs the client's hook once its replies are in."""

    hook: Hook | None = None

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        replies = await super().execute(raise_on_error)
        if self.hook is not None:
            await self.hook()
        return replies


class _WritesBetweenReplies(aioredis.Redis):
    """A client that runs `hook` after each reply (a command's, or a pipeline's): whatever
    the hook writes lands between two reads of a caller that reads in several calls."""

    hook: Hook | None = None

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        if self.hook is not None:
            await self.hook()
        return reply

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = _HookedPipeline(self.connection_pool, self.response_callbacks, transaction,
                               shard_hint)
        pipe.hook = self.hook
        return pipe


@pytest.fixture
async def hooked(redis_url: str) -> AsyncIterator[tuple[_WritesBetweenReplies, aioredis.Redis]]:
    """The snapshot's (hooked) client and another replica's."""
    reader = cast(_WritesBetweenReplies, _WritesBetweenReplies.from_url(redis_url))
    writer = aioredis.from_url(redis_url)
    yield reader, writer
    await reader.aclose()
    await writer.aclose()


def _outcome(i: int, arm: str) -> Outcome:
    return Outcome("exp", arm, f"r{i}", error=i % 7 == 0, ttft_ms=100.0 + i, e2e_ms=900.0 + i,
                   cost_usd=0.001)


def _torn(data: ExperimentData, metrics: tuple[str, ...]) -> list[str]:
    """Where counts and values disagree (empty for a snapshot of one instant)."""
    problems = []
    for name, arm in data.arms.items():
        counts = {m: arm.samples(m).count for m in metrics}
        if len(set(counts.values())) != 1:
            problems.append(f"{name}: counts differ between metrics {counts}")
        for metric in metrics:
            samples = arm.samples(metric)
            if len(samples.recent) != samples.count:
                problems.append(f"{name}/{metric}: count {samples.count}, "
                                f"{len(samples.recent)} recent values")
    return problems


async def _written_during_snapshot(
    hooked: tuple[_WritesBetweenReplies, aioredis.Redis], windows: dict[str, int] | None,
) -> tuple[ExperimentData, int]:
    """A snapshot read while another replica records an outcome after every reply; returns
    it and the number of outcomes written during it."""
    reader, writer = hooked
    prefix = f"t-{uuid.uuid4().hex}"
    store = RedisOutcomeStore(reader, random.Random(0), prefix=prefix, reservoir_size=1000,
                              window_size=1000)
    replica = RedisOutcomeStore(writer, random.Random(1), prefix=prefix, reservoir_size=1000,
                                window_size=1000)
    for i in range(20):
        await replica.record(_outcome(i, ("control", "cheap")[i % 2]))
    written = 0

    async def another_outcome() -> None:
        nonlocal written
        written += 1
        await replica.record(_outcome(100 + written, ("control", "cheap")[written % 2]))

    reader.hook = another_outcome
    try:
        data = await store.snapshot("exp", windows)
    finally:
        reader.hook = None
    return data, written


async def test_a_guardrail_snapshot_is_one_instant(
    hooked: tuple[_WritesBetweenReplies, aioredis.Redis],
) -> None:
    """Outcomes written while a guardrail pass reads (its windows larger than the counts) never
    put a value in an arm's window that its count does not hold. It read an arm's counts, then
    its windows in another call: the outcome written between them was in the window, not the
    count (`control/error: count 11, 12 recent values`)."""
    data, written = await _written_during_snapshot(hooked, dict.fromkeys(METRICS, 1000))
    assert written > 0  # the hook did write during the snapshot
    assert set(data.arms) == {"control", "cheap"}
    assert _torn(data, METRICS) == []


async def test_a_full_snapshot_is_one_instant(
    hooked: tuple[_WritesBetweenReplies, aioredis.Redis],
) -> None:
    """The same for the report's full snapshot: every metric of every arm read at one instant,
    reservoirs included, though it first has to find the arms and metrics."""
    data, written = await _written_during_snapshot(hooked, None)
    assert written > 0
    assert set(data.arms) == {"control", "cheap"}
    assert _torn(data, METRICS) == []
    for arm in data.arms.values():
        assert all(len(arm.samples(m).reservoir) == arm.samples(m).count for m in METRICS)


async def test_an_arm_and_a_metric_new_since_the_last_snapshot_are_read_in_the_same_instant(
    hooked: tuple[_WritesBetweenReplies, aioredis.Redis],
) -> None:
    """A snapshot's transaction names the keys it reads, those of the arms and metrics the last
    snapshot saw: an arm first recorded since, and a first feedback metric, are read again
    with the others, at one instant, while outcomes keep landing between the replies."""
    reader, writer = hooked
    prefix = f"t-{uuid.uuid4().hex}"
    store = RedisOutcomeStore(reader, random.Random(0), prefix=prefix)
    replica = RedisOutcomeStore(writer, random.Random(1), prefix=prefix)
    await replica.record(_outcome(0, "control"))
    assert set((await store.snapshot("exp")).arms) == {"control"}
    await replica.record(_outcome(1, "late"))
    await replica.record_feedback(Exposure("exp", "late"), Feedback("r1", "thumbs_up", 1.0))
    written = 0

    async def another_outcome() -> None:
        nonlocal written
        written += 1
        await replica.record(_outcome(10 + written, ("control", "late")[written % 2]))

    reader.hook = another_outcome
    try:
        data = await store.snapshot("exp")
    finally:
        reader.hook = None
    assert written > 1  # the first reply found the new arm: read again
    assert set(data.arms) == {"control", "late"}
    assert _torn(data, METRICS) == []
    thumbs = data.arm("late").samples("thumbs_up")
    assert (thumbs.count, thumbs.recent) == (1, (1.0,))
