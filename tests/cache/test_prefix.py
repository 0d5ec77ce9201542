"""Prefix cache: provider markers, cached-token accounting, prefix-affinity replica choice."""

from __future__ import annotations

import copy
from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.prefix import (
    EPHEMERAL,
    CachedTokens,
    cache_salt,
    choose_replica,
    mark_prefix,
    prefix_fingerprint,
    prompt_cache_key,
    read_cached_tokens,
    writes_for_an_hour,
)

SYSTEM: dict[str, object] = {"role": "system", "content": "You are the support bot of Acme. " * 20}
TOOLS: list[dict[str, object]] = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
]


def _messages(question: str) -> list[dict[str, object]]:
    return [SYSTEM, {"role": "user", "content": question}]


def test_anthropic_marks_last_tool_and_last_system_block_without_mutating_input() -> None:
    """Two ephemeral breakpoints: the last tool and the end of the system prompt."""
    messages, tools = _messages("hi"), copy.deepcopy(TOOLS)
    before = orjson.dumps([messages, tools])
    marked = mark_prefix(messages, tools, "anthropic", tenant="acme")
    assert orjson.dumps([messages, tools]) == before
    assert marked.tools is not None and marked.tools[-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in marked.tools[0]
    system_content = marked.messages[0]["content"]
    assert isinstance(system_content, list)
    assert system_content[-1] == {
        "type": "text",
        "text": SYSTEM["content"],
        "cache_control": EPHEMERAL,
    }
    assert marked.messages[1] == messages[1]
    assert marked.prompt_cache_key is None


def test_anthropic_leaves_caller_markers_alone() -> None:
    """A request that already has cache_control breakpoints is passed through unchanged."""
    system: dict[str, object] = {
        "role": "system",
        "content": [{"type": "text", "text": "x" * 50, "cache_control": EPHEMERAL}],
    }
    messages: list[dict[str, object]] = [system, {"role": "user", "content": "hi"}]
    marked = mark_prefix(messages, TOOLS, "anthropic", tenant="acme")
    assert list(marked.messages) == messages and list(marked.tools or []) == TOOLS


def test_a_developer_prompt_is_marked_as_a_system_prompt_is() -> None:
    """litellm sends leading `developer` messages to Anthropic as its system: the last of the
    stable prefix carries the marker, alone or after a system message (neither was marked)."""
    developer = {"role": "developer", "content": "Answer in French. " * 10}
    for messages in ([developer, {"role": "user", "content": "hi"}],
                     [SYSTEM, developer, {"role": "user", "content": "hi"}]):
        marked = mark_prefix(messages, None, "anthropic", tenant="acme")
        last = len(messages) - 2
        content = marked.messages[last]["content"]
        assert isinstance(content, list) and content[-1]["cache_control"] == EPHEMERAL
        assert marked.messages[:last] == tuple(messages[:last])


def test_only_markers_where_markers_go_count_as_the_clients() -> None:
    """A tool parameter named `cache_control` is not a breakpoint (it left the request without
    the router's markers); one on a message, a content part, a tool or its function is."""
    tool: dict[str, object] = {"type": "function", "function": {
        "name": "configure", "parameters": {"type": "object", "properties": {
            "cache_control": {"type": "string"}}}}}
    marked = mark_prefix(_messages("hi"), [tool], "anthropic", tenant="acme")
    assert marked.tools is not None and marked.tools[-1]["cache_control"] == EPHEMERAL
    for placed in ({**tool, "cache_control": EPHEMERAL},
                   {"type": "function", "function": {"name": "f", "cache_control": EPHEMERAL}}):
        assert list(mark_prefix(_messages("hi"), [placed], "anthropic",
                                tenant="acme").tools or []) == [placed]
    on_message = [{**SYSTEM, "cache_control": EPHEMERAL}, {"role": "user", "content": "hi"}]
    assert list(mark_prefix(on_message, None, "anthropic", tenant="acme").messages) == on_message


def test_keys_and_salts_of_different_namespaces_and_partitions_never_meet() -> None:
    """A tenant's partition scoped `client-salt` and its unscoped partition's chosen salt
    `salt` hashed alike when the parts were joined with NUL (the prompt-cache audit)."""
    from router.pipeline import prefix_partition_of

    scoped = prefix_partition_of("team-a", ("client-salt",))
    assert cache_salt("team-a", "salt") != cache_salt(scoped)
    assert prompt_cache_key(prefix_partition_of("team-a", ("client",)), "f") != (
        prompt_cache_key("team-a", "client\x00f"))
    assert len({cache_salt("t"), cache_salt("t", ""), prompt_cache_key("t", "")}) == 3


def test_openai_gets_a_prompt_cache_key_per_tenant_and_prefix() -> None:
    """Same prefix + tenant → same key; another tenant or prefix → another key; ≤ 64 chars."""
    key = mark_prefix(_messages("a"), TOOLS, "openai", tenant="acme").prompt_cache_key
    same = mark_prefix(_messages("b"), TOOLS, "openai", tenant="acme").prompt_cache_key
    other_tenant = mark_prefix(_messages("a"), TOOLS, "openai", tenant="globex").prompt_cache_key
    other_prefix = mark_prefix(_messages("a"), TOOLS[:1], "openai", tenant="acme").prompt_cache_key
    assert key is not None and key == same and len(key) <= 64
    assert len({key, other_tenant, other_prefix}) == 3


def test_a_cache_salt_is_per_tenant_and_never_names_it() -> None:
    """One salt per tenant, stable, 43 characters of `[a-z0-9-]` (safe for any server's salt
    checks), never containing the tenant id; a client's chosen salt is kept within its tenant
    and differs from the tenant's default and from every `prompt_cache_key`."""
    acme, globex = cache_salt("acme"), cache_salt("globex")
    chosen, elsewhere = cache_salt("acme", "blue"), cache_salt("globex", "blue")
    assert acme == cache_salt("acme") and chosen == cache_salt("acme", "blue")
    assert len({acme, globex, chosen, elsewhere, "blue"}) == 5
    assert all(len(s) == 43 and s.startswith("sr-") and "acme" not in s
               and set(s[3:]) <= set("0123456789abcdef") for s in (acme, chosen))
    assert acme != prompt_cache_key("acme", "client\x00blue") != chosen


def test_short_prefix_and_other_providers_are_left_alone() -> None:
    """Below min_prefix_chars, or for self-hosted providers, nothing is marked."""
    messages = _messages("hi")
    short = mark_prefix(messages, None, "anthropic", tenant="acme", min_prefix_chars=10**6)
    other = mark_prefix(messages, TOOLS, "other", tenant="acme")
    assert list(short.messages) == messages and short.prompt_cache_key is None
    assert list(other.messages) == messages and other.prompt_cache_key is None


def test_fingerprint_depends_on_the_stable_prefix_only() -> None:
    """Different questions after the same system prompt share a fingerprint; markers ignored."""
    a = prefix_fingerprint(_messages("first question"), TOOLS)
    b = prefix_fingerprint(_messages("second question"), TOOLS)
    marked = mark_prefix(_messages("x"), TOOLS, "anthropic", tenant="acme")
    assert a == b == prefix_fingerprint(marked.messages, marked.tools)
    assert a != prefix_fingerprint(
        [{**SYSTEM, "content": "other"}, {"role": "user", "content": "q"}]
    )
    assert prompt_cache_key("acme", a) != prompt_cache_key(
        "acme", prefix_fingerprint(_messages("q"))
    )


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1536}},
            CachedTokens(2000, 1536, 0),
        ),
        (
            {
                "input_tokens": 50,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
            },
            CachedTokens(1250, 1000, 200),
        ),
        (
            {
                "prompt_tokens": 1250,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
            },
            CachedTokens(1250, 1000, 200),
        ),
        ({"prompt_tokens": 10}, CachedTokens(10, 0, 0)),
        (None, CachedTokens(0, 0, 0)),
    ],
)
def test_cached_tokens_are_read_from_openai_litellm_and_anthropic_usage(
    usage: dict[str, object] | None, expected: CachedTokens
) -> None:
    """Each provider's usage shape yields prompt, cache-read and cache-write counts."""
    got = read_cached_tokens(usage)
    assert got == expected
    assert (
        got.uncached_tokens
        == expected.prompt_tokens - expected.cache_read_tokens - expected.cache_write_tokens
    )


REPLICAS = ["vllm-a", "vllm-b", "vllm-c"]


def test_same_prefix_goes_to_the_same_replica_when_idle() -> None:
    """With no load, a fingerprint always maps to one replica."""
    fp = prefix_fingerprint(_messages("q"), TOOLS)
    idle: dict[str, int] = {}
    assert len({choose_replica(fp, REPLICAS, idle) for _ in range(10)}) == 1


@settings(max_examples=300, deadline=None)
@given(
    fingerprint=st.text(min_size=1, max_size=16),
    loads=st.lists(st.integers(0, 40), min_size=3, max_size=3),
    bound=st.sampled_from([1.0, 1.25, 2.0]),
)
def test_chosen_replica_is_never_over_the_load_bound(
    fingerprint: str, loads: list[int], bound: float
) -> None:
    """The chosen replica stays within ceil(bound * (total + 1) / n) in-flight requests."""
    load = dict(zip(REPLICAS, loads, strict=True))
    chosen = choose_replica(fingerprint, REPLICAS, load, bound=bound)
    cap = -(-bound * (sum(loads) + 1) // len(REPLICAS))
    assert load[chosen] + 1 <= cap


def test_many_prefixes_spread_over_replicas_and_one_hot_prefix_spills_boundedly() -> None:
    """Distinct prefixes spread; a single hot prefix overflows only when over its bound."""
    spread = Counter(choose_replica(f"prefix-{i}", REPLICAS, {}) for i in range(300))
    assert set(spread) == set(REPLICAS)
    load: Counter[str] = Counter()
    for _ in range(30):
        load[choose_replica("hot", REPLICAS, load)] += 1
    favourite = choose_replica("hot", REPLICAS, {})
    assert load[favourite] == max(load.values())
    assert load[favourite] <= -(-1.25 * 30 // len(REPLICAS))


def test_choose_replica_needs_a_replica() -> None:
    """An empty replica list is a programming error, reported at once."""
    with pytest.raises(ValueError):
        choose_replica("fp", [], {})


HOUR = {"type": "ephemeral", "ttl": "1h"}


@pytest.mark.parametrize(("messages", "tools", "hour"), [
    ([{"role": "system", "content": [{"type": "text", "text": "s", "cache_control": HOUR}]}],
     None, True),
    ([{"role": "system", "content": "s", "cache_control": HOUR}], None, True),
    ([{"role": "user", "content": "u"}],
     [{"type": "function", "function": {"name": "f"}, "cache_control": HOUR}], True),
    ([{"role": "user", "content": "u"}],
     [{"type": "function", "function": {"name": "f", "cache_control": HOUR}}], True),
    # five minutes, the default, or no marker
    ([{"role": "system", "content": [{"type": "text", "text": "s",
                                      "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}],
     None, False),
    ([{"role": "system", "content": [{"type": "text", "text": "s",
                                      "cache_control": {"type": "ephemeral"}}]}], None, False),
    ([{"role": "user", "content": "u"}], [], False),
    # a tool parameter of that name is no marker, whatever it holds
    ([{"role": "user", "content": "u"}],
     [{"type": "function", "function": {"name": "f", "parameters": {
         "type": "object", "properties": {"cache_control": HOUR}}}}], False),
    # an odd value where a marker goes is not an hour's
    ([{"role": "system", "content": "s", "cache_control": "1h"}], None, False),
])
def test_an_hour_long_write_is_a_marker_with_ttl_1h_where_markers_go(
        messages: list[dict[str, object]], tools: list[dict[str, object]] | None,
        hour: bool) -> None:
    assert writes_for_an_hour(messages, tools) is hour
