"""What the simulator will send for one admitted request, and when: a pure `Plan`.

`build_answer` is deterministic for a request (seeded by its content key): a function-tool call
(arguments from its schema), the expect-marker answer (right with the profile's `accuracy`, by a
hash of model and prompt), or filler text of a drawn length, cut by stop strings and
`max_tokens`; a custom-tool call carries that text as its input. `build_plan` adds the
latency draws (server RNG) and the stream's timetable. Nothing here sleeps or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from router.providers.simulator import content, sampling
from router.providers.simulator.hashrng import HashRandom
from router.providers.simulator.profile import CutMode, ModelProfile
from router.providers.simulator.request import (
    SimRequest,
    ToolKind,
    ToolSpec,
    content_key,
    expected_answer,
    prompt_key,
    unit_draw,
)

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class ToolCall:
    """The one tool call of an answer; `id_hex` gets a wire-specific prefix (`call_`, `toolu_`).
    `arguments` is a function call's JSON arguments, or a custom call's free-form input."""

    id_hex: str
    name: str
    arguments: str
    kind: ToolKind = "function"


@dataclass(frozen=True)
class Answer:
    """The answer's pieces (one per output token: text, or tool arguments) and how it ends."""

    pieces: tuple[str, ...]
    tool_call: ToolCall | None
    finish_reason: FinishReason


@dataclass(frozen=True)
class Plan:
    """An answer with its timetable: chunk i is sent `ttft_s + i * tokens_per_chunk * tpot_s`
    after admission; a non-streaming answer after `ttft_s + (tokens - 1) * tpot_s`."""

    answer: Answer
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    tpot_s: float
    tokens_per_chunk: int
    cut_after: int | None
    cut_mode: CutMode

    @property
    def completion_tokens(self) -> int:
        return len(self.answer.pieces)

    def chunks(self) -> tuple[str, ...]:
        """The pieces grouped `tokens_per_chunk` at a time (what each streamed chunk carries)."""
        k, pieces = self.tokens_per_chunk, self.answer.pieces
        return tuple("".join(pieces[i : i + k]) for i in range(0, len(pieces), k))

    def chunk_time_s(self, index: int) -> float:
        return self.ttft_s + index * self.tokens_per_chunk * self.tpot_s

    @property
    def total_s(self) -> float:
        return self.ttft_s + max(0, self.completion_tokens - 1) * self.tpot_s


def _callable_tools(request: SimRequest) -> tuple[ToolSpec, ...]:
    """The tools the model may call: all of them, or those `allowed_tools` names."""
    allowed = request.allowed_tools
    if allowed is None:
        return request.tools
    return tuple(t for t in request.tools if t.name in allowed)


def _chosen_tool(request: SimRequest) -> ToolSpec | None:
    tools = _callable_tools(request)
    if not tools or request.tool_mode == "none":
        return None
    if request.forced_tool is not None:
        return next((t for t in tools if t.name == request.forced_tool), tools[0])
    last_role = request.messages[-1].role if request.messages else "user"
    if request.tool_mode == "auto" and last_role == "tool":
        return None  # a tool result came back: answer in text, as a model would
    return tools[0]


def _tool_answer(tool: ToolSpec, key: bytes, rng: HashRandom) -> Answer:
    arguments = content.tool_arguments(tool.parameters_json, rng)
    call = ToolCall(id_hex=key.hex()[:24], name=tool.name, arguments=arguments)
    return Answer(content.split_pieces(arguments), call, "tool_calls")


def _custom_tool_answer(tool: ToolSpec, key: bytes, text: Answer) -> Answer:
    """A custom tool called with the text answer as its input (cut alike, so `length` stays)."""
    call = ToolCall(key.hex()[:24], tool.name, "".join(text.pieces), kind="custom")
    finish: FinishReason = "length" if text.finish_reason == "length" else "tool_calls"
    return Answer(text.pieces, call, finish)


def _text_pieces(request: SimRequest, profile: ModelProfile, rng: HashRandom) -> tuple[str, ...]:
    expected = expected_answer(request)
    if expected is None:
        return content.filler_pieces(rng, sampling.draw_output_tokens(profile, rng))
    if unit_draw(prompt_key(request), b"accuracy") < profile.accuracy:
        return content.split_pieces(expected)
    return content.split_pieces(content.wrong_answer(expected, rng))


def build_answer(request: SimRequest, profile: ModelProfile) -> Answer:
    """The deterministic answer to a request under a profile."""
    key = content_key(request)
    rng = HashRandom(key)
    tool = _chosen_tool(request)
    if tool is not None and tool.kind == "function":
        return _tool_answer(tool, key, rng)
    text = _text_answer(request, profile, rng)
    return text if tool is None else _custom_tool_answer(tool, key, text)


def _text_answer(request: SimRequest, profile: ModelProfile, rng: HashRandom) -> Answer:
    pieces = content.truncate_at_stop(_text_pieces(request, profile, rng), request.stop)
    limit = request.max_tokens
    if limit is not None and len(pieces) > limit:
        return Answer(pieces[: max(limit, 1)], None, "length")
    return Answer(pieces if pieces else ("",), None, "stop")


def build_plan(
    answer: Answer,
    profile: ModelProfile,
    rng: sampling.Rng,
    prompt_tokens: int,
    cached_tokens: int,
) -> Plan:
    """Draw TTFT, TPOT and a possible cut for an admitted request (latency RNG, not content)."""
    base = sampling.draw_base_ttft_ms(profile, rng)
    ttft = sampling.ttft_ms(base, profile, prompt_tokens, prefix_hit=cached_tokens > 0)
    tpot = sampling.draw_tpot_ms(profile, rng)
    cut = sampling.draw_cut(profile, rng)
    return Plan(
        answer=answer,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        ttft_s=ttft / 1000.0,
        tpot_s=tpot / 1000.0,
        tokens_per_chunk=profile.tokens_per_chunk,
        cut_after=profile.cut_after_chunks if cut else None,
        cut_mode=profile.cut_mode,
    )
