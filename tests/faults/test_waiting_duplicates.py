"""A duplicate waiting on an `Idempotency-Key` holds an admission slot only while its client
is there (real router and simulator, a pool of two with no queue)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.scenarios import (
    TENANT_ENV,
    Call,
    Dep,
    Shot,
    SimCounters,
    chat_body,
    interactive_pool,
    router_yaml,
    run,
    send,
)
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

RELIABILITY = interactive_pool(2, 0, 0.5)


def _router(sim: Running, tmp_path_factory: pytest.TempPathFactory,
            reliability: str) -> Iterator[Running]:
    """A router with `long` and `capacity` and the interactive pool `reliability` sets."""
    deps = [Dep("long", "long"), Dep("capacity", "capacity")]
    config = router_yaml(sim.base_url, deps, {"long": ["long"], "capacity": ["capacity"]},
                         reliability)
    running = start_router(tmp_path_factory.mktemp("duplicates-router"), config,
                           env=TENANT_ENV)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from _router(sim, tmp_path_factory, RELIABILITY)


async def _scenario(base: str) -> tuple[Shot, bool, Shot]:
    """The original (a 2.5 s answer) with key K; at 0.2 s a duplicate whose client gives up
    at 0.5 s; at 1.0 s an unrelated request, which needs the duplicate's slot."""
    key = {"idempotency-key": f"waiting-{uuid.uuid4()}"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http, \
            httpx.AsyncClient(base_url=base, timeout=0.3) as impatient:
        original = asyncio.create_task(send(http, Call(chat_body("long"), key)))
        await asyncio.sleep(0.2)
        duplicate = await send(impatient, Call(chat_body("long"), key))
        gave_up = duplicate.status == 0  # a transport error: the client timed out and left
        await asyncio.sleep(0.5)
        unrelated = await send(http, Call(chat_body("capacity")))
        return await original, gave_up, unrelated


def test_a_duplicate_whose_client_left_frees_its_admission_slot(
        gateway: Running, counters: SimCounters) -> None:
    """The duplicate's client leaves while it waits for the original: its slot is free again
    at once, so an unrelated request is admitted (it was refused `overloaded` for as long as
    the original ran), and the original's answer still completes and is kept for the key."""
    before = counters.value("long")
    original, gave_up, unrelated = run(_scenario(gateway.base_url))
    assert gave_up
    assert unrelated.ok, (unrelated.status, unrelated.error_code)
    assert original.ok
    assert counters.value("long") - before == 1  # the duplicate never ran


QUEUEING = interactive_pool(2, 1, 5)


@pytest.fixture(scope="module")
def queueing_gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from _router(sim, tmp_path_factory, QUEUEING)


async def _queue_scenario(base: str) -> tuple[list[Shot], bool, Shot]:
    """Two 2.5 s answers fill both slots; at 0.2 s a request queues and its client leaves at
    0.5 s; at 0.8 s another request needs the one queue place."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http, \
            httpx.AsyncClient(base_url=base, timeout=0.3) as impatient:
        running = [asyncio.create_task(send(http, Call(chat_body("long")))) for _ in range(2)]
        await asyncio.sleep(0.2)
        left = await send(impatient, Call(chat_body("capacity")))
        await asyncio.sleep(0.3)
        patient = await send(http, Call(chat_body("capacity")))
        return list(await asyncio.gather(*running)), left.status == 0, patient


def test_a_queued_request_whose_client_left_gives_up_its_place_and_is_never_sent(
        queueing_gateway: Running, counters: SimCounters) -> None:
    """A client that leaves while its request waits in the admission queue frees its place at
    once (the next request queued behind it was refused `overloaded`), and its request never
    reaches the upstream once a slot frees (it was sent, then cancelled)."""
    before = counters.value("capacity")
    originals, left, patient = run(_queue_scenario(queueing_gateway.base_url))
    assert left
    assert all(shot.ok for shot in originals)
    assert patient.ok, (patient.status, patient.error_code)
    assert counters.value("capacity") - before == 1  # the patient request's call alone
