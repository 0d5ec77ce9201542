"""Wire schemas of the OpenAI chat completions request, validated at the HTTP boundary.

Fields that matter for routing are typed and checked; every other field the client sends is
kept (`extra="allow"`) and passed through to the provider unchanged, so new OpenAI fields work
without a release. `metadata` may carry slorouter hints (`task`, `risk`, `data_version`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: str = Field(min_length=1)
    text: str | None = None


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text: a string, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(part.text for part in self.content if part.text)


class FunctionSpec(_Open):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(_Open):
    type: str = "function"
    function: FunctionSpec


class StreamOptions(_Open):
    include_usage: bool | None = None


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionRequest(_Open):
    """`POST /v1/chat/completions` body. Unknown fields are kept and passed through."""

    model: str = Field(min_length=1, max_length=256)
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=16)
    user: str | None = Field(default=None, max_length=256)
    metadata: dict[str, str] | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    def output_token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else (
            self.max_tokens
        )
