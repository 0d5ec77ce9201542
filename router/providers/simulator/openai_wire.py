"""OpenAI chat-completions wire format of the simulator: request parsing and response rendering.

Requests are validated leniently (unknown fields are ignored, as a provider would) into a
`SimRequest`; every shape the `openai` SDK can send is accepted (function and custom tools,
`tool_choice` as a mode, a named function or custom tool, or `allowed_tools`; content parts of
every type), while what OpenAI refuses (no `messages`, wrong types, an unknown tool type) stays a
400. Responses follow OpenAI's shapes: `chat.completion` with `usage` always set,
`chat.completion.chunk` SSE events (a role-only first chunk, content or tool-call deltas, a
finish chunk, a usage chunk when `stream_options.include_usage`, then `data: [DONE]`; with `n`
choices, each choice's role, deltas and finish chunk under its `index`), and errors as
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

from router.providers.simulator.content import TokenLogprob
from router.providers.simulator.plan import Answer, Plan, ToolCall
from router.providers.simulator.request import (
    JSON_OBJECT_SCHEMA,
    Message,
    SimRequest,
    ToolMode,
    ToolSpec,
)
from router.providers.simulator.wire import ErrorKind, ResponseMeta, WireError

ERROR_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    503: "server_error",
}
DONE = b"data: [DONE]\n\n"
CALL_PAYLOAD = {"function": "arguments", "custom": "input"}  # where a tool call's text goes


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _by_type(message: str) -> Discriminator:
    return Discriminator(_type_tag, custom_error_type="invalid_value",
                         custom_error_message=message)


def _type_tag(value: object) -> str | None:
    """The union member an object's `type` names (`function` when left out, as OpenAI reads
    it; a plain string is a tool mode); an unknown type matches none: a 400."""
    if isinstance(value, str):
        return "mode"
    kind = value.get("type", "function") if isinstance(value, dict) else getattr(
        value, "type", None)
    return kind if isinstance(kind, str) else None


class ContentPart(_Lenient):
    """Any content part (`text`, `image_url`, `input_audio`, `file`, `refusal`); only text and
    refusals are read, the others count as their type's name."""

    type: str
    text: str | None = None
    refusal: str | None = None


class FunctionCall(_Lenient):
    name: str = ""
    arguments: str = ""


class CustomCall(_Lenient):
    name: str = ""
    input: str = ""


class ToolCallIn(_Lenient):
    """A tool call in the history: a function call, or a custom one (`custom: {name, input}`)."""

    function: FunctionCall = FunctionCall()
    custom: CustomCall | None = None

    def text(self) -> str:
        if self.custom is not None:
            return f"[tool_call {self.custom.name} {self.custom.input}]"
        return f"[tool_call {self.function.name} {self.function.arguments}]"


class ChatMessage(_Lenient):
    role: str
    content: str | list[ContentPart] | None = None
    refusal: str | None = None  # an assistant's
    tool_calls: list[ToolCallIn] | None = None
    function_call: FunctionCall | None = None  # an assistant's, before `tool_calls` (deprecated)


class FunctionDef(_Lenient):
    name: str
    parameters: dict[str, object] | None = None


class FunctionTool(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef

    def spec(self) -> ToolSpec:
        return ToolSpec(self.function.name, orjson.dumps(self.function.parameters or {}).decode())


class CustomDef(_Lenient):
    name: str
    format: dict[str, object] | None = None  # `{"type": "text"}` or a grammar; default text


class CustomTool(_Lenient):
    """OpenAI's custom tool: its input is free text (or text of a grammar), not JSON."""

    type: Literal["custom"]
    custom: CustomDef

    def spec(self) -> ToolSpec:
        described = orjson.dumps(self.custom.format or {"type": "text"}).decode()
        return ToolSpec(self.custom.name, described, "custom")


ToolDef = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[CustomTool, Tag("custom")],
    _by_type("a tool's type must be 'function' or 'custom'"),
]


class ToolName(_Lenient):
    name: str


class NamedFunction(_Lenient):
    type: Literal["function"] = "function"
    function: ToolName

    @property
    def name(self) -> str:
        return self.function.name


class NamedCustom(_Lenient):
    type: Literal["custom"]
    custom: ToolName

    @property
    def name(self) -> str:
        return self.custom.name


NamedTool = Annotated[
    Annotated[NamedFunction, Tag("function")] | Annotated[NamedCustom, Tag("custom")],
    _by_type("an allowed tool's type must be 'function' or 'custom'"),
]


class AllowedTools(_Lenient):
    mode: Literal["auto", "required"]
    tools: list[NamedTool]


class AllowedToolsChoice(_Lenient):
    """`{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}`: `mode` over the tools
    named, while the whole `tools` list stays in the prompt (and its cached prefix)."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


ToolChoice = Annotated[
    Annotated[ToolMode, Tag("mode")] | Annotated[NamedFunction, Tag("function")]
    | Annotated[NamedCustom, Tag("custom")]
    | Annotated[AllowedToolsChoice, Tag("allowed_tools")],
    _by_type("tool_choice must be 'auto', 'none', 'required' or an object of type 'function', "
             "'custom' or 'allowed_tools'"),
]


class StreamOptions(_Lenient):
    include_usage: bool | None = False


class ChatCompletionRequest(_Lenient):
    """The fields of an OpenAI chat request that change the simulator's answer."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream: bool | None = False  # `null` as OpenAI takes it: not streamed
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    response_format: dict[str, object] | None = None
    n: int | None = Field(default=None, ge=1, le=128)  # OpenAI's own bounds
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    cache_salt: str | None = Field(default=None, min_length=1)  # vLLM's prefix-cache salt

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and self.logprobs is not True:
            raise ValueError("logprobs must be true when top_logprobs is set")
        return self


def _part_text(part: ContentPart) -> str:
    if part.text is not None:
        return part.text
    return part.refusal if part.refusal is not None else f"[{part.type}]"


def _message_text(message: ChatMessage) -> str:
    parts: list[str] = []
    if isinstance(message.content, str):
        parts.append(message.content)
    elif message.content is not None:
        parts.extend(_part_text(p) for p in message.content)
    if message.refusal is not None:
        parts.append(message.refusal)
    calls = [*(message.tool_calls or ()), *(
        [ToolCallIn(function=message.function_call)] if message.function_call else [])]
    parts.extend(call.text() for call in calls)
    return "\n".join(parts)


def _tool_mode(choice: ToolChoice | None) -> ToolMode:
    if isinstance(choice, str):
        return choice
    return choice.allowed_tools.mode if isinstance(choice, AllowedToolsChoice) else "auto"


def to_sim_request(body: ChatCompletionRequest) -> SimRequest:
    """The wire-neutral view of a validated OpenAI request."""
    choice = body.tool_choice
    allowed = choice.allowed_tools if isinstance(choice, AllowedToolsChoice) else None
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    sampling = [body.temperature, body.top_p, body.seed, body.response_format, body.n]
    return SimRequest(
        model=body.model,
        messages=tuple(Message(m.role, _message_text(m)) for m in body.messages),
        max_tokens=body.max_completion_tokens
        if body.max_completion_tokens is not None
        else body.max_tokens,
        stop=stop,
        tools=tuple(t.spec() for t in body.tools or ()),
        tool_mode=_tool_mode(choice),
        forced_tool=choice.name if isinstance(choice, NamedFunction | NamedCustom) else None,
        stream=body.stream is True,
        include_usage=body.stream_options is not None
        and body.stream_options.include_usage is True,
        sampling_json=orjson.dumps(sampling, option=orjson.OPT_SORT_KEYS).decode(),
        cache_salt=body.cache_salt,
        allowed_tools=tuple(t.name for t in allowed.tools) if allowed is not None else None,
        choices=body.n or 1,
        logprobs=body.logprobs is True,
        top_logprobs=body.top_logprobs or 0,
        json_schema=_answer_schema(body.response_format),
    )


def _answer_schema(response_format: dict[str, object] | None) -> str | None:
    """The schema a JSON mode holds the answer to, as `SimRequest.json_schema` takes it."""
    kind = response_format.get("type") if response_format else None
    if kind == "json_object":
        return JSON_OBJECT_SCHEMA
    if kind == "json_schema" and response_format is not None:
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return orjson.dumps(schema if isinstance(schema, dict) else {"type": "object"}).decode()
    return None


def _tool_call(call: ToolCall, payload: str) -> dict[str, object]:
    """A tool call in OpenAI's shape: `function: {name, arguments}` or `custom: {name, input}`."""
    return {"id": f"call_{call.id_hex}", "type": call.kind,
            call.kind: {"name": call.name, CALL_PAYLOAD[call.kind]: payload}}


def _usage(plan: Plan) -> dict[str, object]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
    }


def _choice(index: int, answer: Answer) -> dict[str, object]:
    """One choice of a whole (non-streamed) completion."""
    message: dict[str, object] = {"role": "assistant", "content": "".join(answer.pieces),
                                  "refusal": None}
    if answer.tool_call is not None:
        message["content"] = None
        message["tool_calls"] = [_tool_call(answer.tool_call, answer.tool_call.arguments)]
    return {"index": index, "message": message, "logprobs": _logprobs(answer.logprobs),
            "finish_reason": answer.finish_reason}


def _token(token: str, logprob: float) -> dict[str, object]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def _logprobs(tokens: Sequence[TokenLogprob] | None) -> dict[str, object] | None:
    """OpenAI's `logprobs` of a choice (or of a chunk's tokens): null when not asked for."""
    if tokens is None:
        return None
    return {"content": [{**_token(t.token, t.logprob),
                         "top_logprobs": [_token(word, lp) for word, lp in t.top]}
                        for t in tokens],
            "refusal": None}


class OpenAIWire:
    """`POST /v1/chat/completions`."""

    def refuse_headers(self, headers: Mapping[str, str]) -> ErrorKind | None:
        """None: OpenAI-compatible servers run without keys too (a local vLLM), and the
        pass-through sends `Authorization` only when its deployment has a key."""
        return None

    def parse(self, body: bytes) -> SimRequest:
        try:
            return to_sim_request(ChatCompletionRequest.model_validate_json(body))
        except ValidationError as exc:
            raise WireError(_first_problem(exc)) from exc

    def status(self, kind: ErrorKind) -> int:
        return kind.status

    def error(self, kind: ErrorKind) -> bytes:
        error_type = ERROR_TYPES.get(kind.status, "server_error")
        body = {"message": kind.message, "type": error_type, "param": None, "code": kind.code}
        return orjson.dumps({"error": body})

    def complete(self, plan: Plan, meta: ResponseMeta) -> bytes:
        return orjson.dumps({
            "id": f"chatcmpl-{meta.id_hex}",
            "object": "chat.completion",
            "created": meta.created,
            "model": meta.model,
            "choices": [_choice(index, answer) for index, answer in enumerate(plan.answers)],
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

    def _event(self, delta: dict[str, object], finish: str | None = None, choice: int = 0,
               logprobs: dict[str, object] | None = None) -> bytes:
        body = {"index": choice, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return b"data: " + orjson.dumps({**self._prefix, "choices": [body]}) + b"\n\n"

    def head(self) -> bytes:
        """Each choice's first chunk: its role."""
        return b"".join(self._event({"role": "assistant", "content": ""}, choice=choice)
                        for choice in range(len(self._plan.answers)))

    def chunk(self, index: int, text: str, choice: int = 0) -> bytes:
        answer = self._plan.answers[choice]
        call = answer.tool_call
        if call is None:
            tokens = (None if answer.logprobs is None
                      else answer.logprobs[self._plan.chunk_pieces(index)])
            return self._event({"content": text}, choice=choice, logprobs=_logprobs(tokens))
        delta: dict[str, object] = {"index": 0, call.kind: {CALL_PAYLOAD[call.kind]: text}}
        if index == 0:
            delta = {"index": 0, **_tool_call(call, text)}
        return self._event({"tool_calls": [delta]}, choice=choice)

    def tail(self) -> bytes:
        """Each choice's finish reason, then the usage of all of them (when asked for)."""
        out = b"".join(self._event({}, answer.finish_reason, choice)
                       for choice, answer in enumerate(self._plan.answers))
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
