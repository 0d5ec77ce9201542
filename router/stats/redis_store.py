"""The Redis-shared statistics store: replicas publish their own estimators and merge the others'.

Reads and writes in the request path go to the wrapped `LocalStatsStore` (no Redis I/O there).
A background loop (`start()` / `stop()`, or `sync_once()` driven by the caller) every
`sync_interval_s`:
1. pushes this replica's *changed* key states (full state per key, so pushes are idempotent and
   a lost push is repaired by the next) into `P:r:<replica>:data`, with a per-field push sequence
   in `P:r:<replica>:ver`, and a small `P:r:<replica>:meta` document (sequence, in-flight counts);
   all expire after `replica_ttl_s` without a push; the replica is listed in the zset `P:replicas`;
2. for each other live replica whose sequence moved, fetches only the fields that changed and
   hands them to the local store, which merges them into its summaries.
When Redis fails (down, slow, a lost connection), the replica drops what it learned from others
(its local view remains), reports `healthy = False` with the error in `status()`, logs
`stats.redis.unavailable`, and re-publishes everything once Redis answers again
(`stats.redis.recovered`). A Redis that lost what was pushed without a failure seen in between
(restarted between two syncs, flushed, its keys evicted) is found by the push itself: the
replica was not listed any more. Everything is then re-published at the next sync
(`stats.redis.republished`), and the others read a replica that was gone and came back whole.

A Redis that answers but refuses writes (out of memory under `noeviction`, a read-only replica,
MISCONF: `router.redis_writes`) is not such a failure: reads still work, so the pull goes on and
the replica keeps merging the others' statistics (those pushed before the refusal, or kept
current by a primary that a read-only replica follows). Only the push is lost: its keys stay
marked for the next push, which sends them once Redis takes writes. The refusal goes to
`writes`, which `/readyz` reads (`degraded`); `healthy` stays True (the replica still routes on
the shared view) and `status().detail` names the refusal. No replica renews its liveness while
writes are refused, so the others' statistics leave with their entries, `replica_ttl_s` after
their last accepted push, as any silent replica's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, RedisError, ResponseError
from redis.typing import EncodableT, FieldT

from policies.labels import Task
from router.logs import ThrottledEvent, event
from router.redis_writes import WriteHealth, refusal_reason
from router.stats.codec import decode_key, decode_state, encode_key, encode_state
from router.stats.decay import Decay
from router.stats.estimators import KeyState, KeySummary, StatKey
from router.stats.observation import Observation
from router.stats.store import Clock, LocalStatsStore, StatsView, StoreStatus
from router.steady_clock import steady_time

log = logging.getLogger("router.stats.redis")

# How far the measured lead of the Redis server's clock may move before it is taken anew (and
# the longest round trip it is taken from): a landmark off by this weighs what it holds
# 2 ** (this / half-life) off, 0.7% at the default 5 s half-life.
OFFSET_TOLERANCE_S = 0.05
# What a refused push costs, for `status()` and `/readyz`.
UNSHARED = "the other replicas do not see this one's statistics (it still merges theirs)"


@dataclass(frozen=True, slots=True)
class RedisSyncConfig:
    """How often to sync, how long a silent replica stays live, and the key prefix."""

    prefix: str = "slorouter:stats"
    sync_interval_s: float = 1.0
    replica_ttl_s: float = 30.0
    op_timeout_s: float = 2.0


class RedisStatsStore:
    """A `StatsStore` that shares what it learns through Redis; reads stay local."""

    def __init__(self, local: LocalStatsStore, client: aioredis.Redis,
                 config: RedisSyncConfig | None = None, replica_id: str | None = None,
                 clock: Clock = steady_time,
                 identities: Mapping[str, str] | None = None, server_time: bool = True) -> None:
        self.local = local
        # Deployment name -> `deployment_identity`: pushed with each key, and a key another
        # replica pushed for a name is merged only under the same identity (another model or
        # address under the name, on a replica of another config version, is another
        # deployment). A name missing here is pushed and merged under the identity "-".
        self._identities = dict(identities or {})
        self.config = config if config is not None else RedisSyncConfig()
        self.replica_id = replica_id if replica_id is not None else uuid.uuid4().hex[:12]
        self._client = client
        self._clock = clock
        self._decay = Decay(local.config.half_life_s)
        self._seq = int(clock() * 1000)  # grows across restarts of the same replica id
        self._seen_seq: dict[str, int] = {}
        self._seen_fields: dict[str, dict[str, int]] = {}
        self._healthy = True
        self._error = ""
        self._last_sync_at: float | None = None
        self._push_all = False
        self._pushed = False  # a push was taken: from then on this replica is listed
        self._task: asyncio.Task[None] | None = None
        self.writes = WriteHealth("statistics")
        # Replicas compare times through the server's clock (`_shared_time`); False: this
        # replica's own clock (tests driving a fake one, or a Redis that renamed TIME away).
        self._server_time = server_time
        self._offset: float | None = None  # the server's clock's lead over this replica's
        self._unreadable = ThrottledEvent(log, "stats.redis.unreadable_state")

    # -- StatsStore: delegated to the local store (no I/O) ------------------------------------
    def begin(self, deployment: str, t: float, prompt_tokens: int = 0,
              streamed: bool = True) -> int:
        return self.local.begin(deployment, t, prompt_tokens, streamed)

    def first_token(self, ticket: int) -> None:
        self.local.first_token(ticket)

    def end(self, ticket: int) -> None:
        self.local.end(ticket)

    def record(self, obs: Observation) -> None:
        self.local.record(obs)

    def view(self, deployment: str, task: Task, prompt_tokens: int) -> StatsView:
        return self.local.view(deployment, task, prompt_tokens)

    def task_summary(self, task: Task) -> KeySummary | None:
        return self.local.task_summary(task)

    def ttft_quantile(self, deployment: str, task: Task, q: float) -> tuple[float | None, float]:
        return self.local.ttft_quantile(deployment, task, q)

    def ttft_quantiles(self, deployment: str, task: Task,
                       qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]:
        return self.local.ttft_quantiles(deployment, task, qs)

    def e2e_quantiles(self, deployment: str, task: Task,
                      qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]:
        return self.local.e2e_quantiles(deployment, task, qs)

    def ttft_quantiles_at_size(self, deployment: str, prompt_tokens: int, qs: Sequence[float],
                               min_trust: float) -> tuple[tuple[float, ...] | None, float]:
        return self.local.ttft_quantiles_at_size(deployment, prompt_tokens, qs, min_trust)

    def refresh(self) -> int:
        return self.local.refresh()

    async def run_refresher(self) -> None:
        await self.local.run_refresher()

    @property
    def load(self) -> Mapping[str, int]:
        return self.local.load

    @property
    def healthy(self) -> bool:
        """Whether the last sync reached Redis, so the others' statistics are merged (also
        while Redis refuses this replica's pushes: `writes` says so)."""
        return self._healthy

    def status(self) -> StoreStatus:
        return StoreStatus(
            backend="redis", healthy=self._healthy, detail=self._detail(),
            keys=len(self.local.keys()), replicas_seen=len(self.local.remote_replicas()),
            last_sync_at=self._last_sync_at,
        )

    def _detail(self) -> str:
        """"shared", or why not: Redis failing (local view only) or refusing this replica's
        pushes (the others' statistics still merged)."""
        if not self._healthy:
            return f"local fallback: {self._error}"
        refused = self.writes.describe(UNSHARED)
        return refused if refused is not None else "shared"

    # -- background sync ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the periodic sync loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="stats-redis-sync")

    async def stop(self) -> None:
        """Stop the loop (a last push is attempted)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.sync_once()

    async def _run(self) -> None:
        while True:
            await self.sync_once()
            await asyncio.sleep(self.config.sync_interval_s)

    async def sync_once(self) -> bool:
        """Push own changes and pull others'; returns whether Redis answered (a push it refused
        is an answer: the pull still ran; `writes` holds the refusal)."""
        try:
            await asyncio.wait_for(self._sync(), self.config.op_timeout_s)
        except (RedisError, OSError, TimeoutError) as exc:
            self._on_failure(exc)
            return False
        except Exception as exc:  # a state it cannot merge: the loop goes on, on its own view
            self._on_failure(exc, "stats.redis.sync_failed", logging.ERROR)
            return False
        if not self._healthy:
            event(log, "stats.redis.recovered", replica=self.replica_id)
        self._healthy, self._error = True, ""
        self._last_sync_at = self._clock()
        return True

    def _on_failure(self, exc: BaseException, name: str = "stats.redis.unavailable",
                    level: int = logging.WARNING) -> None:
        if self._healthy:
            event(log, name, level, replica=self.replica_id, error=type(exc).__name__)
        self._healthy, self._error = False, type(exc).__name__
        self._push_all = True
        self._seen_seq.clear()
        self._seen_fields.clear()
        self.local.drop_remote(self.local.remote_replicas())

    async def _sync(self) -> None:
        shared_now, offset = await self._shared_time()
        await self._push_unless_refused(shared_now, offset)
        await self._pull(shared_now, offset)

    async def _shared_time(self) -> tuple[float, float]:
        """The Redis server's time, and its lead over this replica's clock (seconds).

        Replicas never compare their own clocks: each lists itself by the server's time and
        moves the landmarks of its statistics to it and back, so a replica whose clock is off
        (by an hour, or a second) neither drops the others from the list as gone nor has its
        observations weighed 2x per half-life of the offset. Without TIME (a Redis that renamed
        it away) this replica's own clock stands in.
        """
        sent = self._clock()
        if self._server_time:
            try:
                seconds, micros = await self._client.time()
            except ResponseError as exc:
                if not _no_such_command(exc):
                    raise  # BUSY, LOADING, MASTERDOWN...: this sync fails, the next asks again
                self._server_time = False
                event(log, "stats.redis.own_clock", logging.WARNING, replica=self.replica_id,
                      why="the Redis server does not run TIME (renamed away, or not allowed): "
                          "replicas compare their own clocks; keep them on NTP")
            else:
                received = self._clock()
                measured = seconds + micros / 1e6 - (sent + received) / 2.0
                # Kept while within the tolerance: the round trip's jitter would otherwise move
                # every landmark pushed by a few ms from one sync to the next.
                if self._offset is None or (abs(measured - self._offset) > OFFSET_TOLERANCE_S
                                            and received - sent < OFFSET_TOLERANCE_S):
                    self._offset = measured
                return received + self._offset, self._offset
        return sent, 0.0

    async def _push_unless_refused(self, now: float, offset: float) -> None:
        """Push, telling `writes` how it went. A refusal of writes ends only the push: Redis
        still answers reads, so the pull that follows keeps the others' statistics (the keys not
        pushed stay marked for the next push)."""
        try:
            await self._push(now, offset)
        except ResponseError as exc:
            if refusal_reason(exc) is None:
                raise
            self.writes.failed(exc)
            return
        self.writes.accepted()

    def _p(self, *parts: str) -> str:
        return ":".join((self.config.prefix, *parts))

    async def _push(self, now: float, offset: float) -> None:
        """Push under the server's time `now`, landmarks moved by `offset` to its clock."""
        if self._push_all:
            self.local.take_unpushed()
            states: Mapping[StatKey, KeyState] = self.local.own_states()
        else:
            states = self.local.take_unpushed()
        blobs: dict[FieldT, EncodableT] = {
            encode_key(k, self._identity(k[0])): encode_state(s, offset)
            for k, s in states.items()}
        seqs: dict[FieldT, EncodableT] = dict.fromkeys(blobs, self._seq + 1)
        self._seq += 1
        ttl = max(int(self.config.replica_ttl_s), 1)
        rid = self.replica_id
        meta = orjson.dumps({"seq": self._seq, "in_flight": self.local.in_flight_counts()})
        pipe = self._client.pipeline(transaction=True)
        if blobs:
            pipe.hset(self._p("r", rid, "data"), mapping=blobs)
            pipe.hset(self._p("r", rid, "ver"), mapping=seqs)
        pipe.set(self._p("r", rid, "meta"), meta, ex=ttl)
        pipe.expire(self._p("r", rid, "data"), ttl)
        pipe.expire(self._p("r", rid, "ver"), ttl)
        pipe.zadd(self._p("replicas"), {rid: now})
        pipe.zremrangebyscore(self._p("replicas"), "-inf", now - self.config.replica_ttl_s)
        try:
            replies = await pipe.execute()
        except BaseException:
            for key in states:
                self.local.mark_unpushed(key)
            raise
        # ZADD counts the members it added: this replica, listed since its last push, was not
        # there. Redis lost what it held (what this push did not carry is missing now).
        lost = self._pushed and not self._push_all and replies[-2] == 1
        if lost:
            event(log, "stats.redis.republished", logging.WARNING, replica=rid,
                  reason="this replica's entry was gone (Redis restarted, flushed or evicted)")
        self._push_all, self._pushed = lost, True

    async def _pull(self, now: float, offset: float) -> None:
        """Merge the replicas listed at the server's time `now` (landmarks moved back by
        `offset` to this replica's clock)."""
        live = await self._client.zrangebyscore(
            self._p("replicas"), now - self.config.replica_ttl_s, "+inf")
        others = [r.decode() if isinstance(r, bytes) else str(r) for r in live]
        others = [r for r in others if r != self.replica_id]
        gone = [r for r in self.local.remote_replicas() if r not in others]
        if gone:
            self.local.drop_remote(gone)
        for replica in [r for r in self._seen_seq if r not in others]:
            # Read whole if it comes back: what was seen of it is gone with it.
            del self._seen_seq[replica]
            self._seen_fields.pop(replica, None)
        here = now - offset  # this replica's clock: no state is read as from later than it
        for replica in others:
            await self._pull_replica(replica, offset, here)

    def _identity(self, deployment: str) -> str:
        return self._identities.get(deployment, "-")

    async def _pull_replica(self, replica: str, offset: float, here: float) -> None:
        raw_meta = await self._client.get(self._p("r", replica, "meta"))
        if raw_meta is None:
            return
        meta = orjson.loads(raw_meta)
        seq = int(meta["seq"])
        if self._seen_seq.get(replica) == seq:
            return
        versions = await self._client.hgetall(self._p("r", replica, "ver"))
        seen = self._seen_fields.setdefault(replica, {})
        current = {_text(f): int(v) for f, v in versions.items()}
        changed = [f for f, v in current.items() if seen.get(f) != v]
        states: dict[StatKey, KeyState] = {}
        if changed:
            blobs = await self._client.hmget(self._p("r", replica, "data"), changed)
            for field, blob in zip(changed, blobs, strict=True):
                decoded = decode_key(field)
                if blob is None or decoded is None:
                    continue  # an older replica's format: what it names is not known
                key, identity = decoded
                if identity != self._identity(key[0]):
                    continue  # the name stands for another upstream there
                try:
                    states[key] = decode_state(_bytes(blob), self._decay,
                                               self.local.config.alpha, shift=-offset,
                                               latest=here)
                except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                    self._unreadable.report(replica=replica)  # the replica's other keys merge
                    continue
        in_flight = {str(k): int(v) for k, v in meta.get("in_flight", {}).items()}
        self.local.update_remote(replica, states, in_flight)
        seen.update({f: current[f] for f in changed})
        self._seen_seq[replica] = seq


def _no_such_command(exc: ResponseError) -> bool:
    """Whether Redis refused TIME for good (unknown, renamed away, or not allowed to this user),
    not for the moment (a script running, a replica loading)."""
    text = str(exc).lower()
    return isinstance(exc, NoPermissionError) or text.startswith("noperm") or any(
        words in text for words in _NO_SUCH_COMMAND)


# How servers say a command is not there for good (Redis: "unknown command"; managed services
# and compatible servers: "not available", "disabled", "not supported", "not allowed").
_NO_SUCH_COMMAND = ("unknown command", "not available", "disabled", "not supported",
                    "unsupported", "not allowed")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
