"""Idempotency keys: one execution per (tenant, key), replays, conflicts, release, expiry.

Every behaviour runs against both stores; the Redis one against a real redis-server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import pytest
import redis.asyncio as redis

from router.errors import (
    ConflictError,
    OverloadedError,
    ProviderUnavailableError,
    RequestError,
    StillRunningError,
    UnknownCommitError,
)
from router.idempotency import (
    IdempotencyStore,
    Lease,
    MemoryIdempotencyStore,
    OnceResult,
    RedisIdempotencyStore,
    Replay,
    StoredResponse,
    body_fingerprint,
    keep_renewed,
    run_once,
    scope_of,
    validate_key,
)
from router.wiring import shared_redis
from tests.reliability.fakes import FakeClock

WAIT_S = 10.0
LEASE_S = 30.0
TTL_S = 60.0
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "pay the invoice"}]}'
FINGERPRINT = body_fingerprint(BODY)
DUPLICATES = 100


def response(text: str) -> StoredResponse:
    return StoredResponse(200, (("content-type", "application/json"),), text.encode())


class Upstream:
    """Counts executions; each takes a little while so duplicates overlap it."""

    def __init__(self, result: StoredResponse | None = None,
                 error: BaseException | None = None) -> None:
        self.calls = 0
        self.result = result if result is not None else response('{"ok": true}')
        self.error = error

    async def __call__(self) -> StoredResponse:
        self.calls += 1
        await asyncio.sleep(0.02)
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryIdempotencyStore(FakeClock(), ttl_s=TTL_S)
        return
    client = redis.from_url(request.getfixturevalue("redis_url"))
    yield RedisIdempotencyStore(client, prefix=f"test:{uuid.uuid4().hex}", ttl_s=TTL_S)
    await client.aclose()


async def once(store: IdempotencyStore, upstream: Upstream, *, tenant: str = "t1",
               fingerprint: str = FINGERPRINT) -> OnceResult:
    return await run_once(store, tenant, "k1", fingerprint, upstream,
                          wait_s=WAIT_S, lease_s=LEASE_S)


async def test_concurrent_duplicates_execute_exactly_once(store: IdempotencyStore) -> None:
    """100 concurrent requests with one key cause one execution; 99 replay its result."""
    upstream = Upstream()
    results = await asyncio.gather(*(once(store, upstream) for _ in range(DUPLICATES)))
    assert upstream.calls == 1
    assert sum(r.replayed for r in results) == DUPLICATES - 1
    assert {r.response for r in results} == {upstream.result}


async def test_duplicate_after_completion_gets_the_stored_response(
    store: IdempotencyStore,
) -> None:
    """A later duplicate gets the same status, headers and body bytes, without executing."""
    stored = StoredResponse(201, (("content-type", "text/plain"),), b"\x00binary\xff")
    first, again = Upstream(stored), Upstream()
    await once(store, first)
    replay = await once(store, again)
    assert replay.replayed and replay.response == stored
    assert again.calls == 0


async def test_same_key_different_body_is_a_422(store: IdempotencyStore) -> None:
    """Reusing a key with another body is refused with a conflict error."""
    await once(store, Upstream())
    with pytest.raises(ConflictError) as caught:
        await once(store, Upstream(), fingerprint=body_fingerprint(b'{"other": 1}'))
    assert caught.value.status_code == 422
    assert caught.value.code == "idempotency_key_reuse"


async def test_failure_releases_the_key_for_a_retry(store: IdempotencyStore) -> None:
    """After a failed execution the same key runs again."""
    with pytest.raises(ProviderUnavailableError):
        await once(store, Upstream(error=ProviderUnavailableError("503")))
    retry = Upstream()
    result = await once(store, retry)
    assert retry.calls == 1 and not result.replayed


async def test_unknown_commit_is_stored_not_retried(store: IdempotencyStore) -> None:
    """After an unknown commit, duplicates get the stored 504 instead of a second execution."""
    with pytest.raises(UnknownCommitError):
        await once(store, Upstream(error=UnknownCommitError("may have happened")))
    again = Upstream()
    replay = await once(store, again)
    assert again.calls == 0
    assert replay.response.status == UnknownCommitError.status_code


async def test_keys_are_scoped_per_tenant(store: IdempotencyStore) -> None:
    """The same key under two tenants is two independent requests."""
    upstream = Upstream()
    await once(store, upstream, tenant="alpha")
    await once(store, upstream, tenant="beta")
    assert upstream.calls == 2


async def test_duplicate_gives_up_waiting_with_a_conflict(store: IdempotencyStore) -> None:
    """A duplicate that cannot wait for the in-flight request gets a 409
    `idempotency_key_in_flight` asking it to come back in a second, not when the lease ends."""
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    with pytest.raises(ConflictError) as caught:
        await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert caught.value.code == "idempotency_key_in_flight"
    assert caught.value.status_code == 409 and caught.value.retry_after == 1.0
    assert await store.release(lease)


async def test_stale_lease_cannot_overwrite(store: IdempotencyStore) -> None:
    """Completing or releasing with a lease that was released (or expired) changes nothing for
    the request holding the key since. (A key left free takes a late answer in the Redis
    store: `test_idempotency_redis_faults.py`.)"""
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    assert await store.release(lease)
    holder = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(holder, Lease)
    assert not await store.complete(lease, response("late"))
    assert not await store.release(lease)
    assert await store.complete(holder, response("holder"))
    replay = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(replay, Replay) and replay.response.body == b"holder"


async def test_memory_entries_expire_after_ttl() -> None:
    """In memory, a completed entry is gone after its TTL and the key executes again."""
    clock = FakeClock()
    store = MemoryIdempotencyStore(clock, ttl_s=TTL_S)
    upstream = Upstream()
    await once(store, upstream)
    clock.advance(TTL_S + 1)
    await once(store, upstream)
    assert upstream.calls == 2


async def test_memory_store_full_evicts_the_flooding_tenants_records_not_anothers() -> None:
    """A tenant sending thousands of keys (cheap: result-cache hits complete claims too) fills
    the bounded store; the records evicted to make room are its own, so another tenant's
    completed request still replays instead of running a second time on its retry."""
    store = MemoryIdempotencyStore(FakeClock(), ttl_s=TTL_S, max_entries=8)
    victim = Upstream()
    await once(store, victim, tenant="alpha")
    flood = Upstream()
    for number in range(50):
        await run_once(store, "beta", f"flood-{number}", FINGERPRINT, flood,
                       wait_s=WAIT_S, lease_s=LEASE_S)
    assert len(store) == 8
    retry = await once(store, victim, tenant="alpha")
    assert retry.replayed and victim.calls == 1
    newest = await run_once(store, "beta", "flood-49", FINGERPRINT, flood,
                            wait_s=WAIT_S, lease_s=LEASE_S)
    assert newest.replayed and flood.calls == 50  # the flood loses its oldest, not its newest


class CountingClock(FakeClock):
    """A `FakeClock` that counts its reads: the memory store reads it once per entry it looks at."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return super().__call__()


@pytest.mark.parametrize("size", [1_000, 10_000])
async def test_memory_store_full_makes_room_without_a_pass_over_its_entries(size: int) -> None:
    """A full store stays full under steady traffic (records live a day): each new key then
    evicts one record, looking at a few entries, not at all of them (at 100,000 entries such a
    pass held the event loop for 60 ms per new key). Expired records still go first, and the
    flooding tenant's oldest is the one evicted."""
    clock = CountingClock()
    store = MemoryIdempotencyStore(clock, ttl_s=TTL_S, max_entries=size)
    for number in range(size):
        lease = await store.claim("beta" if number else "alpha", f"k{number}", FINGERPRINT,
                                  wait_s=WAIT_S, lease_s=LEASE_S)
        assert isinstance(lease, Lease)
        await store.complete(lease, response(str(number)))
    clock.reads = 0
    lease = await store.claim("gamma", "new", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S)
    assert clock.reads < 20 and len(store) == size
    assert isinstance(lease, Lease)
    await store.complete(lease, response("new"))
    stored = await store.claim("alpha", "k0", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S)
    assert isinstance(stored, Replay)  # alpha's only record survives the flood's eviction
    evicted = await store.claim("beta", "k1", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S)
    assert isinstance(evicted, Lease)  # beta's oldest was evicted: it runs again
    clock.advance(TTL_S)
    await store.claim("gamma", "after", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S)
    assert len(store) == 1  # the rest expired: completed records by TTL, k1's lease too


async def test_memory_expired_lease_lets_a_new_claim_proceed() -> None:
    """A leaked in-flight marker stops blocking the key once its lease runs out."""
    clock = FakeClock()
    store = MemoryIdempotencyStore(clock)
    leaked = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    clock.advance(LEASE_S)
    fresh = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(leaked, Lease) and isinstance(fresh, Lease)
    assert not await store.complete(leaked, response("stale"))


@pytest.mark.parametrize("turns", range(6))
async def test_memory_duplicate_cancelled_as_the_key_frees_stops_waiting(turns: int) -> None:
    """A duplicate whose client leaves in the turns after the key is released stops waiting:
    cancelled once its wait had ended (3.11's `wait_for` swallowed that), it went round again
    and waited on the duplicate that won the key meanwhile, for a client already gone."""
    store = MemoryIdempotencyStore(FakeClock())
    holder = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(holder, Lease)
    staying = asyncio.ensure_future(
        store.claim("t1", "k1", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S))
    leaving = asyncio.ensure_future(
        store.claim("t1", "k1", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S))
    for _ in range(3):  # both wait on the holder
        await asyncio.sleep(0)
    assert not staying.done() and not leaving.done()
    assert await store.release(holder)  # the holder failed: the key is free again
    for _ in range(turns):
        await asyncio.sleep(0)
    leaving.cancel()  # its client leaves now
    done, _ = await asyncio.wait({staying, leaving}, timeout=2.0)
    assert leaving in done and leaving.cancelled(), "a gone client's duplicate kept waiting"
    won = staying.result()
    assert isinstance(won, Lease) and won.contended
    assert await store.release(won)


async def test_redis_entries_carry_their_ttls(redis_url: str) -> None:
    """In Redis the in-flight marker has the lease TTL and the stored result the result TTL."""
    client = redis.from_url(redis_url)
    prefix = f"test:{uuid.uuid4().hex}"
    store = RedisIdempotencyStore(client, prefix=prefix, ttl_s=TTL_S)
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    key = f"{prefix}:{scope_of('t1', 'k1')}"
    assert 0 < await client.pttl(key) <= LEASE_S * 1000
    assert await store.complete(lease, response("done"))
    assert LEASE_S * 1000 < await client.pttl(key) <= TTL_S * 1000
    await client.aclose()


def test_fingerprint_ignores_json_key_order() -> None:
    """Two JSON bodies differing only in key order have the same fingerprint."""
    assert body_fingerprint(b'{"a": 1, "b": [1, 2]}') == body_fingerprint(b'{"b":[1,2],"a":1}')
    assert body_fingerprint(b'{"a": 1}') != body_fingerprint(b'{"a": 2}')


@pytest.mark.parametrize("bad", ["", "x" * 256, "caf\u00e9", "tab\there"])
def test_unusable_keys_are_rejected(bad: str) -> None:
    """Empty, over-long and non-printable-ASCII keys are request errors."""
    with pytest.raises(RequestError) as caught:
        validate_key(bad)
    assert caught.value.param == "Idempotency-Key"



class SlowReplies:
    """A TCP relay to Redis that holds Redis's replies back while `slow` is set: a command
    reaches Redis and runs, and its client waits for the answer."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.slow = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                       held: bool) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    while held and self.slow.is_set():
                        await asyncio.sleep(0.01)
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer, False),
                             pipe(upstream_reader, writer, True), return_exceptions=True)


async def test_a_redis_claim_cancelled_while_its_set_is_in_flight_gives_the_lease_back(
        redis_url: str) -> None:
    """The claim is cancelled (its client left) after its `SET NX` ran in Redis but before the
    reply came: the lease is released once the reply comes, so a duplicate claims the key at
    once instead of waiting the whole lease out for a request that never ran (before, the
    cancelled client dropped the reply and the lease stayed for `lease_s`)."""
    target = redis.from_url(redis_url).connection_pool.connection_kwargs
    relay = SlowReplies((target["host"], target["port"]))
    client = redis.from_url(await relay.start())
    prefix = f"test:{uuid.uuid4().hex}"
    store = RedisIdempotencyStore(client, prefix=prefix, ttl_s=TTL_S)
    await client.ping()  # connected before replies are held
    relay.slow.set()
    claiming = asyncio.create_task(
        store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S))
    await asyncio.sleep(0.2)  # the SET has run in Redis; its reply is held
    claiming.cancel()
    with pytest.raises(asyncio.CancelledError):
        await claiming
    relay.slow.clear()
    direct = redis.from_url(redis_url)
    key = f"{prefix}:{scope_of('t1', 'k1')}"
    deadline = asyncio.get_running_loop().time() + 3.0
    while await direct.exists(key) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    assert not await direct.exists(key)
    await client.aclose()
    await direct.aclose()
    assert relay.server is not None
    relay.server.close()


async def test_a_redis_claim_whose_reply_times_out_gives_the_lease_back(redis_url: str) -> None:
    """Redis runs the claim's `SET NX` but answers after the client's socket timeout: the
    request is refused (503, it never runs), and the lease that landed all the same is given
    back, so a retry with the key is not blocked for the whole lease (it was, ~2 minutes)."""
    target = redis.from_url(redis_url).connection_pool.connection_kwargs
    relay = SlowReplies((target["host"], target["port"]))
    client = shared_redis(await relay.start(), timeout_s=0.3)
    prefix = f"test:{uuid.uuid4().hex}"
    store = RedisIdempotencyStore(client, prefix=prefix, ttl_s=TTL_S)
    await client.ping()
    relay.slow.set()
    started = asyncio.get_running_loop().time()
    with pytest.raises(OverloadedError) as refused:
        await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert refused.value.code == "idempotency_store_unavailable"
    # One timeout, not two: the client does not send the SET again after its timeout.
    assert asyncio.get_running_loop().time() - started < 0.55
    direct = redis.from_url(redis_url)
    key = f"{prefix}:{scope_of('t1', 'k1')}"
    assert await direct.exists(key)  # the SET ran; only its reply is late
    relay.slow.clear()
    assert await _until(lambda: _absent(direct, key), 3.0)
    retry = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(retry, Lease)
    await client.aclose()
    await direct.aclose()
    assert relay.server is not None
    relay.server.close()


async def test_a_redis_completion_that_fails_is_kept_trying_until_it_is_stored(
        redis_url: str) -> None:
    """Redis holds writes (`CLIENT PAUSE ... WRITE`) past the client's timeout when the answer
    is stored: the store keeps trying in the background, and the answer replaces the in-flight
    marker once Redis takes writes again, so duplicates replay it (before, the marker stayed:
    duplicates got 409, and once the lease ended one ran the request again)."""
    client = shared_redis(redis_url, timeout_s=0.3)
    store = RedisIdempotencyStore(client, prefix=f"test:{uuid.uuid4().hex}", ttl_s=TTL_S)
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    admin = redis.from_url(redis_url)
    await admin.execute_command("CLIENT", "PAUSE", "800", "WRITE")
    assert not await store.complete(lease, response("paid"))
    await asyncio.sleep(0.6)  # past the pause: a claim's SET during it is refused (503)
    replay = await store.claim("t1", "k1", FINGERPRINT, wait_s=5.0, lease_s=LEASE_S)
    assert isinstance(replay, Replay) and replay.response.body == b"paid"
    await client.aclose()
    await admin.aclose()


async def test_a_pooled_redis_connection_redis_closed_costs_no_request(redis_url: str) -> None:
    """Redis drops the store's idle pooled connection (a restart, its idle `timeout`, a proxy):
    the next claim is sent again on a new connection instead of failing with 503 while Redis
    is healthy."""
    client = shared_redis(redis_url, timeout_s=1.0)
    store = RedisIdempotencyStore(client, prefix=f"test:{uuid.uuid4().hex}", ttl_s=TTL_S)
    assert isinstance(await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0,
                                        lease_s=LEASE_S), Lease)
    admin = redis.from_url(redis_url)
    killed = await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert killed >= 1
    lease = await store.claim("t1", "k2", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    await client.aclose()
    await admin.aclose()


async def _absent(client: redis.Redis, key: str) -> bool:
    return not await client.exists(key)


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_renew_extends_only_a_lease_still_held(store: IdempotencyStore) -> None:
    """`renew` (compare-and-extend) keeps a held lease; a completed or released one is never
    taken back."""
    held = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    done = await store.claim("t1", "k2", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(held, Lease) and isinstance(done, Lease)
    assert not held.contended
    assert await store.renew(held, LEASE_S)
    assert await store.complete(done, response("done"))
    assert not await store.renew(done, LEASE_S)
    assert isinstance(await store.claim("t1", "k2", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S),
                      Replay)
    if isinstance(store, MemoryIdempotencyStore):  # Redis cannot tell a released key from a
        assert await store.release(held)          # lost one, and takes a lost one back
        assert not await store.renew(held, LEASE_S)


async def test_renewing_takes_back_a_key_redis_lost(redis_url: str) -> None:
    """A key Redis lost while its request runs (a failover, a restart empty) is taken back at
    the next renewal: a client's retry then finds the request in flight instead of running the
    side effect a second time. Another holder's key is never taken."""
    client = redis.from_url(redis_url)
    prefix = f"test:{uuid.uuid4().hex}"
    store = RedisIdempotencyStore(client, prefix=prefix, ttl_s=TTL_S)
    lease = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(lease, Lease)
    assert await client.delete(f"{prefix}:{lease.scope}") == 1  # Redis lost it
    assert await store.renew(lease, LEASE_S)
    with pytest.raises(StillRunningError) as in_flight:
        await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert in_flight.value.status_code == 409
    assert 0 < await client.pttl(f"{prefix}:{lease.scope}") <= LEASE_S * 1000
    await client.delete(f"{prefix}:{lease.scope}")
    other = await store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(other, Lease)
    assert not await store.renew(lease, LEASE_S)  # the other holder keeps it
    assert await store.complete(other, response("other"))
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def real_time_store(request: pytest.FixtureRequest) -> AsyncIterator[IdempotencyStore]:
    """As `store`, with leases expiring in real time (the memory store on the monotonic
    clock)."""
    if request.param == "memory":
        yield MemoryIdempotencyStore(time.monotonic, ttl_s=TTL_S)
        return
    client = redis.from_url(request.getfixturevalue("redis_url"))
    yield RedisIdempotencyStore(client, prefix=f"test:{uuid.uuid4().hex}", ttl_s=TTL_S)
    await client.aclose()


async def test_an_expired_lease_is_not_taken_back_by_renewing(
        real_time_store: IdempotencyStore) -> None:
    """A holder whose lease ran out (it stalled) and was won by a duplicate cannot renew it:
    the duplicate keeps the key, and it knows it waited for another holder."""
    stalled = await real_time_store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=0.1)
    winner = await real_time_store.claim("t1", "k1", FINGERPRINT, wait_s=2.0, lease_s=LEASE_S)
    assert isinstance(stalled, Lease) and isinstance(winner, Lease)
    assert winner.contended
    assert not await real_time_store.renew(stalled, LEASE_S)
    assert not await real_time_store.complete(stalled, response("stale"))
    assert await real_time_store.complete(winner, response("winner"))


async def test_run_once_renews_a_short_lease_while_it_executes(
        real_time_store: IdempotencyStore) -> None:
    """A lease of 0.3 s is held through a 1.2 s execution (renewed every 0.1 s): a duplicate
    meanwhile waits for it and replays; the lease is not renewed after it completes."""
    upstream = Upstream()

    async def slow() -> StoredResponse:
        await asyncio.sleep(1.2)
        return await upstream()

    first = asyncio.ensure_future(run_once(real_time_store, "t1", "k1", FINGERPRINT, slow,
                                           wait_s=WAIT_S, lease_s=0.3))
    await asyncio.sleep(0.6)
    duplicate = await run_once(real_time_store, "t1", "k1", FINGERPRINT, slow,
                               wait_s=WAIT_S, lease_s=0.3)
    assert duplicate.replayed and not (await first).replayed
    assert upstream.calls == 1


async def test_a_holder_that_stops_renewing_frees_its_key_within_a_lease(
        real_time_store: IdempotencyStore) -> None:
    """A renewal task that ends (its replica died) lets a duplicate win within a lease, not
    after the request's whole deadline."""
    lease = await real_time_store.claim("t1", "k1", FINGERPRINT, wait_s=0.0, lease_s=0.3)
    assert isinstance(lease, Lease)
    renewing = keep_renewed(real_time_store, lease, lease_s=0.3)
    await asyncio.sleep(0.5)
    renewing.cancel()  # as if the holder's process stopped
    started = time.monotonic()
    won = await real_time_store.claim("t1", "k1", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S)
    assert isinstance(won, Lease) and won.contended
    assert time.monotonic() - started < 0.5


async def test_a_side_effects_holder_lost_unsettled_leaves_an_unknown_commit(
        redis_url: str) -> None:
    """A side effect's holder that stops without settling its key (its replica SIGKILLed
    mid-call) may have reached the provider: the duplicate that wins the key once the lease
    ends gets a stored 504 `unknown_commit`, and so does every later one, instead of running
    it again (the reliability audit: a retry at the other replica ran the payment twice)."""
    client = redis.from_url(redis_url)
    store = RedisIdempotencyStore(client, prefix=f"test:{uuid.uuid4().hex}", ttl_s=TTL_S)
    lost = await store.claim("t1", "pay", FINGERPRINT, wait_s=0.0, lease_s=0.2, acting=True)
    assert isinstance(lost, Lease)  # ... and its process dies: no renewal, no settling
    duplicate = await store.claim("t1", "pay", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S,
                                  acting=True)
    assert isinstance(duplicate, Replay) and duplicate.response.status == 504
    assert orjson.loads(duplicate.response.body)["error"]["code"] == "unknown_commit"
    later = await store.claim("t1", "pay", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S)
    assert isinstance(later, Replay) and later.response == duplicate.response
    with pytest.raises(ConflictError):  # another body under the key is still a reuse
        await store.claim("t1", "pay", "another", wait_s=0.0, lease_s=LEASE_S, acting=True)
    await client.aclose()


@pytest.mark.parametrize("settles", ["complete", "release"])
async def test_a_settled_side_effect_or_a_lost_read_leaves_no_acting_mark(
        redis_url: str, settles: str) -> None:
    """Settling drops the mark (a released side effect, refused before it acted, runs again
    with its key; a completed one replays its answer); a read's holder lost unsettled frees
    its key as before."""
    client = redis.from_url(redis_url)
    prefix = f"test:{uuid.uuid4().hex}"
    store = RedisIdempotencyStore(client, prefix=prefix, ttl_s=TTL_S)
    lease = await store.claim("t1", "pay", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S, acting=True)
    assert isinstance(lease, Lease)
    assert await client.exists(f"{prefix}:{scope_of('t1', 'pay')}:acting")
    if settles == "complete":
        assert await store.complete(lease, response("paid"))
    else:
        assert await store.release(lease)
    assert not await client.exists(f"{prefix}:{scope_of('t1', 'pay')}:acting")
    again = await store.claim("t1", "pay", FINGERPRINT, wait_s=0.0, lease_s=LEASE_S,
                              acting=True)
    assert isinstance(again, Replay if settles == "complete" else Lease)
    read = await store.claim("t1", "read", FINGERPRINT, wait_s=0.0, lease_s=0.2)
    assert isinstance(read, Lease)  # lost unsettled
    won = await store.claim("t1", "read", FINGERPRINT, wait_s=WAIT_S, lease_s=LEASE_S)
    assert isinstance(won, Lease) and won.contended
    await client.aclose()
