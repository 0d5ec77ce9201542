"""The OpenAI-compatible API end to end: real openai client → router → simulator."""

from __future__ import annotations

import openai
import pytest

MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What are three rivers?"}]
ADAPTER_MODELS = ["pt-fast", "ll-fast", "ll-anthropic"]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@pytest.mark.parametrize("model", ADAPTER_MODELS)
def test_non_streaming_answer_carries_content_usage_and_routing_headers(
        client: openai.OpenAI, model: str) -> None:
    """A non-streaming completion comes back whole, with usage and every slorouter header."""
    raw = client.chat.completions.with_raw_response.create(model=model, messages=MESSAGES)
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert raw.headers["x-slorouter-model"] == model
    for name in ("x-request-id", "x-slorouter-task", "x-slorouter-risk", "x-slorouter-policy",
                 "x-slorouter-cache"):
        assert raw.headers[name], name
    phases = raw.headers["server-timing"]
    for phase in ("classify", "decide", "cache", "upstream_ttft", "total"):
        assert f"{phase};dur=" in phases


@pytest.mark.parametrize("model", ADAPTER_MODELS)
def test_streaming_answer_ends_with_usage_when_asked(client: openai.OpenAI, model: str) -> None:
    """A stream yields content chunks and a final usage chunk when include_usage is set."""
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_streaming_without_include_usage_sends_no_usage_chunk(client: openai.OpenAI) -> None:
    """The router asks upstream for usage but strips the usage chunk the client did not ask for."""
    chunks = list(client.chat.completions.create(model="pt-fast", messages=MESSAGES,
                                                 stream=True))
    assert chunks and all(c.choices for c in chunks)


def test_streaming_headers_name_the_deployment_before_the_first_byte(
        client: openai.OpenAI) -> None:
    """Streaming responses carry the routing headers (set before the body starts)."""
    with client.chat.completions.with_streaming_response.create(
            model="ll-fast", messages=MESSAGES, stream=True) as response:
        assert response.headers["x-slorouter-model"] == "ll-fast"
        assert "upstream_ttft;dur=" in response.headers["server-timing"]
        assert response.headers["content-type"].startswith("text/event-stream")
        assert list(response.iter_lines())


@pytest.mark.parametrize("model", ADAPTER_MODELS)
async def test_async_client_streams_and_completes(aclient: openai.AsyncOpenAI,
                                                  model: str) -> None:
    """The async client works for both call styles through every adapter."""
    completion = await aclient.chat.completions.create(model=model, messages=MESSAGES)
    assert completion.choices[0].message.content
    stream = await aclient.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts)


@pytest.mark.parametrize("model", ADAPTER_MODELS)
def test_tool_calls_are_passed_through(client: openai.OpenAI, model: str) -> None:
    """Declared tools reach the provider and its tool call reaches the client intact."""
    completion = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL], tool_choice="auto")
    calls = completion.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert "city" in calls[0].function.arguments


@pytest.mark.parametrize("model", ["pt-fast", "ll-fast"])
def test_streamed_tool_calls_are_passed_through(client: openai.OpenAI, model: str) -> None:
    """Tool-call deltas survive streaming."""
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL], stream=True)
    names = [tc.function.name for c in stream if c.choices
             for tc in (c.choices[0].delta.tool_calls or []) if tc.function and tc.function.name]
    assert names == ["get_weather"]


def test_models_endpoint_lists_aliases_and_models(client: openai.OpenAI) -> None:
    """GET /v1/models lists the routing alias and every configured model."""
    ids = {m.id for m in client.models.list()}
    assert {"auto", "pt-fast", "ll-anthropic", "chain"} <= ids


def test_auto_alias_follows_the_task_hint(client: openai.OpenAI) -> None:
    """`auto` with a task hint resolves through the per-task default table."""
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, extra_headers={"x-slorouter-task": "code"})
    assert raw.headers["x-slorouter-task"] == "code"
    assert raw.headers["x-slorouter-model"] == "ll-fast"


def test_fallback_moves_to_the_next_deployment_on_a_5xx(client: openai.OpenAI) -> None:
    """A failing first deployment is skipped; the answer names the one that served it."""
    raw = client.chat.completions.with_raw_response.create(model="chain", messages=MESSAGES)
    assert raw.headers["x-slorouter-model"] == "pt-fast"
    assert raw.parse().choices[0].message.content


def test_stream_fails_over_before_the_first_content_chunk(client: openai.OpenAI) -> None:
    """Stream fallback happens only before content: a 500 and a hang are skipped."""
    with client.chat.completions.with_streaming_response.create(
            model="chain-stream", messages=MESSAGES, stream=True) as response:
        assert response.headers["x-slorouter-model"] == "pt-fast"


def test_metadata_and_unknown_fields_pass_through(client: openai.OpenAI) -> None:
    """Client metadata and fields the router does not model are accepted."""
    completion = client.chat.completions.create(
        model="pt-fast", messages=MESSAGES, metadata={"team": "search"}, seed=7, user="u-1",
        temperature=0, top_p=1, max_tokens=30, stop=["\n\n"], n=1,
        response_format={"type": "text"}, extra_body={"service_tier": "auto"})
    assert completion.choices[0].message.content


def test_deterministic_content_for_identical_requests(client: openai.OpenAI) -> None:
    """The same request gives the same content (the simulator is deterministic)."""
    first = client.chat.completions.create(model="pt-fast", messages=MESSAGES, seed=1)
    second = client.chat.completions.create(model="pt-fast", messages=MESSAGES, seed=1)
    assert first.choices[0].message.content == second.choices[0].message.content
