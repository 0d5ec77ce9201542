"""`/readyz` over a Redis that is slow, or hung, answers within a readiness probe's timeout,
ready, with the stores that cannot use it listed as degraded.

A real redis-server behind a proxy that holds every chunk for a while each way
(`tests.support.delaying_proxy`), under the result cache and the idempotency store. At 30 ms each
way `/readyz` said `cache: redis` while every cache call failed (its client gives up after 50
ms), and at 60 ms it took 1.5 s, past Kubernetes' default 1 s probe timeout, on every replica
at once (round trips one after another, a new connection per check; the ops audit of
2026-12-07 saw 1.17 s at 25 ms with the experiments store too).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.delaying_proxy import DelayingProxy
from tests.support.procs import ManagedProcess
from tests.support.redis_server import start_redis
from tests.support.services import MINIMAL_CONFIG, Running, start_router

pytestmark = pytest.mark.integration

# A Kubernetes readiness probe's default timeoutSeconds: the deadline `/readyz` must meet (its
# Redis checks have 0.3 s; the rest is margin for a busy machine).
PROBE_TIMEOUT_S = 1.0


@pytest.fixture
def redis_behind_proxy(tmp_path: Path) -> Iterator[tuple[ManagedProcess, DelayingProxy]]:
    server = start_redis(tmp_path)
    try:
        proxy = DelayingProxy(server.port).start()
        try:
            yield server, proxy
        finally:
            proxy.stop()
    finally:
        server.stop()


def _probe(router: Running) -> dict[str, Any]:
    """`/readyz` as a probe reads it: an answer after its timeout is a failed probe (raises)."""
    with urllib.request.urlopen(f"{router.base_url}/readyz",
                                timeout=PROBE_TIMEOUT_S) as answer:
        assert answer.status == 200
        body: dict[str, Any] = json.loads(answer.read())
        return body


def test_readyz_answers_a_probe_in_time_over_a_slow_or_hung_redis(
        tmp_path: Path, redis_behind_proxy: tuple[ManagedProcess, DelayingProxy]) -> None:
    _, proxy = redis_behind_proxy
    url = f"redis://127.0.0.1:{proxy.port}/0"
    router = start_router(tmp_path, MINIMAL_CONFIG + (
        f"server:\n  idempotency_redis_url: '{url}'\n"
        f"  cache: {{backend: redis, redis_url: '{url}'}}\n"))
    try:
        assert _probe(router)["degraded"] == []
        proxy.delay_s = 0.03  # a round trip of 60 ms: past the cache's 50 ms, fine for the rest
        slow = [_probe(router) for _ in range(5)]
        proxy.delay_s = 0.06  # the old checks, one after another, took 1.5 s
        slower = [_probe(router) for _ in range(3)]
        proxy.delay_s = 3600.0  # hung: connections open, nothing answered
        hung = [_probe(router) for _ in range(2)]
    finally:
        router.stop()
    for body in slow + slower:
        assert body["status"] == "ready" and "cache" in body["degraded"], body
        assert body["checks"]["cache"]["detail"] == (
            "redis slow: no answer to PING within the store's own timeout: serving uncached")
    # The idempotency store's Redis answers within its 1 s: fine, through its own connection.
    assert any(body["checks"]["idempotency"] == {"ok": True, "degraded": False,
                                                 "detail": "redis"} for body in slow), slow
    for body in hung:
        assert body["status"] == "ready", body
        assert {"cache", "idempotency"} <= set(body["degraded"]), body
        assert body["checks"]["idempotency"]["detail"] == (
            "redis slow: no answer to PING within 0.3 s (if it stays so: requests with an "
            "Idempotency-Key are refused (503))"), body
