"""A cache hit costs its arm nothing, and counts so in the arm's cost per request.

An experiment (unit user) on a router with the result cache on; one user sends the same
temperature-0 request six times: the first is answered upstream and billed, the other five are
cache hits. The arm's `cost_mean_usd` is the one bill over six requests. Before, the hits were
left out (the mean was the bill itself), so an arm whose route caches better got no credit.

Real processes: the package's simulator and a router of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.experiments_service.support import (
    AUTH,
    TENANT_ENV,
    arm_of,
    client,
    router_yaml,
    wait_for_counts,
)
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

EXPERIMENT = """  - name: cached
    tasks: [classification]
    unit: user
    salt: cached-1
    arms:
      - {name: control, route: "model:instant-b", control: true, share: 0.5}
      - {name: other, route: "model:instant-c", share: 0.5}"""
SENDS = 6


@pytest.fixture(scope="module")
def router(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yaml = router_yaml(sim.base_url, ["instant-b", "instant-c"], ["instant-b", "instant-c"], {},
                       EXPERIMENT)
    yaml = yaml.replace("    candidates: [instant-b, instant-c]\n  tasks:",
                        "    candidates: [instant-b, instant-c]\n    cache: {enabled: true}\n"
                        "  tasks:")
    yaml = yaml.replace("    backend: none", "    backend: disk")
    running = start_router(tmp_path_factory.mktemp("cache-hit-cost"), yaml, env=TENANT_ENV)
    yield running
    running.stop()


async def test_cache_hits_count_as_free_requests_of_their_arm(router: Running) -> None:
    body = {"model": "auto", "temperature": 0, "max_tokens": 8, "user": "u-1",
            "messages": [{"role": "user", "content": "classify: a river or a mountain?"}]}
    async with client(router.base_url) as http:
        statuses, arms, usages = [], set(), []
        for _ in range(SENDS):
            response = await http.post("/v1/chat/completions", json=body,
                                       headers={**AUTH, "x-slorouter-task": "classification"})
            statuses.append(response.headers.get("x-slorouter-cache"))
            arms.add(response.headers["x-slorouter-arm"].split("/")[1])
            usages.append(response.json()["usage"])
        assert statuses == ["miss"] + ["hit"] * (SENDS - 1)
        (arm,) = arms
        rep = await wait_for_counts(http, "cached", {arm: SENDS})
    # the one upstream answer, at the deployments' $1 / $2 per million tokens
    billed = (usages[0]["prompt_tokens"] * 1.0 + usages[0]["completion_tokens"] * 2.0) / 1e6
    served = arm_of(rep, arm)
    assert served["requests"] == SENDS
    assert served["cost_mean_usd"] == pytest.approx(billed / SENDS)
