"""Idempotency-Key duplicates are not experiment outcomes: the arm ran once.

Two routers share one `redis-server` for experiment outcomes and Idempotency-Key records (as
replicas behind a load balancer), plus a third whose idempotency Redis does not answer. An
experiment on `classification` (unit user) splits users between two steady models. A keyed
request sent to replica A and repeated at replica B (after it completed, and concurrently)
runs once and is counted once; a keyed request refused because the idempotency store is down
(503 `idempotency_store_unavailable`) is counted not at all. Before, every replay counted as a
request of the arm (3 sends, 1 execution: 3 requests with 0 cost for two of them), and every
such 503 as an arm error, so a Redis blip could push a healthy arm past its error guardrail.
Feedback is taken on the first answer's request id only: a replay is that answer under a new
id, and its feedback was credited (a second time) to the arm the new id was assigned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.experiments_service.support import (
    AUTH,
    TENANT_ENV,
    chat_body,
    client,
    feedback,
    feedback_when_exposed,
    report,
    requests_by_arm,
    router_yaml,
    sim_requests,
    wait_for_counts,
)
from tests.support.procs import free_port
from tests.support.redis_server import start_redis
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

EXPERIMENT = """  - name: dup
    tasks: [classification]
    unit: user
    salt: dup-1
    arms:
      - {name: control, route: "model:instant-b", control: true, share: 0.5}
      - {name: other, route: "model:instant-c", share: 0.5}
    metrics:
      - {name: thumbs_up, kind: binary}"""
USERS = 8


@pytest.fixture(scope="module")
def replicas(sim: Running, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Running, Running, Running]]:
    directory = tmp_path_factory.mktemp("idempotent-duplicates")
    with ExitStack() as started:
        redis = start_redis(directory)
        started.callback(redis.stop)
        url = f"redis://127.0.0.1:{redis.port}/0"

        def config(idempotency_url: str) -> str:
            yaml = router_yaml(sim.base_url, ["instant-b", "instant-c"],
                               ["instant-b", "instant-c"], {}, EXPERIMENT,
                               experiments_redis_url=url)
            return yaml.replace("  experiments_redis_url:",
                                f"  idempotency_redis_url: {idempotency_url}\n"
                                "  experiments_redis_url:")

        routers = []
        for name, idempotency_url in (("a", url), ("b", url),
                                      ("down", f"redis://127.0.0.1:{free_port()}/0")):
            router = start_router(directory, config(idempotency_url), env=TENANT_ENV,
                                  name=f"replica-{name}")
            started.callback(router.stop)
            routers.append(router)
        yield routers[0], routers[1], routers[2]


async def _send(http: httpx.AsyncClient, user: str, key: str) -> httpx.Response:
    body = {**chat_body(f"classify {key}: a river or a mountain?", user=user), "stream": False}
    return await http.post("/v1/chat/completions", json=body,
                           headers={**AUTH, "x-slorouter-task": "classification",
                                    "idempotency-key": key})


async def _run(a: Running, b: Running, down: Running, sim_base: str) -> None:
    async with client(a.base_url) as at_a, client(b.base_url) as at_b, \
            client(down.base_url) as at_down:
        before = requests_by_arm(await report(at_a, "dup"))
        upstream = [await sim_requests(sim_base, m) for m in ("instant-b", "instant-c")]
        arms: dict[str, int] = {}
        for n in range(USERS):
            user, key = f"dup-user-{n}", f"dup-key-{n}"
            first = await _send(at_a, user, key)
            again = await asyncio.gather(_send(at_b, user, key), _send(at_a, user, key))
            assert first.status_code == 200 and [r.status_code for r in again] == [200, 200]
            assert [r.headers.get("x-slorouter-idempotent-replay") for r in again] == \
                ["true", "true"]
            arm = first.headers["x-slorouter-arm"].partition("/")[2]
            assert {r.headers["x-slorouter-arm"] for r in again} == {f"dup/{arm}"}
            arms[arm] = arms.get(arm, 0) + 1
            on_first = await feedback_when_exposed(at_a, first.headers["x-request-id"],
                                                   "thumbs_up", 1)
            assert on_first.status_code == 200, on_first.text
            for replay in again:
                assert replay.headers["x-request-id"] != first.headers["x-request-id"]
                on_replay = await feedback(at_a, replay.headers["x-request-id"], "thumbs_up", 1)
                assert on_replay.status_code == 404, on_replay.text
            refused = await _send(at_down, user, f"dup-down-{n}")
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "idempotency_store_unavailable"
        assert [await sim_requests(sim_base, m) for m in ("instant-b", "instant-c")] == \
            [upstream[0] + arms.get("control", 0), upstream[1] + arms.get("other", 0)]
        expected = {arm: before.get(arm, 0) + count for arm, count in arms.items()}
        await wait_for_counts(at_a, "dup", expected)
        await asyncio.sleep(0.5)  # any outcome still to come (a replay's) has landed by now
        for http in (at_a, at_b):
            rep = await report(http, "dup")
            assert requests_by_arm(rep) == {**{a: 0 for a in requests_by_arm(rep)},
                                            **expected}
            assert all(arm["error_rate"] == 0.0 for arm in rep["arms"]), rep["arms"]


def test_duplicates_at_other_replicas_and_refused_keys_are_no_outcomes(
        replicas: tuple[Running, Running, Running], sim: Running) -> None:
    asyncio.run(_run(*replicas, sim.base_url))
