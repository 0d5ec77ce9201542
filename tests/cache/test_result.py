"""The result-cache front over each real backend: hits, misses, TTL, versions, no-store."""

from __future__ import annotations

import pytest

from cache.entry import CachedEntry, EntryVersions
from cache.keys import derive_key
from cache.metrics import CacheMetrics
from cache.policy import CacheControl, CacheDecision, CacheRule, decide
from cache.result import ResultCache, ResultCacheFront
from tests.cache.conftest import ManualClock
from tests.cache.helpers import completion_body, request, scope

RULE = CacheRule(ttl_s=60.0)
MODEL = "gpt-4o-mini"
NO_DIRECTIVES = CacheControl()


def _decision(control: CacheControl = NO_DIRECTIVES) -> CacheDecision:
    return decide(request(), RULE, task="chat", risk="low", control=control)


@pytest.fixture
def front(backend: ResultCache, metrics: CacheMetrics, clock: ManualClock) -> ResultCacheFront:
    return ResultCacheFront(backend, metrics, clock=clock)


async def _write(front: ResultCacheFront, body: bytes, **scope_overrides: object) -> str | None:
    current = scope(**scope_overrides)  # type: ignore[arg-type]
    key = derive_key(current, request())
    return await front.store(key, _decision(), body, scope=current, model=MODEL, generation_s=0.5)


async def test_written_answer_is_served_to_the_same_principal(
    front: ResultCacheFront, metrics: CacheMetrics
) -> None:
    """store then lookup with the same scope and request is a hit with the same bytes."""
    body = completion_body()
    assert await _write(front, body) is None
    found = await front.lookup(derive_key(scope(), request()), _decision(), scope())
    assert found.status == "hit"
    assert found.entry is not None and found.entry.body == body
    snap = metrics.snapshot()
    assert (snap.hits, snap.writes, snap.time_saved_s) == (1, 1, 0.5)


async def test_unknown_key_is_a_miss(front: ResultCacheFront, metrics: CacheMetrics) -> None:
    """Nothing written → miss, counted."""
    found = await front.lookup(derive_key(scope(), request()), _decision(), scope())
    assert found.status == "miss" and found.entry is None
    assert metrics.snapshot().misses == 1


async def test_entry_older_than_the_rule_ttl_is_a_miss(
    front: ResultCacheFront, clock: ManualClock, metrics: CacheMetrics
) -> None:
    """Freshness is checked by the injected clock, whatever the backend still holds."""
    await _write(front, completion_body())
    key = derive_key(scope(), request())
    clock.advance(RULE.ttl_s - 1)
    assert (await front.lookup(key, _decision(), scope())).status == "hit"
    clock.advance(1)
    assert (await front.lookup(key, _decision(), scope())).status == "miss"
    assert metrics.snapshot().expired == 1


@pytest.mark.parametrize(("header", "fresh_for"), [
    ("max-age=0", 0), ("max-age=10", 10), ("no-transform, max-age=30", 30),
    ("max-age=600", 60), ("max-age=abc", 60), ('max-age="5"', 5)])
async def test_a_clients_max_age_turns_older_entries_into_misses(
    front: ResultCacheFront, clock: ManualClock, metrics: CacheMetrics, header: str,
    fresh_for: int,
) -> None:
    """`Cache-Control: max-age=N` (RFC 9111): no stored answer older than N seconds, within
    the rule's TTL (a larger N takes none older than the TTL; a malformed one is ignored).
    It was ignored: `max-age=0` was served a stored answer (the cache audit of 2026-12-07).
    Only the rule's TTL counts an entry as expired."""
    from cache.policy import parse_cache_control

    await _write(front, completion_body())
    key = derive_key(scope(), request())
    asked = _decision(parse_cache_control(header))
    if fresh_for > 0:
        clock.advance(fresh_for - 1)
        assert (await front.lookup(key, asked, scope())).status == "hit"
        clock.advance(1)
    assert (await front.lookup(key, asked, scope())).status == "miss"
    assert metrics.snapshot().expired == (1 if fresh_for == RULE.ttl_s else 0)
    assert asked.write  # the fresh answer is stored in its place


@pytest.mark.parametrize(
    "change", [{"policy_version": "pv2"}, {"data_version": "dv2"}, {"tenant": "globex"}]
)
async def test_version_or_tenant_change_reaches_no_old_entry(
    front: ResultCacheFront, change: dict[str, object]
) -> None:
    """A new policy/data version (or another tenant) derives another key: 0 hits."""
    await _write(front, completion_body())
    moved = scope(**change)  # type: ignore[arg-type]
    found = await front.lookup(derive_key(moved, request()), _decision(), moved)
    assert found.status == "miss"


async def test_entry_written_under_other_versions_is_stale_and_not_served(
    front: ResultCacheFront, clock: ManualClock, metrics: CacheMetrics
) -> None:
    """An entry whose recorded versions no longer hold is reported stale, never served."""
    key = derive_key(scope(), request())
    old = CachedEntry.from_completion(
        completion_body(), EntryVersions("pv0", "dv1", MODEL), created_at=clock(), generation_s=1
    )
    assert await front.store_entry(key, old, RULE.ttl_s) is None
    found = await front.lookup(key, _decision(), scope())
    assert found.status == "stale" and found.entry is None
    assert metrics.snapshot().stale_hits == 1


async def test_no_store_never_writes(front: ResultCacheFront) -> None:
    """A no-store request's answer is not written, so the next request misses."""
    key = derive_key(scope(), request())
    decision = _decision(CacheControl(no_store=True))
    reason = await front.store(
        key, decision, completion_body(), scope=scope(), model=MODEL, generation_s=1
    )
    assert reason == "no_store"
    assert (await front.lookup(key, _decision(), scope())).status == "miss"


async def test_no_cache_bypasses_an_existing_entry(
    front: ResultCacheFront, metrics: CacheMetrics
) -> None:
    """A no-cache request does not read even when an entry exists."""
    await _write(front, completion_body())
    key = derive_key(scope(), request())
    found = await front.lookup(key, _decision(CacheControl(no_cache=True)), scope())
    assert (found.status, found.bypass_reason) == ("bypass", "no_cache")
    assert metrics.snapshot().bypasses == {"no_cache": 1}


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"message": "upstream timeout", "type": "timeout"}}',
        completion_body("The capital is", finish_reason=None),
    ],
)
async def test_errors_and_cut_streams_are_never_written(
    front: ResultCacheFront, metrics: CacheMetrics, body: bytes
) -> None:
    """store refuses them with a reason, and the next lookup misses."""
    assert await _write(front, body) in {"error", "unfinished"}
    assert (
        await front.lookup(derive_key(scope(), request()), _decision(), scope())
    ).status == "miss"
    assert metrics.snapshot().writes == 0
