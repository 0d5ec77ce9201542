"""Cache hits at the service, on both backends: JSON and SSE replay, Cache-Control, TTL.

Every request goes through the real `openai` client to a real router process; whether the
upstream was called is read from the simulator's own counters, not from the router's header
alone. Each test uses prompts no other test sends (`unique_messages`).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.caching.conftest import Gateway
from tests.caching.service import (
    ALIASED_MODEL,
    DEFAULT_HINTS,
    DEFAULT_TTL_S,
    KEY_A,
    TTL_SHORT_S,
    Caller,
    SimStats,
    direct_completion,
    unique_messages,
)


def test_repeated_request_is_a_hit_with_the_upstream_body_and_no_upstream_call(
        gateway: Gateway, caller: Caller, sim_stats: SimStats) -> None:
    """The second identical request is answered from the cache with the first answer's body."""
    messages = unique_messages("json")
    before = sim_stats.requests()
    first = caller.chat(messages)
    second = caller.chat(messages)
    assert (first.status, first.cache) == (200, "miss")
    assert (second.status, second.cache) == (200, "hit")
    assert second.body == first.body
    assert sim_stats.requests() - before == 1
    assert second.headers["x-slorouter-model"] == first.headers["x-slorouter-model"] == "det"
    upstream = direct_completion(gateway.sim_base, messages)
    assert second.content == upstream["choices"][0]["message"]["content"]


def test_cached_answer_is_replayed_as_sse_to_a_streaming_client(
        caller: Caller, sim_stats: SimStats) -> None:
    """A JSON-written entry streams back as SSE: role delta, the same text, finish, usage."""
    messages = unique_messages("sse")
    written = caller.chat(messages)
    assert written.cache == "miss" and written.body is not None
    before = sim_stats.requests()
    replay = caller.chat(messages, stream=True, include_usage=True)
    assert sim_stats.requests() == before
    assert (replay.status, replay.cache, replay.error) == (200, "hit", None)
    assert replay.headers["content-type"].startswith("text/event-stream")
    assert replay.content == written.content
    assert replay.finish_reason == written.finish_reason == "stop"
    first_delta = replay.chunks[0]["choices"][0]["delta"]
    assert first_delta.get("role") == "assistant" and not first_delta.get("content")
    assert sum(1 for c in replay.chunks if c["choices"] and c["choices"][0]["delta"]
               .get("content")) >= 1
    assert replay.chunks[-1]["choices"] == []
    assert replay.chunks[-1]["usage"] == written.body["usage"]
    assert {c["id"] for c in replay.chunks} == {written.body["id"]}


def test_replay_without_include_usage_sends_no_usage_chunk(caller: Caller) -> None:
    """A streaming hit without `include_usage` carries only choice chunks, as upstream would."""
    messages = unique_messages("sse-no-usage")
    caller.chat(messages)
    replay = caller.chat(messages, stream=True)
    assert replay.cache == "hit" and replay.chunks
    assert all(chunk["choices"] for chunk in replay.chunks)
    assert all(chunk.get("usage") is None for chunk in replay.chunks)


def test_streamed_answer_is_stored_and_served_to_json_and_streaming_clients(
        caller: Caller, sim_stats: SimStats) -> None:
    """A streamed miss is assembled and stored; later JSON and SSE requests hit it."""
    messages = unique_messages("stream-write")
    before = sim_stats.requests()
    streamed = caller.chat(messages, stream=True, include_usage=True)
    as_json = caller.chat(messages)
    restreamed = caller.chat(messages, stream=True, include_usage=True)
    assert (streamed.cache, as_json.cache, restreamed.cache) == ("miss", "hit", "hit")
    assert sim_stats.requests() - before == 1
    assert streamed.content and as_json.content == streamed.content == restreamed.content
    assert as_json.body is not None
    assert as_json.body["usage"] == streamed.chunks[-1]["usage"]
    assert restreamed.chunks[-1]["usage"] == streamed.chunks[-1]["usage"]


def test_stream_end_means_the_answer_is_stored(caller: Caller, sim_stats: SimStats) -> None:
    """A repeat sent the moment `data: [DONE]` is read, before the stream has closed, hits:
    the stream's end is only sent once the answer is stored, as a JSON answer is."""
    client = caller.client().chat.completions
    for attempt in range(5):
        messages = unique_messages(f"done-then-repeat-{attempt}")
        before = sim_stats.requests()
        with client.with_streaming_response.create(
                model="det", messages=messages, stream=True, temperature=0,  # type: ignore[arg-type]
                extra_headers=DEFAULT_HINTS) as streamed:
            assert streamed.headers["x-slorouter-cache"] == "miss"
            lines = streamed.iter_lines()
            assert any(line == "data: [DONE]" for line in lines)
            repeat = caller.chat(messages)
            assert [line for line in lines if line] == []
        assert repeat.cache == "hit", attempt
        assert sim_stats.requests() - before == 1


def test_no_cache_skips_the_read_but_stores_the_fresh_answer(
        caller: Caller, sim_stats: SimStats) -> None:
    """`Cache-Control: no-cache` goes upstream despite an entry, and its answer replaces it."""
    messages = unique_messages("no-cache")
    old = caller.chat(messages)
    before = sim_stats.requests()
    fresh = caller.chat(messages, headers={"cache-control": "no-cache"})
    assert (fresh.status, fresh.cache) == (200, "bypass")
    assert sim_stats.requests() - before == 1
    after = caller.chat(messages)
    assert after.cache == "hit"
    assert old.body is not None and fresh.body is not None and after.body is not None
    assert after.body["id"] == fresh.body["id"] != old.body["id"]


def test_max_age_takes_no_older_answer_and_a_hit_says_its_age(
        caller: Caller, sim_stats: SimStats) -> None:
    """A hit carries `age` (RFC 9111, whole seconds since the answer was stored); a client's
    `Cache-Control: max-age=N` takes no stored answer older than N seconds, so `max-age=0`
    goes upstream and its fresh answer replaces the entry. Both were missing: a hit's age showed
    only in its body's old `created`, and `max-age=0` was served it (the cache audit)."""
    messages = unique_messages("max-age")
    old = caller.chat(messages)
    assert old.cache == "miss" and "age" not in old.headers
    time.sleep(1.1)
    hit = caller.chat(messages, headers={"cache-control": "max-age=60"})
    assert hit.cache == "hit" and int(hit.headers["age"]) >= 1
    before = sim_stats.requests()
    fresh = caller.chat(messages, headers={"cache-control": "max-age=0"})
    assert (fresh.status, fresh.cache) == (200, "miss")
    assert sim_stats.requests() - before == 1
    after = caller.chat(messages)
    assert after.cache == "hit" and int(after.headers["age"]) <= 1
    assert old.body is not None and fresh.body is not None and after.body is not None
    assert after.body["id"] == fresh.body["id"] != old.body["id"]


def test_no_store_serves_a_hit_but_never_writes(caller: Caller, sim_stats: SimStats) -> None:
    """`Cache-Control: no-store` on a miss writes nothing; on an existing entry it may hit."""
    messages = unique_messages("no-store")
    before = sim_stats.requests()
    unstored = caller.chat(messages, headers={"cache-control": "no-store"})
    plain = caller.chat(messages)
    assert (unstored.status, unstored.cache) == (200, "miss")
    assert plain.cache == "miss"
    assert sim_stats.requests() - before == 2
    served = caller.chat(messages, headers={"cache-control": "no-store"})
    assert served.cache == "hit"
    assert served.body == plain.body


def test_no_store_on_a_second_cache_control_line_still_writes_nothing(
        gateway: Gateway, caller: Caller, sim_stats: SimStats) -> None:
    """Repeated `Cache-Control` lines are one list (RFC 9110 §5.3): a proxy's own line before
    the client's `no-store` does not cancel it (only the first line was read, and the answer
    was stored and served to the next caller)."""
    messages = unique_messages("no-store-second-line")
    headers = [("authorization", f"Bearer {KEY_A}"), *DEFAULT_HINTS.items(),
               ("cache-control", "no-transform"), ("cache-control", "no-store")]
    before = sim_stats.requests()
    unstored = httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=headers,
                          json={"model": "det", "messages": messages, "temperature": 0},
                          timeout=20)
    plain = caller.chat(messages)
    assert (unstored.status_code, unstored.headers["x-slorouter-cache"]) == (200, "miss")
    assert plain.cache == "miss"
    assert sim_stats.requests() - before == 2


def test_pinned_entry_expires_after_the_default_ttl(caller: Caller, sim_stats: SimStats) -> None:
    """A pinned answer (`server.cache.default`, TTL 2 s) hits while fresh and misses once older.

    Expiry is wall-clock time in another process, so this test waits the TTL out."""
    messages = unique_messages("ttl-default")
    written = caller.chat(messages)
    fresh = caller.chat(messages)
    assert (written.cache, fresh.cache) == ("miss", "hit")
    time.sleep(DEFAULT_TTL_S + 0.3)
    before = sim_stats.requests()
    expired = caller.chat(messages)
    assert (expired.status, expired.cache) == (200, "miss")
    assert sim_stats.requests() - before == 1
    assert caller.chat(messages).cache == "hit"


def test_policy_entry_expires_after_the_task_policy_ttl(
        caller: Caller, sim_stats: SimStats) -> None:
    """An `extraction` answer (policy TTL 1 s) hits while fresh and misses once older."""
    messages = unique_messages("ttl-policy")
    hints = {"x-slorouter-task": "extraction", "x-slorouter-risk": "low"}
    written = caller.chat(messages, model="auto", headers=hints)
    fresh = caller.chat(messages, model="auto", headers=hints)
    assert (written.cache, fresh.cache) == ("miss", "hit")
    time.sleep(TTL_SHORT_S + 0.3)
    before = sim_stats.requests()
    expired = caller.chat(messages, model="auto", headers=hints)
    assert (expired.status, expired.cache) == (200, "miss")
    assert sim_stats.requests() - before == 1


@pytest.mark.parametrize("model", ["auto", ALIASED_MODEL])
def test_alias_and_renamed_model_requests_hit(caller: Caller, sim_stats: SimStats,
                                              model: str) -> None:
    """`auto` and a model named unlike its deployment hit on repeat like any pinned request."""
    messages = unique_messages(f"alias-{model}")
    hints = {"x-slorouter-task": "chat", "x-slorouter-risk": "low"}
    before = sim_stats.requests()
    first = caller.chat(messages, model=model, headers=hints)
    second = caller.chat(messages, model=model, headers=hints)
    assert (first.cache, second.cache) == ("miss", "hit")
    assert sim_stats.requests() - before == 1


@pytest.mark.parametrize("model", ["auto", ALIASED_MODEL])
def test_hit_names_the_deployment_that_produced_the_answer(caller: Caller, model: str) -> None:
    """`x-slorouter-model` on a hit is the deployment named when the answer was produced."""
    messages = unique_messages(f"hit-model-{model}")
    first = caller.chat(messages, model=model)
    second = caller.chat(messages, model=model)
    assert (first.cache, second.cache) == ("miss", "hit")
    assert second.headers["x-slorouter-model"] == first.headers["x-slorouter-model"] == "det"
