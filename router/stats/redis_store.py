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
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError
from redis.typing import EncodableT, FieldT

from policies.labels import Task
from router.logs import event
from router.redis_writes import WriteHealth, refusal_reason
from router.stats.codec import decode_key, decode_state, encode_key, encode_state
from router.stats.decay import Decay
from router.stats.estimators import KeyState, KeySummary, StatKey
from router.stats.observation import Observation
from router.stats.store import Clock, LocalStatsStore, StatsView, StoreStatus

log = logging.getLogger("router.stats.redis")

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
                 clock: Clock = time.time,
                 identities: Mapping[str, str] | None = None) -> None:
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
        if not self._healthy:
            event(log, "stats.redis.recovered", replica=self.replica_id)
        self._healthy, self._error = True, ""
        self._last_sync_at = self._clock()
        return True

    def _on_failure(self, exc: BaseException) -> None:
        if self._healthy:
            event(log, "stats.redis.unavailable", logging.WARNING, replica=self.replica_id,
                  error=type(exc).__name__)
        self._healthy, self._error = False, type(exc).__name__
        self._push_all = True
        self._seen_seq.clear()
        self._seen_fields.clear()
        self.local.drop_remote(self.local.remote_replicas())

    async def _sync(self) -> None:
        now = self._clock()
        await self._push_unless_refused(now)
        await self._pull(now)

    async def _push_unless_refused(self, now: float) -> None:
        """Push, telling `writes` how it went. A refusal of writes ends only the push: Redis
        still answers reads, so the pull that follows keeps the others' statistics (the keys not
        pushed stay marked for the next push)."""
        try:
            await self._push(now)
        except ResponseError as exc:
            if refusal_reason(exc) is None:
                raise
            self.writes.failed(exc)
            return
        self.writes.accepted()

    def _p(self, *parts: str) -> str:
        return ":".join((self.config.prefix, *parts))

    async def _push(self, now: float) -> None:
        if self._push_all:
            self.local.take_unpushed()
            states: Mapping[StatKey, KeyState] = self.local.own_states()
        else:
            states = self.local.take_unpushed()
        blobs: dict[FieldT, EncodableT] = {
            encode_key(k, self._identity(k[0])): encode_state(s) for k, s in states.items()}
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

    async def _pull(self, now: float) -> None:
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
        for replica in others:
            await self._pull_replica(replica)

    def _identity(self, deployment: str) -> str:
        return self._identities.get(deployment, "-")

    async def _pull_replica(self, replica: str) -> None:
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
                states[key] = decode_state(_bytes(blob), self._decay, self.local.config.alpha)
        in_flight = {str(k): int(v) for k, v in meta.get("in_flight", {}).items()}
        self.local.update_remote(replica, states, in_flight)
        seen.update({f: current[f] for f in changed})
        self._seen_seq[replica] = seq


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
