"""The Redis idempotency store: safe across replicas sharing one Redis.

One string key per (tenant, key) scope, `{prefix}:{sha256(tenant, key)}`:
- claim: `SET key "i|<token>|<fingerprint>" NX PX lease` — exactly one replica wins the lease;
- complete: a Lua compare-and-set replaces the in-flight marker (only if it is still ours, or
  the key is gone: Redis lost it, restarted empty or flushed, and a retry must replay the answer,
  not run again) with `"d|" + JSON{fingerprint, status, headers, body(base64)}` and the result
  TTL;
- release: a Lua compare-and-delete drops the marker (only if it is still ours);
- renew: a Lua compare-and-extend (`PEXPIRE`, only if it is still ours: a holder whose lease
  ran out never takes it back from the replica that won it since). A key found gone is taken
  back, as `complete` does: Redis lost it (a failover, a restart empty, a flush) while the
  request still runs, and without its marker a client's retry would run the side effect again.
Duplicates that find an in-flight marker poll it with capped exponential backoff and jitter
until it turns into a result, disappears (released/expired: they then try to claim), or their
`wait_s` runs out. The client must be created with `decode_responses=False`.

A side effect's claim (`acting=True`) also sets `{key}:acting` = its fingerprint, for as long as
a record lives; settling (complete, release) drops it. A claim that wins the lease and finds
it was left by a holder that never settled (its replica was killed, lost its host, ran out of
memory): that request may have reached the provider, so the key is settled as a 504
`unknown_commit`, replayed to this and every later duplicate, instead of running it again
(it ran twice: the lease alone said only that no one held the key any more).

A completion Redis cannot take (down, hung, refusing writes) is held in the process until it
does: a duplicate arriving here meanwhile replays it from there, and a flusher tries the held
ones again every `FLUSH_INTERVAL_S` for as long as the record would have lived (it gave up after
~16 s, and a retry after a longer outage ran the side effect a second time). Held completions
die with the process, and a duplicate sent to another replica before Redis takes them finds
the key free once the lease ends: the guarantee across replicas needs Redis back before that.

Every write's refusal goes to `writes` (`router.redis_writes.WriteHealth`): a Redis that
answers but refuses writes (out of memory, a read-only replica) refuses every keyed request,
and `/readyz` says so from there. Only a write that stores something (the claim's `SET`, a
completion) tells it writes are taken again: out of memory, Redis still runs a release's or a
renewal's script (`DEL`, `PEXPIRE` free memory or keep it), which would clear it too soon.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import secrets
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from typing import Any

import orjson
import redis.asyncio as redis

from router.errors import OverloadedError, UnknownCommitError
from router.idempotency.types import (
    Claim,
    Lease,
    Replay,
    StoredResponse,
    error_response,
    key_reused,
    record_unreadable,
    scope_of,
    still_in_flight,
)
from router.logs import ThrottledEvent, event
from router.redis_auth import refusal
from router.redis_writes import WriteHealth, refusal_reason

log = logging.getLogger("slorouter.idempotency")

# When a command whose reply never came is tried again in the background (about 16 s in all).
RETRY_DELAYS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
# How often completions Redis did not take are tried again (the first time after the first of
# `RETRY_DELAYS_S`), and how many are held at most (past it, the oldest is given up, logged).
FLUSH_INTERVAL_S = 0.25
MAX_HELD_COMPLETIONS = 10_000


# What `_CLAIM` answers.
_TAKEN, _WON, _ORPHANED, _OTHER_BODY = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class _Held:
    """A completion Redis has not taken yet: its compare-and-set, and the answer to replay."""

    args: list[str | bytes | int]
    fingerprint: str
    response: StoredResponse
    until: float  # the event loop's time the record would expire at

# KEYS: the record, its acting marker. ARGV: our in-flight marker, lease ms, "1" for a side
# effect, its fingerprint, the record's TTL ms. 0: held by another (or settled); 1: ours;
# 2: ours, left by an acting holder that never settled; 3: that holder's body was another
# (our lease is dropped again: the key is reused).
_CLAIM = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local acting = redis.call('GET', KEYS[2])
if acting then
  if acting == ARGV[4] then
    return 2
  end
  redis.call('DEL', KEYS[1])
  return 3
end
if ARGV[3] == '1' then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
end
return 1
"""
_COMPARE_AND_SET = """
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or not current then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""
_COMPARE_AND_EXTEND = """
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisIdempotencyStore:
    """`IdempotencyStore` on a shared Redis."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "slorouter:idem",
        ttl_s: float = 86_400.0,
        poll_min_s: float = 0.01,
        poll_max_s: float = 0.25,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._poll_min_s = poll_min_s
        self._poll_max_s = poll_max_s
        self._rng = rng if rng is not None else random.Random()
        self._unavailable = ThrottledEvent(log, "idempotency_store_unavailable",
                                           recovered_name="idempotency_store_recovered")
        # Once per interval too: Redis down, every keyed request's give-back gives up.
        self._gave_up = ThrottledEvent(log, "idempotency_store_gave_up")
        self._background: set[asyncio.Task[None]] = set()  # give-backs and the flusher
        self._held: OrderedDict[str, _Held] = OrderedDict()  # by scope, oldest first
        self._flushing = False
        self.writes = WriteHealth("idempotency")
        self._claim_script = client.register_script(_CLAIM)
        self._cas = client.register_script(_COMPARE_AND_SET)
        self._cad = client.register_script(_COMPARE_AND_DELETE)
        self._cae = client.register_script(_COMPARE_AND_EXTEND)

    @property
    def client(self) -> redis.Redis:
        """The pooled client: `/readyz` checks Redis through it (no connection of its own)."""
        return self._client

    async def claim(
        self, tenant: str, key: str, fingerprint: str, *, wait_s: float, lease_s: float,
        acting: bool = False,
    ) -> Claim:
        """As `IdempotencyStore.claim`; with Redis unreachable, a 503 (the request cannot be
        guaranteed to run once, so it does not run), unless its answer is held here."""
        held = self._held.get(scope_of(tenant, key)) if self._held else None
        if held is not None:
            if held.fingerprint != fingerprint:
                raise key_reused()
            return Replay(held.response)
        try:
            claim = await self._claim(tenant, key, fingerprint, wait_s=wait_s, lease_s=lease_s,
                                      acting=acting)
        except (redis.RedisError, OSError) as exc:
            raise self._down(exc) from None
        self._unavailable.recovered()
        return claim

    async def renew(self, lease: Lease, lease_s: float) -> bool:
        """As `IdempotencyStore.renew`; with Redis unreachable, the 503 `claim` raises."""
        marker = _marker(lease.token, lease.fingerprint)
        try:
            return bool(await self._cae(keys=[self._key(lease.scope)],
                                        args=[marker, _ms(lease_s)]))
        except (redis.RedisError, OSError) as exc:
            raise self._down(exc) from None

    def _down(self, exc: BaseException) -> OverloadedError:
        self._unavailable.report(error=type(exc).__name__)
        self.writes.failed(exc)
        if refusal(exc) is not None:  # credentials or database: only an operator mends it
            return OverloadedError(
                "the idempotency store refuses the router's Redis credentials or database: "
                "requests with an Idempotency-Key are refused until the router's configuration "
                "is fixed (retrying will not help)", code="idempotency_store_misconfigured")
        refused = refusal_reason(exc)
        why = "unavailable" if refused is None else f"refusing writes ({refused})"
        return OverloadedError(f"the idempotency store is {why}; retry shortly",
                               code="idempotency_store_unavailable", retry_after=1.0)

    async def _claim(
        self, tenant: str, key: str, fingerprint: str, *, wait_s: float, lease_s: float,
        acting: bool,
    ) -> Claim:
        scope = scope_of(tenant, key)
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + wait_s
        poll_s = self._poll_min_s
        contended = False
        while True:
            lease = Lease(scope, secrets.token_hex(16), fingerprint, contended)
            won = await self._try_lease(lease, lease_s, acting)
            if won == _WON:
                return lease
            if won == _ORPHANED:
                return await self._settle_orphaned(lease)
            if won == _OTHER_BODY:
                raise key_reused()
            found = await self._read(scope, fingerprint, lease)
            if found is not None:
                return found
            left = give_up_at - loop.time()
            if left <= 0:
                ttl_ms = await self._client.pttl(self._key(scope))
                raise still_in_flight(max(0.0, ttl_ms / 1000.0))
            await asyncio.sleep(min(left, self._rng.uniform(0.5, 1.0) * poll_s))
            poll_s = min(self._poll_max_s, poll_s * 2)
            contended = True

    async def _try_lease(self, lease: Lease, lease_s: float, acting: bool) -> int:
        """`SET NX` the lease (`_CLAIM`: `_TAKEN`, `_WON`, `_ORPHANED` or `_OTHER_BODY`).
        Without its reply (cancelled while the command is on its way: the client left, the
        deadline, shutdown; or Redis too slow to answer in time) the SET may still land: the
        lease is then given back as soon as it does, so duplicates do not wait the lease out
        for a request that never ran."""
        setting = asyncio.ensure_future(self._claim_script(
            keys=self._keys(lease.scope),
            args=[_marker(lease.token, lease.fingerprint), _ms(lease_s), "1" if acting else "0",
                  lease.fingerprint, self._ttl_ms]))
        try:
            leased = int(await asyncio.shield(setting))
        except asyncio.CancelledError:
            setting.add_done_callback(lambda done: self._give_back_unless_refused(done, lease))
            raise
        except redis.ResponseError:  # refused (out of memory, READONLY): it never ran
            raise
        except (redis.RedisError, OSError):
            self._give_back(lease)
            raise
        self.writes.accepted()  # taken or not, the SET ran
        return leased

    async def _settle_orphaned(self, lease: Lease) -> Replay:
        """The key won from a side effect's holder that never settled it: stored as the 504
        `unknown_commit` it is (the request may have reached the provider), and replayed."""
        event(log, "idempotency_holder_lost", logging.WARNING,
              hint="a side effect's holder stopped without settling its key (its replica was "
              "killed?); answered unknown_commit, not run again")
        response = error_response(UnknownCommitError(
            "an earlier request with this Idempotency-Key stopped without an answer (its "
            "replica ended) after it may have reached the upstream; it may have taken effect, "
            "so this key does not run it again: use a new key to run it knowingly",
            code="unknown_commit"))
        await self.complete(lease, response)  # held here if Redis does not take it now
        return Replay(response)

    def _give_back_unless_refused(self, done: asyncio.Future[Any], lease: Lease) -> None:
        if _may_have_set(done):
            self._give_back(lease)

    def _give_back(self, lease: Lease) -> None:
        """Release `lease` in the background, which may not be set yet (a SET without its reply
        lands late) or may never be: tried after each of `RETRY_DELAYS_S` until it is found and
        dropped (Redis errors meanwhile are tried again). Giving up is logged, throttled, when
        Redis did not answer the last try: the lease may then be held until it expires. When it
        answered without the lease there, the SET never took (the key held another request's
        lease or answer) or its lease ran out: nothing was left to give back."""
        marker, keys = _marker(lease.token, lease.fingerprint), self._keys(lease.scope)

        async def give_back() -> None:
            answered = False
            for delay in RETRY_DELAYS_S:
                await asyncio.sleep(delay)
                try:
                    if await self._cad(keys=keys, args=[marker]):
                        return
                    answered = True
                except (redis.RedisError, OSError) as exc:
                    answered = False
                    self.writes.failed(exc)
            if not answered:
                self._gave_up.report(step="give_back")

        self._in_background(give_back())

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._background.discard)

    async def complete(self, lease: Lease, response: StoredResponse) -> bool:
        """Store the answer; False if another request holds or settled the key, or Redis is
        unreachable (the answer is then held here until Redis takes it; the answer itself is
        still sent). A key found gone (Redis restarted empty, flushed) takes the answer."""
        stored = _encode_done(lease.fingerprint, response)
        marker = _marker(lease.token, lease.fingerprint)
        keys = self._keys(lease.scope)
        args: list[str | bytes | int] = [marker, stored, self._ttl_ms]
        try:
            done = await self._cas(keys=keys, args=args)
        except (redis.RedisError, OSError) as exc:
            self.writes.failed(exc)
            event(log, "idempotency_store_failed", logging.WARNING, step="complete",
                  error=type(exc).__name__)
            # Held and tried again: otherwise the finished request's in-flight marker stays,
            # its duplicates get 409, and once the lease ends one runs it again.
            # An exact-size copy of the answer: orjson's output holds 4 KiB however short
            # (`MemoryIdempotencyStore.complete`); up to 10,000 are held while Redis is down.
            kept = replace(response, body=bytes(memoryview(response.body)))
            self._hold(lease.scope, _Held(args, lease.fingerprint, kept,
                                          asyncio.get_running_loop().time() + self._ttl_ms / 1000))
            return False
        if done:  # its SET ran (0: the key was another's, and nothing was written)
            self.writes.accepted()
        return bool(done)

    def _hold(self, scope: str, held: _Held) -> None:
        self._held[scope] = held
        if len(self._held) > MAX_HELD_COMPLETIONS:
            self._held.popitem(last=False)
            self._gave_up.report(step="complete")
        if not self._flushing:
            self._flushing = True
            self._in_background(self._flush())

    async def _flush(self) -> None:
        """Try the held completions again, oldest first, until none is left: a round stops at
        the first Redis error (it is still down) and the next begins `FLUSH_INTERVAL_S` later.
        Any reply settles one (0: the key is another's now, or an earlier try had landed)."""
        loop = asyncio.get_running_loop()
        try:
            delay = RETRY_DELAYS_S[0]
            while self._held:
                await asyncio.sleep(delay)
                delay = FLUSH_INTERVAL_S
                for scope, held in list(self._held.items()):
                    if loop.time() >= held.until:
                        self._held.pop(scope, None)
                        self._gave_up.report(step="complete")
                        continue
                    try:
                        stored = await self._cas(keys=self._keys(scope), args=held.args)
                    except (redis.RedisError, OSError) as exc:
                        self.writes.failed(exc)
                        break
                    if stored:
                        self.writes.accepted()
                    if self._held.get(scope) is held:
                        del self._held[scope]
        finally:
            self._flushing = False

    @property
    def held_completions(self) -> int:
        """Answers finished while Redis could not take them, held here until it does."""
        return len(self._held)

    async def release(self, lease: Lease) -> bool:
        """Drop the lease for a retry; with Redis unreachable it expires on its own."""
        marker = _marker(lease.token, lease.fingerprint)
        try:
            return bool(await self._cad(keys=self._keys(lease.scope), args=[marker]))
        except (redis.RedisError, OSError) as exc:
            self.writes.failed(exc)
            event(log, "idempotency_store_failed", logging.WARNING, step="release",
                  error=type(exc).__name__)
            return False

    def _key(self, scope: str) -> str:
        return f"{self._prefix}:{scope}"

    def _keys(self, scope: str) -> list[str]:
        """The record's key and its acting marker's (`_CLAIM`)."""
        key = self._key(scope)
        return [key, f"{key}:acting"]

    async def _read(self, scope: str, fingerprint: str, lease: Lease) -> Claim | None:
        """Replay, raise on a different body, or None (in flight, or gone: try again). The
        marker may be `lease`'s own: a SET NX that redis-py sent again after a lost connection
        finds the key its first send had set."""
        raw = await self._client.get(self._key(scope))
        if raw is None:
            return None
        data = raw.encode() if isinstance(raw, str) else raw
        kind, _, rest = data.partition(b"|")
        if kind == b"i":
            try:
                their_token, _, their_fingerprint = rest.decode().partition("|")
            except UnicodeDecodeError:  # not a marker this version wrote: never run it blind
                event(log, "idempotency_record_unreadable", logging.WARNING)
                raise record_unreadable() from None
            if their_token == lease.token:
                return lease
            if their_fingerprint != fingerprint:
                raise key_reused()
            return None
        done = _decode_done(rest) if kind == b"d" else None
        if done is None:  # another version's shape, or a hand edit: never run it blind
            event(log, "idempotency_record_unreadable", logging.WARNING)
            raise record_unreadable()
        stored_fingerprint, response = done
        if stored_fingerprint != fingerprint:
            raise key_reused()
        return Replay(response)


def _may_have_set(setting: asyncio.Future[Any]) -> bool:
    """Whether a finished claim may have left a lease: it did, or its reply never came. Not
    when the key was taken, the lease dropped again (another body) or Redis refused it (an
    error reply: it never ran)."""
    if setting.cancelled():
        return True
    error = setting.exception()
    if error is not None:
        return not isinstance(error, redis.ResponseError)
    return int(setting.result()) in (_WON, _ORPHANED)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _marker(token: str, fingerprint: str) -> str:
    return f"i|{token}|{fingerprint}"


def _encode_done(fingerprint: str, response: StoredResponse) -> bytes:
    payload = {
        "fingerprint": fingerprint,
        "status": response.status,
        "headers": [list(pair) for pair in response.headers],
        "body": base64.b64encode(response.body).decode(),
    }
    return b"d|" + orjson.dumps(payload)


def _decode_done(raw: bytes) -> tuple[str, StoredResponse] | None:
    """A finished request's record, or None when it is not of the shape this version writes
    (it raised, a 500 on every request with that key for the record's day)."""
    try:
        payload = orjson.loads(raw)
        headers = tuple((str(k), str(v)) for k, v in payload["headers"])
        body = base64.b64decode(payload["body"], validate=True)
        status = int(payload["status"])
        if not 100 <= status <= 599:  # replayed, it dropped the connection with no answer
            return None
        return str(payload["fingerprint"]), StoredResponse(status, headers, body)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
