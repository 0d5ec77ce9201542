"""A Redis that may evict keys under memory pressure loses what the idempotency store keeps
(an evicted Idempotency-Key record lets a duplicate run upstream a second time, silently),
while the result cache loses only speed. `serve` warns at start-up, naming the setting, and
`/readyz` says so under the store, live. Against a real redis-server started with `maxmemory`
and an eviction policy."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from router.readiness_redis import LOOK_EVERY_S
from tests.support.redis_server import start_redis
from tests.support.services import MINIMAL_CONFIG, start_router

pytestmark = pytest.mark.integration


def test_an_evicting_redis_under_the_idempotency_store_is_warned_of(tmp_path: Path) -> None:
    """allkeys-lru with a memory limit: a start-up warning for the idempotency setting (none
    for the result cache on the same Redis, which may evict) and a `/readyz` detail that
    follows the policy when an operator changes it (looked at again on a connection of its own
    every few seconds, not at every probe)."""
    server = start_redis(tmp_path, ("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
    url = f"redis://127.0.0.1:{server.port}/0"
    try:
        router = start_router(tmp_path, MINIMAL_CONFIG + (
            f"server:\n  idempotency_redis_url: '{url}'\n"
            f"  cache: {{backend: redis, redis_url: '{url}'}}\n"))
        try:
            def detail() -> str:
                with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as answer:
                    return str(json.loads(answer.read())["checks"]["idempotency"]["detail"])

            evicting = detail()
            with redis.Redis.from_url(url) as client:
                client.config_set("maxmemory-policy", "noeviction")
            waited_until = time.monotonic() + 4 * LOOK_EVERY_S
            while (safe := detail()) != "redis" and time.monotonic() < waited_until:
                time.sleep(0.2)
            log = router.proc.log_text()
        finally:
            router.stop()
    finally:
        server.stop()
    warnings = [line for line in log.splitlines() if "redis_may_evict_records" in line]
    assert len(warnings) == 1, log
    assert "server.idempotency_redis_url" in warnings[0], warnings
    assert "allkeys-lru" in warnings[0] and "redis://" not in warnings[0], warnings
    assert evicting.startswith("redis (maxmemory-policy allkeys-lru: Idempotency-Key records"), \
        evicting
    assert safe == "redis"


@pytest.mark.parametrize("options", [(), ("--maxmemory", "64mb", "--maxmemory-policy",
                                              "noeviction")], ids=["no-limit", "noeviction"])
def test_no_warning_when_redis_never_evicts(tmp_path: Path, options: tuple[str, ...]) -> None:
    """The default redis-server (no `maxmemory`) and `noeviction` under a limit never evict."""
    server = start_redis(tmp_path, options)
    try:
        router = start_router(tmp_path, MINIMAL_CONFIG + (
            f"server:\n  idempotency_redis_url: 'redis://127.0.0.1:{server.port}/0'\n"))
        try:
            with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as answer:
                checks = json.loads(answer.read())["checks"]
            log = router.proc.log_text()
        finally:
            router.stop()
    finally:
        server.stop()
    assert "redis_may_evict_records" not in log, log
    assert checks["idempotency"]["detail"] == "redis", checks
