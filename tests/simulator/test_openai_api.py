"""The OpenAI wire format of a real simulator process, driven by the real `openai` client."""

from __future__ import annotations

import json
import math

import httpx
import openai
import pytest

from tests.simulator.conftest import Sim

pytestmark = pytest.mark.integration

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}


def client(sim: Sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_url, api_key="any-key", max_retries=0)


def aclient(sim: Sim) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.openai_url, api_key="any-key", max_retries=0)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


def test_non_streaming_answer_reports_usage(sim: Sim) -> None:
    """A plain completion has text, finish_reason stop and usage that adds up."""
    response = client(sim).chat.completions.create(model="steady", messages=ask("hello"))
    usage = response.usage
    assert response.choices[0].message.content
    assert response.choices[0].finish_reason == "stop"
    assert usage is not None and usage.completion_tokens == 20
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stream_starts_with_role_then_content_and_ends_with_usage(sim: Sim) -> None:
    """A stream is role-only first, then content deltas, a finish chunk, a usage chunk, DONE."""
    stream = client(sim).chat.completions.create(
        model="steady", messages=ask("hello"), stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    first, finish, last = chunks[0], chunks[-2], chunks[-1]
    content = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert first.choices[0].delta.role == "assistant" and not first.choices[0].delta.content
    assert all(content)
    assert finish.choices[0].finish_reason == "stop"
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == len(content)


def test_streamed_text_equals_non_streamed_text(sim: Sim) -> None:
    """Streaming does not change the deterministic answer."""
    api = client(sim)
    whole = api.chat.completions.create(model="steady", messages=ask("same"))
    parts = api.chat.completions.create(model="steady", messages=ask("same"), stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
    assert text == whole.choices[0].message.content


def test_same_request_gets_same_answer_and_different_request_another(sim: Sim) -> None:
    """Content is a function of model, messages and parameters."""
    api = client(sim)
    answers = [api.chat.completions.create(model="instant", messages=ask(q)).choices[0]
               .message.content for q in ("one", "one", "two")]
    other = api.chat.completions.create(model="instant", messages=ask("one"), temperature=0.5)
    assert answers[0] == answers[1]
    assert answers[0] != answers[2]
    assert other.choices[0].message.content != answers[0]


def test_tokens_per_chunk_groups_tokens_and_keeps_usage_consistent(sim: Sim) -> None:
    """With 3 tokens per chunk, 10 tokens arrive in 4 content chunks and usage says 10."""
    stream = client(sim).chat.completions.create(
        model="chunky", messages=ask("hi"), stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 4
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 10


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_caps_output_with_finish_reason_length(sim: Sim, field: str) -> None:
    """Both spellings of the output limit cut the answer and say `length`."""
    response = client(sim).chat.completions.create(
        model="steady", messages=ask("long"), **{field: 5})  # type: ignore[call-overload]
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 5


def test_tool_call_fills_required_arguments_from_schema(sim: Sim) -> None:
    """With tools, the first tool is called with JSON arguments holding the required fields."""
    response = client(sim).chat.completions.create(
        model="instant", messages=ask("weather?"), tools=[WEATHER_TOOL, TIME_TOOL])
    choice = response.choices[0]
    calls = choice.message.tool_calls or []
    arguments = json.loads(calls[0].function.arguments)
    assert choice.finish_reason == "tool_calls"
    assert calls[0].function.name == "get_weather"
    assert set(arguments) == {"city", "unit"} and arguments["unit"] == "celsius"


def test_named_tool_choice_calls_that_tool_and_none_answers_in_text(sim: Sim) -> None:
    """tool_choice naming a function picks it; tool_choice none gives a text answer."""
    api = client(sim)
    named = api.chat.completions.create(
        model="instant", messages=ask("time?"), tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    text = api.chat.completions.create(
        model="instant", messages=ask("time?"), tools=[WEATHER_TOOL], tool_choice="none")
    calls = named.choices[0].message.tool_calls or []
    assert calls[0].function.name == "get_time"
    assert text.choices[0].message.tool_calls is None and text.choices[0].message.content


def test_streamed_tool_call_deltas_rebuild_the_same_call(sim: Sim) -> None:
    """Tool-call deltas (id and name first, then argument pieces) add up to the full call."""
    api = client(sim)
    whole = api.chat.completions.create(model="instant", messages=ask("w"), tools=[WEATHER_TOOL])
    stream = api.chat.completions.create(model="instant", messages=ask("w"),
                                         tools=[WEATHER_TOOL], stream=True)
    name, arguments, finish = "", "", None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            name += delta.function.name or "" if delta.function else ""
            arguments += delta.function.arguments or "" if delta.function else ""
        finish = chunk.choices[0].finish_reason or finish
    expected = (whole.choices[0].message.tool_calls or [])[0].function
    assert (name, arguments, finish) == (expected.name, expected.arguments, "tool_calls")


def test_tool_result_in_history_gets_a_text_answer(sim: Sim) -> None:
    """After a tool result (tool_choice auto), the model answers in text instead of looping."""
    messages = [*ask("weather?"),
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    response = client(sim).chat.completions.create(model="instant", messages=messages,
                                                   tools=[WEATHER_TOOL])
    assert response.choices[0].finish_reason == "stop" and response.choices[0].message.content


async def test_async_client_streams_and_completes(sim: Sim) -> None:
    """The async client gets the same answer streamed and not."""
    api = aclient(sim)
    whole = await api.chat.completions.create(model="steady", messages=ask("async"))
    stream = await api.chat.completions.create(model="steady", messages=ask("async"),
                                               stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    await api.close()
    assert text == whole.choices[0].message.content


def test_stream_null_is_answered_whole(sim: Sim) -> None:
    """`stream=None` sends `"stream": null`, which OpenAI reads as not streamed (it was a 400)."""
    completion = client(sim).chat.completions.create(model="steady", messages=ask("x"),
                                                     stream=None)
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"


def test_models_endpoint_lists_configured_models(sim: Sim) -> None:
    """GET /v1/models lists every model of the profile file."""
    names = {m.id for m in client(sim).models.list()}
    assert {"instant", "steady", "quiz"} <= names


def test_unknown_model_is_404_in_openai_error_shape(sim: Sim) -> None:
    """An unknown model name gets OpenAI's not-found error."""
    with pytest.raises(openai.NotFoundError) as caught:
        client(sim).chat.completions.create(model="no-such-model", messages=ask("x"))
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "model_not_found"


@pytest.mark.parametrize("body", [b"{not json", b'{"model": "instant", "messages": []}',
                                  b'{"model": "instant"}', b'{"model": 3, "messages": 1}'])
def test_bad_body_is_400_with_error_object(sim: Sim, body: bytes) -> None:
    """Malformed or invalid requests get a 400 with OpenAI's error object."""
    response = httpx.post(f"{sim.openai_url}/chat/completions", content=body)
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_prompt_over_context_window_is_rejected_as_context_length(sim: Sim) -> None:
    """A prompt plus max_tokens beyond the model's window is a 400 context_length_exceeded."""
    with pytest.raises(openai.BadRequestError) as caught:
        client(sim).chat.completions.create(model="small-window", messages=ask("x " * 200))
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "context_length_exceeded"


def test_n_choices_are_drawn_apart_and_billed_together(sim: Sim) -> None:
    """`n` answers come as choices 0..n-1, each its own draw, and usage counts them all;
    choice 0 is the same for the same request."""
    api = client(sim)
    response = api.chat.completions.create(model="instant", messages=ask("many"), n=3)
    again = api.chat.completions.create(model="instant", messages=ask("many"), n=3)
    texts = [choice.message.content for choice in response.choices]
    assert [choice.index for choice in response.choices] == [0, 1, 2]
    assert all(texts) and len(set(texts)) == 3
    assert [c.message.content for c in again.choices] == texts
    assert all(choice.finish_reason == "stop" for choice in response.choices)
    steady = api.chat.completions.create(model="steady", messages=ask("many"), n=3)
    assert steady.usage is not None and steady.usage.completion_tokens == 3 * 20


def test_n_streamed_choices_interleave_and_each_finishes(sim: Sim) -> None:
    """A stream of `n` choices: each choice opens with its role, sends its own deltas (the
    same text as the whole answer's choice) and its own finish reason; usage sums them."""
    api = client(sim)
    whole = api.chat.completions.create(model="instant", messages=ask("many"), n=2)
    stream = api.chat.completions.create(model="instant", messages=ask("many"), n=2,
                                         stream=True, stream_options={"include_usage": True})
    texts: dict[int, list[str]] = {0: [], 1: []}
    roles: dict[int, str | None] = {}
    finishes: dict[int, str | None] = {}
    usage = None
    order = []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            roles.setdefault(choice.index, choice.delta.role)
            if choice.delta.content:
                texts[choice.index].append(choice.delta.content)
                order.append(choice.index)
            if choice.finish_reason is not None:
                finishes[choice.index] = choice.finish_reason
    assert roles == {0: "assistant", 1: "assistant"}
    assert ["".join(texts[i]) for i in (0, 1)] == [c.message.content for c in whole.choices]
    assert finishes == {0: "stop", 1: "stop"}
    assert order[:2] == [0, 1]  # decoded side by side, not one choice after the other
    assert usage is not None and usage.completion_tokens == len(texts[0]) + len(texts[1])


@pytest.mark.parametrize("n", [0, 129])
def test_n_outside_openai_bounds_is_400(sim: Sim, n: int) -> None:
    with pytest.raises(openai.BadRequestError):
        client(sim).chat.completions.create(model="instant", messages=ask("x"), n=n)


def test_logprobs_cover_each_token_with_its_likeliest_alternatives(sim: Sim) -> None:
    """Asked for, each content token has a log probability (of at least 0.5: it was chosen)
    and its `top_logprobs` likeliest tokens, itself first, in order; whole or streamed the
    same; the text is the one the request gets without them."""
    api = client(sim)
    plain = api.chat.completions.create(model="steady", messages=ask("odds"))
    whole = api.chat.completions.create(model="steady", messages=ask("odds"), logprobs=True,
                                        top_logprobs=3)
    choice = whole.choices[0]
    assert choice.message.content == plain.choices[0].message.content
    assert plain.choices[0].logprobs is None
    assert choice.logprobs is not None and choice.logprobs.content is not None
    tokens = choice.logprobs.content
    assert "".join(t.token for t in tokens) == choice.message.content
    for token in tokens:
        assert math.log(0.5) <= token.logprob < 0
        assert token.bytes == list(token.token.encode())
        ranked = [t.logprob for t in token.top_logprobs]
        assert token.top_logprobs[0].token == token.token and len(ranked) == 3
        assert ranked == sorted(ranked, reverse=True)
        assert len({t.token for t in token.top_logprobs}) == 3
        assert sum(math.exp(lp) for lp in ranked) < 1
    streamed = [entry for chunk in api.chat.completions.create(
        model="steady", messages=ask("odds"), logprobs=True, top_logprobs=3, stream=True)
        for c in chunk.choices if c.logprobs is not None and c.logprobs.content
        for entry in c.logprobs.content]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in tokens]


def test_logprobs_without_top_ones_and_top_ones_without_logprobs(sim: Sim) -> None:
    api = client(sim)
    bare = api.chat.completions.create(model="steady", messages=ask("odds"), logprobs=True)
    content = bare.choices[0].logprobs.content if bare.choices[0].logprobs else None
    assert content and all(t.top_logprobs == [] for t in content)
    with pytest.raises(openai.BadRequestError):
        api.chat.completions.create(model="steady", messages=ask("odds"), top_logprobs=2)


@pytest.mark.parametrize("stream", [False, True])
def test_json_modes_answer_an_object_of_the_schema(sim: Sim, stream: bool) -> None:
    """`response_format` json_object answers a JSON object, json_schema an object holding the
    schema's required properties; cut by `max_tokens`, it ends `length` (no longer JSON). The
    simulator answered prose whatever the format, so a router that dropped a JSON mode on the
    way (litellm does, to Anthropic) passed unseen."""
    schema = {"type": "json_schema", "json_schema": {"name": "w", "schema": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}
    openai_client = client(sim)

    def answer(response_format: dict[str, object], max_tokens: int = 200) -> tuple[str, str]:
        messages = [{"role": "user", "content": "The weather, as JSON."}]
        if not stream:
            done = openai_client.chat.completions.create(
                model="steady", messages=messages, max_tokens=max_tokens,  # type: ignore[arg-type]
                response_format=response_format)  # type: ignore[arg-type]
            return done.choices[0].message.content or "", done.choices[0].finish_reason
        chunks = list(openai_client.chat.completions.create(
            model="steady", messages=messages, max_tokens=max_tokens, stream=True,  # type: ignore[arg-type]
            response_format=response_format))  # type: ignore[arg-type]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = next(c.choices[0].finish_reason for c in reversed(chunks)
                      if c.choices and c.choices[0].finish_reason)
        return text, finish

    text, finish = answer({"type": "json_object"})
    assert isinstance(json.loads(text), dict) and finish == "stop"
    text, finish = answer(schema)
    assert set(json.loads(text)) == {"city", "days"} and finish == "stop"
    cut, finish = answer(schema, max_tokens=2)
    assert finish == "length" and len(cut) < len(text)
