"""Request shapes of the current OpenAI API that the simulator once refused with a 400, end to
end: the real `openai` client → the router → the simulator, whole and streamed.

`allowed_tools` (its mode over the tools it lists), custom tools (free-form or grammar input;
the simulator calls them in OpenAI's `custom: {name, input}` shape) and a `tool_choice` naming a
custom tool. A real provider accepts all of them, so a user's first requests against
`./dev serve` must too. (`"stream": null`, the fourth shape, never reaches an upstream through
the router, which sends `stream` itself: `tests/simulator/test_openai_api.py` covers it.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

# ll-fast: litellm refuses a custom tool choice itself (`adapter_rejected`, see
# test_litellm_config_errors), so that case runs through the pass-through adapter only.
MODELS = ["pt-fast", "ll-fast"]
USER = [{"role": "user", "content": "Check the weather and the time, then run some code."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}
CODE = {"type": "custom", "custom": {"name": "code_exec", "description": "Runs Python",
                                     "format": {"type": "text"}}}
SQL = {"type": "custom", "custom": {"name": "sql", "description": "Read-only query", "format": {
    "type": "grammar", "grammar": {"definition": "start: /SELECT .+/", "syntax": "lark"}}}}
AFTER_TIME_RESULT = [*USER, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]


def _allowed(mode: str, name: str) -> dict[str, Any]:
    return {"type": "allowed_tools", "allowed_tools": {
        "mode": mode, "tools": [{"type": "function", "function": {"name": name}}]}}


# name: (request fields, expected call (type, name), models it runs through)
SHAPES: dict[str, tuple[dict[str, Any], tuple[str, str], list[str]]] = {
    "allowed-tools-auto": ({"tools": [WEATHER, TIME], "tool_choice": _allowed("auto", "get_time")},
                           ("function", "get_time"), MODELS),
    "allowed-tools-required-after-a-result": (
        {"messages": AFTER_TIME_RESULT, "tools": [WEATHER, TIME],
         "tool_choice": _allowed("required", "get_time")}, ("function", "get_time"), MODELS),
    "custom-tool": ({"tools": [CODE]}, ("custom", "code_exec"), MODELS),
    "custom-grammar-tool-named": (
        {"tools": [WEATHER, SQL], "tool_choice": {"type": "custom", "custom": {"name": "sql"}}},
        ("custom", "sql"), ["pt-fast"]),
}
CASES = [pytest.param(name, model, id=f"{name}-{model}")
         for name, (_, _, models) in SHAPES.items() for model in models]


def _whole_call(completion: ChatCompletion) -> tuple[str, str, str, str | None]:
    choice = completion.choices[0]
    (call,) = [c.model_dump() for c in choice.message.tool_calls or []]
    kind = call["type"]
    body = call[kind]
    return kind, body["name"], body.get("arguments", body.get("input")), choice.finish_reason


def _streamed_call(chunks: Iterable[ChatCompletionChunk]) -> tuple[str, str, str, str | None]:
    kind, name, payload, finish = "", "", "", None
    for chunk in chunks:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            part = delta.model_dump()  # a custom call's `custom` is an extra field of the SDK's
            kind = part.get("type") or kind
            body = part.get(kind) or {}
            name += body.get("name") or ""
            payload += body.get("arguments") or body.get("input") or ""
        finish = chunk.choices[0].finish_reason or finish
    return kind, name, payload, finish


@pytest.mark.parametrize(("shape", "model"), CASES)
def test_a_shape_openai_accepts_is_answered_whole_and_streamed(
        client: openai.OpenAI, shape: str, model: str) -> None:
    """The request is answered (no 400) with the call its tool choice asks for, and the stream
    rebuilds the same call as the whole answer."""
    fields, (kind, name), _ = SHAPES[shape]
    request: dict[str, Any] = {"model": model, "messages": USER, **fields}
    raw = client.chat.completions.with_raw_response.create(**request)
    whole = _whole_call(raw.parse())
    streamed = _streamed_call(client.chat.completions.create(**request, stream=True))
    assert raw.headers["x-slorouter-model"] == model
    assert whole[:2] == (kind, name) and whole[2] and whole[3] == "tool_calls"
    assert streamed == whole

