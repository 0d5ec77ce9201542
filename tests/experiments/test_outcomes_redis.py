"""The Redis outcome store shared by two service instances, against a real redis-server."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from policies.experiments.schema import ExperimentSpec
from router.experiments.outcomes import Feedback, Halt, MemoryOutcomeStore, Outcome
from router.experiments.outcomes_redis import RedisOutcomeStore
from tests.experiments.support import make_spec

pytestmark = pytest.mark.integration
NOW = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    """Two independent connections, as two replicas would hold."""
    a, b = aioredis.from_url(redis_url), aioredis.from_url(redis_url)
    yield a, b
    await a.aclose()
    await b.aclose()


def _outcomes(n: int) -> list[Outcome]:
    rng = random.Random(7)
    return [Outcome("exp", rng.choice(["control", "cheap"]), f"r{i}", error=rng.random() < 0.1,
                    ttft_ms=rng.lognormvariate(6, 0.5), e2e_ms=rng.lognormvariate(7, 0.5),
                    cost_usd=rng.random() / 100) for i in range(n)]


async def test_two_instances_share_counts_and_agree_with_memory(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """Outcomes written through two instances add up exactly like one in-memory store."""
    prefix = f"t-{uuid.uuid4().hex}"
    stores = [RedisOutcomeStore(c, random.Random(i), prefix=prefix, reservoir_size=100,
                                window_size=30) for i, c in enumerate(clients)]
    memory = MemoryOutcomeStore(random.Random(0), reservoir_size=100, window_size=30)
    outcomes = _outcomes(400)
    for i, outcome in enumerate(outcomes):
        await stores[i % 2].record(outcome)
        await memory.record(outcome)
    shared, local = await stores[0].snapshot("exp"), await memory.snapshot("exp")
    assert shared == await stores[1].snapshot("exp")
    assert shared.arms.keys() == local.arms.keys()
    for arm in local.arms:
        for metric in ("ttft_ms", "e2e_ms", "cost_usd", "error"):
            got, want = shared.arm(arm).samples(metric), local.arm(arm).samples(metric)
            assert got.count == want.count
            assert got.total == pytest.approx(want.total)
            assert got.total_sq == pytest.approx(want.total_sq)
            assert len(got.reservoir) == min(100, want.count)
            assert got.recent == pytest.approx(want.recent)


async def test_feedback_and_halts_are_seen_by_the_other_instance(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """A request recorded on one replica takes feedback once, and halts are first-wins."""
    prefix = f"t-{uuid.uuid4().hex}"
    one, two = (RedisOutcomeStore(c, random.Random(0), prefix=prefix) for c in clients)
    await one.record(Outcome("exp", "cheap", "req-1", error=False, ttft_ms=120.0))
    exposure = await two.exposure("req-1")
    assert exposure is not None and exposure.arm == "cheap"
    assert await two.record_feedback(exposure, Feedback("req-1", "thumbs_up", 1.0))
    assert not await one.record_feedback(exposure, Feedback("req-1", "thumbs_up", 0.0))
    halt = Halt("cheap", "error_rate", "too many errors", 120, 0.2, 0.05, NOW)
    assert await one.halt("exp", halt)
    assert not await two.halt("exp", Halt("cheap", "cost_per_request", "x", 1, 1.0, 0.1, NOW))
    snapshot = await two.snapshot("exp")
    assert snapshot.halts == (halt,)
    assert snapshot.arm("cheap").samples("thumbs_up").mean == 1.0


async def test_an_arm_whose_route_changed_starts_afresh_and_keeps_data_otherwise(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """Shared outcomes and halts belong to the experiment's treatment: after a restart with an
    arm's route changed, the arm is neither halted nor credited with the old route's outcomes;
    a changed guardrail (or metric, or date) keeps them."""
    prefix = f"t-{uuid.uuid4().hex}"
    arms = [{"name": "control", "route": "policy:chat", "control": True, "share": 0.5},
            {"name": "cheap", "route": "model:dead", "share": 0.5}]
    before = make_spec(arms=arms)
    moved = make_spec(arms=[arms[0], {**arms[1], "route": "model:small"}])
    guarded = make_spec(arms=arms, guardrails=[{"kind": "error_rate", "max_rate": 0.2}])
    assert before.treatment_version == guarded.treatment_version != moved.treatment_version

    def store(spec: ExperimentSpec) -> RedisOutcomeStore:
        return RedisOutcomeStore(clients[0], random.Random(0), prefix=prefix,
                                 versions={spec.name: spec.treatment_version})

    first = store(before)
    for i in range(5):
        await first.record(Outcome(before.name, "cheap", f"r{i}", error=True, ttft_ms=10.0))
    assert await first.halt(before.name, Halt("cheap", "error_rate", "errors", 5, 1.0, 0.2, NOW))
    fresh = await store(moved).snapshot(moved.name)
    assert fresh.halts == () and "cheap" not in fresh.arms
    kept = await store(guarded).snapshot(guarded.name)
    assert len(kept.halts) == 1 and kept.arm("cheap").samples("error").count == 5
