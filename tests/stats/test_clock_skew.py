"""Replicas whose wall clocks disagree, or step, still share statistics at their true age.

The pause audit of 2026-12-06 ran a replica under libfaketime two hours ahead beside correct
ones sharing its Redis: every `auto` request of the correct replicas answered 500
(`OverflowError` in the decay of the merged statistics), their sync loop died without a log
line, the replica list churned (the one ahead pruned the others as gone), and one observation
of the replica ahead outweighed hundreds of theirs (2x per half-life of lead). Replicas now
compare times through the Redis server's clock, merges scale toward the later landmark, and a
state from ahead is held at the reader's now; the statistics' clock never steps.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from pathlib import Path
from unittest import mock

import orjson
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from router.stats import LocalStatsStore, Observation, RedisStatsStore, RedisSyncConfig
from router.stats.codec import decode_state, encode_key, encode_state
from router.stats.decay import Decay, DecayedSums
from router.stats.estimators import KeyState, KeySummary
from router.stats.sketch import DecayedSketch
from router.steady_clock import steady_time
from tests.support.redis_server import start_redis

TWO_HOURS = 7200.0


def _obs(dep: str, ttft: float, t: float) -> Observation:
    return Observation(dep, "chat", 300, 20, ttft, 0.02, ttft + 0.4, 0.0, None, False, t)


def _replica(url: str, prefix: str, name: str, skew_s: float) -> RedisStatsStore:
    def clock() -> float:
        return steady_time() + skew_s

    client = aioredis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return RedisStatsStore(LocalStatsStore(clock=clock), client,
                           RedisSyncConfig(prefix=prefix, op_timeout_s=2.0),
                           replica_id=name, clock=clock)


def _task_view(store: RedisStatsStore, dep: str) -> KeySummary | None:
    """The deployment's summary at the request's prompt bucket (where TTFT quantiles are)."""
    store.view(dep, "chat", 300)  # a key is recomputed by `refresh` once a decision read it
    store.refresh()
    return store.view(dep, "chat", 300).bucket


@pytest.mark.parametrize("skew_s", [TWO_HOURS, -TWO_HOURS, 60.0])
async def test_a_replica_with_a_skewed_clock_is_weighed_as_what_it_saw(
        redis_url: str, skew_s: float) -> None:
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    right = _replica(redis_url, prefix, "right", 0.0)
    other = _replica(redis_url, prefix, "other", 0.0)
    off = _replica(redis_url, prefix, "off", skew_s)
    now = steady_time()
    for i in range(100):
        right.record(_obs("A", 0.2, now - 1.0 + i * 0.01))
    off.record(_obs("A", 9.0, off._clock()))  # one slow answer, at the skewed replica's now
    for _ in range(2):
        for store in (right, other, off):
            assert await store.sync_once()
    for store in (right, other, off):
        status = store.status()
        assert status.healthy and status.replicas_seen == 2, (store.replica_id, status)
    summary = _task_view(right, "A")  # raised OverflowError two hours ahead
    assert summary is not None and summary.ttft is not None
    assert summary.ttft.p50 == pytest.approx(0.2, rel=0.02)  # was 8.94 s at +1 h
    assert summary.n(steady_time()) == pytest.approx(101 * 0.5 ** (0.5 / 5.0), rel=0.25)
    seen_by_other = _task_view(other, "A")
    assert seen_by_other is not None and seen_by_other.ttft is not None
    assert seen_by_other.ttft.p50 == pytest.approx(0.2, rel=0.02)


async def test_the_replica_list_is_kept_by_the_server_s_clock(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The replica ahead used to prune every other replica from the list at each of its pushes
    (`zremrangebyscore` by its own now), so they re-published everything every few seconds."""
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    right, ahead = (_replica(redis_url, prefix, "right", 0.0),
                    _replica(redis_url, prefix, "ahead", TWO_HOURS))
    right.record(_obs("A", 0.2, steady_time()))
    ahead.record(_obs("A", 0.2, ahead._clock()))
    with caplog.at_level(logging.WARNING, logger="router.stats.redis"):
        for _ in range(4):
            assert await right.sync_once() and await ahead.sync_once()
    assert not [r for r in caplog.records if "republished" in r.getMessage()]
    client = aioredis.from_url(redis_url)
    listed = await client.zrange(f"{prefix}:replicas", 0, -1, withscores=True)
    server_now = await client.time()
    await client.aclose()
    assert {m for m, _ in listed} == {b"right", b"ahead"}
    assert all(abs(score - server_now[0]) < 5 for _, score in listed)


async def test_a_state_it_cannot_read_is_skipped_and_the_sync_loop_goes_on(
        redis_url: str) -> None:
    """A field that does not decode (hand-edited, another version's bug) is left out; the
    replica's other fields are merged. Before, any error but Redis's ended the sync task
    silently: the replica stopped pushing and pulling, and `/readyz` still said `shared`."""
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    right, other = (_replica(redis_url, prefix, "right", 0.0),
                    _replica(redis_url, prefix, "other", 0.0))
    other.record(_obs("A", 0.3, steady_time()))
    assert await other.sync_once()
    client = aioredis.from_url(redis_url)
    bad_field = encode_key(("B", "chat", 0), "-")
    await client.hset(f"{prefix}:r:other:data", bad_field, b'{"s": 1}')
    await client.hset(f"{prefix}:r:other:ver", bad_field, 10**9)
    await client.aclose()
    assert await right.sync_once()
    assert right.status().healthy and right.status().replicas_seen == 1
    merged = _task_view(right, "A")
    assert merged is not None and merged.n_ok > 0.5

    def fail(*_: object, **__: object) -> None:
        raise OverflowError("math range error")

    other.record(_obs("A", 0.3, steady_time()))
    assert await other.sync_once()
    with mock.patch.object(right.local, "update_remote", fail):
        assert not await right.sync_once()  # a failure, reported, not an ended loop
    assert not right.status().healthy
    assert await right.sync_once() and right.status().healthy


def test_merging_states_hours_apart_scales_toward_the_later_one() -> None:
    decay = Decay(5.0)
    now = steady_time()
    old, new = DecayedSums(decay), DecayedSums(decay)
    old.add({"ok": 100.0}, now - TWO_HOURS)
    new.add({"ok": 1.0}, now)
    old.merge(new)  # raised OverflowError (2 ** 1440 to scale the newer one back)
    assert old.value("ok", now) == pytest.approx(1.0)
    early, late = DecayedSketch(decay), DecayedSketch(decay)
    early.add(9.0, now - TWO_HOURS)
    late.add(0.2, now)
    early.merge(late)
    assert early.quantile(0.5) == pytest.approx(0.2, rel=0.02)
    assert early.count(now) == pytest.approx(1.0)
    assert math.isfinite(decay.factor(-1e9))  # a landmark far ahead: large, never an error


def test_a_shared_state_moves_by_the_clock_offset_and_never_reads_from_ahead() -> None:
    decay = Decay(5.0)
    state = KeyState(decay, 0.01, with_model=False)
    state.record(_obs("A", 0.3, 1000.0))
    blob = encode_state(state, 500.0)
    shifted = orjson.loads(blob)["o"][0]
    assert shifted == pytest.approx(1500.0)
    back = decode_state(blob, decay, 0.01, shift=-500.0)
    assert back.outcomes.landmark == pytest.approx(1000.0)
    held = decode_state(blob, decay, 0.01, latest=1200.0)
    assert held.outcomes.landmark == pytest.approx(1200.0)
    assert held.outcomes.value("ok", 1200.0) == pytest.approx(1.0)


def test_the_statistics_clock_does_not_follow_a_stepped_wall_clock() -> None:
    before = steady_time()
    with mock.patch("time.time", return_value=time.time() - 600.0):
        assert steady_time() >= before
    assert abs(steady_time() - time.time()) < 5.0


async def test_a_passing_refusal_of_time_fails_one_sync_and_the_server_s_clock_stays(
        redis_url: str) -> None:
    """A BUSY reply (a script running) to TIME turned a replica to its own clock for good: with
    skewed clocks the replicas then dropped each other (the re-audit of 2026-12-06). It fails
    that sync only; the next one asks again."""
    prefix = f"t:{uuid.uuid4().hex[:8]}"
    store = _replica(redis_url, prefix, "one", TWO_HOURS)
    real_time = store._client.time
    calls = 0

    async def busy_once() -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ResponseError("BUSY Redis is busy running a script. You can only call "
                                "SCRIPT KILL or SHUTDOWN NOSAVE.")
        return await real_time()

    with mock.patch.object(store._client, "time", busy_once):
        assert not await store.sync_once()
        assert await store.sync_once() and store._server_time
    client = aioredis.from_url(redis_url)
    (_, score), = await client.zrange(f"{prefix}:replicas", 0, -1, withscores=True)
    server_now = (await client.time())[0]
    await client.aclose()
    assert abs(score - server_now) < 5  # listed by the server's clock, not two hours ahead


async def test_a_redis_without_time_leaves_each_replica_its_own_clock_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = start_redis(tmp_path, ("--rename-command", "TIME", ""))
    url = f"redis://127.0.0.1:{server.port}/0"
    try:
        one, two = _replica(url, "t", "one", 0.0), _replica(url, "t", "two", 0.0)
        one.record(_obs("A", 0.3, steady_time()))
        with caplog.at_level(logging.WARNING, logger="router.stats.redis"):
            assert await one.sync_once() and await two.sync_once()
        assert [r for r in caplog.records if "stats.redis.own_clock" in r.getMessage()]
        assert not one._server_time and two.status().replicas_seen == 1
        shared = _task_view(two, "A")
        assert shared is not None and shared.n_ok > 0.5
    finally:
        server.stop()


@pytest.mark.parametrize(("reply", "for_good"), [
    ("ERR unknown command 'TIME', with args beginning with: ", True),
    ("ERR Command is not available: TIME", True),
    ("ERR command 'TIME' is disabled", True),
    ("NOPERM User bot has no permissions to run the 'time' command", True),
    ("BUSY Redis is busy running a script.", False),
    ("LOADING Redis is loading the dataset in memory", False),
    ("MASTERDOWN Link with MASTER is down", False),
])
def test_which_refusals_of_time_are_for_good(reply: str, for_good: bool) -> None:
    from router.stats.redis_store import _no_such_command

    assert _no_such_command(ResponseError(reply)) is for_good
