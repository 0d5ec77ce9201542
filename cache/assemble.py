"""Fold a streamed answer's chunks back into one chat.completion body, so it can be cached.

`StreamAssembler.add(chunk)` takes each parsed `chat.completion.chunk` as it passes through the
router; `completion_body()` returns the equivalent non-streaming chat.completion JSON, whatever
arrived: a choice without a `finish_reason` keeps `null` there, and no chunk at all gives no
choices. Whether that is a finished answer is `cache.entry.check_completion`'s to judge (it
refuses both), so a partial answer never reaches the cache, while an idempotency record still
keeps what its client was sent (some upstreams end a stream with `[DONE]` and no finish reason).
Parts of a chunk that are not what OpenAI sends (a number where a name should be) are skipped.

Pure and incremental (no I/O); the caller feeds it from its `finally`-bound streaming loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

_HEADER = ("id", "created", "model", "system_fingerprint", "service_tier")


@dataclass
class _Tool:
    """One tool call: a function's `arguments`, or a custom tool's free-form `input`."""

    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: str = ""  # `function.arguments`, or `custom.input` for a custom tool

    def as_json(self) -> dict[str, object]:
        if self.type == "custom":
            custom = {"name": self.name, "input": self.arguments}
            return {"id": self.id, "type": self.type, "custom": custom}
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": self.type, "function": function}


@dataclass
class _Choice:
    role: str = "assistant"
    texts: dict[str, str] = field(default_factory=dict)
    tools: list[_Tool] = field(default_factory=list)  # in the order the calls began
    _slots: dict[int, int] = field(default_factory=dict)  # a delta's `index` → its call
    _last: int | None = None  # the call the latest tool-call delta went to
    function_call: _Tool | None = None
    logprobs: dict[str, list[object]] = field(default_factory=dict)
    finish_reason: str | None = None

    def add(self, delta: Mapping[str, object], logprobs: object) -> None:
        for name, value in delta.items():
            if name == "role" and isinstance(value, str):
                self.role = value
            elif isinstance(value, str):
                self.texts[name] = self.texts.get(name, "") + value
            elif name == "tool_calls" and isinstance(value, list):
                self._add_tools(value)
            elif name == "function_call" and isinstance(value, Mapping):
                self.function_call = self.function_call if self.function_call else _Tool()
                _merge_tool(self.function_call, value)
        if isinstance(logprobs, Mapping):
            for part, tokens in logprobs.items():
                if isinstance(tokens, list):
                    self.logprobs.setdefault(part, []).extend(tokens)

    def _add_tools(self, deltas: list[object]) -> None:
        for delta in deltas:
            if isinstance(delta, Mapping):
                _merge_tool(self.tools[self._slot(delta)], delta)

    def _slot(self, delta: Mapping[str, object]) -> int:
        """The call a tool-call delta belongs to. OpenAI gives each call its `index`; some
        OpenAI-compatible servers (Gemini's, SGLang, mistral.rs) send none, and some (Ollama
        through litellm) give parallel calls the same one. So a delta whose `id` differs from
        its call's begins a new call, and one with no index continues the latest call."""
        given, call_id = delta.get("index"), delta.get("id")
        index = given if isinstance(given, int) and not isinstance(given, bool) else None
        slot = self._slots.get(index) if index is not None else self._last
        if slot is None or (isinstance(call_id, str) and call_id
                            and self.tools[slot].id not in (None, call_id)):
            slot = len(self.tools)
            self.tools.append(_Tool())
            if index is not None:
                self._slots[index] = slot
        self._last = slot
        return slot

    def as_json(self, index: int) -> dict[str, object]:
        content = self.texts.get("content")
        if content == "" and (self.tools or self.function_call is not None):
            content = None  # a tool-call answer's content is null, however a stream spelled it
        message: dict[str, object] = {"role": self.role, "content": content}
        message.update({k: v for k, v in self.texts.items() if k != "content"})
        if self.tools:
            message["tool_calls"] = [tool.as_json() for tool in self.tools]
        if self.function_call is not None:
            message["function_call"] = self.function_call.as_json()["function"]
        logprobs = dict(self.logprobs) if self.logprobs else None
        return {
            "index": index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": self.finish_reason,
        }


def _merge_tool(tool: _Tool, delta: Mapping[str, object]) -> None:
    """Fold one tool-call delta (or a legacy `function_call` delta, which is the function part
    itself) into `tool`. A custom tool's delta carries `custom: {name, input}` where a
    function's carries `function: {name, arguments}`."""
    if isinstance(delta.get("id"), str):
        tool.id = str(delta["id"])
    if isinstance(delta.get("type"), str):
        tool.type = str(delta["type"])
    if "function" in delta:
        part, text = delta["function"], "arguments"
    elif "custom" in delta:
        part, text = delta["custom"], "input"
        if not isinstance(delta.get("type"), str):
            tool.type = "custom"
    else:
        part, text = delta, "arguments"
    if isinstance(part, Mapping):
        name, arguments = part.get("name"), part.get(text)
        tool.name += name if isinstance(name, str) else ""
        tool.arguments += arguments if isinstance(arguments, str) else ""


@dataclass
class StreamAssembler:
    """Accumulates chunks; `completion_body()` is the finished chat.completion."""

    _header: dict[str, object] = field(default_factory=dict)
    _choices: dict[int, _Choice] = field(default_factory=dict)
    _usage: object = None

    def add(self, chunk: Mapping[str, object]) -> None:
        """Fold in one parsed `chat.completion.chunk`."""
        for name in _HEADER:
            if chunk.get(name) is not None:
                self._header.setdefault(name, chunk[name])
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, Mapping):
                continue
            index = choice.get("index", 0)
            state = self._choices.setdefault(index if isinstance(index, int) else 0, _Choice())
            delta = choice.get("delta")
            state.add(delta if isinstance(delta, Mapping) else {}, choice.get("logprobs"))
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                state.finish_reason = finish

    def completion_body(self) -> bytes:
        """The chat.completion JSON of the chunks added so far (see the module's docstring)."""
        body: dict[str, object] = {**self._header, "object": "chat.completion"}
        body["choices"] = [self._choices[i].as_json(i) for i in sorted(self._choices)]
        if self._usage is not None:
            body["usage"] = self._usage
        return orjson.dumps(body)
