"""A Redis that answers but refuses writes under a running router's result cache and statistics.

Out of memory under `noeviction` (`CONFIG SET maxmemory 1`) or a read-only replica cut off from
its primary (`REPLICAOF` an address nobody answers: it keeps serving what it holds): stored
answers are still served, new ones are not stored, and a replica's statistics pushes are
refused while it still reads the others'. `/readyz` stays 200 and lists `cache` and `stats` under
`degraded` with the reason, and clears once Redis takes writes again (the cache at once, by its
own probe write; the statistics at their next push, within a second). A real redis-server, the
package's simulator, the router as a process, the `openai` client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.caching.service import (
    KEYS_ENV,
    Caller,
    redis_cache_block,
    router_yaml,
    unique_messages,
)
from tests.support.redis_breakage import REFUSAL_IDS, REFUSALS, Breakage
from tests.support.redis_server import start_redis
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

@pytest.fixture
def shared(sim: Running, tmp_path: Path) -> Iterator[tuple[Running, int]]:
    """The router with its result cache and statistics on one redis-server (and its port)."""
    with ExitStack() as started:  # the server stopped even when the router fails to start
        store = start_redis(tmp_path)
        started.callback(store.stop)
        url = f"redis://127.0.0.1:{store.port}/0"
        config = router_yaml(sim.base_url, redis_cache_block(url, ttl_s=600),
                             stats_redis_url=url)
        router = start_router(tmp_path, config, env=KEYS_ENV, name="refusals")
        started.callback(router.stop)
        yield router, store.port


def _ready(router: Running) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{router.base_url}/readyz", timeout=10)
    return answer.status_code, answer.json()


def _ready_when(router: Running, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """`/readyz` (200) once `until` holds of its body, within a generous bound."""
    waited_until = time.monotonic() + 15
    while True:
        status, body = _ready(router)
        assert (status, body["status"]) == (200, "ready"), body
        if until(body) or time.monotonic() > waited_until:
            return body
        time.sleep(0.05)


@pytest.mark.parametrize(("breaks", "mends", "reason"), REFUSALS[:2], ids=REFUSAL_IDS[:2])
def test_a_redis_refusing_writes_shows_cache_and_stats_degraded_until_it_takes_them_again(
        shared: tuple[Running, int], breaks: Breakage, mends: Breakage, reason: str) -> None:
    """Refused writes: stored answers still hit, new ones miss every time; `/readyz` (200,
    `ready`) lists `cache` (with the reason and that only speed is lost) and `stats` (healthy:
    it still merges the others' statistics; its detail names the refusal) as degraded; once
    writes are taken again both clear without a request and new answers are stored again."""
    router, port = shared
    caller = Caller(router.base_url)
    admin = redis.Redis(port=port)
    stored, new, after = (unique_messages(f"refusals-{n}") for n in ("stored", "new", "after"))
    try:
        assert [caller.chat(stored).cache for _ in range(2)] == ["miss", "hit"]
        assert _ready_when(router, lambda body: not body["degraded"])["degraded"] == []

        breaks(admin)
        assert [caller.chat(new).cache for _ in range(2)] == ["miss", "miss"]
        assert caller.chat(stored).cache == "hit"
        during = _ready_when(router, lambda body: {"cache", "stats"} <= set(body["degraded"]))
        assert {"cache", "stats"} <= set(during["degraded"]), during
        cache = during["checks"]["cache"]
        assert cache["ok"] and cache["degraded"], cache
        assert cache["detail"].startswith(f"redis refuses writes ({reason}"), cache
        assert "slower, never failed" in cache["detail"], cache
        stats = during["checks"]["stats"]["status"]
        assert stats["healthy"], stats
        assert stats["detail"].startswith(f"redis refuses writes ({reason}"), stats

        mends(admin)
        _, cleared = _ready(router)  # no request in between: the cache's own probe sees it
        assert "cache" not in cleared["degraded"], cleared
        assert cleared["checks"]["cache"]["detail"] == "redis", cleared
        cleared = _ready_when(router, lambda body: not body["degraded"])  # the next push
        assert cleared["degraded"] == [], cleared
        assert cleared["checks"]["stats"]["status"]["detail"] == "shared"
        assert [caller.chat(after).cache for _ in range(2)] == ["miss", "hit"]
    finally:
        admin.close()
        caller.close()
    log = router.proc.log_text()
    for store in ("cache", "statistics"):
        assert f'"store":"{store}"' in log.replace(" ", ""), store
    assert "redis_writes_accepted" in log
