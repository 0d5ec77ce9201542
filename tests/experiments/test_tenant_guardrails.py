"""An error-rate halt is attributed to tenants as a breaker opening is.

For each tenant with errors on an arm, while the arm served another tenant within the
guardrail's window, the guardrail must also fire without that tenant's outcomes: one tenant's
failures alone halt nothing; an arm failing for everyone, or used by one tenant alone, is
halted as before. The stores keep each tenant's share of an arm's errors (`TenantErrors`); the
Redis store's agrees with the memory store's.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from router.experiments.guardrails import check_guardrail
from router.experiments.monitor import enforce_guardrails
from router.experiments.outcomes import (
    NO_TENANTS,
    MemoryOutcomeStore,
    Outcome,
    OutcomeStore,
    tenant_tag,
)
from router.experiments.outcomes_redis import RedisOutcomeStore
from tests.experiments.support import make_spec

NOW = datetime(2025, 6, 1, tzinfo=UTC)
WINDOW = 100
SPEC = make_spec(guardrails=[{"kind": "error_rate", "max_rate": 0.05, "min_sample": 30,
                              "window": WINDOW}])


async def _record(store: OutcomeStore, outcomes: Sequence[tuple[str, bool]],
                  arm: str = "cheap") -> None:
    for number, (tenant, error) in enumerate(outcomes):
        await store.record(Outcome(SPEC.name, arm, f"{tenant}-{number}-{uuid.uuid4().hex[:6]}",
                                   error=error, tenant=tenant))


async def _halted(outcomes: Sequence[tuple[str, bool]]) -> bool:
    store = MemoryOutcomeStore(random.Random(0))
    await _record(store, outcomes)
    return bool(await enforce_guardrails(SPEC, store, NOW))


async def test_one_tenants_failures_alone_halt_nothing_while_the_others_are_served() -> None:
    """A served 30 times, then B's 40 requests all fail: 57% errors, all of them B's."""
    assert not await _halted([("a", False)] * 30 + [("b", True)] * 40)
    # interleaved, and a blip of A's among them
    assert not await _halted([("a", False), ("b", True)] * 40 + [("a", True)])


async def test_the_same_failures_halt_the_arm_without_tenants_kept_apart() -> None:
    """The arm's data without each tenant's share (as recorded before tenants were kept)
    halts as it always did."""
    store = MemoryOutcomeStore(random.Random(0))
    await _record(store, [("a", False)] * 30 + [("b", True)] * 40)
    data = await store.snapshot(SPEC.name, {"error": WINDOW})
    arm = data.arm("cheap")
    assert arm.tenants.counts == {tenant_tag("a"): (30, 0), tenant_tag("b"): (40, 40)}
    assert check_guardrail(SPEC, SPEC.guardrails[0], arm, NOW) is None
    pooled = type(arm)(arm=arm.arm, metrics=arm.metrics, tenants=NO_TENANTS)
    assert check_guardrail(SPEC, SPEC.guardrails[0], pooled, NOW) is not None


async def test_an_arm_failing_for_every_tenant_is_halted() -> None:
    healthy = [("a", False), ("b", False)] * 20
    failing = [("a", True), ("b", True)] * 15
    assert await _halted(healthy + failing)


async def test_an_arm_one_tenant_uses_alone_is_halted_on_its_failures() -> None:
    """A was served long ago, out of the window: B's failures are all the arm has now."""
    assert await _halted([("a", False)] * 30 + [("b", False)] * 80 + [("b", True)] * 40)
    assert await _halted([("b", True)] * 40)


async def test_old_failures_of_one_tenant_do_not_halt_the_arm_it_serves_others_on() -> None:
    """B's 200 failures, then A served 150 times: the window holds only A's answers, the
    whole arm 57% errors, all B's."""
    assert not await _halted([("b", True)] * 200 + [("a", False)] * 150)


async def test_the_memory_store_keeps_a_window_of_tenants_and_only_for_guardrail_reads(
) -> None:
    store = MemoryOutcomeStore(random.Random(0), window_size=5)
    await _record(store, [("a", False), ("b", True)] * 4)
    data = await store.snapshot(SPEC.name, {"error": 3})
    tenants = data.arm("cheap").tenants
    a, b = tenant_tag("a"), tenant_tag("b")
    assert tenants.counts == {a: (4, 0), b: (4, 4)}
    assert tenants.recent == ((b, 1), (a, 0), (b, 1))
    assert (await store.snapshot(SPEC.name)).arm("cheap").tenants == NO_TENANTS
    assert (await store.snapshot(SPEC.name, {})).arm("cheap").tenants == NO_TENANTS


@pytest.mark.integration
async def test_the_redis_store_keeps_the_same_as_the_memory_store(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    try:
        shared = RedisOutcomeStore(client, random.Random(1), prefix=f"t-{uuid.uuid4().hex}",
                                   window_size=50)
        memory = MemoryOutcomeStore(random.Random(1), window_size=50)
        rng = random.Random(2)
        outcomes = [(rng.choice("abc"), rng.random() < 0.3) for _ in range(120)]
        for store in (shared, memory):
            await _record(store, outcomes)
            await _record(store, outcomes[:10], arm="control")
        for n in (1, 20, 50):
            got = await shared.snapshot(SPEC.name, {"error": n})
            want = await memory.snapshot(SPEC.name, {"error": n})
            for arm in ("cheap", "control"):
                assert got.arm(arm).tenants == want.arm(arm).tenants, (arm, n)
        assert (await shared.snapshot(SPEC.name)).arm("cheap").tenants == NO_TENANTS
        halted = await enforce_guardrails(SPEC, shared, NOW)
        assert halted == await enforce_guardrails(SPEC, memory, NOW)
    finally:
        await client.aclose()
