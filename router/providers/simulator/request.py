"""The simulator's wire-neutral view of one chat request, and pure functions over it.

Both wire formats (OpenAI chat completions, Anthropic messages) are parsed into a `SimRequest`;
this module derives from it what the simulator needs: the content key (a hash that seeds the
deterministic answer), the approximate prompt token count (about 4 characters per token), the
chain of prompt prefixes (for the prefix-cache model), the `<<expect:VALUE>>` marker and the
`<<fail:KIND>>` one (a failure that quotes the request, `router.providers.simulator.echo`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

import orjson

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
EXPECT_MARKER = re.compile(r"<<expect:(.*?)>>", re.DOTALL)
FAIL_MARKER = re.compile(r"<<fail:([a-z0-9]+)>>")

ToolMode = Literal["auto", "none", "required"]
ToolKind = Literal["function", "custom"]


@dataclass(frozen=True)
class Message:
    """One message reduced to its role and its text (tool calls and parts flattened to text)."""

    role: str
    text: str


@dataclass(frozen=True)
class ToolSpec:
    """A tool the caller offers: its name and, as JSON, what the model is told of its input —
    a function's JSON-schema parameters, or a custom tool's `format` (free text or a grammar)."""

    name: str
    parameters_json: str
    kind: ToolKind = "function"


@dataclass(frozen=True)
class SimRequest:
    """A chat request as the simulator sees it, whatever wire format it came in."""

    model: str
    messages: tuple[Message, ...]
    max_tokens: int | None
    stop: tuple[str, ...]
    tools: tuple[ToolSpec, ...]
    tool_mode: ToolMode
    forced_tool: str | None
    stream: bool
    include_usage: bool
    sampling_json: str
    cache_salt: str | None = None  # vLLM's: prefix-cache reuse only between equal salts
    allowed_tools: tuple[str, ...] | None = None  # OpenAI's `allowed_tools`: the callable names
    choices: int = 1  # OpenAI's `n`: how many answers to decode side by side
    logprobs: bool = False  # OpenAI's `logprobs`: each content token's log probability
    top_logprobs: int = 0  # and this many likeliest tokens at its place
    # OpenAI's JSON modes: the schema the text answer is an object of (json_object: one of
    # `JSON_OBJECT_SCHEMA`), as JSON text; None: free text
    json_schema: str | None = None


# What a json_object `response_format` is answered with: an object, of one string.
JSON_OBJECT_SCHEMA = '{"type":"object","properties":{"answer":{"type":"string"}}}'


def count_tokens(text: str) -> int:
    """Approximate token count of a text: one token per 4 characters, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def _message_tokens(message: Message) -> int:
    return count_tokens(message.text) + MESSAGE_OVERHEAD_TOKENS


def _tools_tokens(tools: tuple[ToolSpec, ...]) -> int:
    return sum(count_tokens(tool.name) + count_tokens(tool.parameters_json) for tool in tools)


def prompt_tokens(request: SimRequest) -> int:
    """Approximate prompt tokens: messages (text plus a fixed overhead each) and tool schemas."""
    return sum(_message_tokens(m) for m in request.messages) + _tools_tokens(request.tools)


def _tools_key(tools: tuple[ToolSpec, ...]) -> list[list[str]]:
    """The tools as hashed (a function tool as before custom tools existed, so answers stay)."""
    return [[t.name, t.parameters_json] + ([t.kind] if t.kind != "function" else [])
            for t in tools]


def _digest(payload: object) -> bytes:
    return hashlib.blake2b(orjson.dumps(payload), digest_size=16).digest()


def content_key(request: SimRequest) -> bytes:
    """Hash of everything that determines the answer: model, messages and relevant parameters."""
    payload: list[object] = [
        request.model,
        [[m.role, m.text] for m in request.messages],
        request.max_tokens,
        list(request.stop),
        _tools_key(request.tools),
        request.tool_mode,
        request.forced_tool,
        request.sampling_json,
    ]
    if request.allowed_tools is not None:  # appended only when set: other answers stay as they were
        payload.append(list(request.allowed_tools))
    return _digest(payload)


def prompt_key(request: SimRequest) -> bytes:
    """Hash of model and prompt only (what the accuracy draw of an expect marker depends on)."""
    return _digest([request.model, [[m.role, m.text] for m in request.messages]])


def prefix_chain(request: SimRequest) -> tuple[tuple[bytes, int], ...]:
    """`(hash, tokens)` of each prompt prefix that ends at a message boundary, shortest first.

    A prefix is the tools plus the first k messages, for k from 1 to all but the last message
    (the last message is the new turn, which a KV prefix cache would not hold yet). The
    request's `cache_salt` seeds every hash, as vLLM salts its first block: requests with
    different salts share no prefix, and those without one share theirs with each other.
    """
    hasher = hashlib.blake2b(orjson.dumps([request.model, _tools_key(request.tools),
                                           request.cache_salt]),
                             digest_size=16)
    tokens = _tools_tokens(request.tools)
    chain: list[tuple[bytes, int]] = []
    for message in request.messages[:-1]:
        hasher.update(orjson.dumps([message.role, message.text]))
        tokens += _message_tokens(message)
        chain.append((hasher.copy().digest(), tokens))
    return tuple(chain)


def last_user_text(request: SimRequest) -> str | None:
    """The text of the last user message, if there is one."""
    return next((m.text for m in reversed(request.messages) if m.role == "user"), None)


def expected_answer(request: SimRequest) -> str | None:
    """The VALUE of a `<<expect:VALUE>>` marker in the last user message, if there is one."""
    found = EXPECT_MARKER.search(last_user_text(request) or "")
    return found.group(1) if found else None


def asked_failure(request: SimRequest) -> str | None:
    """The KIND of a `<<fail:KIND>>` marker in the last user message, if there is one."""
    found = FAIL_MARKER.search(last_user_text(request) or "")
    return found.group(1) if found else None


def unit_draw(key: bytes, salt: bytes) -> float:
    """A deterministic number in [0, 1) from a key (for draws that must not vary per call)."""
    digest = hashlib.blake2b(key + salt, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
