"""The experiments' shared Redis goes away and comes back, under a running router.

A router of its own with its own `redis-server` (experiment outcomes and idempotency records
there), the package's simulator, and an experiment on `classification` (unit user): `control`
(the policy: `steady`) against `broken` (`model:meh`, made to fail after the outage) with an
error-rate guardrail. While Redis is down: chat is served, the experiment endpoints answer a
JSON 503 with Retry-After, `/readyz` says what is degraded, and lost writes are logged a few
times, not per request. Once Redis is back the guardrail loop is still running: it halts the
failing arm.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.experiments_service.support import AUTH, TENANT_ENV, client, router_yaml, send
from tests.support.procs import ManagedProcess, free_port
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

EXPERIMENT = """  - name: outage
    tasks: [classification]
    unit: user
    salt: outage-1
    arms:
      - {name: control, route: "model:steady", control: true, share: 0.5}
      - {name: broken, route: "model:meh", share: 0.5}
    metrics:
      - {name: thumbs_up, kind: binary}
    guardrails:
      - {kind: error_rate, max_rate: 0.2, min_sample: 8, window: 30}"""


def _redis(directory: Path, port: int) -> ManagedProcess:
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is needed (apt-get install redis-server)"
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--dir", str(directory)]
    return ManagedProcess(argv, port, log_path=directory / f"redis-{time.time_ns()}.log").start()


@pytest.fixture(scope="module")
def outage(sim: Running, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Running, ManagedProcess, Path]]:
    directory = tmp_path_factory.mktemp("experiments-outage")
    with ExitStack() as started:  # redis stopped even when the router fails to start
        redis = _redis(directory, free_port())
        started.callback(redis.stop)
        url = f"redis://127.0.0.1:{redis.port}/0"
        config = router_yaml(sim.base_url, ["steady", "meh"], ["steady", "meh"], {},
                             EXPERIMENT, experiments_redis_url=url)
        config = config.replace("  experiments_redis_url:", f"  idempotency_redis_url: {url}\n"
                                "  experiments_redis_url:")
        router = start_router(directory, config, env=TENANT_ENV, name="outage")
        started.callback(router.stop)
        yield router, redis, directory


def _get(router: Running, path: str) -> httpx.Response:
    return httpx.get(f"{router.base_url}{path}", headers=AUTH, timeout=10)


def test_an_outage_is_survived_and_the_guardrails_resume(
        outage: tuple[Running, ManagedProcess, Path], sim: Running) -> None:
    router, redis, directory = outage
    with httpx.Client(base_url=router.base_url, timeout=10) as http:
        assert _get(router, "/v1/experiments").status_code == 200
        port = redis.port
        redis.stop()
        time.sleep(0.3)
        reports = _get(router, "/v1/experiments")
        feedback = http.post("/v1/feedback", headers=AUTH, json={
            "request_id": "r-1", "metric": "thumbs_up", "value": 1})
        for response in (reports, feedback):
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "experiments_store_unavailable"
            assert response.headers["retry-after"] == "1"
        ready = _get(router, "/readyz").json()
        assert ready["status"] == "ready"
        degraded = {name: check["detail"] for name, check in ready["checks"].items()}
        assert "unavailable" in degraded["idempotency"]
        assert "unavailable" in degraded["experiments"]

    async def traffic(prefix: str, n: int) -> list[int]:
        async with client(router.base_url) as http_async:
            return [(await send(http_async, "classification", f"{prefix}-{i}",
                                user=f"user-{i}")).status for i in range(n)]

    served = asyncio.run(traffic("down", 12))
    assert served == [200] * 12  # chat does not need the experiments store
    time.sleep(1.2)  # several guardrail passes fail meanwhile
    log = (directory / "outage.log").read_text()
    assert "never retrieved" not in log
    assert 1 <= log.count("experiment_outcome_lost") <= 2
    assert 1 <= log.count("experiment_guardrails_failed") <= 2

    revived = _redis(directory, port)
    try:
        httpx.post(f"{sim.base_url}/control/models/meh", json={"error_rate_500": 1.0},
                   timeout=10).raise_for_status()
        halted = False
        for round_ in range(10):
            asyncio.run(traffic(f"up-{round_}", 10))
            time.sleep(0.7)  # a guardrail pass or more
            rep = _get(router, "/v1/experiments?name=outage").json()["data"][0]
            halted = any(h["arm"] == "broken" and h["persisted"] for h in rep["halts"])
            if halted:
                break
        assert halted, rep
    finally:
        httpx.post(f"{sim.base_url}/control/models/meh", json={"error_rate_500": 0.0},
                   timeout=10)
        revived.stop()
