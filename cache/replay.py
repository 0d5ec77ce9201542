"""Replay a cached chat.completion as the SSE stream an OpenAI client expects (`stream: true`).

Pure: `replay_sse(body, include_usage=...)` returns the whole event sequence as bytes, each
item one `data: {...}\\n\\n` event, ending with `data: [DONE]\\n\\n`. For every choice, in order:
a role delta (`{"role": "assistant", "content": ""}`), deltas for extra message text fields
(`reasoning_content`, ...), the refusal, the content (one chunk, or `chunk_chars`-sized pieces;
logprobs ride on the first content chunk), one delta per tool call (id, name and full
arguments), the legacy `function_call`, then an empty delta with the `finish_reason`. With
`include_usage`, every chunk carries `"usage": null` and a last chunk with no choices carries
the usage, as OpenAI does.

What does not live here: deciding to replay (the pipeline does, when the client streams) and
writing bytes to the socket.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

import orjson

DONE: Final = b"data: [DONE]\n\n"
_STRUCTURED: Final = frozenset({"role", "content", "refusal", "tool_calls", "function_call"})
_PASSED: Final = ("id", "created", "model", "system_fingerprint", "service_tier")

Json = Mapping[str, object]


def replay_sse(
    body: bytes, *, include_usage: bool = False, chunk_chars: int | None = None
) -> tuple[bytes, ...]:
    """The SSE events (as bytes) that stream the chat.completion `body`."""
    completion = orjson.loads(body)
    if not isinstance(completion, dict):
        raise ValueError("a cached body must be a chat.completion object")
    base: dict[str, object] = {k: completion[k] for k in _PASSED if k in completion}
    base["object"] = "chat.completion.chunk"
    if include_usage:
        base["usage"] = None
    events = [
        _event(base, choice, delta, finish, logprobs)
        for choice in _choices(completion)
        for delta, finish, logprobs in _choice_deltas(choice, chunk_chars)
    ]
    if include_usage:
        usage_chunk = {**base, "choices": [], "usage": completion.get("usage")}
        events.append(_encode(usage_chunk))
    events.append(DONE)
    return tuple(events)


def _choices(completion: Json) -> list[Json]:
    choices = completion.get("choices")
    return [c for c in choices if isinstance(c, Mapping)] if isinstance(choices, list) else []


def _event(base: Json, choice: Json, delta: Json, finish: object, logprobs: object) -> bytes:
    index = choice.get("index", 0)
    chunk_choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return _encode({**base, "choices": [chunk_choice]})


def _encode(chunk: Json) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _choice_deltas(choice: Json, chunk_chars: int | None) -> Iterator[tuple[Json, object, object]]:
    """(delta, finish_reason, logprobs) for each chunk of one choice."""
    message = choice.get("message")
    message = message if isinstance(message, Mapping) else {}
    content = "" if isinstance(message.get("content"), str) else None
    yield {"role": message.get("role", "assistant"), "content": content}, None, None
    for name, value in message.items():
        if name not in _STRUCTURED and isinstance(value, str | list) and value:
            yield {name: value}, None, None
    if isinstance(message.get("refusal"), str):
        yield {"refusal": message["refusal"]}, None, None
    yield from _content_deltas(message.get("content"), choice.get("logprobs"), chunk_chars)
    yield from _tool_deltas(message.get("tool_calls"))
    if isinstance(message.get("function_call"), Mapping):
        yield {"function_call": message["function_call"]}, None, None
    yield {}, choice.get("finish_reason"), None


def _content_deltas(
    content: object, logprobs: object, chunk_chars: int | None
) -> Iterator[tuple[Json, object, object]]:
    if not isinstance(content, str) or not content:
        if logprobs is not None:  # a refusal's logprobs still reach the client
            yield {}, None, logprobs
        return
    size = chunk_chars if chunk_chars is not None and chunk_chars > 0 else len(content)
    for start in range(0, len(content), size):
        yield {"content": content[start : start + size]}, None, logprobs if start == 0 else None


def _tool_deltas(tool_calls: object) -> Iterator[tuple[Json, object, object]]:
    if not isinstance(tool_calls, list):
        return
    for index, call in enumerate(tool_calls):
        if not isinstance(call, Mapping):
            continue
        delta = {"index": index, "id": call.get("id"), "type": call.get("type", "function")}
        if "function" in call:
            delta["function"] = call["function"]
        if "custom" in call:
            delta["custom"] = call["custom"]
        yield {"tool_calls": [delta]}, None, None
