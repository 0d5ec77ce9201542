"""A tenant flooding the queue does not keep another tenant's request waiting behind it.

A router with 2 interactive slots and a queue of 3, in front of a simulator model that answers
in 2.5 s. Tenant `flood` sends five requests (two run, three queue, alone it may fill both); a
moment later tenant `other` sends one: the queue is full, so `flood`'s newest queued request is
refused (429) to make room. The first slot freed must go to `other`, which runs nothing, not to
`flood`'s older queued requests: with plain FIFO `other` waited out all of them (and, with a
shorter `max_queue_wait_s`, timed out while `flood` was served). Asserted on the order in which
the answers end, 2.5 s apart, not on timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.scenarios import (
    API_KEY,
    Dep,
    interactive_pool,
    router_yaml,
    start_with_second_tenant,
    varied_body,
)
from tests.support.services import Running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OTHER_KEY = "sk-faults-other-tenant"
RELIABILITY = interactive_pool(2, 3, 20)


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    config = router_yaml(sim.base_url, [Dep("long", "long")], {"long": ["long"]}, RELIABILITY,
                         request_timeout_s=30.0)
    running = start_with_second_tenant(tmp_path_factory.mktemp("fairness-router"), config,
                                       "other", OTHER_KEY)
    yield running
    running.stop()


async def _flood_then_other(base_url: str) -> list[tuple[str, int, str | None]]:
    """Every request's (name, status, error code), in the order their answers ended."""
    ended: list[tuple[str, int, str | None]] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        async def send(name: str, key: str) -> None:
            response = await client.post("/v1/chat/completions", json=varied_body("long"),
                                         headers={"authorization": f"Bearer {key}"})
            code = response.json()["error"]["code"] if response.status_code != 200 else None
            ended.append((name, response.status_code, code))

        tasks = []
        for n in range(5):
            tasks.append(asyncio.create_task(send(f"flood-{n}", API_KEY)))
            await asyncio.sleep(0.05)  # in this order into the queue
        await asyncio.sleep(0.5)
        tasks.append(asyncio.create_task(send("other", OTHER_KEY)))
        await asyncio.gather(*tasks)
    return ended


def test_a_freed_slot_goes_to_the_tenant_running_nothing_before_a_floods_queue(
        gateway: Running) -> None:
    ended = asyncio.run(_flood_then_other(gateway.base_url))
    statuses = {name: (status, code) for name, status, code in ended}
    assert statuses["flood-4"] == (429, "tenant_over_share"), ended  # made room for `other`
    assert all(statuses[name] == (200, None) for name in
               ("flood-0", "flood-1", "flood-2", "flood-3", "other")), ended
    order = [name for name, status, _ in ended if status == 200]
    # flood-0/1 end first; then `other` and flood-2 took the freed slots; flood-3 ran last.
    assert order.index("other") < order.index("flood-3"), ended
