"""The chat request at the boundary: strict types, tagged objects, OpenAI-style params, depth.

The pipeline forwards the client's raw JSON, so anything the schema lets through reaches the
provider as sent: these tests hold that a wrongly typed or malformed field is a 400 with the
field's path (`messages[0].content`) in `param`, and that valid OpenAI requests still pass.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.requests import Request

from router.api.body import (
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    parse_chat,
    parse_json_object,
    read_json,
    too_deep,
)
from router.errors import RequestError
from router.pipeline import request_view

MESSAGES = [{"role": "user", "content": "hello"}]


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": MESSAGES, **fields}


def _rejected(body: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_chat(body)
    assert caught.value.status_code == 400
    assert caught.value.error_type == "invalid_request_error"
    return caught.value


def _nested(levels: int) -> dict[str, Any]:
    """A chat body that is `levels` objects deep (the body itself is level 1)."""
    body = _body()
    node = body
    for _ in range(levels - 1):
        node["x"] = {}
        node = node["x"]
    return body


@pytest.mark.parametrize(("field", "value"), [
    ("max_tokens", "5"), ("max_tokens", 5.0), ("max_tokens", True),
    ("max_completion_tokens", "5"), ("max_completion_tokens", False),
    ("n", "1"), ("n", 1.0), ("seed", "7"), ("seed", True), ("top_logprobs", "2"),
    ("temperature", "0.5"), ("temperature", True), ("top_p", "1"),
    ("presence_penalty", "0"), ("frequency_penalty", False),
    ("stream", "yes"), ("stream", 1), ("stream", "true"),
    ("logprobs", "true"), ("parallel_tool_calls", 0),
    ("model", 7), ("user", 5), ("tool_choice", 5),
])
def test_wrongly_typed_fields_are_400_with_the_param(field: str, value: object) -> None:
    """No lax coercion: a string, float or boolean where OpenAI wants another type is a 400."""
    error = _rejected(_body(**{field: value}))
    assert error.param == field
    assert error.code == "invalid_type"


@pytest.mark.parametrize(("fields", "param"), [
    ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"metadata": {"task": 5}}, "metadata.task"),
    ({"stop": 5}, "stop"),
    ({"stop": ["ok", 1]}, "stop[1]"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x", "name": 3}]}, "messages[0].name"),
    ({"messages": [*MESSAGES, {"role": "tool", "content": "y", "tool_call_id": 5}]},
     "messages[1].tool_call_id"),
])
def test_nested_wrong_types_name_the_field_in_openai_style(fields: dict[str, Any],
                                                           param: str) -> None:
    """Params read like OpenAI's: brackets for indices, no union-branch names (`str`)."""
    error = _rejected(_body(**fields))
    assert error.param == param
    assert error.code == "invalid_type"


def test_json_numbers_and_booleans_of_the_right_type_pass() -> None:
    """A float field takes a JSON integer; the raw values stay as sent for the provider."""
    chat = parse_chat(_body(temperature=1, top_p=0.5, max_tokens=5, max_completion_tokens=9,
                            n=1, seed=0, stream=True, stream_options={"include_usage": True},
                            logprobs=False, top_logprobs=0, stop=["\n"], user="u-1",
                            tool_choice={"type": "function", "function": {"name": "f"}},
                            tools=[{"type": "function", "function": {"name": "f"}}]))
    assert chat.temperature == 1.0 and chat.stream is True
    assert chat.output_token_limit() == 9


def test_n_takes_openai_range() -> None:
    """1..128 as OpenAI takes it (it was capped at 16)."""
    assert parse_chat(_body(n=128)).n == 128
    for n in (0, 129):
        error = _rejected(_body(n=n))
        assert (error.param, error.code) == ("n", "invalid_value")


def test_a_null_stream_is_not_streaming() -> None:
    """OpenAI takes `"stream": null` as not streaming; so does the router."""
    assert parse_chat(_body(stream=None)).stream is False


def test_unknown_fields_are_kept_for_the_provider() -> None:
    """Fields the router does not model are accepted and kept, whatever their type."""
    chat = parse_chat(_body(service_tier="auto", reasoning_effort="low", prediction={"x": [1]}))
    assert chat.model_extra == {"service_tier": "auto", "reasoning_effort": "low",
                                "prediction": {"x": [1]}}


@pytest.mark.parametrize("part", [
    {"type": "text", "text": "hi"},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "file", "file": {"file_id": "file-1"}},
])
def test_openai_content_part_types_pass(part: dict[str, Any]) -> None:
    """The user content parts of the OpenAI chat API are accepted (extra keys too)."""
    chat = parse_chat(_body(messages=[{"role": "user", "content": [{**part, "detail": "x"}]}]))
    assert isinstance(chat.messages[0].content, list)


@pytest.mark.parametrize(("part", "param", "code"), [
    ({"type": "bogus"}, "messages[0].content[0].type", "invalid_value"),
    ({"text": "no type"}, "messages[0].content[0].type", "missing_required_parameter"),
    ({"type": 3, "text": "x"}, "messages[0].content[0].type", "invalid_value"),
    ({"type": "text"}, "messages[0].content[0].text", "missing_required_parameter"),
    ({"type": "text", "text": 5}, "messages[0].content[0].text", "invalid_type"),
    ({"type": "image_url"}, "messages[0].content[0].image_url", "missing_required_parameter"),
    ({"type": "image_url", "image_url": "u"}, "messages[0].content[0].image_url",
     "invalid_type"),
    ({"type": "input_audio"}, "messages[0].content[0].input_audio",
     "missing_required_parameter"),
    ({"type": "file"}, "messages[0].content[0].file", "missing_required_parameter"),
])
def test_malformed_content_parts_are_400(part: dict[str, Any], param: str, code: str) -> None:
    """An unknown part type, or a part without the object its type names, stops here."""
    error = _rejected(_body(messages=[{"role": "user", "content": [part]}]))
    assert (error.param, error.code) == (param, code)
    assert "ContentPart" not in error.message  # no internal class names


def test_a_refusal_part_only_comes_from_the_assistant() -> None:
    """`refusal` parts are an assistant's; in a user message they are a 400."""
    part = {"type": "refusal", "refusal": "I can't"}
    chat = parse_chat(_body(messages=[*MESSAGES, {"role": "assistant", "content": [part]}]))
    assert chat.messages[1].role == "assistant"
    error = _rejected(_body(messages=[{"role": "user", "content": [part]}]))
    assert error.param == "messages[0].content"
    assert "assistant" in error.message


@pytest.mark.parametrize(("response_format", "param"), [
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": "x"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name"),
    ({"type": "xml"}, "response_format.type"),
    ({}, "response_format.type"),
])
def test_malformed_response_formats_are_400(response_format: dict[str, Any],
                                            param: str) -> None:
    """`json_schema` needs its `json_schema` object (with a name); unknown types are a 400."""
    assert _rejected(_body(response_format=response_format)).param == param


@pytest.mark.parametrize("response_format", [
    {"type": "text"}, {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "answer", "strict": True,
                                            "schema": {"type": "object"}}},
])
def test_openai_response_formats_pass(response_format: dict[str, Any]) -> None:
    chat = parse_chat(_body(response_format=response_format))
    assert chat.response_format is not None
    assert chat.response_format.type == response_format["type"]


def test_custom_tools_pass_and_routing_reads_their_names() -> None:
    """OpenAI's `custom` tools are accepted beside function tools (with or without `type`)."""
    chat = parse_chat(_body(tools=[
        {"type": "custom", "custom": {"name": "code_exec", "description": "runs code",
                                      "format": {"type": "text"}}},
        {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
        {"function": {"name": "legacy"}},
    ]))
    view = request_view(chat)
    assert view.tool_names == ("code_exec", "get_weather", "legacy")
    assert view.tool_descriptions == ("runs code", "", "")


def test_the_service_reads_tools_without_invisible_characters() -> None:
    """The service's view (not only the CLI's) drops invisible characters from tool names and
    descriptions: `del\u200bete_user` was `low` risk with no side-effecting tool through the
    service and `high` through `slorouter classify` (the classifier audit)."""
    from router.classify.classifier import load_default_classifier
    from router.classify.types import Hints

    def explain(name: str, legacy: bool) -> object:
        spec = {"name": name, "description": "Dele\u200btes a user account"}
        tools = {"functions": [spec]} if legacy else {"tools": [{"type": "function",
                                                                 "function": spec}]}
        chat = parse_chat(_body(**tools, messages=[
            {"role": "user", "content": "Remove the account of Sam"}]))
        view = request_view(chat)
        assert view.tool_descriptions == ("Deletes a user account",)
        return load_default_classifier().explain(view, Hints())

    for legacy in (False, True):
        hidden = explain("del\u200bete_user", legacy)
        assert hidden == explain("delete_user", legacy)
        assert hidden.side_effect_tools == ("delete_user",)  # type: ignore[attr-defined]
        assert hidden.labels.risk == "high"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("tool", "param", "code"), [
    ({"type": "custom", "custom": {"name": "x"}, "function": 5}, None, None),  # passes
    ({"type": "custom"}, "tools[0].custom", "missing_required_parameter"),
    ({"type": "custom", "custom": {}}, "tools[0].custom.name", "missing_required_parameter"),
    ({"type": "function"}, "tools[0].function", "missing_required_parameter"),
    ({"type": "function", "function": {"name": 5}}, "tools[0].function.name", "invalid_type"),
    ({"type": "web_search"}, "tools[0].type", "invalid_value"),
    ({"type": ["function"]}, "tools[0].type", "invalid_value"),
    ("get_weather", "tools[0]", "invalid_value"),
])
def test_tools_are_function_or_custom(tool: object, param: str | None,
                                      code: str | None) -> None:
    """Each tool needs the object its type names; other tool types are a clear 400."""
    if param is None:
        assert parse_chat(_body(tools=[tool])).tools is not None
        return
    error = _rejected(_body(tools=[tool]))
    assert (error.param, error.code) == (param, code)
    if param.endswith(".type"):
        assert "'function' or 'custom'" in error.message


def test_a_union_field_names_the_branch_the_client_meant() -> None:
    """A list of parts with one bad part points at that part, not at the string branch, and
    counts only the other fields as more problems."""
    body = _body(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                         {"type": "bogus"}]}])
    error = _rejected(body)
    assert error.param == "messages[0].content[1].type"
    assert "more" not in error.message
    error = _rejected({**body, "max_tokens": "5"})
    assert "(and 1 more)" in error.message


@pytest.mark.parametrize("levels", [1, 2, 10, MAX_JSON_DEPTH])
def test_bodies_up_to_the_depth_limit_pass(levels: int) -> None:
    body = _nested(levels)
    assert not too_deep(body, MAX_JSON_DEPTH)
    assert orjson.loads(orjson.dumps(body)) == body  # what is accepted can be forwarded


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 300, 1000])
def test_bodies_past_the_depth_limit_are_too_deep(levels: int) -> None:
    assert too_deep(_nested(levels), MAX_JSON_DEPTH)


def test_depth_counts_arrays_and_objects_alike() -> None:
    """Six alternating levels, plus the innermost object's array: seven deep."""
    value: Any = "leaf"
    for i in range(6):
        value = [value] if i % 2 else {"k": value, "s": "x" * 100, "n": [1, 2, 3]}
    assert not too_deep(value, 7)
    assert too_deep(value, 6)
    assert not too_deep("scalar", 0)


def _request(body: bytes) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": [(b"content-length", str(len(body)).encode())], "query_string": b""}
    return Request(scope, receive)


async def test_read_json_refuses_a_body_nested_300_deep() -> None:
    """orjson reads 300 levels but cannot write them back: refused before any other use."""
    deep = b'{"model":"auto","messages":[],"x":' + b"[" * 299 + b"]" * 299 + b"}"
    with pytest.raises(RequestError) as caught:
        await read_json(_request(deep), 1 << 20, 10.0)
    assert caught.value.status_code == 400
    assert caught.value.code == "too_deeply_nested"
    assert str(MAX_JSON_DEPTH) in caught.value.message


async def test_read_json_keeps_a_body_at_the_limit() -> None:
    body = orjson.dumps(_nested(MAX_JSON_DEPTH))
    assert await read_json(_request(body), 1 << 20, 10.0) == _nested(MAX_JSON_DEPTH)


def test_a_body_of_more_containers_than_the_limit_is_refused_before_validation() -> None:
    """120,000 empty messages held the event loop for 0.8 s in validation; past the limit the
    body is refused when parsed, whatever its shape (messages, content parts, tools)."""
    many = {"model": "auto", "messages": [{"role": "user", "content": ""}] * MAX_JSON_CONTAINERS}
    with pytest.raises(RequestError) as caught:
        parse_json_object(orjson.dumps(many))
    assert caught.value.code == "too_many_elements"
    parts = [{"type": "text", "text": ""}] * MAX_JSON_CONTAINERS
    with pytest.raises(RequestError) as caught:
        parse_json_object(orjson.dumps({"model": "auto", "messages": [
            {"role": "user", "content": parts}]}))
    assert caught.value.code == "too_many_elements"
    fits = {"model": "auto",
            "messages": [{"role": "user", "content": "x"}] * (MAX_JSON_CONTAINERS - 2)}
    assert len(parse_chat(parse_json_object(orjson.dumps(fits))).messages) == len(fits["messages"])


FUNCTION_TOOLS = [{"type": "function", "function": {"name": "lookup"}}]


@pytest.mark.parametrize(("fields", "param"), [
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ({"tool_choice": "sometimes", "tools": FUNCTION_TOOLS}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "lookup"}}}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "other"}},
      "tools": FUNCTION_TOOLS}, "tool_choice"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"logit_bias": [1, 2]}, "logit_bias"),
    ({"logit_bias": {"hello": 5}}, "logit_bias"),
    ({"logit_bias": {"50256": 101}}, "logit_bias.50256"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "system"}, {"role": "user", "content": "hi"}]},
     "messages[0].content"),
])
def test_requests_openai_refuses_are_refused_here_whatever_would_serve_them(
        fields: dict[str, Any], param: str) -> None:
    """Forwarded, these reached a deployment that refused them (a 400, and `auto` moved on to
    the next candidate) or one whose litellm dropped the field and answered 200 without it:
    the same request got a 400 or a 200 depending on the route. Now it is a 400 naming the
    field, before any routing."""
    assert _rejected(_body(**fields)).param == param


@pytest.mark.parametrize("fields", [
    {"top_logprobs": 0},  # zero alternatives asks for nothing
    {"top_logprobs": 20, "logprobs": True},
    {"tool_choice": "none"},
    {"tool_choice": "auto"},
    {"tool_choice": "required", "tools": FUNCTION_TOOLS},
    {"tool_choice": {"type": "function", "function": {"name": "lookup"}},
     "tools": FUNCTION_TOOLS},
    {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
     "tools": FUNCTION_TOOLS},
    {"presence_penalty": -2, "frequency_penalty": 2},
    {"logit_bias": {"50256": -100, "15": 7.5}},
    {"stream": True, "stream_options": {"include_usage": True}},
    {"stream_options": None},
    {"messages": [{"role": "assistant", "content": None,
                   "tool_calls": [{"id": "c1", "type": "function",
                                   "function": {"name": "lookup", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "42"}]},
])
def test_what_openai_takes_of_those_fields_passes(fields: dict[str, Any]) -> None:
    assert parse_chat(_body(**fields)).model == "auto"


def _assistant_calls(*calls: object) -> dict[str, Any]:
    """A user message, then an assistant message making `calls`, each answered after it."""
    answers = [{"role": "tool", "tool_call_id": call["id"], "content": "ok"}
               for call in calls if isinstance(call, dict) and "id" in call]
    return {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": None, "tool_calls": list(calls)},
                         *answers]}


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def _turns(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}, *messages]}


def _assistant(*call_ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [_call(i) for i in call_ids]}


def _answer(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "42"}


USER_AGAIN = {"role": "user", "content": "and then?"}


@pytest.mark.parametrize(("fields", "param", "says"), [
    ({"tools": []}, "tools", "at least 1 item"),
    ({"tools": FUNCTION_TOOLS * 129}, "tools", "at most 128 items"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls", "only allowed when `tools`"),
    (_turns({"role": "assistant", "content": "x", "tool_calls": []}),
     "messages[1].tool_calls", "at least one tool call"),
    (_turns(_answer("c1")), "messages[1].tool_call_id", "must answer a tool call"),
    (_turns(_assistant("c1"), _answer("c2")), "messages[2].tool_call_id",
     "must answer a tool call"),
    (_turns(_assistant("c1"), _answer("c1"), USER_AGAIN, _answer("c1")),
     "messages[4].tool_call_id", "must answer a tool call"),
    (_turns(_assistant("c1", "c2"), _answer("c2"), USER_AGAIN), "messages[1].tool_calls",
     "1 of its tool calls not answered"),
    (_turns(_assistant("c1")), "messages[1].tool_calls", "1 of its tool calls not answered"),
    (_turns(_assistant("c1"), _answer("c1"), _assistant("c2", "c3")),
     "messages[3].tool_calls", "2 of its tool calls not answered"),
])
def test_tool_turns_openai_refuses_are_refused_here(fields: dict[str, Any], param: str,
                                                    says: str) -> None:
    """OpenAI refuses these with a 400 ("Messages with role 'tool' must be a response to a
    preceding message with 'tool_calls'", "An assistant message with 'tool_calls' must be
    followed by tool messages responding to each 'tool_call_id'", "empty array", "array too
    long"); forwarded, they were a 200 from a lenient deployment (and litellm's, which drops
    what its provider takes none of) and a 400 from a strict one, after which `auto` tried the
    next candidate. Now a 400 names the message and field, before any routing."""
    error = _rejected(_body(**fields))
    assert (error.param, error.code) == (param, "invalid_value"), error.message
    assert says in error.message


@pytest.mark.parametrize("fields", [
    {"tools": FUNCTION_TOOLS * 128, "parallel_tool_calls": False},
    _turns(_assistant("c1", "c2"), _answer("c2"), _answer("c1"), USER_AGAIN),
    _turns(_assistant("c1"), _answer("c1"), {"role": "assistant", "content": "done"},
           USER_AGAIN, _assistant("c2"), _answer("c2")),
    _turns({"role": "assistant", "content": "no tools"}, USER_AGAIN),
    _turns({"role": "function", "name": "lookup", "content": "42"}),  # the legacy role
])
def test_tool_turns_openai_takes_pass(fields: dict[str, Any]) -> None:
    assert parse_chat(_body(**fields)).model == "auto"


@pytest.mark.parametrize(("fields", "param", "says"), [
    ({"tool_choice": {"type": "function", "function": "f"}, "tools": FUNCTION_TOOLS},
     "tool_choice", "`function` should be an object"),
    ({"tool_choice": {"type": "function", "function": {}}, "tools": FUNCTION_TOOLS},
     "tool_choice", "non-empty string `name`"),
    ({"tool_choice": {"type": 5}, "tools": FUNCTION_TOOLS}, "tool_choice", "`type`"),
    (_assistant_calls({"id": "c", "type": "function", "function": "x"}),
     "messages[1].tool_calls", "item 0: `function` should be an object"),
    (_assistant_calls({"type": "function", "function": {"name": "f", "arguments": "{}"}}),
     "messages[1].tool_calls", "item 0: `id`"),
    (_assistant_calls({"id": "c", "type": "function",
                       "function": {"name": "f", "arguments": "{}"}},
                      {"id": "d", "function": {"name": "f", "arguments": {"a": 1}}}),
     "messages[1].tool_calls", "item 1: `function.arguments` should be a string"),
    (_assistant_calls({"id": "c", "type": "web", "web": {}}), "messages[1].tool_calls",
     "item 0: `type` should be 'function' or 'custom'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 1}}]}]},
     "messages[0].content[0].image_url", "`url`"),
    ({"messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]},
     "messages[0].content[0].file", "`file_data` or `file_id`"),
    ({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA"}}]}]},
     "messages[0].content[0].input_audio", "`format`"),
])
def test_malformed_tool_calls_and_payloads_are_400_whatever_would_serve_them(
        fields: dict[str, Any], param: str, says: str) -> None:
    """Unchecked, the same body got a 200 from one deployment and a 400 from another, with
    litellm's Python errors for messages ("'str' object has no attribute 'get'", "list index
    out of range"), and `auto` paid an attempt at each (the fuzzing audit of 2026-12-06)."""
    error = _rejected(_body(**fields))
    assert (error.param, error.code) == (param, "invalid_value"), error.message
    assert says in error.message


@pytest.mark.parametrize("fields", [
    _assistant_calls({"id": "c", "type": "custom", "custom": {"name": "sh", "input": "ls"}},
                     {"id": "d", "function": {"name": "f", "arguments": ""}}),
    {"messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,AA",
                                  "filename": "a.pdf"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}},
    ]}]},
    {"tool_choice": {"type": "custom", "custom": {"name": "sh"}},
     "tools": [{"type": "custom", "custom": {"name": "sh"}}]},
])
def test_well_formed_tool_calls_and_payloads_pass(fields: dict[str, Any]) -> None:
    assert parse_chat(_body(**fields)).model == "auto"
