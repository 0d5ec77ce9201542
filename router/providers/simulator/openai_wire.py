"""OpenAI chat-completions wire format of the simulator: request parsing and response rendering.

Requests are validated leniently (unknown fields are ignored, as a provider would) into a
`SimRequest`. Responses follow OpenAI's shapes: `chat.completion` with `usage` always set,
`chat.completion.chunk` SSE events (a role-only first chunk, content or tool-call deltas, a
finish chunk, a usage chunk when `stream_options.include_usage`, then `data: [DONE]`), and
errors as `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from router.providers.simulator.plan import Plan
from router.providers.simulator.request import Message, SimRequest, ToolSpec
from router.providers.simulator.wire import ErrorKind, ResponseMeta, WireError

ERROR_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    503: "server_error",
}
DONE = b"data: [DONE]\n\n"


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class FunctionCall(_Lenient):
    name: str = ""
    arguments: str = ""


class ToolCallIn(_Lenient):
    function: FunctionCall = FunctionCall()


class ChatMessage(_Lenient):
    role: str
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None


class FunctionDef(_Lenient):
    name: str
    parameters: dict[str, object] | None = None


class ToolDef(_Lenient):
    type: str = "function"
    function: FunctionDef


class ToolName(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: str = "function"
    function: ToolName


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionRequest(_Lenient):
    """The fields of an OpenAI chat request that change the simulator's answer."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    response_format: dict[str, object] | None = None
    n: int | None = None
    cache_salt: str | None = Field(default=None, min_length=1)  # vLLM's prefix-cache salt


def _message_text(message: ChatMessage) -> str:
    parts: list[str] = []
    if isinstance(message.content, str):
        parts.append(message.content)
    elif message.content is not None:
        parts.extend(p.text if p.text is not None else f"[{p.type}]" for p in message.content)
    for call in message.tool_calls or ():
        parts.append(f"[tool_call {call.function.name} {call.function.arguments}]")
    return "\n".join(parts)


def to_sim_request(body: ChatCompletionRequest) -> SimRequest:
    """The wire-neutral view of a validated OpenAI request."""
    choice = body.tool_choice
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    sampling = [body.temperature, body.top_p, body.seed, body.response_format, body.n]
    return SimRequest(
        model=body.model,
        messages=tuple(Message(m.role, _message_text(m)) for m in body.messages),
        max_tokens=body.max_completion_tokens
        if body.max_completion_tokens is not None
        else body.max_tokens,
        stop=stop,
        tools=tuple(
            ToolSpec(t.function.name, orjson.dumps(t.function.parameters or {}).decode())
            for t in body.tools or ()
        ),
        tool_mode=choice if isinstance(choice, str) else "auto",
        forced_tool=choice.function.name if isinstance(choice, NamedToolChoice) else None,
        stream=body.stream,
        include_usage=body.stream_options is not None and body.stream_options.include_usage,
        sampling_json=orjson.dumps(sampling, option=orjson.OPT_SORT_KEYS).decode(),
        cache_salt=body.cache_salt,
    )


def _usage(plan: Plan) -> dict[str, object]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
    }


class OpenAIWire:
    """`POST /v1/chat/completions`."""

    def parse(self, body: bytes) -> SimRequest:
        try:
            return to_sim_request(ChatCompletionRequest.model_validate_json(body))
        except ValidationError as exc:
            raise WireError(_first_problem(exc)) from exc

    def error(self, kind: ErrorKind) -> bytes:
        error_type = ERROR_TYPES.get(kind.status, "server_error")
        body = {"message": kind.message, "type": error_type, "param": None, "code": kind.code}
        return orjson.dumps({"error": body})

    def complete(self, plan: Plan, meta: ResponseMeta) -> bytes:
        answer = plan.answer
        message: dict[str, object] = {"role": "assistant", "content": "".join(answer.pieces),
                                      "refusal": None}
        if answer.tool_call is not None:
            call = answer.tool_call
            function = {"name": call.name, "arguments": call.arguments}
            message["content"] = None
            message["tool_calls"] = [{"id": f"call_{call.id_hex}", "type": "function",
                                      "function": function}]
        return orjson.dumps({
            "id": f"chatcmpl-{meta.id_hex}",
            "object": "chat.completion",
            "created": meta.created,
            "model": meta.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": answer.finish_reason}],
            "usage": _usage(plan),
            "system_fingerprint": None,
        })

    def stream(self, plan: Plan, meta: ResponseMeta, include_usage: bool) -> OpenAIStream:
        return OpenAIStream(plan, meta, include_usage)


class OpenAIStream:
    """SSE chunks of one streamed chat completion."""

    def __init__(self, plan: Plan, meta: ResponseMeta, include_usage: bool) -> None:
        self._plan = plan
        self._include_usage = include_usage
        self._prefix = {"id": f"chatcmpl-{meta.id_hex}", "object": "chat.completion.chunk",
                        "created": meta.created, "model": meta.model, "system_fingerprint": None}

    def _event(self, delta: dict[str, object], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + orjson.dumps({**self._prefix, "choices": [choice]}) + b"\n\n"

    def head(self) -> bytes:
        return self._event({"role": "assistant", "content": ""})

    def chunk(self, index: int, text: str) -> bytes:
        call = self._plan.answer.tool_call
        if call is None:
            return self._event({"content": text})
        delta: dict[str, object] = {"index": 0, "function": {"arguments": text}}
        if index == 0:
            delta = {"index": 0, "id": f"call_{call.id_hex}", "type": "function",
                     "function": {"name": call.name, "arguments": text}}
        return self._event({"tool_calls": [delta]})

    def tail(self) -> bytes:
        out = self._event({}, self._plan.answer.finish_reason)
        if self._include_usage:
            usage = {**self._prefix, "choices": [], "usage": _usage(self._plan)}
            out += b"data: " + orjson.dumps(usage) + b"\n\n"
        return out + DONE


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request body"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))
