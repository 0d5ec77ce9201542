"""What the simulator will send for one admitted request, and when: a pure `Plan`.

`build_answer` is deterministic for a request (seeded by its content key): a function-tool call
(arguments from its schema), the expect-marker answer (right with the profile's `accuracy`, by a
hash of model and prompt), or filler text of a drawn length, cut by stop strings and
`max_tokens`; a custom-tool call carries that text as its input. A request for `n` choices gets
`n` answers, each drawn on its own (choice 0 is the answer the request would get alone with the
same `n`). `build_plan` adds the latency draws (server RNG) and the stream's timetable: the
choices decode side by side, as a server batches them. Nothing here sleeps or does I/O.
"""

from __future__ import annotations

import hashlib
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
    """The answer's pieces (one per output token: text, or tool arguments) and how it ends;
    with `logprobs` asked for, a text answer's log probability per piece."""

    pieces: tuple[str, ...]
    tool_call: ToolCall | None
    finish_reason: FinishReason
    logprobs: tuple[content.TokenLogprob, ...] | None = None
    stop_sequence: str | None = None  # the request's stop string the text ended before


@dataclass(frozen=True)
class Plan:
    """The answers of the request's choices (one, or `n`) with their timetable: chunk i is sent
    `ttft_s + i * tokens_per_chunk * tpot_s` after admission; a non-streaming answer after
    `ttft_s + (tokens - 1) * tpot_s`, where `tokens` is the longest choice's (the choices of
    `n > 1` decode together)."""

    answers: tuple[Answer, ...]
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    tpot_s: float
    tokens_per_chunk: int
    cut_after: int | None
    cut_mode: CutMode

    @property
    def answer(self) -> Answer:
        """Choice 0's answer (the only one unless `n` > 1)."""
        return self.answers[0]

    @property
    def completion_tokens(self) -> int:
        """Output tokens of all choices (what usage reports and a provider bills)."""
        return sum(len(answer.pieces) for answer in self.answers)

    def chunk_pieces(self, index: int) -> slice:
        """The pieces streamed chunk `index` of a choice carries."""
        return slice(index * self.tokens_per_chunk, (index + 1) * self.tokens_per_chunk)

    def chunks(self, choice: int = 0) -> tuple[str, ...]:
        """A choice's pieces grouped `tokens_per_chunk` at a time (what each streamed chunk
        carries)."""
        k, pieces = self.tokens_per_chunk, self.answers[choice].pieces
        return tuple("".join(pieces[i : i + k]) for i in range(0, len(pieces), k))

    def steps(self) -> tuple[tuple[tuple[int, str], ...], ...]:
        """What each decoding step streams: `(choice, text)` for every choice with a chunk at
        that step (a choice that ended sends nothing more)."""
        per_choice = [self.chunks(choice) for choice in range(len(self.answers))]
        longest = max(len(chunks) for chunks in per_choice)
        return tuple(tuple((choice, chunks[step]) for choice, chunks in enumerate(per_choice)
                           if step < len(chunks))
                     for step in range(longest))

    def chunk_time_s(self, index: int) -> float:
        return self.ttft_s + index * self.tokens_per_chunk * self.tpot_s

    @property
    def total_s(self) -> float:
        longest = max(len(answer.pieces) for answer in self.answers)
        return self.ttft_s + max(0, longest - 1) * self.tpot_s


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


def _within(pieces: tuple[str, ...], limit: int | None) -> tuple[tuple[str, ...], bool]:
    """`pieces` cut at `max_tokens` (`limit`, at least one piece kept), and whether they were."""
    if limit is not None and len(pieces) > limit:
        return pieces[: max(limit, 1)], True
    return pieces, False


def _tool_answer(tool: ToolSpec, key: bytes, rng: HashRandom, limit: int | None) -> Answer:
    """A function call; past `max_tokens` (`limit`) its arguments are cut there and it ends
    with `length`, as a provider's do (not valid JSON then): it came whole until 2026-12-05."""
    pieces, cut = _within(content.split_pieces(content.tool_arguments(tool.parameters_json,
                                                                      rng)), limit)
    call = ToolCall(id_hex=key.hex()[:24], name=tool.name, arguments="".join(pieces))
    return Answer(pieces, call, "length" if cut else "tool_calls")


def _json_answer(schema_json: str, rng: HashRandom, limit: int | None) -> Answer:
    """A JSON mode's answer: an object of the schema as the text, cut at `max_tokens` (`limit`)
    with `length` (no longer valid JSON then, as a provider's)."""
    pieces, cut = _within(content.split_pieces(content.tool_arguments(schema_json, rng)), limit)
    return Answer(pieces, None, "length" if cut else "stop")


def _custom_tool_answer(tool: ToolSpec, key: bytes, text: Answer) -> Answer:
    """A custom tool called with the text answer as its input (cut alike, so `length` stays)."""
    call = ToolCall(key.hex()[:24], tool.name, "".join(text.pieces), kind="custom")
    finish: FinishReason = "length" if text.finish_reason == "length" else "tool_calls"
    return Answer(text.pieces, call, finish)


def _text_pieces(request: SimRequest, profile: ModelProfile, rng: HashRandom, choice: int
                 ) -> tuple[str, ...]:
    expected = expected_answer(request)
    if expected is None:
        return content.filler_pieces(rng, sampling.draw_output_tokens(profile, rng))
    salt = b"accuracy" if choice == 0 else b"accuracy:%d" % choice
    if unit_draw(prompt_key(request), salt) < profile.accuracy:
        return content.split_pieces(expected)
    return content.split_pieces(content.wrong_answer(expected, rng))


def choice_key(request: SimRequest, choice: int) -> bytes:
    """The seed of one choice's answer: the request's content key, salted for choices past 0."""
    key = content_key(request)
    if choice == 0:
        return key
    return hashlib.blake2b(key + b"choice:%d" % choice, digest_size=16).digest()


def build_answer(request: SimRequest, profile: ModelProfile, choice: int = 0) -> Answer:
    """The deterministic answer to a request under a profile (its `choice`-th, of `n`)."""
    key = choice_key(request, choice)
    rng = HashRandom(key)
    tool = _chosen_tool(request)
    if tool is not None and tool.kind == "function":
        return _tool_answer(tool, key, rng, request.max_tokens)
    if tool is None and request.json_schema is not None:
        return _json_answer(request.json_schema, rng, request.max_tokens)
    text = _text_answer(request, profile, rng, choice)
    if tool is not None:
        return _custom_tool_answer(tool, key, text)
    if not request.logprobs:
        return text
    probabilities = content.token_logprobs(text.pieces, HashRandom(key + b"logprobs"),
                                           request.top_logprobs)
    return Answer(text.pieces, None, text.finish_reason, probabilities)


def build_answers(request: SimRequest, profile: ModelProfile) -> tuple[Answer, ...]:
    """The answers of all the request's choices (`n`), in index order."""
    return tuple(build_answer(request, profile, choice) for choice in range(request.choices))


def _text_answer(request: SimRequest, profile: ModelProfile, rng: HashRandom, choice: int
                 ) -> Answer:
    drawn = _text_pieces(request, profile, rng, choice)
    pieces, cut = _within(content.truncate_at_stop(drawn, request.stop), request.max_tokens)
    if cut:
        return Answer(pieces, None, "length")
    return Answer(pieces if pieces else ("",), None, "stop",
                  stop_sequence=content.stop_found(drawn, request.stop))


def build_plan(
    answers: tuple[Answer, ...],
    profile: ModelProfile,
    rng: sampling.Rng,
    prompt_tokens: int,
    cached_tokens: int,
) -> Plan:
    """Draw TTFT, TPOT and a possible cut for an admitted request (latency RNG, not content)
    answered by `answers` (`build_answers`: one per choice)."""
    base = sampling.draw_base_ttft_ms(profile, rng)
    ttft = sampling.ttft_ms(base, profile, prompt_tokens, prefix_hit=cached_tokens > 0)
    tpot = sampling.draw_tpot_ms(profile, rng)
    cut = sampling.draw_cut(profile, rng)
    return Plan(
        answers=answers,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        ttft_s=ttft / 1000.0,
        tpot_s=tpot / 1000.0,
        tokens_per_chunk=profile.tokens_per_chunk,
        cut_after=profile.cut_after_chunks if cut else None,
        cut_mode=profile.cut_mode,
    )
