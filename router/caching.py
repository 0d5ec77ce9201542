"""The result-cache step of the request path: decide, derive the key, look up, store.

Everything that decides *who may read an answer* goes into the key: tenant, permission
scopes, locale (`accept-language`), policy version, the model or the alias with its task
and risk (any answer the policy allows is acceptable), and the caller's data version
(`x-slorouter-data-version` or `metadata.data_version`). Cacheability is the policy's rule plus
`cache.policy` (deterministic requests only, never high risk or side effects, honour
`Cache-Control`). A cache failure can only make a request slower, never fail it.

Identical requests at once are computed once per process: the first that misses a key leads
(it may write the answer), and a non-streamed request that finds a leader for its key waits
for the leader's answer (at most half its own time left, and no longer than its client stays)
and is served it from memory, kept by the backend or not: a hit. When the leader ends with no
answer an entry can hold (its client left, it failed, was cut, was filtered), the first
follower to wake leads in its place and the others wait for it; when that one ends without an
answer too, each looks the key up and goes upstream itself (two leaders in a row at most, so
followers of a failing upstream do not wait for one failure after another). Without
coalescing, 100 identical requests for an expired answer made 100 upstream calls (a race
audit); without the second leader, a leader whose client left sent every follower upstream.
A stream never waits: its first token would wait for a whole answer.
Replicas do not coalesce with one another.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cache.entry import CachedEntry
from cache.keys import CacheScope, derive_key
from cache.metrics import CacheMetrics
from cache.policy import CacheDecision, CacheRule, decide, parse_cache_control
from cache.result import Lookup, ResultCacheFront
from router.pipeline import Prepared, arm_degraded, header_or_metadata
from router.redis_writes import WriteHealth
from router.runtime_config import Principal

if TYPE_CHECKING:
    from redis.asyncio import Redis

DATA_VERSION_HEADER = "x-slorouter-data-version"


@dataclass(frozen=True, slots=True)
class CachePlan:
    key: str | None
    decision: CacheDecision
    scope: CacheScope


def _rule(prepared: Prepared, default: CacheRule) -> CacheRule:
    """The task policy's rule for `auto`, the server's default for a pinned model; a risk rule
    with `cache: false` turns either off (a pinned request's only when it is held to the risk
    rule, `enforce_risk_rule_on_pinned_requests`)."""
    decision = prepared.decision
    if prepared.policy is None or (decision.pinned and not decision.risk_rule_applied):
        return default
    risk_rule = prepared.policy.risk.get(prepared.labels.risk)
    risk_allows = risk_rule is None or risk_rule.cache
    if decision.pinned:
        return default if risk_allows else replace(default, enabled=False)
    spec = prepared.policy.cache
    return CacheRule(enabled=spec.enabled and risk_allows, ttl_s=spec.ttl_s,
                     require_deterministic=spec.require_deterministic)


def data_version_of(headers: Mapping[str, str], metadata: object) -> object | None:
    """The caller's data version, from its header or `metadata.data_version`; it decides which
    cached answers the request may see, so two different values are a 400."""
    return header_or_metadata(headers, DATA_VERSION_HEADER, metadata, "data_version",
                              "data versions", "conflicting_data_version")


def scope_of(prepared: Prepared, principal: Principal, headers: Mapping[str, str],
             raw: Mapping[str, Any]) -> CacheScope:
    data_version = data_version_of(headers, raw.get("metadata"))
    decision, labels = prepared.decision, prepared.labels
    # An answer is kept for the rules that chose who wrote it: a policy's route answers per task
    # and risk, and so does a named model held to the task's risk rule (else a request the rule
    # refuses that model would be served the answer written under a looser risk).
    model = decision.requested if decision.pinned and not decision.risk_rule_applied else (
        f"{decision.requested}:{labels.task}:{labels.risk}")
    assignment = prepared.assignment
    if assignment is not None:
        # Each arm of an experiment keeps its own answers: a hit is then always its own route's
        # answer, and every arm gains from the cache alike (a shared entry would serve one arm
        # another's answers and record them as its own outcomes). A degraded arm (its model
        # could not serve; the policy's route did) is kept apart from the arm proper.
        degraded = arm_degraded(assignment, decision)
        model += f"@{assignment.experiment}/{assignment.arm}{'~degraded' if degraded else ''}"
    return CacheScope(tenant=principal.tenant, scopes=frozenset(principal.scopes),
                      locale=headers.get("accept-language", ""),
                      policy_version=decision.policy_version, models=frozenset({model}),
                      data_version=str(data_version) if data_version is not None else None)


# The leaders a follower waits for: the first, and the follower that leads in its place when it
# ends without an answer (a second would make followers of a failing upstream wait in a row).
FOLLOWED_LEADERS = 2


class ResultCaching:
    def __init__(self, front: ResultCacheFront | None, default_rule: CacheRule,
                 metrics: CacheMetrics | None = None, *, unavailable: str | None = None,
                 writes: WriteHealth | None = None,
                 degraded: Callable[[], str | None] | None = None,
                 redis: Redis | None = None) -> None:
        self._front = front
        self.unavailable = unavailable  # why a configured cache is not used (for /readyz)
        self.writes = writes  # whether a Redis backend takes the cache's writes (for /readyz)
        # a Redis backend's pooled client: /readyz PINGs through it, with the cache's timeouts
        self.redis = redis
        # why the disk backend stores nothing now (its disk full), for /readyz; None: it does
        self.degraded = degraded if degraded is not None else _never
        self._default = default_rule
        self.metrics = metrics
        # per key, the request of this process computing its answer: done with its entry once
        # it has one, or with None once the request has ended without
        self._leaders: dict[str, asyncio.Future[CachedEntry | None]] = {}

    def plan(self, prepared: Prepared, principal: Principal, headers: Mapping[str, str],
             raw: Mapping[str, Any]) -> CachePlan:
        started = time.perf_counter()
        labels = prepared.labels
        fields = {k: v for k, v in raw.items() if k != "model"}
        rule = _rule(prepared, self._default)
        if self._front is None:
            rule = CacheRule(enabled=False)
        decision = decide(fields, rule, task=labels.task, risk=labels.risk,
                          signals=labels.signals,
                          control=parse_cache_control(headers.get("cache-control")))
        scope = scope_of(prepared, principal, headers, raw)
        key = derive_key(scope, fields) if decision.uses_cache else None
        prepared.phases.cache += time.perf_counter() - started
        return CachePlan(key, decision, scope)

    async def lookup(self, plan: CachePlan, prepared: Prepared,
                     held: contextlib.AsyncExitStack | None = None, follow_s: float = 0.0,
                     unless_gone: Callable[[Awaitable[None]], Awaitable[None]] | None = None
                     ) -> Lookup:
        """The cache's answer for the plan. With `held` (closed when the request has ended), a
        miss that may write makes the request its key's leader; a non-streamed request that
        finds a leader waits for its answer up to `follow_s` (see the module), through
        `unless_gone` (which ends the wait when the client leaves: a follower must not hold its
        admission slot for a client that is gone)."""
        key = plan.key
        led: asyncio.Future[CachedEntry | None] | None = None
        loop = asyncio.get_running_loop()
        followed = 0
        while True:
            leader = self._leaders.get(key) if key is not None and self._leaders else None
            if leader is None:
                if held is not None and key is not None and plan.decision.write \
                        and followed < FOLLOWED_LEADERS:
                    # it leads from before its lookup, whose await (a Redis round trip) would
                    # let identical requests arriving meanwhile miss too and lead as well
                    led = loop.create_future()
                    self._leaders[key] = led
                    held.callback(self._followed, key, led, None)
                break
            if followed == FOLLOWED_LEADERS or follow_s <= 0 or prepared.request.stream \
                    or not plan.decision.read:
                break
            began = loop.time()
            waiting = self._follow(leader, follow_s)
            await (unless_gone(waiting) if unless_gone is not None else waiting)
            follow_s -= loop.time() - began
            followed += 1
            answer = leader.result() if leader.done() else None
            if answer is not None:  # the leader's, kept or not (Redis cooling down, disk full)
                if self.metrics is not None:
                    self.metrics.record_hit(answer.generation_s)
                    self.metrics.record_coalesced()
                return Lookup("hit", answer)
            if not leader.done():  # waited as long as it may: it computes its own
                break
            # The leader ended without an answer (its client left, its call failed): the first
            # follower to wake leads in its place and the others follow it, once; a leader whose
            # client left sent every follower upstream (the cache audit of 2026-12-07: 11 calls
            # for 11 identical requests).
        started = time.perf_counter()
        try:
            if self._front is None:
                return Lookup("bypass", bypass_reason=plan.decision.bypass_reason)
            found = await self._front.lookup(key, plan.decision, plan.scope)
        finally:
            prepared.phases.cache += time.perf_counter() - started
        if found.entry is not None and led is not None and key is not None:
            self._followed(key, led, None)  # found, not to be computed: no leader
        return found

    @staticmethod
    async def _follow(leader: asyncio.Future[CachedEntry | None], wait_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(leader), wait_s)

    def _followed(self, key: str, led: asyncio.Future[CachedEntry | None],
                  answer: CachedEntry | None) -> None:
        """The leader of `key` is done: with its `answer` (an entry of it, kept or not), or
        None (an answer no entry can hold, or the request ended without one), whose followers
        then look the key up and go upstream themselves."""
        if self._leaders.get(key) is led:
            del self._leaders[key]
        if not led.done():
            led.set_result(answer)

    def age_s(self, entry: CachedEntry) -> float:
        """How long ago `entry` was stored, by the cache's wall clock (0 without a backend:
        a coalesced answer is from now)."""
        return 0.0 if self._front is None else max(0.0, self._front.now() - entry.created_at)

    def note_prefix(self, cached_tokens: int | None) -> None:
        """Count a provider answer's prompt-cache use (prefix hit rate and cached tokens)."""
        if self.metrics is not None and cached_tokens is not None:
            self.metrics.record_prefix(cached_tokens)

    async def store(self, plan: CachePlan, body: bytes, generation_s: float,
                    deployment: str) -> None:
        """Write a finished answer under the scope's model name (what lookups check)."""
        if self._front is not None and plan.decision.write and plan.key is not None:
            model = next(iter(plan.scope.models))
            entry = self._front.entry_of(body, scope=plan.scope, model=model,
                                         generation_s=generation_s, deployment=deployment)
            answer = entry if isinstance(entry, CachedEntry) else None
            led = self._leaders.get(plan.key)
            if led is not None and not led.done():  # its followers are answered now, not at
                led.set_result(answer)  # the stream's end
            try:
                if answer is not None:
                    await self._front.store_entry(plan.key, answer, plan.decision.ttl_s)
            finally:
                # leading until the entry is written: a request arriving during the write
                # (a thread's disk write, a Redis round trip) is answered the leader's answer,
                # where it missed the key and went upstream again (2 upstream calls of a burst
                # of 20 on a loaded machine, 2026-12-07)
                if led is not None:
                    self._followed(plan.key, led, answer)


def _never() -> str | None:
    return None
