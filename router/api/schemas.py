"""Wire schemas of the OpenAI chat completions request, validated at the HTTP boundary.

Fields that matter for routing are typed and checked; every other field the client sends is
kept (`extra="allow"`) and passed through to the provider unchanged, so new OpenAI fields work
without a release. `metadata` may carry slorouter hints (`task`, `risk`, `data_version`).

The typed fields are *strict*: the pipeline forwards the client's raw JSON, not these models,
so a value pydantic would coerce (`"max_tokens": "5"`, `5.0`, `true`; `"stream": "yes"`) would
reach the provider as sent and fail there (a 5xx that also counts against the deployment's
circuit breaker). An integer must be a JSON integer (not a boolean, not `5.0`), a number a JSON
integer or float, a boolean a JSON boolean and a string a JSON string, as OpenAI requires.
Tagged objects (content parts, tools, `response_format`) are checked against the types the
OpenAI chat API defines, with the object each type requires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def _required_for(tag: str, value: object, info: ValidationInfo, what: str) -> None:
    """Fails when the object's `type` is `tag` and the field that type requires is missing."""
    if value is None and info.data.get("type") == tag:
        raise PydanticCustomError("missing", "required by the {what}", {"what": what})


ContentType = Literal["text", "image_url", "input_audio", "file", "refusal"]


class ContentPart(_Open):
    """A content part: `text`, `image_url`, `input_audio`, `file` (and `refusal` from an
    assistant), each with the field its type names."""

    type: ContentType
    text: StrictStr | None = Field(default=None, validate_default=True)
    image_url: dict[str, Any] | None = Field(default=None, validate_default=True)
    input_audio: dict[str, Any] | None = Field(default=None, validate_default=True)
    file: dict[str, Any] | None = Field(default=None, validate_default=True)
    refusal: StrictStr | None = Field(default=None, validate_default=True)

    @field_validator("text", "image_url", "input_audio", "file", "refusal")
    @classmethod
    def _payload_of_its_type(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name if info.field_name is not None else ""
        _required_for(name, value, info, f"`{name}` content part")
        problem = _PAYLOAD_PROBLEMS[name](value) if isinstance(value, dict) else None
        if problem is not None:
            raise PydanticCustomError("invalid_value", "{problem}", {"problem": problem})
        return value


def _strings(value: dict[str, Any], *names: str) -> bool:
    return all(isinstance(value.get(name), str) and value[name] for name in names)


# What each payload must hold, as OpenAI's API refuses it otherwise (unchecked, the same body
# was a 200 from one deployment and a 400 from another, with litellm's Python errors as
# messages: "list index out of range" for an `image_url` whose `url` was a number; the fuzzing
# audit of 2026-12-06).
_PAYLOAD_PROBLEMS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "image_url": lambda v: None if _strings(v, "url") else "`url` should be a non-empty string",
    "input_audio": lambda v: None if _strings(v, "data", "format")
    else "`data` and `format` should be non-empty strings",
    "file": lambda v: None if (_strings(v, "file_data") or _strings(v, "file_id")) and all(
        isinstance(v.get(k), str) for k in ("file_data", "file_id", "filename") if k in v)
    else "should hold `file_data` or `file_id` (strings), and a string `filename` if any",
}


def _tool_call_problem(call: object) -> str | None:
    """What is wrong with an assistant message's tool call, as OpenAI's API would refuse it."""
    if not isinstance(call, dict):
        return "should be an object"
    if not _strings(call, "id"):
        return "`id` should be a non-empty string (the id its tool message answers)"
    kind = call.get("type", "function")
    if kind == "function":
        function = call.get("function")
        if not isinstance(function, dict) or not _strings(function, "name"):
            return "`function` should be an object with a non-empty string `name`"
        if not isinstance(function.get("arguments"), str):
            return "`function.arguments` should be a string (the arguments as JSON text)"
        return None
    if kind == "custom":
        custom = call.get("custom")
        if not isinstance(custom, dict) or not _strings(custom, "name") or not isinstance(
                custom.get("input"), str):
            return "`custom` should be an object with string `name` and `input`"
        return None
    return "`type` should be 'function' or 'custom'"


# Roles whose message is nothing without its content (an assistant's may be tool calls alone).
_CONTENT_REQUIRED = frozenset({"system", "developer", "user", "tool"})


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[ContentPart] | None = Field(default=None, validate_default=True)
    name: StrictStr | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: StrictStr | None = Field(default=None, validate_default=True)

    @field_validator("content")
    @classmethod
    def _content_of_its_role(cls, value: Any, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if value is None and role in _CONTENT_REQUIRED:
            raise PydanticCustomError("missing", "required in a {role} message", {"role": role})
        if isinstance(value, list) and role not in (None, "assistant") and any(
                part.type == "refusal" for part in value):
            raise PydanticCustomError("invalid_value",
                                      "a `refusal` content part is only valid in an assistant "
                                      "message, not in a {role} message", {"role": role})
        return value

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls_as_written_by_the_model(cls, value: Any) -> Any:
        if value == []:  # OpenAI: "empty array. Expected an array with minimum length 1"
            raise PydanticCustomError("invalid_value", "should hold at least one tool call "
                                      "(or be left out)")
        for index, call in enumerate(value or ()):
            problem = _tool_call_problem(call)
            if problem is not None:
                raise PydanticCustomError("invalid_value", "item {index}: {problem}",
                                          {"index": index, "problem": problem})
        return value

    @field_validator("tool_call_id")
    @classmethod
    def _tool_results_name_their_call(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.data.get("role") == "tool":
            raise PydanticCustomError("missing", "required in a tool message (the id of the "
                                      "tool call it answers)")
        return value

    def text(self) -> str:
        """The message's text: a string, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(part.text for part in self.content if part.text)


class FunctionSpec(_Open):
    name: StrictStr = Field(min_length=1, max_length=128)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class CustomToolSpec(_Open):
    """OpenAI's custom tool: free-form (or grammar-constrained) text input, no JSON schema."""

    name: StrictStr = Field(min_length=1, max_length=128)
    description: StrictStr | None = None
    format: dict[str, Any] | None = None


class FunctionTool(_Open):
    type: Literal["function"] = "function"
    function: FunctionSpec

    @property
    def spec(self) -> FunctionSpec:
        """The tool's name and description (what routing reads of any tool)."""
        return self.function


class CustomTool(_Open):
    type: Literal["custom"]
    custom: CustomToolSpec

    @property
    def spec(self) -> CustomToolSpec:
        """The tool's name and description (what routing reads of any tool)."""
        return self.custom


def _tool_tag(value: Any) -> str | None:
    """`function` (also when `type` is left out, as this gateway always accepted) or `custom`;
    the tags are not JSON keys, so error locations are easy to map back (see `body`)."""
    kind = value.get("type", "function") if isinstance(value, dict) else getattr(
        value, "type", None)
    return f"{kind}-tool" if kind in ("function", "custom") else None


ToolSpec = Annotated[
    Annotated[FunctionTool, Tag("function-tool")] | Annotated[CustomTool, Tag("custom-tool")],
    Discriminator(_tool_tag, custom_error_type="invalid_value",
                  custom_error_message="a tool's type must be 'function' or 'custom'",
                  custom_error_context={"param_field": "type"}),
]


class StreamOptions(_Open):
    include_usage: StrictBool | None = None


class JsonSchemaFormat(_Open):
    name: StrictStr = Field(min_length=1, max_length=64)
    description: StrictStr | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(default=None, validate_default=True)

    @field_validator("json_schema")
    @classmethod
    def _schema_for_json_schema(cls, value: Any, info: ValidationInfo) -> Any:
        _required_for("json_schema", value, info, "`json_schema` response format")
        return value


MAX_TOOLS = 128  # OpenAI's: "array too long. Expected an array with maximum length 128"


def tool_turn_problem(messages: list[ChatMessage]) -> tuple[int, str, str] | None:
    """Where a conversation breaks the rule of tool turns that OpenAI (and Anthropic) refuse
    a request for: an assistant message's tool calls are each answered by the `tool` messages
    right after it, and a `tool` message answers a call of that assistant message. The
    problem as (message index, its field, what is wrong), or None."""
    calls: set[str] = set()  # the ids of the turn's calls (empty: no turn open)
    unanswered: set[str] = set()
    opened_at = 0
    for index, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id not in calls:
                return (index, "tool_call_id", "a `tool` message must answer a tool call of the "
                        "assistant message before it (the tool messages answering one assistant "
                        "message follow it directly)")
            unanswered.discard(message.tool_call_id)
            continue
        if unanswered:
            break
        calls = {call["id"] for call in message.tool_calls or ()}
        unanswered, opened_at = set(calls), index
    if unanswered:
        return (opened_at, "tool_calls", f"{len(unanswered)} of its tool calls not answered: an "
                "assistant message with `tool_calls` must be followed by a `tool` message "
                "answering each of them (by `tool_call_id`)")
    return None


class ChatCompletionRequest(_Open):
    """`POST /v1/chat/completions` body. Unknown fields are kept and passed through."""

    model: StrictStr = Field(min_length=1, max_length=256)
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    stream: StrictBool = False  # `null` too, as OpenAI takes it: read as false
    stream_options: StreamOptions | None = None
    tools: list[ToolSpec] | None = Field(default=None, min_length=1, max_length=MAX_TOOLS)
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: ResponseFormat | None = None
    # StrictFloat takes JSON integers too (`"temperature": 1`); strings and booleans never.
    temperature: StrictFloat | None = Field(default=None, ge=0, le=2)
    top_p: StrictFloat | None = Field(default=None, ge=0, le=1)
    frequency_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    presence_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    # token id (a string of digits) -> bias, OpenAI's bounds
    logit_bias: dict[StrictStr, Annotated[StrictFloat, Field(ge=-100, le=100)]] | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    stop: StrictStr | list[StrictStr] | None = None
    seed: StrictInt | None = None
    n: StrictInt | None = Field(default=None, ge=1, le=128)  # OpenAI's own bounds
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=20)
    user: StrictStr | None = Field(default=None, max_length=256)
    # vLLM's prefix-cache salt; the router scopes it within the tenant (`upstream_body`)
    cache_salt: StrictStr | None = Field(default=None, min_length=1, max_length=256)
    # OpenAI's bounds: at most 16 pairs, keys up to 64 characters, values up to 512.
    metadata: Annotated[dict[Annotated[StrictStr, Field(max_length=64)],
                             Annotated[StrictStr, Field(max_length=512)]],
                        Field(max_length=16)] | None = None

    @field_validator("stream", mode="before")
    @classmethod
    def _null_stream_is_false(cls, value: object) -> object:
        return False if value is None else value

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    # OpenAI refuses the requests below with a 400. Checked here, they are refused alike
    # whichever deployment would serve: forwarded, a provider's 400 moved `auto` to the next
    # candidate, and litellm's `drop_params` let another answer 200 without the field.

    @field_validator("messages")
    @classmethod
    def _tool_turns_answered(cls, value: list[ChatMessage]) -> list[ChatMessage]:
        problem = tool_turn_problem(value)
        if problem is not None:
            index, field, says = problem
            raise PydanticCustomError("invalid_value", "{says}",
                                      {"says": says, "param_at": (index, field)})
        return value

    @field_validator("parallel_tool_calls")
    @classmethod
    def _parallel_tool_calls_with_tools(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and not info.data.get("tools"):
            raise PydanticCustomError("invalid_value", "only allowed when `tools` are given")
        return value

    @field_validator("stream_options")
    @classmethod
    def _stream_options_of_a_stream(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("stream") is not True:
            raise PydanticCustomError("invalid_value",
                                      "only allowed when `stream` is true")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice_among_the_tools(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or value == "none":
            return value
        if isinstance(value, str) and value not in ("auto", "required"):
            raise PydanticCustomError("invalid_value",
                                      "should be 'none', 'auto', 'required' or an object")
        if value == "auto":
            return value
        tools = info.data.get("tools")
        if not tools:
            raise PydanticCustomError("invalid_value", "only allowed when `tools` are given")
        if not isinstance(value, dict):
            return value
        kind = value.get("type")
        if kind in ("function", "custom"):
            named = value.get(kind)
            if not isinstance(named, dict) or not _strings(named, "name"):
                raise PydanticCustomError(
                    "invalid_value", "`{kind}` should be an object with a non-empty string "
                    "`name` (the tool to call)", {"kind": kind})
            if kind == "function" and named["name"] not in {
                    t.function.name for t in tools if isinstance(t, FunctionTool)}:
                raise PydanticCustomError("invalid_value",
                                          "names a function that is not among `tools`")
        elif not isinstance(kind, str):
            raise PydanticCustomError("invalid_value", "an object's `type` should be a string "
                                      "('function', 'custom' or 'allowed_tools')")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias_by_token_id(cls, value: Any) -> Any:
        if value is not None and not all(key.isascii() and key.isdigit() for key in value):
            raise PydanticCustomError("invalid_value", "keys should be token ids (digits)")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs_with_logprobs(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and value > 0 and info.data.get("logprobs") is not True:
            raise PydanticCustomError("invalid_value", "requires `logprobs` to be true")
        return value

    def output_token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else (
            self.max_tokens
        )
