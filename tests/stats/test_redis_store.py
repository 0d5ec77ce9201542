"""Replicas share statistics through a real redis-server, fall back to local when it dies, and
keep merging the others' statistics while it answers but refuses their writes."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from router.stats import LocalStatsStore, Observation, RedisStatsStore, RedisSyncConfig
from router.wiring import shared_redis
from tests.stats.sim import FakeClock
from tests.support.procs import ManagedProcess
from tests.support.redis_breakage import REFUSAL_IDS, REFUSALS, Breakage
from tests.support.redis_server import start_redis


def _obs(dep: str, ttft: float, t: float) -> Observation:
    return Observation(dep, "chat", 300, 20, ttft, 0.02, ttft + 0.4, 0.0, None, False, t)


def _replica(url: str, prefix: str, name: str, clock: FakeClock,
             identities: dict[str, str] | None = None) -> RedisStatsStore:
    client = aioredis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return RedisStatsStore(LocalStatsStore(clock=clock), client,
                           RedisSyncConfig(prefix=prefix, op_timeout_s=2.0),
                           replica_id=name, clock=clock, identities=identities,
                           server_time=False)  # the fake clock is the replicas' shared one


def _n(store: RedisStatsStore, dep: str, clock: FakeClock) -> float:
    view = store.view(dep, "chat", 300)
    return view.task.n(clock.now) if view.task is not None else 0.0


def _current_n(store: RedisStatsStore, dep: str, clock: FakeClock) -> float:
    """`_n` with the summaries recomputed first (a view serves them as of the last refresh)."""
    _n(store, dep, clock)  # a key is recomputed by `refresh` once a decision read it
    store.refresh()
    return _n(store, dep, clock)


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


async def test_a_name_re_pointed_on_another_replica_is_another_deployment(
        redis_url: str) -> None:
    """A canary whose `d-fast` calls another address (or model) shares the name, not the
    deployment: the old replica learned the canary's slow upstream as its own `d-fast` and moved
    85% of its traffic to a deployment twelve times the price (the rollout audit). Statistics
    are shared under the deployment's identity (model string and address): the same identity
    merges, another is left out."""
    from router.stats.codec import deployment_identity

    clock = FakeClock()
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    old = {"d-fast": deployment_identity("openai/fast", "http://10.0.0.1/v1")}
    moved = {"d-fast": deployment_identity("openai/fast", "http://10.0.0.2/v1")}
    assert old != moved
    first = _replica(redis_url, prefix, "old-1", clock, old)
    second = _replica(redis_url, prefix, "old-2", clock, old)
    canary = _replica(redis_url, prefix, "canary", clock, moved)
    for i in range(30):
        canary.record(_obs("d-fast", 2.5, clock.now + i * 0.01))
        second.record(_obs("d-fast", 0.3, clock.now + i * 0.01))
    for store in (canary, second, first):
        assert await store.sync_once()
    clock.now += 1.0
    assert _n(first, "d-fast", clock) == pytest.approx(_n(second, "d-fast", clock), rel=1e-6)
    assert _n(canary, "d-fast", clock) == pytest.approx(30 * 0.5 ** (1.0 / 5.0), rel=0.05)
    merged = first.view("d-fast", "chat", 300).task
    assert merged is not None and merged.n(clock.now) < 31  # the canary's 30 slow ones left out


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


@pytest.mark.parametrize("loss", ["flushall", "restart"])
async def test_what_redis_lost_between_two_syncs_is_published_again(
        tmp_path: Path, loss: str, caplog: pytest.LogCaptureFixture) -> None:
    """Redis loses everything between two syncs (a restart no sync saw fail, a FLUSHALL): the
    next push finds this replica's entry gone and the one after re-publishes every key, so the
    other replica sees them all again. Only the keys that changed came back, and the others
    stayed missing from the shared view until each changed, while both said `shared`."""
    server = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{server.port}/0"
    clock = FakeClock()

    def replica(name: str) -> RedisStatsStore:  # with the service's client, which sends a
        # command again on a new connection when its pooled one turns out closed
        return RedisStatsStore(LocalStatsStore(clock=clock), shared_redis(url, timeout_s=1.0),
                               RedisSyncConfig(prefix="t", op_timeout_s=2.0), replica_id=name,
                               clock=clock, server_time=False)

    one, two = replica("one"), replica("two")
    restarted = None
    try:
        for dep in ("A", "B", "C"):
            for i in range(20):
                one.record(_obs(dep, 0.3, clock.now + i * 0.01))
        assert await one.sync_once() and await two.sync_once()
        clock.now += 1.0
        shared = {dep: _current_n(two, dep, clock) for dep in ("B", "C")}
        assert min(shared.values()) > 10
        if loss == "flushall":
            admin = redis.Redis.from_url(url)
            admin.flushall()
            admin.close()
        else:
            server.kill()
            restarted = ManagedProcess(server.argv, server.port,
                                       log_path=tmp_path / "again.log").start()
        one.record(_obs("A", 0.3, clock.now))  # only A changes
        with caplog.at_level("WARNING", logger="router.stats.redis"):
            assert await one.sync_once()
        assert [r for r in caplog.records if r.getMessage() == "stats.redis.republished"]
        assert await two.sync_once()  # it finds `one` gone and forgets what it saw of it
        assert await one.sync_once() and await two.sync_once()
        for dep in ("B", "C"):
            assert _current_n(two, dep, clock) == pytest.approx(
                _current_n(one, dep, clock), rel=1e-6)
        assert two.status().healthy and two.status().replicas_seen == 1
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()


@pytest.mark.parametrize(("breaks", "mends", "reason"), REFUSALS, ids=REFUSAL_IDS)
async def test_a_refused_push_keeps_the_others_statistics_and_is_sent_once_writes_are_taken(
        tmp_path: Path, breaks: Breakage, mends: Breakage, reason: str) -> None:
    """Redis answers but refuses writes: a replica's push is refused, yet its sync still pulls,
    so it keeps what another replica pushed before (it used to drop it and route on its own view
    alone); it stays healthy, `writes` and `status()` name the refusal. What it learned meanwhile
    reaches the other replica once Redis takes writes again."""
    (tmp_path / "data").mkdir()  # where snapshots go: a directory of its own, to remove
    server = start_redis(tmp_path, ("--dir", str(tmp_path / "data")))
    url = f"redis://127.0.0.1:{server.port}/0"
    admin = redis.Redis(port=server.port, decode_responses=True)
    clock = FakeClock()
    one, two = _replica(url, "t", "one", clock), _replica(url, "t", "two", clock)
    try:
        for _ in range(20):
            two.record(_obs("A", 0.3, clock.now))
        assert await two.sync_once() and await one.sync_once()
        shared = _current_n(one, "A", clock)
        assert shared > 15.0 and one.status().replicas_seen == 1

        breaks(admin)
        for _ in range(10):
            one.record(_obs("A", 0.3, clock.now))
        pulled = await one.sync_once()  # the push refused, the pull done
        assert _current_n(one, "A", clock) == pytest.approx(shared + 10.0, rel=1e-6)
        assert pulled
        refusal = one.writes.refusal
        assert refusal is not None and refusal.reason.startswith(reason), refusal
        status = one.status()
        assert one.healthy and status.healthy and status.replicas_seen == 1, status
        assert status.detail.startswith(f"redis refuses writes ({reason}"), status
        assert "it still merges theirs" in status.detail, status

        mends(admin)
        assert await one.sync_once() and one.writes.refusal is None
        assert one.status().detail == "shared"
        assert await two.sync_once()
        assert _current_n(two, "A", clock) == pytest.approx(shared + 10.0, rel=1e-6)
    finally:
        admin.close()
        server.stop()


async def test_a_replica_on_a_read_only_redis_keeps_merging_the_others_updates(
        tmp_path: Path) -> None:
    """A replica left on a read-only Redis (after a failover, its URL names the old primary, now
    a replica of the new one) while another writes to the primary: its pushes are refused, but
    the other's new statistics, replicated to the Redis it reads, still reach it."""
    for name in ("primary", "replica"):
        (tmp_path / name).mkdir()
    primary = start_redis(tmp_path / "primary", ("--repl-diskless-sync-delay", "0"))
    follower = start_redis(tmp_path / "replica",
                           ("--replicaof", "127.0.0.1", str(primary.port)))
    clock = FakeClock()
    left = _replica(f"redis://127.0.0.1:{follower.port}/0", "t", "left", clock)
    writer = _replica(f"redis://127.0.0.1:{primary.port}/0", "t", "writer", clock)
    try:
        for _ in range(20):
            writer.record(_obs("A", 0.3, clock.now))
        assert await writer.sync_once()
        left.record(_obs("A", 0.3, clock.now))
        expected = 21.0
        for batch in range(2):  # what the writer pushed before, then an update of it
            waited_until = time.monotonic() + 15
            while await left.sync_once() and _current_n(left, "A", clock) < expected - 1e-6:
                assert time.monotonic() < waited_until, (left.status(), batch)
                await asyncio.sleep(0.05)
            assert _current_n(left, "A", clock) == pytest.approx(expected, rel=1e-6)
            for _ in range(5):
                writer.record(_obs("A", 0.3, clock.now))
            assert await writer.sync_once()
            expected += 5.0
        refusal = left.writes.refusal
        assert refusal is not None and refusal.reason == "read-only replica", refusal
        assert left.healthy and left.status().replicas_seen == 1
    finally:
        follower.stop()
        primary.stop()
