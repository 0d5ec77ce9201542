"""Admission control: bounded queues per priority, tenant fair share, fast rejections."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import pytest

from router.admission import (
    Admission,
    AdmissionController,
    AdmissionPolicy,
    PoolLimits,
    Priority,
    parse_priority,
)
from router.errors import OverloadedError, RequestError, SlorouterError, TenantRateLimitedError
from tests.reliability.fakes import FakeClock

E = TypeVar("E", bound=SlorouterError)
SMALL = PoolLimits(max_concurrency=2, max_queue=2, max_queue_wait_s=5.0)


def controller(clock: FakeClock | None = None, limits: PoolLimits = SMALL) -> AdmissionController:
    pools: dict[Priority, PoolLimits] = {"interactive": limits, "background": limits}
    return AdmissionController(AdmissionPolicy(pools), clock if clock is not None else FakeClock())


class Holder:
    """Requests that enter admission in the background and hold their slot until released."""

    def __init__(self, admission: AdmissionController) -> None:
        self.admission = admission
        self.release = asyncio.Event()
        self.tickets: list[Admission] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def _hold(self, tenant: str, priority: Priority) -> None:
        async with self.admission.admit(tenant, priority) as ticket:
            self.tickets.append(ticket)
            await self.release.wait()

    async def start(self, tenant: str, priority: Priority = "interactive") -> asyncio.Task[None]:
        task = asyncio.ensure_future(self._hold(tenant, priority))
        self.tasks.append(task)
        await asyncio.sleep(0)  # let it reach its slot or its queue position
        return task


async def refusal(admission: AdmissionController, tenant: str,
                  error: type[E]) -> E:
    """The rejection that `tenant`'s next interactive request gets."""
    with pytest.raises(error) as caught:
        async with admission.admit(tenant, "interactive"):
            pass
    return caught.value


async def test_free_slot_admits_at_once_without_queue_time() -> None:
    """With a free slot the request enters immediately and reports no queueing."""
    async with controller().admit("t1", "interactive") as ticket:
        assert not ticket.queued
        assert ticket.queue_time_s == 0.0


async def test_queued_requests_enter_in_fifo_order_with_measured_queue_time() -> None:
    """Waiters are admitted first-in first-out, and their queue time is measured."""
    clock = FakeClock()
    holder = Holder(controller(clock, PoolLimits(1, 3, 60.0)))
    await holder.start("t0")
    for tenant in ("t1", "t2", "t3"):
        await holder.start(tenant)
    clock.advance(2.0)
    holder.release.set()
    await asyncio.gather(*holder.tasks)
    assert [t.tenant for t in holder.tickets] == ["t0", "t1", "t2", "t3"]
    assert holder.tickets[1].queued and holder.tickets[1].queue_time_s == pytest.approx(2.0)


async def test_a_freed_slot_goes_to_the_oldest_waiter_of_the_tenant_running_least() -> None:
    """FIFO among equals, but a tenant running nothing is not kept behind another's queue."""
    holder = Holder(controller(limits=PoolLimits(2, 4, 60.0)))
    for _ in range(5):
        await holder.start("flood")  # two run, three queue
    await holder.start("other")
    holder.release.set()
    await asyncio.gather(*holder.tasks)
    assert [t.tenant for t in holder.tickets] == ["flood"] * 2 + ["other"] + ["flood"] * 3


async def test_full_queue_rejects_at_once_with_503_and_retry_after() -> None:
    """When slots and queue are full, a new request is refused immediately with 503."""
    holder = Holder(controller())
    for tenant in ("a", "b", "c", "d"):
        await holder.start(tenant)
    with pytest.raises(OverloadedError) as caught:
        async with holder.admission.admit("e", "interactive"):
            pass
    assert caught.value.status_code == 503
    assert caught.value.retry_after is not None and caught.value.retry_after >= 1.0
    holder.release.set()
    await asyncio.gather(*holder.tasks)


async def test_lone_tenant_filling_everything_is_overload_503_not_429() -> None:
    """With no other tenant waiting, a full class is overload (503), not a share breach (429)."""
    holder = Holder(controller())
    for _ in range(4):
        await holder.start("alone")
    with pytest.raises(OverloadedError) as caught:
        async with holder.admission.admit("alone", "interactive"):
            pass
    assert caught.value.status_code == 503 and caught.value.retry_after is not None
    holder.release.set()
    await asyncio.gather(*holder.tasks)


async def test_tenant_over_its_share_gets_429_and_yields_room_to_others() -> None:
    """A tenant filling the class is cut back to its fair share when another tenant arrives."""
    holder = Holder(controller())
    for _ in range(4):
        await holder.start("greedy")
    await holder.start("modest")  # evicts greedy's newest queued request
    evicted = holder.tasks[3]
    await asyncio.wait([evicted], timeout=5.0)
    assert evicted.done() and isinstance(evicted.exception(), TenantRateLimitedError)
    with pytest.raises(TenantRateLimitedError) as caught:
        async with holder.admission.admit("greedy", "interactive"):
            pass
    assert caught.value.status_code == 429 and caught.value.retry_after is not None
    holder.release.set()
    await asyncio.gather(*holder.tasks[:3], holder.tasks[4])
    assert "modest" in [t.tenant for t in holder.tickets]


async def test_a_full_queue_evicts_a_tenant_over_its_share_that_has_requests_queued() -> None:
    """`noisy` runs all six slots (nothing queued), `q1` has five queued; `q2` arrives at the
    full queue. The victim is q1's newest queued request (q1 holds 5, over the share of 4),
    not noisy, the most over but with nothing to evict: q2 was refused a 503 while q1's
    requests waited (the overload audit of 2026-12-07)."""
    holder = Holder(controller(limits=PoolLimits(max_concurrency=6, max_queue=5,
                                                 max_queue_wait_s=5.0)))
    for _ in range(6):
        await holder.start("noisy")
    for _ in range(5):
        await holder.start("q1")
    newcomer = await holder.start("q2")
    evicted = holder.tasks[10]  # q1's newest
    await asyncio.wait([evicted], timeout=5.0)
    assert evicted.done() and isinstance(evicted.exception(), TenantRateLimitedError)
    assert not newcomer.done()  # queued, not refused
    holder.release.set()
    await asyncio.gather(*holder.tasks[:10], newcomer)
    assert "q2" in [t.tenant for t in holder.tickets]


async def test_a_tenant_at_its_cap_is_refused_while_others_still_get_slots() -> None:
    """With `max_concurrency_per_tenant`, one tenant's long requests cannot hold every slot:
    at the cap (running and queued alike) its next request is a 429 at once, and another
    tenant's request is admitted at once (without the cap it would wait for a slot)."""
    capped = PoolLimits(max_concurrency=4, max_queue=4, max_queue_wait_s=5.0,
                        max_concurrency_per_tenant=3)
    holder = Holder(controller(limits=capped))
    for _ in range(3):
        await holder.start("greedy")
    refused = await refusal(holder.admission, "greedy", TenantRateLimitedError)
    assert refused.code == "tenant_over_share" and refused.retry_after is not None
    assert "max_concurrency_per_tenant" in refused.message
    await holder.start("modest")
    assert [t.tenant for t in holder.tickets] == ["greedy"] * 3 + ["modest"]
    assert not any(t.queued for t in holder.tickets)
    holder.release.set()
    await asyncio.gather(*holder.tasks)
    async with holder.admission.admit("greedy", "interactive") as ticket:  # slots given back
        assert not ticket.queued


async def test_a_tenant_at_its_cap_is_told_to_retry_when_one_of_its_own_requests_ends() -> None:
    """The Retry-After of a tenant at its cap is about the mean hold over the requests it holds
    (one of them must end), not the pool's drain over every slot: with 10 s holds, 16 slots and
    a cap of 2, 5 s, not the 1 s (10 / 16, clamped) after which an SDK's retries are refused
    again. Other rejections keep the pool's estimate."""
    limits = PoolLimits(max_concurrency=16, max_queue=0, max_queue_wait_s=5.0,
                        max_concurrency_per_tenant=2, initial_hold_s=10.0)
    holder = Holder(controller(limits=limits))
    for _ in range(2):
        await holder.start("greedy")
    refused = await refusal(holder.admission, "greedy", TenantRateLimitedError)
    assert refused.retry_after == pytest.approx(5.0)
    for n in range(14):
        await holder.start(f"other-{n}")
    full = await refusal(holder.admission, "late", OverloadedError)
    assert full.retry_after == pytest.approx(1.0)  # 10 s / 16 slots, raised to the min
    holder.release.set()
    await asyncio.gather(*holder.tasks)


def test_the_per_tenant_cap_is_a_positive_count() -> None:
    with pytest.raises(ValueError, match="max_concurrency_per_tenant"):
        PoolLimits(max_concurrency=4, max_queue=0, max_queue_wait_s=1.0,
                   max_concurrency_per_tenant=0)


async def test_queue_wait_is_bounded_by_the_request_deadline() -> None:
    """A queued request whose deadline runs out is refused with code queue_timeout."""

    class AlmostExpired:
        def remaining(self) -> float:
            return 0.01

    holder = Holder(controller())
    await holder.start("a")
    await holder.start("b")
    with pytest.raises(OverloadedError) as caught:
        async with holder.admission.admit("c", "interactive", AlmostExpired()):
            pass
    assert caught.value.code == "queue_timeout"
    assert holder.admission.snapshot()["interactive"].queued == 0
    holder.release.set()
    await asyncio.gather(*holder.tasks)


async def test_cancelled_waiter_leaves_no_trace() -> None:
    """A client that disconnects while queued frees its queue place and leaks no slot."""
    holder = Holder(controller())
    await holder.start("a")
    await holder.start("b")
    waiter = await holder.start("c")
    waiter.cancel()
    holder.release.set()
    await asyncio.gather(*holder.tasks, return_exceptions=True)
    view = holder.admission.snapshot()["interactive"]
    assert (view.active, view.queued, view.tenants) == (0, 0, 0)


async def test_priorities_have_separate_capacity() -> None:
    """A full background class does not stop interactive requests."""
    holder = Holder(controller())
    for tenant in ("a", "b", "c", "d"):
        await holder.start(tenant, "background")
    async with holder.admission.admit("e", "interactive") as ticket:
        assert not ticket.queued
    holder.release.set()
    await asyncio.gather(*holder.tasks)


async def test_memory_stays_bounded_under_overload() -> None:
    """Thousands of refused requests leave queue and tenant tables within their limits."""
    holder = Holder(controller())
    for tenant in ("a", "b", "c", "d"):
        await holder.start(tenant)
    refused = 0
    for n in range(2000):
        try:
            async with holder.admission.admit(f"tenant-{n}", "interactive"):
                pass
        except (OverloadedError, TenantRateLimitedError):
            refused += 1
    view = holder.admission.snapshot()["interactive"]
    assert refused == 2000
    assert view.queued <= SMALL.max_queue
    assert view.tenants <= SMALL.max_concurrency + SMALL.max_queue
    holder.release.set()
    await asyncio.gather(*holder.tasks, return_exceptions=True)


def test_priority_header_parsing() -> None:
    """Absent means interactive, known values are accepted, anything else is a 400."""
    assert parse_priority(None) == "interactive"
    assert parse_priority(" Background ") == "background"
    with pytest.raises(RequestError):
        parse_priority("urgent")
