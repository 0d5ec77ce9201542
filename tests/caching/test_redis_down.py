"""Redis killed mid-run: the service keeps answering every request, without the cache.

A router on its own `redis-server` serves a closed-loop mix (repeats of warmed prompts, new
prompts, streaming and not) from several threads; the server is SIGKILLed part-way through.
No request may fail, no request that started after the kill may claim a hit, and the cache's
timeouts must keep each request's latency bounded.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from tests.caching.service import (
    KEYS_ENV,
    Caller,
    redis_cache_block,
    router_yaml,
    unique_messages,
)
from tests.caching.test_coalescing import coalesced
from tests.support.redis_server import start_redis
from tests.support.services import Running, start_router

THREADS = 4
BEFORE_KILL_S = 1.5
AFTER_KILL_S = 3.0
WARM_PROMPTS = 8
MAX_E2E_S = 2.0  # generous: upstream TTFT is 40 ms and Redis timeouts are 50-100 ms


@dataclass(frozen=True)
class Sent:
    started: float
    e2e_s: float
    stream: bool
    status: int
    cache: str | None
    finished: bool


def _worker(base_url: str, warm: list[list[dict[str, str]]], stop: threading.Event,
            out: list[Sent], seed: int) -> None:
    caller = Caller(base_url)
    i = seed
    try:
        while not stop.is_set():
            i += 1
            stream = i % 3 == 0
            messages = warm[i % len(warm)] if i % 2 == 0 else unique_messages("down-new")
            started = time.monotonic()
            seen = caller.chat(messages, stream=stream)
            out.append(Sent(started, time.monotonic() - started, stream, seen.status,
                            seen.cache, seen.finish_reason is not None and seen.error is None))
    finally:
        caller.close()


def test_redis_killed_mid_run_fails_no_request_and_serves_no_hit(
        sim: Running, tmp_path: Path) -> None:
    """SIGKILL of redis-server under load: every request 200, later ones `miss`/`bypass`."""
    with ExitStack() as started:  # redis stopped even when the router fails to start
        redis = start_redis(tmp_path)
        started.callback(redis.stop)
        config = router_yaml(sim.base_url, redis_cache_block(
            f"redis://127.0.0.1:{redis.port}/0", ttl_s=600))
        router = start_router(tmp_path, config, env=KEYS_ENV)
        started.callback(router.stop)
        warm = [unique_messages(f"down-warm-{n}") for n in range(WARM_PROMPTS)]
        warmer = Caller(router.base_url)
        assert [warmer.chat(m).cache for m in warm] == ["miss"] * WARM_PROMPTS
        assert [warmer.chat(m).cache for m in warm] == ["hit"] * WARM_PROMPTS
        warmer.close()

        sent: list[Sent] = []
        stop = threading.Event()
        threads = [threading.Thread(target=_worker, args=(router.base_url, warm, stop, sent, n))
                   for n in range(THREADS)]
        for thread in threads:
            thread.start()
        time.sleep(BEFORE_KILL_S)
        coalesced_before = coalesced(router.base_url)
        redis.kill()  # returns once the server is gone: requests after this cannot hit it
        killed_at = time.monotonic()
        time.sleep(AFTER_KILL_S)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        coalesced_after = coalesced(router.base_url)

    after = [s for s in sent if s.started > killed_at]
    before = [s for s in sent if s.started + s.e2e_s < killed_at]
    assert len(after) >= 20 and any(s.cache == "hit" for s in before)
    assert [s for s in sent if s.status != 200 or not s.finished] == []
    # a `hit` after the kill is only an identical request's answer, computed after the kill
    # and handed over in memory (coalesced), never one read from the dead store
    assert {s.cache for s in after} <= {"miss", "bypass", "hit"}
    assert sum(s.cache == "hit" for s in after) <= coalesced_after - coalesced_before
    assert any(s.stream for s in after)
    assert max(s.e2e_s for s in after) < MAX_E2E_S
