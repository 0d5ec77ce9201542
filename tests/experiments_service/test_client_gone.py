"""Clients that give up on a slow arm before its first token.

The `slow` arm's model takes about 3 s to its first token; every client waits 0.5 s. Those
requests are the arm's (status 499, no error), and what the client waited is all the arm's
TTFT shows: at least 0.5 s. The arm used to have no TTFT at all for them (no content was
sent), so an arm every client abandoned showed no TTFT, its `p95_ttft_ms` guardrail had
nothing to fire on, and only control had TTFT values to compare.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.experiments_service.support import (
    AUTH,
    TENANT_ENV,
    arm_of,
    chat_body,
    client,
    profile,
    report,
    requests_by_arm,
    router_yaml,
)
from tests.support.services import simulated_gateway

pytestmark = pytest.mark.integration

REQUESTS, PATIENCE_S = 16, 0.5
EXPERIMENT = """  - name: patience
    tasks: [summarization]
    unit: request
    salt: patience-1
    arms:
      - {name: control, route: "model:steady", control: true, share: 0.5}
      - {name: slow, route: "model:slow", share: 0.5}
"""


async def _abandon(base_url: str) -> dict[str, Any]:
    """Send the requests with a client that waits `PATIENCE_S`, then read the report once
    every outcome is in."""
    async with httpx.AsyncClient(base_url=base_url, timeout=PATIENCE_S) as impatient:
        for i in range(REQUESTS):
            headers = {**AUTH, "x-slorouter-task": "summarization", "x-request-id": f"p-{i}"}
            try:
                async with impatient.stream("POST", "/v1/chat/completions", headers=headers,
                                            content=orjson.dumps(chat_body("Sum up: rivers."))
                                            ) as response:
                    async for _ in response.aiter_lines():
                        pass
            except httpx.TimeoutException:
                pass  # the client gave up; the router sees it leave
    async with client(base_url) as http:
        deadline = time.monotonic() + 10.0
        while True:
            rep = await report(http, "patience")
            if sum(requests_by_arm(rep).values()) >= REQUESTS or time.monotonic() > deadline:
                return rep
            await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def abandoned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    def config(sim_base: str) -> str:
        return router_yaml(sim_base, ["steady", "slow"], ["steady"], {}, EXPERIMENT)

    with simulated_gateway(tmp_path_factory.mktemp("client-gone"),
                           {"steady": profile(10), "slow": profile(3000)}, config,
                           TENANT_ENV) as router:
        yield asyncio.run(_abandon(router.base_url))


def test_an_abandoned_request_shows_what_its_client_waited_as_the_arms_ttft(
    abandoned: dict[str, Any],
) -> None:
    """Every request of the slow arm was abandoned before its first token: each is in the
    arm's TTFT, at no less than what the client waited, so the arm's TTFT shows it slow."""
    slow = arm_of(abandoned, "slow")
    ttft = next(s for s in abandoned["sequential"] if s["arm"] == "slow"
                and s["metric"] == "ttft_ms")
    print(f"\nslow arm: {slow['requests']} requests, ttft p50 {slow['ttft_p50_ms']} ms, "
          f"e2e p50 {slow['e2e_p50_ms']} ms; control ttft p50 "
          f"{arm_of(abandoned, 'control')['ttft_p50_ms']} ms")
    assert slow["requests"] > 0 and slow["error_rate"] == 0.0
    assert ttft["n_arm"] == slow["requests"]
    assert slow["ttft_p50_ms"] is not None and slow["ttft_p50_ms"] >= 0.8 * PATIENCE_S * 1e3
    assert slow["ttft_p50_ms"] > arm_of(abandoned, "control")["ttft_p50_ms"]
