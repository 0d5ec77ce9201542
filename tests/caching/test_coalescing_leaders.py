"""A burst's leader stays its key's leader until its answer is written, and a follower leads in
its place when it ends without one.

The leader's followers were answered as soon as it had its answer, and the key was left
without a leader while the entry was still being written (a worker thread's disk write, a Redis
round trip): an identical request arriving in between missed the key and went upstream again
(2 upstream calls for a burst of 20 on a loaded machine, 2026-12-07). Here the disk backend's
write is held open while a second identical request looks the key up: it must be served the
leader's answer, not miss."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import orjson

from cache.backends.disk import DiskResultCache
from cache.entry import CachedEntry
from cache.keys import CacheScope, derive_key
from cache.metrics import CacheMetrics
from cache.policy import CacheRule, decide
from cache.result import ResultCacheFront
from router.caching import CachePlan, ResultCaching
from router.pipeline import Phases, Prepared

FIELDS = {"messages": [{"role": "user", "content": "Name three rivers."}], "temperature": 0}
ANSWER = orjson.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Nile, Amazon, Po."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})


class _HeldWrites(DiskResultCache):
    """The disk backend, its writes held until `release` is set."""

    def __init__(self, directory: Path, metrics: CacheMetrics) -> None:
        super().__init__(directory, metrics)
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    async def set(self, key: str, entry: CachedEntry, ttl_s: float) -> bool:
        self.writing.set()
        await self.release.wait()
        return await super().set(key, entry, ttl_s)


def _prepared() -> Prepared:
    # what `ResultCaching.lookup` reads of a prepared request: whether it streams, its phases
    return cast(Prepared, SimpleNamespace(request=SimpleNamespace(stream=False),
                                          phases=Phases()))


def test_a_request_arriving_while_the_answer_is_written_is_served_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, str | None]:
        metrics = CacheMetrics()
        backend = _HeldWrites(tmp_path / "cache", metrics)
        caching = ResultCaching(ResultCacheFront(backend, metrics), CacheRule(enabled=True),
                                metrics)
        scope = CacheScope("t", frozenset(), "en", "p1", frozenset({"m"}))
        decision = decide(FIELDS, CacheRule(enabled=True), task="chat", risk="low")
        plan = CachePlan(derive_key(scope, FIELDS), decision, scope)
        async with contextlib.AsyncExitStack() as leader_held:
            first = await caching.lookup(plan, _prepared(), leader_held, follow_s=5.0)
            assert first.status == "miss"  # it leads: it computes the answer
            storing = asyncio.ensure_future(caching.store(plan, ANSWER, 0.4, "d"))
            await backend.writing.wait()  # the answer is being written
            async with contextlib.AsyncExitStack() as second_held:
                second = await caching.lookup(plan, _prepared(), second_held, follow_s=5.0)
            backend.release.set()
            await storing
        return second.status, None if second.entry is None else second.entry.body.decode()

    status, body = asyncio.run(scenario())
    assert status == "hit"
    assert body is not None and "Nile" in body


def test_a_follower_leads_in_place_of_a_leader_that_ended_without_an_answer(
        tmp_path: Path) -> None:
    """A leader whose client left (or whose call failed) ended its followers' wait with no
    answer, and every one of them went upstream (the cache audit of 2026-12-07: 11 calls for
    11 identical requests). Now the first to wake leads in its place and the others wait for
    its answer; when that second leader ends without one too, they go upstream themselves."""
    async def scenario(second_answers: bool) -> list[str]:
        metrics = CacheMetrics()
        caching = ResultCaching(ResultCacheFront(DiskResultCache(tmp_path / str(second_answers),
                                                                 metrics), metrics),
                                CacheRule(enabled=True), metrics)
        scope = CacheScope("t", frozenset(), "en", "p1", frozenset({"m"}))
        decision = decide(FIELDS, CacheRule(enabled=True), task="chat", risk="low")
        plan = CachePlan(derive_key(scope, FIELDS), decision, scope)
        async with contextlib.AsyncExitStack() as stacks:
            first = contextlib.AsyncExitStack()
            assert (await caching.lookup(plan, _prepared(), first, follow_s=5.0)).status \
                == "miss"
            held = [await stacks.enter_async_context(contextlib.AsyncExitStack())
                    for _ in range(4)]
            followers = [asyncio.ensure_future(caching.lookup(plan, _prepared(), h, follow_s=5.0))
                         for h in held]
            await asyncio.sleep(0.05)
            assert not any(f.done() for f in followers)  # they wait for the leader
            await first.aclose()  # its client left: it ends with no answer
            done, waiting = await asyncio.wait(followers, timeout=1.0)
            assert len(done) == 1  # one leads in its place; the others wait for it
            new_leader = next(iter(done))
            if second_answers:  # its answer comes, and is stored
                await caching.store(plan, ANSWER, 0.4, "d")
            await held[followers.index(new_leader)].aclose()
            rest = await asyncio.gather(*waiting)
        return [new_leader.result().status, *(r.status for r in rest)]

    served, failed = asyncio.run(scenario(True)), asyncio.run(scenario(False))
    assert served == ["miss", "hit", "hit", "hit"]  # one computes, three are served its answer
    assert failed == ["miss", "miss", "miss", "miss"]  # two leaders without one: no third
