"""The Anthropic Messages wire format, raw over HTTP and through litellm's `anthropic/` route."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.simulator.conftest import Sim

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm

pytestmark = pytest.mark.integration

HEADERS = {"x-api-key": "any-key", "anthropic-version": "2023-06-01"}
WEATHER = {"name": "get_weather", "description": "Weather of a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
OPENAI_WEATHER = {"type": "function", "function": {"name": "get_weather",
                                                   "parameters": WEATHER["input_schema"]}}


def message(model: str, stream: bool = False, **extra: object) -> dict[str, object]:
    return {"model": model, "max_tokens": 64, "stream": stream, "system": "Be terse.",
            "messages": [{"role": "user", "content": "Hello there"}], **extra}


def sse_events(text: str) -> list[tuple[str, dict[str, object]]]:
    """(event name, data) pairs of an SSE body."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_message_has_text_content_and_usage(sim: Sim) -> None:
    """A non-streaming message has one text block, end_turn and input/output token usage."""
    response = httpx.post(f"{sim.base_url}/v1/messages", json=message("steady"), headers=HEADERS)
    body = response.json()
    assert response.status_code == 200 and body["type"] == "message"
    assert body["content"][0]["type"] == "text" and body["content"][0]["text"]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"]["output_tokens"] == 20 and body["usage"]["input_tokens"] > 0


def test_stream_follows_anthropic_event_sequence(sim: Sim) -> None:
    """message_start, content_block_start, ping, deltas, content_block_stop, message_delta,
    message_stop, with the output token count in message_delta."""
    response = httpx.post(f"{sim.base_url}/v1/messages", json=message("steady", True),
                          headers=HEADERS)
    events = sse_events(response.text)
    names = [name for name, _ in events]
    deltas = [data for name, data in events if name == "content_block_delta"]
    assert names == ["message_start", "content_block_start", "ping", *["content_block_delta"]
                     * len(deltas), "content_block_stop", "message_delta", "message_stop"]
    usage = events[-2][1]["usage"]
    assert isinstance(usage, dict) and usage["output_tokens"] == len(deltas) == 20


def test_tools_give_a_tool_use_block_streamed_as_input_json(sim: Sim) -> None:
    """With tools, the answer is a tool_use block; streamed, its input arrives as JSON deltas."""
    whole = httpx.post(f"{sim.base_url}/v1/messages", json=message("instant", tools=[WEATHER]),
                       headers=HEADERS).json()
    events = sse_events(httpx.post(f"{sim.base_url}/v1/messages", headers=HEADERS,
                                   json=message("instant", True, tools=[WEATHER])).text)
    partial = "".join(str(data["delta"]["partial_json"]) for name, data in events  # type: ignore[index]
                      if name == "content_block_delta")
    block = whole["content"][0]
    assert whole["stop_reason"] == "tool_use" and block["type"] == "tool_use"
    assert block["name"] == "get_weather" and json.loads(partial) == block["input"]


def test_a_tool_call_cut_by_max_tokens_stops_with_max_tokens(sim: Sim) -> None:
    """`max_tokens: 2` cuts the tool_use block: `stop_reason: max_tokens`, `output_tokens` 2;
    the whole message's `input` is `{}` (the cut arguments are not JSON), a stream sends the
    two fragments it has."""
    body = message("instant", tools=[WEATHER], max_tokens=2)
    whole = httpx.post(f"{sim.base_url}/v1/messages", json=body, headers=HEADERS).json()
    assert whole["stop_reason"] == "max_tokens" and whole["usage"]["output_tokens"] == 2
    assert whole["content"][0]["type"] == "tool_use" and whole["content"][0]["input"] == {}
    events = sse_events(httpx.post(f"{sim.base_url}/v1/messages", headers=HEADERS,
                                   json={**body, "stream": True}).text)
    fragments = [data for name, data in events if name == "content_block_delta"]
    delta = next(data["delta"] for name, data in events if name == "message_delta")
    assert len(fragments) == 2 and isinstance(delta, dict)
    assert delta["stop_reason"] == "max_tokens"


def test_rate_limit_uses_anthropic_error_shape_and_retry_after(sim: Sim) -> None:
    """A simulated 429 on /v1/messages is a rate_limit_error with Retry-After."""
    response = httpx.post(f"{sim.base_url}/v1/messages", json=message("rate-limited"),
                          headers=HEADERS)
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_overloaded_is_anthropics_529(sim: Sim) -> None:
    """`error_rate_503` on the Anthropic wire answers as Anthropic does when overloaded: 529
    `overloaded_error` (it answered 503, a status Anthropic does not send)."""
    response = httpx.post(f"{sim.base_url}/v1/messages", json=message("unavailable"),
                          headers=HEADERS)
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("stream", [False, True])
def test_a_matched_stop_sequence_is_named_in_the_stop_reason(sim: Sim, stream: bool) -> None:
    """The text ends before one of the request's stop strings: `stop_reason: stop_sequence`
    with that string in `stop_sequence`, whole or streamed (it said `end_turn` and null). A
    stop string the text never reaches leaves `end_turn`. (The stop strings seed the text, so
    the test stops at letters any 20 English words hold.)"""
    def ended(stop_sequences: list[str]) -> tuple[object, object, str]:
        body = message("steady", stream, stop_sequences=stop_sequences)
        response = httpx.post(f"{sim.base_url}/v1/messages", json=body, headers=HEADERS)
        if not stream:
            answer = response.json()
            return answer["stop_reason"], answer["stop_sequence"], answer["content"][0]["text"]
        events = sse_events(response.text)
        delta = next(data["delta"] for name, data in events if name == "message_delta")
        assert isinstance(delta, dict)
        text = "".join(str(data["delta"]["text"]) for name, data in events  # type: ignore[index]
                       if name == "content_block_delta")
        return delta["stop_reason"], delta["stop_sequence"], text

    reason, sequence, text = ended(["e", "a"])
    assert reason == "stop_sequence" and sequence in ("e", "a")
    assert "e" not in text and "a" not in text
    assert ended(["zzzz-never"])[:2] == ("end_turn", None)


def test_missing_max_tokens_is_invalid_request(sim: Sim) -> None:
    """Anthropic requires max_tokens: without it the request is a 400 invalid_request_error."""
    body = {"model": "instant", "messages": [{"role": "user", "content": "x"}]}
    response = httpx.post(f"{sim.base_url}/v1/messages", json=body, headers=HEADERS)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(("extra", "named"), [
    ({"messages": [{"role": "system", "content": "Be terse."},
                   {"role": "user", "content": "Hello"}]}, "messages.0.role"),
    ({"temperature": 1.5}, "temperature"),
    ({"top_p": 1.2}, "top_p"),
    ({"tool_choice": {"type": "any"}}, "may only be given with tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_time"}}, "get_time"),
])
def test_what_anthropic_refuses_is_a_400_invalid_request(
        sim: Sim, extra: dict[str, object], named: str) -> None:
    """The Messages API refuses a `system` role among the messages (the system prompt is a
    top-level field), a temperature or top_p above 1, and a `tool_choice` of `any` or a named
    tool without tools or naming none of them: so does the simulator (it took them all), so a
    translation that produced one fails here as it would at Anthropic."""
    response = httpx.post(f"{sim.base_url}/v1/messages", json=message("steady", **extra),
                          headers=HEADERS)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and named in error["message"]


@pytest.mark.parametrize(("drop", "status", "kind"), [
    ("x-api-key", 401, "authentication_error"),
    ("anthropic-version", 400, "invalid_request_error")])
def test_a_request_without_anthropics_headers_is_refused(
        sim: Sim, drop: str, status: int, kind: str) -> None:
    """Anthropic answers a request without `x-api-key` with a 401 and one without
    `anthropic-version` with a 400; any key is accepted."""
    headers = {k: v for k, v in HEADERS.items() if k != drop}
    response = httpx.post(f"{sim.base_url}/v1/messages", json=message("steady"), headers=headers)
    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and drop in body[
        "error"]["message"]


async def test_litellm_anthropic_route_translates_completion(sim: Sim) -> None:
    """litellm's anthropic/ provider gets OpenAI-shaped text and usage from the simulator."""
    response = await litellm.acompletion(
        model="anthropic/steady", api_base=sim.base_url, api_key="x", max_tokens=64,
        messages=[{"role": "system", "content": "Be terse."},
                  {"role": "user", "content": "Hello"}])
    assert response.choices[0].message.content
    assert response.usage.completion_tokens == 20


async def test_litellm_anthropic_stream_matches_usage(sim: Sim) -> None:
    """Streaming through litellm yields content chunks whose count matches reported usage."""
    stream = await litellm.acompletion(
        model="anthropic/steady", api_base=sim.base_url, api_key="x", max_tokens=64,
        messages=[{"role": "user", "content": "Hello"}], stream=True,
        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    usage = [c.usage for c in chunks if getattr(c, "usage", None)]
    assert len(content) == 20 and usage[-1].completion_tokens == 20


async def test_litellm_anthropic_tool_call(sim: Sim) -> None:
    """litellm maps the simulator's tool_use block to an OpenAI tool call."""
    response = await litellm.acompletion(
        model="anthropic/instant", api_base=sim.base_url, api_key="x", max_tokens=64,
        messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[OPENAI_WEATHER])
    call = response.choices[0].message.tool_calls[0]
    assert response.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)


async def test_litellm_maps_simulated_429_to_rate_limit_error(sim: Sim) -> None:
    """A simulated 429 on the Anthropic route surfaces as litellm.RateLimitError."""
    with pytest.raises(litellm.RateLimitError):
        await litellm.acompletion(
            model="anthropic/rate-limited", api_base=sim.base_url, api_key="x", max_tokens=8,
            messages=[{"role": "user", "content": "x"}], num_retries=0)
