"""Anthropic Messages wire format of the simulator (`POST /v1/messages`).

Requests (system prompt, text/tool_use/tool_result blocks, tools with `input_schema`,
`tool_choice` auto/any/tool/none, `stop_sequences`, required `max_tokens`) become a
`SimRequest`. Responses are `message` objects with text or `tool_use` content and usage
(`input_tokens` excludes prefix-cache reads, reported as `cache_read_input_tokens`); streams
are the SSE event sequence message_start, content_block_start, ping, content_block_delta…,
content_block_stop, message_delta (stop reason and usage), message_stop. Errors use
`{"type": "error", "error": {"type", "message"}}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from router.providers.simulator.plan import Plan
from router.providers.simulator.request import Message, SimRequest, ToolMode, ToolSpec
from router.providers.simulator.wire import ErrorKind, ResponseMeta, WireError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _stop_reason(plan: Plan) -> str:
    """`stop_sequence` when the text ended before one of the request's stop strings."""
    answer = plan.answer
    return "stop_sequence" if answer.stop_sequence is not None else STOP_REASONS[
        answer.finish_reason]
TOOL_MODES: dict[str, ToolMode] = {"auto": "auto", "any": "required", "tool": "required",
                                   "none": "none"}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Block(_Lenient):
    type: str
    text: str | None = None
    name: str | None = None
    input: dict[str, object] | None = None
    content: str | list[Block] | None = None


class AnthropicMessage(_Lenient):
    role: Literal["user", "assistant"]  # the system prompt is the top-level `system` field
    content: str | list[Block]


class AnthropicTool(_Lenient):
    name: str
    input_schema: dict[str, object] = Field(default_factory=dict)


class AnthropicToolChoice(_Lenient):
    type: Literal["auto", "any", "tool", "none"] = "auto"
    name: str | None = None


class MessagesRequest(_Lenient):
    """The fields of an Anthropic Messages request that change the simulator's answer, held to
    Anthropic's rules so that a translation the provider refuses is refused here too: roles
    `user` / `assistant` only, temperature and top_p in [0, 1], stop sequences that are not
    empty or whitespace only, and a `tool_choice` of `any` or a named tool only with `tools`
    (naming one of them)."""

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[Block] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)

    @field_validator("stop_sequences")
    @classmethod
    def _stop_sequences_have_text(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not stop.strip() for stop in value):
            raise ValueError("each stop sequence must contain non-whitespace")
        return value

    @model_validator(mode="after")
    def _tool_choice_names_a_tool(self) -> MessagesRequest:
        choice = self.tool_choice
        if choice is None or choice.type in ("auto", "none"):
            return self
        names = {tool.name for tool in self.tools or ()}
        if not names:
            raise ValueError(f"tool_choice {choice.type!r} may only be given with tools")
        if choice.type == "tool" and choice.name not in names:
            raise ValueError(f"tool_choice names tool {choice.name!r}, which is not in tools")
        return self


def _block_text(block: Block) -> str:
    if block.type == "tool_use":
        return f"[tool_call {block.name} {orjson.dumps(block.input or {}).decode()}]"
    if isinstance(block.content, str):
        return block.content
    if isinstance(block.content, list):
        return "\n".join(_block_text(b) for b in block.content)
    return block.text if block.text is not None else f"[{block.type}]"


def _content_text(content: str | list[Block]) -> str:
    return content if isinstance(content, str) else "\n".join(_block_text(b) for b in content)


def _role(message: AnthropicMessage) -> str:
    blocks = message.content if isinstance(message.content, list) else []
    return "tool" if any(b.type == "tool_result" for b in blocks) else message.role


def to_sim_request(body: MessagesRequest) -> SimRequest:
    """The wire-neutral view of a validated Anthropic request (system becomes a first message)."""
    system = () if body.system is None else (Message("system", _content_text(body.system)),)
    choice = body.tool_choice if body.tool_choice is not None else AnthropicToolChoice()
    sampling = [body.temperature, body.top_p, body.top_k]
    return SimRequest(
        model=body.model,
        messages=system + tuple(Message(_role(m), _content_text(m.content)) for m in body.messages),
        max_tokens=body.max_tokens,
        stop=tuple(body.stop_sequences or ()),
        tools=tuple(ToolSpec(t.name, orjson.dumps(t.input_schema).decode())
                    for t in body.tools or ()),
        tool_mode=TOOL_MODES[choice.type],
        forced_tool=choice.name if choice.type == "tool" else None,
        stream=body.stream,
        include_usage=True,
        sampling_json=orjson.dumps(sampling).decode(),
    )


def _usage(plan: Plan) -> dict[str, int]:
    return {
        "input_tokens": plan.prompt_tokens - plan.cached_tokens,
        "output_tokens": plan.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": plan.cached_tokens,
    }


def _content_block(plan: Plan, full: bool) -> dict[str, object]:
    call = plan.answer.tool_call
    if call is None:
        return {"type": "text", "text": "".join(plan.answer.pieces) if full else ""}
    arguments = _input_of(call.arguments) if full else {}
    return {"type": "tool_use", "id": f"toolu_{call.id_hex}", "name": call.name,
            "input": arguments}


def _input_of(arguments: str) -> object:
    """A tool_use block's `input`: the arguments, or `{}` for arguments `max_tokens` cut (not
    JSON: a whole message has no partial input to show; a stream sends the fragments)."""
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}


def _message(plan: Plan, meta: ResponseMeta, full: bool) -> dict[str, object]:
    usage = _usage(plan) if full else {**_usage(plan), "output_tokens": 1}
    return {
        "id": f"msg_{meta.id_hex}",
        "type": "message",
        "role": "assistant",
        "model": meta.model,
        "content": [_content_block(plan, full)] if full else [],
        "stop_reason": _stop_reason(plan) if full else None,
        "stop_sequence": plan.answer.stop_sequence if full else None,
        "usage": usage,
    }


def _event(name: str, data: Mapping[str, object]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class AnthropicWire:
    """`POST /v1/messages`."""

    def refuse_headers(self, headers: Mapping[str, str]) -> ErrorKind | None:
        """Anthropic answers a request without `x-api-key` with a 401 and one without
        `anthropic-version` with a 400, before reading the body (any key is accepted)."""
        if not headers.get("x-api-key"):
            return ErrorKind(401, "authentication_error", "x-api-key header is required")
        if not headers.get("anthropic-version"):
            return ErrorKind(400, "invalid_request", "anthropic-version: header is required")
        return None

    def parse(self, body: bytes) -> SimRequest:
        try:
            return to_sim_request(MessagesRequest.model_validate_json(body))
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid body"}
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise WireError(f"{where}: {first.get('msg')}") from exc

    def status(self, kind: ErrorKind) -> int:
        """Anthropic answers "overloaded" with its own 529, not 503."""
        return 529 if kind.status == 503 else kind.status

    def error(self, kind: ErrorKind) -> bytes:
        error_type = ERROR_TYPES.get(kind.status, "api_error")
        return orjson.dumps({"type": "error",
                             "error": {"type": error_type, "message": kind.message}})

    def complete(self, plan: Plan, meta: ResponseMeta) -> bytes:
        return orjson.dumps(_message(plan, meta, full=True))

    def stream(self, plan: Plan, meta: ResponseMeta, include_usage: bool) -> AnthropicStream:
        return AnthropicStream(plan, meta)


class AnthropicStream:
    """SSE events of one streamed message (one content block: text or tool_use)."""

    def __init__(self, plan: Plan, meta: ResponseMeta) -> None:
        self._plan = plan
        self._meta = meta
        self._delta_type = "text_delta" if plan.answer.tool_call is None else "input_json_delta"
        self._delta_field = "text" if plan.answer.tool_call is None else "partial_json"

    def head(self) -> bytes:
        start = {"type": "message_start", "message": _message(self._plan, self._meta, False)}
        block = {"type": "content_block_start", "index": 0,
                 "content_block": _content_block(self._plan, full=False)}
        return (_event("message_start", start) + _event("content_block_start", block)
                + _event("ping", {"type": "ping"}))

    def chunk(self, index: int, text: str, choice: int = 0) -> bytes:  # Anthropic has no `n`
        delta = {"type": self._delta_type, self._delta_field: text}
        return _event("content_block_delta",
                      {"type": "content_block_delta", "index": 0, "delta": delta})

    def tail(self) -> bytes:
        stop = {"type": "message_delta",
                "delta": {"stop_reason": _stop_reason(self._plan),
                          "stop_sequence": self._plan.answer.stop_sequence},
                "usage": {"output_tokens": self._plan.completion_tokens}}
        return (_event("content_block_stop", {"type": "content_block_stop", "index": 0})
                + _event("message_delta", stop)
                + _event("message_stop", {"type": "message_stop"}))
