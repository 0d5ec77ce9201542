"""The Redis idempotency store when its Redis misbehaves: refuses writes, is down, or comes
back empty. Against real redis-servers (one per test where the test breaks it)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as redis

from policies.loader import load_config_text
from router.errors import ConflictError, OverloadedError
from router.idempotency import (
    Lease,
    RedisIdempotencyStore,
    Replay,
    StoredResponse,
    body_fingerprint,
)
from router.idempotency import redis_store as redis_store_module
from router.wiring import idempotency_store, shared_redis
from tests.support.procs import ManagedProcess, free_port
from tests.support.redis_server import start_redis

FINGERPRINT = body_fingerprint(b'{"model": "m", "messages": [{"role": "user", "content": "pay"}]}')
LEASE_S = 30.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[ManagedProcess]:
    proc = start_redis(tmp_path)
    yield proc
    proc.stop()


async def _script_calls(admin: redis.Redis) -> int:
    stats = await admin.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("eval", "evalsha"))


async def test_a_claim_redis_refuses_leaves_nothing_to_give_back(
        own_redis: ManagedProcess) -> None:
    """Redis answers the claim's `SET NX` with an error (out of memory under `noeviction`): the
    request is refused (503) and, as the SET never ran, no give-back follows it (one used to
    run in the background for ~16 s per refused request, and log a warning at the end)."""
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = shared_redis(url, timeout_s=1.0)
    store = RedisIdempotencyStore(client)
    admin = redis.from_url(url)
    await admin.config_set("maxmemory", 1)
    with pytest.raises(OverloadedError) as refused:
        await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert refused.value.code == "idempotency_store_unavailable"
    claimed = await _script_calls(admin)  # the claim is a script itself
    await asyncio.sleep(redis_store_module.RETRY_DELAYS_S[0] * 2)
    assert await _script_calls(admin) == claimed
    await client.aclose()
    await admin.aclose()


async def test_an_outage_logs_the_given_up_give_backs_once_per_interval(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """With Redis down, every keyed request is refused and its lease's give-back gives up in
    the end: one `idempotency_store_gave_up` line per interval with a count of the others, as
    for `idempotency_store_unavailable`, not one per request."""
    monkeypatch.setattr(redis_store_module, "RETRY_DELAYS_S", (0.01, 0.01))
    client = shared_redis(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    store = RedisIdempotencyStore(client)
    with caplog.at_level(logging.WARNING, logger="slorouter.idempotency"):
        for n in range(20):
            with pytest.raises(OverloadedError):
                await store.claim("t1", f"k{n}", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
        await asyncio.sleep(0.5)
    gave_up = [r for r in caplog.records if r.getMessage() == "idempotency_store_gave_up"]
    assert len(gave_up) == 1
    await client.aclose()


async def test_a_duplicate_refused_while_redis_paused_leaves_no_give_up_behind(
        own_redis: ManagedProcess, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A duplicate of a finished key, sent while Redis is paused, is refused (503) without the
    reply to its `SET NX`; once Redis runs again that SET fails (the key holds the answer), so
    its give-back finds nothing of its own, every try. That is not a lease that may have
    leaked: no `idempotency_store_gave_up` (it was logged ~16 s later), and the answer still
    replays."""
    monkeypatch.setattr(redis_store_module, "RETRY_DELAYS_S", (0.3, 0.3))
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = shared_redis(url, timeout_s=0.2)
    store = RedisIdempotencyStore(client)
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    assert await store.complete(lease, StoredResponse(200, (), b"paid"))
    with caplog.at_level(logging.WARNING, logger="slorouter.idempotency"):
        os.kill(own_redis.pid, signal.SIGSTOP)
        try:
            with pytest.raises(OverloadedError):
                await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
        finally:
            os.kill(own_redis.pid, signal.SIGCONT)
        await asyncio.sleep(1.0)  # both tries of the give-back, with Redis answering
    assert [r for r in caplog.records if r.getMessage() == "idempotency_store_gave_up"] == []
    replay = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(replay, Replay) and replay.response.body == b"paid"
    await client.aclose()


@pytest.mark.parametrize("emptied", ["flushall", "restart"])
async def test_an_answer_finished_after_redis_came_back_empty_is_replayed(
        own_redis: ManagedProcess, tmp_path: Path, emptied: str) -> None:
    """Redis loses the in-flight marker while its request runs (a restart without persistence,
    a FLUSHALL): the answer, once finished, is stored all the same, so a retry with the key
    replays it. It used to be dropped (the marker was not ours any more), and the retry ran
    the request, a side effect too, a second time."""
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = shared_redis(url, timeout_s=1.0)
    store = RedisIdempotencyStore(client)
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    restarted = None
    if emptied == "flushall":
        admin = redis.from_url(url)
        await admin.flushall()
        await admin.aclose()
    else:
        own_redis.kill()
        restarted = ManagedProcess(own_redis.argv, own_redis.port,
                                   log_path=tmp_path / "again.log").start()
    try:
        assert await store.complete(lease, StoredResponse(200, (), b"paid"))
        replay = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
        assert isinstance(replay, Replay) and replay.response.body == b"paid"
    finally:
        if restarted is not None:
            restarted.stop()
        await client.aclose()


async def test_an_answer_finished_while_redis_is_down_is_kept_until_redis_takes_it(
        own_redis: ManagedProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis goes down while a keyed request runs, for longer than the background retries
    lasted (~16 s; shortened here): its answer is held in the process, a duplicate here replays
    it meanwhile (another body with the key is still refused), and once Redis is back the
    answer is stored, so another replica replays it too. It was given up, and a retry after the
    outage ran the side effect a second time."""
    monkeypatch.setattr(redis_store_module, "RETRY_DELAYS_S", (0.01, 0.01))
    monkeypatch.setattr(redis_store_module, "FLUSH_INTERVAL_S", 0.05)
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client, other_client = shared_redis(url, timeout_s=0.5), shared_redis(url, timeout_s=0.5)
    store, other_replica = RedisIdempotencyStore(client), RedisIdempotencyStore(other_client)
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    own_redis.kill()
    restarted = None
    try:
        assert not await store.complete(lease, StoredResponse(200, (), b"paid"))
        await asyncio.sleep(0.5)  # ten flush rounds against a Redis that is down
        assert store.held_completions == 1
        replay = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
        assert isinstance(replay, Replay) and replay.response.body == b"paid"
        with pytest.raises(ConflictError) as reused:
            await store.claim("t1", "k1", "another-body", wait_s=0.0, lease_s=LEASE_S)
        assert reused.value.code == "idempotency_key_reuse"
        restarted = ManagedProcess(own_redis.argv, own_redis.port,
                                   log_path=tmp_path / "again.log").start()
        for _ in range(100):
            if not store.held_completions:
                break
            await asyncio.sleep(0.05)
        assert store.held_completions == 0
        elsewhere = await other_replica.claim("t1", "k1", FINGERPRINT, wait_s=0.0,
                                              lease_s=LEASE_S)
        assert isinstance(elsewhere, Replay) and elsewhere.response.body == b"paid"
    finally:
        if restarted is not None:
            restarted.stop()
        await client.aclose()
        await other_client.aclose()


_KEYED_CONFIG = """version: 1
deployments:
  - name: pt-fast
    model: openai/fast
    adapter: openai_passthrough
    api_base: http://127.0.0.1:9/v1
models:
  - name: fast
    deployments: [pt-fast]
routes:
  aliases: [auto]
  default_model: fast
server:
  idempotency_redis_url: {url}
policies:
  default:
    candidates: [fast]
"""


async def test_a_burst_of_keyed_requests_while_redis_pauses_is_claimed_whole(
        own_redis: ManagedProcess) -> None:
    """Redis pauses for 0.3 s (a snapshot's fork, a busy moment), well inside the store's 1 s
    timeout, while 150 keyed requests claim their keys: each claim waits for a connection and
    wins its lease. The service's client used to refuse every claim past its pool's 100
    connections at once (503 idempotency_store_unavailable) while Redis was healthy."""
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    store = idempotency_store(load_config_text(_KEYED_CONFIG.format(url=url)))
    assert isinstance(store, RedisIdempotencyStore)
    os.kill(own_redis.pid, signal.SIGSTOP)
    threading.Timer(0.3, os.kill, (own_redis.pid, signal.SIGCONT)).start()
    try:
        claims = await asyncio.gather(
            *(store.claim("t1", f"burst-{n}", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
              for n in range(150)),
            return_exceptions=True)
    finally:
        os.kill(own_redis.pid, signal.SIGCONT)
    refused = [claim for claim in claims if not isinstance(claim, Lease)]
    assert refused == []


async def test_a_refusal_of_writes_stands_through_releases_until_a_claim_stores(
        own_redis: ManagedProcess) -> None:
    """Out of memory under `noeviction`: a refused claim marks the store's writes refused;
    releasing and renewing a lease taken before (Redis still runs those: `DEL` and `PEXPIRE`
    add no memory) leave that standing, and so does a refused completion; the first claim
    whose `SET` runs once memory is back clears it."""
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = shared_redis(url, timeout_s=1.0)
    store = RedisIdempotencyStore(client)
    admin = redis.from_url(url)
    before = await store.claim("t1", "held", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    other = await store.claim("t1", "other", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(before, Lease) and isinstance(other, Lease)
    await admin.config_set("maxmemory-policy", "noeviction")
    await admin.config_set("maxmemory", 1)
    with pytest.raises(OverloadedError) as refused:
        await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert "refusing writes (out of memory" in refused.value.message
    assert await store.renew(other, LEASE_S)
    assert await store.release(before)
    assert not await store.complete(other, StoredResponse(200, (), b"{}"))
    refusal = store.writes.refusal
    assert refusal is not None and refusal.count == 2, refusal
    await admin.config_set("maxmemory", 0)
    assert isinstance(await store.claim("t1", "k2", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S),
                      Lease)
    assert store.writes.refusal is None
    await client.aclose()
    await admin.aclose()


async def test_the_end_of_an_outage_is_logged_at_the_first_claim_after_it(
        own_redis: ManagedProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Keyed requests refused while Redis is down log `idempotency_store_unavailable` (once per
    interval); the first claim after it comes back logs `idempotency_store_recovered` once, with
    how many failed: the log said when the guarantee was lost, never when it was back."""
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = shared_redis(url, timeout_s=0.5)
    store = RedisIdempotencyStore(client)
    own_redis.kill()
    restarted = None
    try:
        with caplog.at_level(logging.INFO, logger="slorouter.idempotency"):
            for n in range(3):
                with pytest.raises(OverloadedError):
                    await store.claim("t1", f"down-{n}", FINGERPRINT, wait_s=0.0,
                                      lease_s=LEASE_S)
            restarted = ManagedProcess(own_redis.argv, own_redis.port,
                                       log_path=tmp_path / "again.log")
            restarted.start()
            for n in range(2):
                await store.claim("t1", f"up-{n}", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    finally:
        if restarted is not None:
            restarted.stop()
        await client.aclose()
    events = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith("idempotency_store_")]
    assert events == ["idempotency_store_unavailable", "idempotency_store_recovered"], events
    recovered = next(r for r in caplog.records if r.getMessage() == "idempotency_store_recovered")
    assert getattr(recovered, "event_data", {})["failures"] == 3


@pytest.mark.parametrize("record", [
    b"d2|{\"v\": 2}", b"d|not json", b"d|{\"status\": 200}", b"i|\xff\xfe|x",
    b"d|{\"fingerprint\": \"f\", \"status\": 1000, \"headers\": [], \"body\": \"\"}"])
async def test_a_record_of_another_shape_is_refused_not_a_500(
        own_redis: ManagedProcess, record: bytes) -> None:
    """A record this version cannot read (the next format, a hand edit) was a 500 `KeyError` on
    every request with its key for the record's day (the rollout audit). Whether its request
    ran cannot be told, so it is not run: 422 `idempotency_record_unreadable`."""
    from router.errors import ConflictError
    from router.idempotency import scope_of

    url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = shared_redis(url, timeout_s=1.0)
    store = RedisIdempotencyStore(client)
    admin = redis.from_url(url)
    await admin.set(f"slorouter:idem:{scope_of('t1', 'odd')}", record)
    try:
        with pytest.raises(ConflictError) as refused:
            await store.claim("t1", "odd", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    finally:
        await client.aclose()
        await admin.aclose()
    assert refused.value.code == "idempotency_record_unreadable"
