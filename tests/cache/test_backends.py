"""Backends on their own: native TTL, and Redis failures turned into counted misses."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from cache.backends.redis import RedisResultCache, connect, redis_is_down
from cache.entry import CachedEntry, EntryVersions
from cache.keys import derive_key
from cache.metrics import CacheMetrics
from cache.policy import CacheRule, decide
from cache.result import ResultCache, ResultCacheFront
from router.redis_writes import WriteHealth
from tests.cache.conftest import ManualClock
from tests.cache.helpers import completion_body, request, scope
from tests.support.procs import ManagedProcess
from tests.support.redis_server import start_redis

ENTRY = CachedEntry.from_completion(
    completion_body(), EntryVersions("pv1", "dv1", "m"), created_at=0.0, generation_s=0.1
)


async def test_backend_expires_entries_after_their_ttl(backend: ResultCache) -> None:
    """An entry set with a 1 s TTL is there at once and gone within a generous bound."""
    assert await backend.set("k-ttl", ENTRY, 1.0)
    assert await backend.get("k-ttl") == ENTRY
    deadline = time.monotonic() + 15.0
    while await backend.get("k-ttl") is not None:
        assert time.monotonic() < deadline, "entry outlived its TTL by far"
        await asyncio.sleep(0.1)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[ManagedProcess]:
    """A redis-server for this test alone, so it can be killed or paused."""
    proc = start_redis(tmp_path)
    yield proc
    proc.stop()


async def test_redis_killed_mid_run_turns_gets_into_misses_without_raising(
    own_redis: ManagedProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """After SIGKILL: gets miss, sets no-op, every failure counted, one log line per interval."""
    metrics, clock = CacheMetrics(), ManualClock()
    interval, cooldown, rounds = 10.0, 1.0, 20
    client = connect(f"redis://127.0.0.1:{own_redis.port}/0")
    cache = RedisResultCache(
        client, metrics, cooldown_s=cooldown, log_interval_s=interval, clock=clock
    )
    assert await cache.set("k", ENTRY, 60.0)
    assert await cache.get("k") == ENTRY
    own_redis.kill()
    with caplog.at_level(logging.WARNING, logger="slorouter.cache"):
        for _ in range(rounds):
            assert await cache.get("k") is None  # probes the dead server (cool-down is over)
            assert await cache.set("k", ENTRY, 60.0) is False  # inside the cool-down: skipped
            clock.advance(interval / 2)
    assert metrics.snapshot().backend_errors["redis"] == 2 * rounds
    logged = [r for r in caplog.records if r.message == "cache_backend_error"]
    assert len(logged) == rounds // 2
    await cache.aclose()


async def test_front_over_a_killed_redis_serves_misses_and_skips_writes(
    own_redis: ManagedProcess,
) -> None:
    """What the request pipeline sees when Redis dies: status miss, write skipped, no raise."""
    metrics = CacheMetrics()
    cache = RedisResultCache(connect(f"redis://127.0.0.1:{own_redis.port}/0"), metrics)
    front = ResultCacheFront(cache, metrics)
    current = scope()
    key = derive_key(current, request())
    decision = decide(request(), CacheRule(), task="chat", risk="low")
    body = completion_body()
    model = sorted(current.models)[0]
    assert (
        await front.store(key, decision, body, scope=current, model=model, generation_s=1) is None
    )
    assert (await front.lookup(key, decision, current)).status == "hit"
    own_redis.kill()
    assert (await front.lookup(key, decision, current)).status == "miss"
    stored = await front.store(key, decision, body, scope=current, model=model, generation_s=1)
    assert stored == "backend_error"
    await cache.aclose()


async def test_redis_comes_back_after_a_restart(own_redis: ManagedProcess, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """Once the server is back and the cool-down has passed, writes and hits resume, and one
    `cache_backend_recovered` line says the outage ended (its start was logged, its end was not:
    an operator could not tell from the log whether the cache was still off)."""
    metrics, clock = CacheMetrics(), ManualClock()
    cache = RedisResultCache(connect(f"redis://127.0.0.1:{own_redis.port}/0"), metrics, clock=clock)
    assert await cache.set("k", ENTRY, 60.0)
    own_redis.kill()
    assert await cache.get("k") is None
    assert await cache.get("k") is None  # inside the cool-down: no call to Redis at all
    restarted = ManagedProcess(own_redis.argv, own_redis.port, log_path=tmp_path / "again.log")
    restarted.start()
    try:
        clock.advance(2.0)
        with caplog.at_level(logging.INFO, logger="slorouter.cache"):
            assert await cache.set("k", ENTRY, 60.0)
            assert await cache.get("k") == ENTRY
    finally:
        restarted.stop()
        await cache.aclose()
    recovered = [r for r in caplog.records if r.message == "cache_backend_recovered"]
    assert len(recovered) == 1, [r.message for r in caplog.records]
    fields = getattr(recovered[0], "event_data", {})
    assert fields["backend"] == "redis" and fields["failures"] >= 1 and fields["failing_s"] >= 2.0


async def test_paused_redis_times_out_into_a_miss(own_redis: ManagedProcess) -> None:
    """A server that stops answering (SIGSTOP) costs one short timeout, then misses."""
    metrics = CacheMetrics()
    cache = RedisResultCache(connect(f"redis://127.0.0.1:{own_redis.port}/0"), metrics)
    assert await cache.set("k", ENTRY, 60.0)
    os.kill(own_redis.pid, signal.SIGSTOP)
    try:
        assert await cache.get("k") is None
        assert await cache.set("k", ENTRY, 60.0) is False
    finally:
        os.kill(own_redis.pid, signal.SIGCONT)
    assert metrics.snapshot().backend_errors["redis"] == 2
    await cache.aclose()


@pytest.mark.parametrize("refusing", [("CONFIG", "SET", "maxmemory", "1"),  # OOM, noeviction
                                      ("REPLICAOF", "127.0.0.1", "9")],      # a READONLY replica
                         ids=["out-of-memory", "read-only"])
async def test_writes_redis_refuses_leave_its_entries_readable(
    own_redis: ManagedProcess, refusing: tuple[str, ...]
) -> None:
    """A Redis that answers but refuses writes (full under `noeviction`, a read-only replica) is
    no outage: each write is a counted no-op, and the entries it holds still hit, with no
    cool-down in between (each refused write used to skip Redis for a second, so a full cache
    under steady misses served no hit at all)."""
    metrics = CacheMetrics()  # the real clock: a cool-down, if any, would still be running
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    # Refusals, not timeouts, are under test: the service's 50 ms timeout ran out once in a
    # full suite's load (a round's hit came back None), so the client waits up to a second.
    cache = RedisResultCache(connect(url, timeout_s=1.0), metrics)
    assert await cache.set("k", ENTRY, 60.0)
    admin = connect(url, timeout_s=1.0)
    await admin.execute_command(*refusing)
    await admin.aclose()
    for round_ in range(5):
        assert await cache.set(f"new-{round_}", ENTRY, 60.0) is False
        assert await cache.get("k") == ENTRY
    assert metrics.snapshot().backend_errors["redis"] == 5
    await cache.aclose()


@pytest.mark.parametrize(("refusing", "accepting", "reason"), [
    (("CONFIG", "SET", "maxmemory", "1"), ("CONFIG", "SET", "maxmemory", "0"), "out of memory"),
    (("REPLICAOF", "127.0.0.1", "9"), ("REPLICAOF", "NO", "ONE"), "read-only replica"),
], ids=["out-of-memory", "read-only"])
async def test_a_refused_set_marks_the_cache_writes_refused_until_one_is_taken(
    own_redis: ManagedProcess, refusing: tuple[str, ...], accepting: tuple[str, ...],
    reason: str,
) -> None:
    """Each `set`'s reply goes to `writes` (what `/readyz` reads): the first refused set starts
    a refusal, reads change nothing, the next accepted set ends it."""
    writes = WriteHealth("cache")
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    cache = RedisResultCache(connect(url, timeout_s=1.0), CacheMetrics(), writes=writes)
    admin = connect(url, timeout_s=1.0)
    try:
        assert await cache.set("k", ENTRY, 60.0) and writes.refusal is None
        await admin.execute_command(*refusing)
        assert await cache.set("new", ENTRY, 60.0) is False
        assert await cache.get("k") == ENTRY
        refusal = writes.refusal
        assert refusal is not None and refusal.reason.startswith(reason), refusal
        await admin.execute_command(*accepting)
        assert await cache.get("k") == ENTRY and writes.refusal is not None
        assert await cache.set("new", ENTRY, 60.0) and writes.refusal is None
    finally:
        await admin.aclose()
        await cache.aclose()


async def test_the_disk_cache_directory_is_private_to_its_user(tmp_path: Path) -> None:
    """Cached answers are tenants' content: under a umask of 022 the directory is created 0700
    (a new one, with missing parents), an existing 0755 one is narrowed to 0700, and group and
    others cannot read the stored entry's files whatever their own modes."""
    from cache.backends.disk import DiskResultCache

    created, existing = tmp_path / "new" / "cache", tmp_path / "existing"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    previous = os.umask(0o022)
    try:
        for directory in (created, existing):
            disk = DiskResultCache(directory, CacheMetrics(), offload_set=False)
            assert await disk.set("k", ENTRY, 60.0)
            assert await disk.get("k") == ENTRY
            disk.close()
            assert directory.stat().st_mode & 0o777 == 0o700
            assert any(p.name.startswith("cache.db") for p in directory.iterdir())
    finally:
        os.umask(previous)


@pytest.mark.exclusive  # each get waits at most 100 ms (the cache's op timeout) for a connection
async def test_a_burst_larger_than_the_pool_waits_for_connections_and_hits(
        own_redis: ManagedProcess) -> None:
    """150 gets at once for a stored entry through a pool of 8 connections: every one waits for
    a connection and hits. The pool used to refuse calls past its size (`MaxConnectionsError`),
    which read as Redis down: misses, and a second of cool-down for everyone."""
    metrics = CacheMetrics()
    cache = RedisResultCache(connect(f"redis://127.0.0.1:{own_redis.port}/0", max_connections=8),
                             metrics)
    assert await cache.set("k", ENTRY, 60.0)
    # The pool's connections opened first: connecting is not what the burst is about. Eight
    # connections opened at once on a slow machine can take longer than the 100 ms a get
    # waits (two fresh-clone runs saw a warm-up get miss), so the warm-up is tried again until
    # all eight hit (past a cool-down, if a miss started one), and the errors counted are the
    # burst's own.
    for _ in range(30):
        if await asyncio.gather(*(cache.get("k") for _ in range(8))) == [ENTRY] * 8:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("eight gets at once never all hit")
    errors_before = metrics.snapshot().backend_errors.get("redis", 0)
    found = await asyncio.gather(*(cache.get("k") for _ in range(150)))
    assert found == [ENTRY] * 150
    assert metrics.snapshot().backend_errors.get("redis", 0) == errors_before
    await cache.aclose()


def test_a_call_that_failed_while_redis_answered_others_says_nothing_of_redis() -> None:
    """The cool-down rule: a timeout or a connection error with no answer from Redis since the
    call began is Redis down; one after Redis answered another call (the router's own event
    loop or pool held it) is not, nor is an error reply."""
    assert redis_is_down(TimeoutError(), started=5.0, answered_at=4.0)
    assert redis_is_down(RedisConnectionError("refused"), started=5.0, answered_at=5.0)
    assert not redis_is_down(TimeoutError(), started=5.0, answered_at=5.2)
    assert not redis_is_down(RedisConnectionError("No connection available."), started=5.0,
                             answered_at=5.1)
    assert not redis_is_down(ResponseError("OOM"), started=5.0, answered_at=float("-inf"))
