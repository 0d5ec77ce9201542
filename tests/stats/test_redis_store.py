"""Replicas share statistics through a real redis-server, and fall back to local when it dies."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from router.stats import LocalStatsStore, Observation, RedisStatsStore, RedisSyncConfig
from tests.stats.sim import FakeClock
from tests.support.procs import ManagedProcess
from tests.support.redis_server import start_redis


def _obs(dep: str, ttft: float, t: float) -> Observation:
    return Observation(dep, "chat", 300, 20, ttft, 0.02, ttft + 0.4, 0.0, None, False, t)


def _replica(url: str, prefix: str, name: str, clock: FakeClock) -> RedisStatsStore:
    client = aioredis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return RedisStatsStore(LocalStatsStore(clock=clock), client,
                           RedisSyncConfig(prefix=prefix, op_timeout_s=2.0),
                           replica_id=name, clock=clock)


def _n(store: RedisStatsStore, dep: str, clock: FakeClock) -> float:
    view = store.view(dep, "chat", 300)
    return view.task.n(clock.now) if view.task is not None else 0.0


async def test_two_replicas_share_what_they_learn(redis_url: str) -> None:
    """Observations recorded on one replica show up in the other's view after a sync."""
    clock = FakeClock()
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    one, two = _replica(redis_url, prefix, "one", clock), _replica(redis_url, prefix, "two", clock)
    for i in range(30):
        one.record(_obs("A", 0.3, clock.now + i * 0.01))
    for i in range(10):
        two.record(_obs("A", 0.3, clock.now + i * 0.01))
    assert await one.sync_once() and await two.sync_once() and await one.sync_once()
    clock.now += 1.0
    assert _n(two, "A", clock) == pytest.approx(_n(one, "A", clock), rel=1e-6)
    assert _n(two, "A", clock) > 35 * 0.5 ** (1.0 / 5.0)
    assert two.status().healthy and two.status().replicas_seen == 1


async def test_only_changed_keys_travel_and_updates_replace_older_state(redis_url: str) -> None:
    """A second sync brings the newer state of a key, not a double count of the old one."""
    clock = FakeClock()
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    one, two = _replica(redis_url, prefix, "one", clock), _replica(redis_url, prefix, "two", clock)
    for i in range(10):
        one.record(_obs("A", 0.3, clock.now + i * 0.01))
    await one.sync_once()
    await two.sync_once()
    await two.sync_once()
    first = _n(two, "A", clock)
    one.record(_obs("A", 0.3, clock.now + 0.2))
    await one.sync_once()
    await two.sync_once()
    clock.now += 1.0
    assert _n(two, "A", clock) == pytest.approx(_n(one, "A", clock), rel=1e-6)
    assert first > 0.0


async def test_redis_down_falls_back_to_local_view_and_reports_it(tmp_path: Path) -> None:
    """Killing redis-server: sync fails, status is unhealthy, views keep only local data."""
    server = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{server.port}/0"
    clock = FakeClock()
    one, two = _replica(url, "t", "one", clock), _replica(url, "t", "two", clock)
    try:
        for i in range(20):
            one.record(_obs("A", 0.3, clock.now + i * 0.01))
        two.record(_obs("A", 0.3, clock.now))
        assert await one.sync_once() and await two.sync_once()
        clock.now += 1.0
        shared = _n(two, "A", clock)
        server.kill()
        two.record(_obs("A", 0.3, clock.now))
        assert not await two.sync_once()
        status = two.status()
        assert not two.healthy and not status.healthy and "local fallback" in status.detail
        clock.now += 0.5
        assert _n(two, "A", clock) < 3.0 < shared
    finally:
        server.stop()


async def test_replica_republishes_and_reports_healthy_when_redis_returns(
        tmp_path: Path) -> None:
    """After a restart of redis-server on the same port, a sync succeeds and re-shares state."""
    server = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{server.port}/0"
    clock = FakeClock()
    one, two = _replica(url, "t", "one", clock), _replica(url, "t", "two", clock)
    restarted = None
    try:
        for i in range(20):
            one.record(_obs("A", 0.3, clock.now + i * 0.01))
        assert await one.sync_once()
        server.kill()
        assert not await one.sync_once() and not one.healthy
        restarted = ManagedProcess(server.argv, server.port, log_path=tmp_path / "r2.log").start()
        assert await one.sync_once() and one.healthy and one.status().healthy
        assert await two.sync_once()
        clock.now += 1.0
        assert _n(two, "A", clock) == pytest.approx(_n(one, "A", clock), rel=1e-6)
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()
