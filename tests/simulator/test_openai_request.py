"""The simulator's OpenAI request models: every shape the `openai` SDK can send is read (custom
tools, `allowed_tools`, a named custom tool, `stream: null`, content parts and history calls of
every kind), what OpenAI refuses stays a 400, and the answers to the new shapes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from router.providers.simulator import presets
from router.providers.simulator.openai_wire import OpenAIWire
from router.providers.simulator.plan import Plan, build_answer
from router.providers.simulator.request import SimRequest, ToolSpec, content_key
from router.providers.simulator.wire import ResponseMeta, WireError

USER = [{"role": "user", "content": "hello"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time"}}
CODE = {"type": "custom", "custom": {"name": "code_exec", "description": "Runs Python",
                                     "format": {"type": "text"}}}
SQL = {"type": "custom", "custom": {"name": "sql", "format": {"type": "grammar", "grammar": {
    "definition": "start: /SELECT .+/", "syntax": "lark"}}}}
PROFILE = presets.instant({"output_tokens_p50": 12, "output_tokens_p99": 12})


def allowed(mode: str, *names: str) -> dict[str, Any]:
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
        {"type": "function", "function": {"name": n}} for n in names]}}


def parse(**fields: Any) -> SimRequest:
    return OpenAIWire().parse(orjson.dumps({"model": "m", "messages": USER, **fields}))


@pytest.mark.parametrize(("fields", "tools", "mode", "forced", "allowed_names"), [
    ({"tools": [WEATHER, TIME], "tool_choice": allowed("auto", "get_time")},
     (("get_weather", "function"), ("get_time", "function")), "auto", None, ("get_time",)),
    ({"tools": [WEATHER, TIME], "tool_choice": allowed("required", "get_time")},
     (("get_weather", "function"), ("get_time", "function")), "required", None, ("get_time",)),
    ({"tools": [CODE, WEATHER]}, (("code_exec", "custom"), ("get_weather", "function")),
     "auto", None, None),
    ({"tools": [{"type": "custom", "custom": {"name": "bare"}}]}, (("bare", "custom"),), "auto",
     None, None),
    ({"tools": [WEATHER, SQL], "tool_choice": {"type": "custom", "custom": {"name": "sql"}}},
     (("get_weather", "function"), ("sql", "custom")), "auto", "sql", None),
    ({"tools": [CODE], "tool_choice": {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "custom", "custom": {"name": "code_exec"}}]}}},
     (("code_exec", "custom"),), "required", None, ("code_exec",)),
], ids=["allowed-auto", "allowed-required", "custom", "custom-no-format", "named-custom",
        "allowed-custom"])
def test_new_tool_shapes_are_read(fields: dict[str, Any], tools: tuple[tuple[str, str], ...],
                                  mode: str, forced: str | None,
                                  allowed_names: tuple[str, ...] | None) -> None:
    """Custom tools, `allowed_tools` and a named custom tool parse into the simulator's view
    (they were a 400: `tools.0.function: Field required`, `tool_choice: Input should be ...`)."""
    request = parse(**fields)
    assert tuple((t.name, t.kind) for t in request.tools) == tools
    assert (request.tool_mode, request.forced_tool, request.allowed_tools) == (
        mode, forced, allowed_names)


def test_a_custom_tools_format_counts_as_its_schema() -> None:
    """A custom tool's `format` (a grammar, say) is what the prompt carries of it."""
    (tool,) = parse(tools=[SQL]).tools
    assert orjson.loads(tool.parameters_json)["grammar"]["syntax"] == "lark"
    assert orjson.loads(parse(tools=[{"type": "custom", "custom": {"name": "x"}}]).tools[0]
                        .parameters_json) == {"type": "text"}


def test_stream_null_is_a_whole_answer() -> None:
    """`"stream": null` (the SDK sends it for `stream=None`) is not streamed, as OpenAI reads it;
    `stream_options.include_usage: null` is no usage chunk."""
    request = parse(stream=None, stream_options={"include_usage": None})
    assert (request.stream, request.include_usage) == (False, False)


@pytest.mark.parametrize("extra", [
    {"audio": {"format": "wav", "voice": "alloy"}, "modalities": ["text", "audio"]},
    {"prediction": {"type": "content", "content": [{"type": "text", "text": "x = 1"}]}},
    {"web_search_options": {"search_context_size": "low", "user_location": {
        "type": "approximate", "approximate": {"city": "Paris"}}}},
    {"verbosity": "low", "prompt_cache_key": "k", "safety_identifier": "s",
     "reasoning_effort": "minimal", "service_tier": "flex", "store": True,
     "prompt_cache_retention": "24h", "parallel_tool_calls": False, "logprobs": True,
     "top_logprobs": 2, "logit_bias": {"50256": -100}, "metadata": {"a": "b"}},
    {"functions": [{"name": "f"}], "function_call": {"name": "f"}},
], ids=["audio", "prediction", "web-search", "options", "functions"])
def test_fields_the_simulator_does_not_model_are_accepted_and_change_nothing(
        extra: dict[str, Any]) -> None:
    """Fields without an effect here are read past, and the answer is the plain request's."""
    assert content_key(parse(**extra)) == content_key(parse())


def test_history_of_every_kind_is_read_into_the_prompt() -> None:
    """Content parts of every type, refusals and past custom or legacy function calls all
    count in the prompt (a custom call used to read as `[tool_call  ]`, a refusal as a type)."""
    messages = [
        {"role": "user", "content": [
            {"type": "text", "text": "look", "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "file", "file": {"file_id": "file-1"}}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I won't"}]},
        {"role": "assistant", "content": None, "refusal": "Not that"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": "ok"},
    ]
    texts = [m.text for m in parse(messages=messages).messages]
    assert texts == ["look\n[image_url]\n[input_audio]\n[file]", "I won't", "Not that",
                     "[tool_call code_exec print(1)]", "1", "[tool_call f {}]", "ok"]


@pytest.mark.parametrize(("fields", "problem"), [
    ({"tools": [{"type": "web_search", "function": {"name": "f"}}]},
     "tools.0: a tool's type must be 'function' or 'custom'"),
    ({"tools": [{"type": "custom"}]}, "Field required"),
    ({"tools": [{"type": "function"}]}, "Field required"),
    ({"tool_choice": "bogus"}, "Input should be 'auto', 'none' or 'required'"),
    ({"tool_choice": {"type": "hosted"}}, "tool_choice must be"),
    ({"tool_choice": allowed("none", "f")}, "Input should be 'auto' or 'required'"),
    ({"tool_choice": {"type": "allowed_tools"}}, "Field required"),
    ({"messages": []}, "at least 1 item"),
    ({"max_tokens": 0}, "greater than or equal to 1"),
])
def test_what_openai_refuses_stays_a_400(fields: dict[str, Any], problem: str) -> None:
    """Unknown tool or tool-choice types, missing tool bodies, a bad mode: refused, named."""
    with pytest.raises(WireError) as caught:
        parse(**fields)
    assert problem in str(caught.value)


def _answer(**fields: Any) -> tuple[SimRequest, Plan]:
    request = parse(**fields)
    answer = build_answer(request, PROFILE)
    return request, Plan((answer,), 10, 0, 0.0, 0.0, 1, None, "abort")


def test_allowed_tools_calls_only_a_listed_tool_and_keeps_its_mode() -> None:
    """`allowed_tools` is its mode over the tools it lists: `auto` calls the first listed (not
    the first of `tools`) and answers a tool result in text; `required` calls it anyway."""
    after_result = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "noon"}]
    _, auto = _answer(tools=[WEATHER, TIME], tool_choice=allowed("auto", "get_time"))
    _, done = _answer(tools=[WEATHER, TIME], tool_choice=allowed("auto", "get_time"),
                      messages=after_result)
    _, again = _answer(tools=[WEATHER, TIME], tool_choice=allowed("required", "get_time"),
                       messages=after_result)
    _, unknown = _answer(tools=[WEATHER], tool_choice=allowed("required", "nope"))
    assert auto.answer.tool_call is not None and auto.answer.tool_call.name == "get_time"
    assert done.answer.tool_call is None and done.answer.finish_reason == "stop"
    assert again.answer.tool_call is not None and again.answer.tool_call.name == "get_time"
    assert unknown.answer.tool_call is None  # no listed tool exists: a text answer


def test_allowed_tools_keeps_every_tool_in_the_prompt_and_changes_the_answer_key() -> None:
    """The whole `tools` list stays in the prompt (and its cached prefix), as OpenAI means it."""
    plain = parse(tools=[WEATHER, TIME])
    narrowed = parse(tools=[WEATHER, TIME], tool_choice=allowed("auto", "get_weather"))
    assert plain.tools == narrowed.tools
    assert content_key(plain) != content_key(narrowed)


def test_a_custom_tool_is_called_with_the_text_answer_as_input() -> None:
    """The custom call's input is the text the request would get (12 filler tokens here),
    `finish_reason: tool_calls`; cut by `max_tokens` it says `length`."""
    request, plan = _answer(tools=[CODE])
    text = build_answer(parse(), PROFILE)
    call = plan.answer.tool_call
    assert call is not None and (call.kind, call.name) == ("custom", "code_exec")
    assert call.arguments == "".join(plan.answer.pieces) and len(plan.answer.pieces) == 12
    assert plan.answer.finish_reason == "tool_calls" and text.tool_call is None
    _, cut = _answer(tools=[CODE], max_tokens=3)
    assert (len(cut.answer.pieces), cut.answer.finish_reason) == (3, "length")
    assert request.tools == (ToolSpec("code_exec", '{"type":"text"}', "custom"),)


def test_a_function_call_is_cut_at_max_tokens_as_a_providers_is() -> None:
    """Past `max_tokens` the call's arguments stop there and it ends with `length` (not valid
    JSON then), its usage within the limit: it came whole with `tool_calls` whatever the limit,
    so nothing exercised a router on truncated tool calls. Under the limit it is unchanged."""
    _, whole = _answer(tools=[WEATHER])
    _, cut = _answer(tools=[WEATHER], max_tokens=2)
    call, cut_call = whole.answer.tool_call, cut.answer.tool_call
    assert call is not None and cut_call is not None and call.name == cut_call.name
    assert whole.answer.finish_reason == "tool_calls" and len(whole.answer.pieces) > 2
    assert (len(cut.answer.pieces), cut.answer.finish_reason) == (2, "length")
    assert cut_call.arguments == "".join(cut.answer.pieces)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(cut_call.arguments)
    _, roomy = _answer(tools=[WEATHER], max_tokens=len(whole.answer.pieces))
    assert roomy.answer.finish_reason == "tool_calls"


def test_a_custom_call_renders_in_openais_shape_whole_and_streamed() -> None:
    """`{"type": "custom", "custom": {"name", "input"}}`; streamed, the first delta has id, type
    and name with the first input piece, the others `custom: {input}` pieces."""
    _, plan = _answer(tools=[WEATHER, SQL], tool_choice={"type": "custom",
                                                        "custom": {"name": "sql"}})
    meta = ResponseMeta("ab" * 12, 0, "m")
    whole = orjson.loads(OpenAIWire().complete(plan, meta))["choices"][0]
    (call,) = whole["message"]["tool_calls"]
    assert (call["type"], call["custom"]["name"], whole["finish_reason"]) == (
        "custom", "sql", "tool_calls")
    stream = OpenAIWire().stream(plan, meta, include_usage=False)
    deltas = [orjson.loads(stream.chunk(i, text)[len(b"data: "):])["choices"][0]["delta"]
              ["tool_calls"][0] for i, text in enumerate(plan.chunks())]
    assert deltas[0]["id"] == call["id"] and deltas[0]["custom"]["name"] == "sql"
    assert set(deltas[1]) == {"index", "custom"} and set(deltas[1]["custom"]) == {"input"}
    assert "".join(d["custom"]["input"] for d in deltas) == call["custom"]["input"]
