"""A streamed tool-call answer, stored by the result cache, is replayed as the upstream sent it.

A hand-written upstream streams one fixed answer in fragments: two parallel function calls
(ids, names, arguments split across chunks; with OpenAI's indexes, with none, or with one
index for both) or one custom tool call (free-form `input` split across chunks), then its
finish reason and the usage chunk. The router (disk cache, both
adapters) relays it to a first streaming client, assembles and stores it; later requests,
non-streamed and streamed, are hits and must carry the same calls, finish reason and usage.
"""

from __future__ import annotations

import http.server
import json
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from tests.support.fake_upstream import send_body, serve_in_thread
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

HINTS = {"x-slorouter-task": "chat", "x-slorouter-risk": "low"}
HEAD = {"id": "chatcmpl-tools", "created": 1700000000, "model": "gpt-x",
        "system_fingerprint": "fp_1"}
USAGE = {"prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80}


def _call(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


PARALLEL = [
    {"role": "assistant", "content": None, **_call(0, id="call_A1", type="function",
                                                   function={"name": "get_weather",
                                                             "arguments": ""})},
    _call(0, function={"arguments": '{"ci'}),
    _call(0, function={"arguments": 'ty": "Par'}),
    _call(0, function={"arguments": 'is"}'}),
    _call(1, id="call_B2", type="function", function={"name": "get_time", "arguments": ""}),
    _call(1, function={"arguments": '{"tz": '}),
    _call(1, function={"arguments": '"CET"}'}),
]
PARALLEL_CALLS: list[dict[str, Any]] = [
    {"id": "call_A1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    {"id": "call_B2", "type": "function",
     "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}},
]
# OpenAI's custom tools (free-form input) stream their input as `custom.input` fragments.
CUSTOM = [
    {"role": "assistant", "content": None, **_call(0, id="call_C3", type="custom",
                                                   custom={"name": "shell", "input": ""})},
    _call(0, type="custom", custom={"input": "echo"}),
    _call(0, type="custom", custom={"input": " hello"}),
]
CUSTOM_CALLS = [{"id": "call_C3", "type": "custom",
                 "custom": {"name": "shell", "input": "echo hello"}}]
# Some OpenAI-compatible servers send no `index` (Gemini's, SGLang, mistral.rs), or the same
# one for parallel calls (Ollama through litellm): each call begins with its own `id`.
UNINDEXED: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_A1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": '}}]},
    {"tool_calls": [{"function": {"arguments": '"Paris"}'}}]},
    {"tool_calls": [{"id": "call_B2", "type": "function",
                     "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}}]},
]
SAME_INDEX = [
    {"role": "assistant", "content": None, **_call(0, **PARALLEL_CALLS[0])},
    _call(0, **PARALLEL_CALLS[1]),
]
# The legacy `functions` answer: one `function_call`, streamed as fragments of its own.
LEGACY: list[dict[str, Any]] = [
    {"role": "assistant", "content": None,
     "function_call": {"name": "get_weather", "arguments": ""}},
    {"function_call": {"arguments": '{"city": '}},
    {"function_call": {"arguments": '"Paris"}'}},
]
ANSWERS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "parallel": (PARALLEL, PARALLEL_CALLS), "custom": (CUSTOM, CUSTOM_CALLS),
    "unindexed": (UNINDEXED, PARALLEL_CALLS), "same_index": (SAME_INDEX, PARALLEL_CALLS)}


class _ToolUpstream(http.server.BaseHTTPRequestHandler):
    """Streams the fixed answer the request's first tool names (a key of `ANSWERS`)."""

    protocol_version = "HTTP/1.1"
    requests: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        type(self).requests += 1
        if "functions" in body:
            self._stream(LEGACY, "function_call")
            return
        tool = body["tools"][0]
        name = tool[tool["type"]]["name"]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": "It is sunny.",
                                       "refusal": None, "annotations": []}
            if name != "text":
                message.update(content=None, tool_calls=ANSWERS[name][1])
            finish = "stop" if name == "text" else "tool_calls"
            whole = {**HEAD, "object": "chat.completion", "usage": USAGE, "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}
            send_body(self, 200, json.dumps(whole).encode())
            return
        self._stream(ANSWERS[name][0], "tool_calls")

    def _stream(self, deltas: list[dict[str, Any]], finish: str) -> None:
        chunks: list[dict[str, Any]] = [
            {"index": 0, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
        chunks.append({"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish})
        events = [{**HEAD, "object": "chat.completion.chunk", "choices": [c], "usage": None}
                  for c in chunks]
        events.append({**HEAD, "object": "chat.completion.chunk", "choices": [], "usage": USAGE})
        payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        send_body(self, 200, payload + b"data: [DONE]\n\n", "text/event-stream")

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, origin = serve_in_thread(_ToolUpstream)
    base = f"{origin}/v1"
    directory = tmp_path_factory.mktemp("tool-call-answers")
    config = f"""version: 1
deployments:
  - {{name: pt, model: openai/gpt-x, adapter: openai_passthrough, api_base: '{base}',
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
  - {{name: ll, model: openai/gpt-x, adapter: litellm, api_base: '{base}', api_key: env:UP_KEY,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: pt, deployments: [pt]}}, {{name: ll, deployments: [ll]}}]
routes: {{default_model: pt}}
server:
  cache:
    backend: disk
    directory: {directory / "cache"}
    default: {{enabled: true, ttl_s: 600}}
"""
    running = start_router(directory, config, env={"UP_KEY": "sk-upstream"})
    yield running
    running.stop()
    server.shutdown()
    server.server_close()


def _post(gateway: Running, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, headers=HINTS,
                          timeout=30)
    assert response.status_code == 200, response.text
    return response


def _streamed(response: httpx.Response) -> tuple[list[dict[str, Any]], str | None, Any]:
    """The tool calls a client folds from the stream (as the OpenAI SDK does: by index, text
    fields concatenated), the finish reason and the usage."""
    calls: dict[int, dict[str, Any]] = {}
    finish = usage = None
    for line in response.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line.removeprefix("data: "))
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            finish = choice.get("finish_reason") or finish
            for delta in choice["delta"].get("tool_calls") or []:
                call = calls.setdefault(delta["index"], {})
                for name, value in delta.items():
                    if name == "index" or value is None:
                        continue
                    if isinstance(value, dict):
                        part = call.setdefault(name, {})
                        for key, text in value.items():
                            if text is not None:
                                part[key] = part.get(key, "") + text
                    else:
                        call[name] = value
    return [calls[i] for i in sorted(calls)], finish, usage


def _usage_of(usage: dict[str, Any]) -> dict[str, Any]:
    return {k: usage[k] for k in USAGE}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("model", ["pt", "ll"])
def test_a_streamed_tool_call_answer_is_replayed_from_the_cache_as_sent(
        gateway: Running, model: str, answer: str) -> None:
    _, calls = ANSWERS[answer]
    tool: dict[str, Any] = (
        {"type": "custom", "custom": {"name": answer}} if answer == "custom" else
        {"type": "function", "function": {"name": answer, "parameters": {}}})
    nonce = uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    body = {"model": model, "temperature": 0, "tools": [tool],
            "messages": [{"role": "user", "content": f"weather and time {nonce}"}]}
    before = _ToolUpstream.requests

    first = _post(gateway, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert first.headers["x-slorouter-cache"] == "miss"
    if answer in ("parallel", "custom"):  # the others cannot be folded by index
        assert _streamed(first)[:2] == (calls, "tool_calls")

    whole = _post(gateway, body)
    assert whole.headers["x-slorouter-cache"] == "hit"
    choice = whole.json()["choices"][0]
    assert choice["message"]["tool_calls"] == calls
    assert choice["message"]["content"] is None and choice["finish_reason"] == "tool_calls"
    assert _usage_of(whole.json()["usage"]) == USAGE

    again = _post(gateway, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert again.headers["x-slorouter-cache"] == "hit"
    replayed, finish, usage = _streamed(again)
    assert (replayed, finish, _usage_of(usage)) == (calls, "tool_calls", USAGE)
    assert _ToolUpstream.requests == before + 1


def _nulls(fields: dict[str, Any], path: str) -> list[str]:
    found = []
    for name, value in fields.items():
        if value is None:
            found.append(f"{path}.{name}")
        elif isinstance(value, dict):
            found += _nulls(value, f"{path}.{name}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += _nulls(item, f"{path}.{name}[{i}]")
    return found


@pytest.mark.parametrize("model", ["pt", "ll"])
def test_streamed_tool_call_deltas_carry_only_what_the_upstream_sent(
        gateway: Running, model: str) -> None:
    """OpenAI's deltas carry only the fields a chunk has (a first delta's `content: null`
    aside). Through litellm every delta used to spell `role`, `function_call`, `audio`,
    `provider_specific_fields` as null, the finish chunk `tool_calls: null`, and each argument
    fragment its call's `id` and `name` as null."""
    nonce = uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    response = _post(gateway, {
        "model": model, "stream": True, "temperature": 0,
        "tools": [{"type": "function", "function": {"name": "parallel", "parameters": {}}}],
        "messages": [{"role": "user", "content": f"weather and time {nonce}"}]})
    deltas = [choice["delta"] for line in response.text.splitlines()
              if line.startswith("data: {")
              for choice in json.loads(line.removeprefix("data: "))["choices"]]
    assert len(deltas) == len(PARALLEL) + 1
    nulls = [n for i, d in enumerate(deltas) for n in _nulls(d, f"delta{i}")]
    assert [n for n in nulls if n != "delta0.content"] == []
    assert [i for i, d in enumerate(deltas) if "role" in d] == [0]
    assert deltas[-1] == {}
    assert _streamed(response)[:2] == (PARALLEL_CALLS, "tool_calls")


@pytest.mark.parametrize("model", ["pt", "ll"])
def test_whole_answers_carry_their_tool_calls_as_openai_sends_them(
        gateway: Running, model: str) -> None:
    """Through litellm a text answer used to carry `tool_calls: null` and `function_call: null`
    (a client reading `message.get("tool_calls", [])` got None), each tool call a streamed
    delta's `index`, and `provider_specific_fields` of nulls."""
    nonce = uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    messages = [{"role": "user", "content": f"weather {nonce}"}]
    calls = _post(gateway, {"model": model, "messages": messages, "tools": [
        {"type": "function", "function": {"name": "parallel", "parameters": {}}}]}).json()
    text = _post(gateway, {"model": model, "messages": messages, "tools": [
        {"type": "function", "function": {"name": "text", "parameters": {}}}]}).json()
    message = calls["choices"][0]["message"]
    assert message["tool_calls"] == PARALLEL_CALLS and message["content"] is None
    assert calls["choices"][0]["finish_reason"] == "tool_calls"
    message = text["choices"][0]["message"]
    assert message["content"] == "It is sunny." and text["choices"][0]["finish_reason"] == "stop"
    for body in (calls, text):
        message = body["choices"][0]["message"]
        assert not {"tool_calls", "function_call"} & {k for k, v in message.items() if v is None}
        assert message.get("provider_specific_fields", {"kept": 1}) != {}
        assert not _nulls(message.get("provider_specific_fields") or {}, "")


@pytest.mark.parametrize("model", ["pt", "ll"])
def test_streamed_function_call_deltas_carry_only_what_the_upstream_sent(
        gateway: Running, model: str) -> None:
    """A legacy `function_call` answer streams as the upstream sent it. Through litellm each
    argument fragment used to carry the function's `name` as null."""
    nonce = uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    response = _post(gateway, {
        "model": model, "stream": True, "temperature": 0,
        "functions": [{"name": "get_weather", "parameters": {}}],
        "messages": [{"role": "user", "content": f"weather {nonce}"}]})
    choices = [choice for line in response.text.splitlines() if line.startswith("data: {")
               for choice in json.loads(line.removeprefix("data: "))["choices"]]
    deltas = [choice["delta"] for choice in choices]
    assert len(deltas) == len(LEGACY) + 1
    nulls = [n for i, d in enumerate(deltas) for n in _nulls(d, f"delta{i}")]
    assert [n for n in nulls if n != "delta0.content"] == []
    assert [d["function_call"] for d in deltas[1:-1]] == [d["function_call"] for d in LEGACY[1:]]
    assert deltas[-1] == {} and choices[-1]["finish_reason"] == "function_call"
