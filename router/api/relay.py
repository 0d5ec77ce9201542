"""One committed upstream stream relayed to the client as SSE, then settled and recorded.

`chunks()` yields the upstream events as `data:` lines (the usage-only chunk only when the client
asked for it), observes token times and usage on the way, and assembles the whole answer when
the cache or an idempotency claim wants it. A clean end is settled (stored) before
`data: [DONE]`; an upstream error mid-stream ends with an OpenAI error event. `finish()` runs
after the last byte, the client's departure or the router's own end of the stream (a shutdown
whose grace is over): it closes the upstream, releases its in-flight slot, records the outcome
and releases the claim of an answer that did not end cleanly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

import orjson

from cache.assemble import StreamAssembler
from cache.replay import DONE
from router.api.errors import error_event
from router.api.settle import Settle
from router.errors import SlorouterError
from router.execution.events import close_quietly
from router.execution.plan import CommittedStream
from router.outcomes import CLIENT_CLOSED, Outcome, answer_messages
from router.providers.base import StreamEvent


class ChoiceChunks:
    """Per choice of a stream of `n` > 1, the content chunks that carried it, however the
    provider packs them (one choice a chunk, or every choice in each: Gemini's candidates
    through litellm, which counted for the last index only read TPOT `n` times too fast)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def add(self, indexes: Iterable[int]) -> None:
        for index in indexes:
            self._counts[index] = self._counts.get(index, 0) + 1

    def longest_share(self) -> float | None:
        """The longest choice's share of the choices' content chunks (None before any)."""
        if not self._counts:
            return None
        return max(self._counts.values()) / sum(self._counts.values())


class StreamRelay:
    """The SSE side of one streamed answer (one instance per request)."""

    __slots__ = ("_assembler", "_capture", "_clean_end", "_clock", "_committed", "_content_events",
                 "_error", "_idle_s", "_outcome", "_per_choice", "_prompt_estimate", "_record",
                 "_settle", "_written_1h_tokens", "_written_tokens")

    def __init__(self, committed: CommittedStream, outcome: Outcome, settle: Settle,
                 record: Callable[[Outcome], None], clock: Callable[[], float],
                 prompt_estimate: int, capture: bool = False) -> None:
        """`prompt_estimate`: the router's count of the prompt's tokens, which prices a stream
        that ended before the provider reported its usage."""
        self._committed = committed
        self._prompt_estimate = prompt_estimate
        self._outcome = outcome
        self._settle = settle
        self._record = record
        self._clock = clock
        self._capture = capture  # the tenant opted in to content capture
        self._assembler = StreamAssembler() if settle.wants_body or capture else None
        self._content_events = 0
        self._per_choice = ChoiceChunks() if outcome.choices > 1 else None
        self._written_tokens = 0  # prompt tokens the provider wrote into its prompt cache
        self._written_1h_tokens = 0  # ... of them, for an hour
        self._clean_end = False
        self._error: BaseException | None = None
        self._idle_s: float | None = None  # since the last content chunk, when it broke

    async def chunks(self, include_usage: bool) -> AsyncIterator[bytes]:
        outcome = self._outcome
        # A finish or usage chunk carries nothing of the answer: it waits for the next line (at
        # the end, `[DONE]`, which ends the body in the same write), so a stream's end is one
        # write where it was up to four (finish, usage, `[DONE]`, the body's end).
        held = b""
        try:
            # What came before the stream was committed (a role chunk, then the first content)
            # goes out in one write: one segment before the client's first token, where one
            # write per event cost the router a send (a system call) on that token's path and
            # could wake the client for a chunk without content first.
            head = b"".join([self._line(event, include_usage) for event in self._committed.head])
            if head:
                yield head
            async for event in self._committed.tail:
                line = self._line(event, include_usage)
                if not line:
                    continue
                if not event.has_content and (event.finished or event.usage is not None):
                    held += line
                else:
                    yield held + line
                    held = b""
            self._clean_end = True
            # Settled before [DONE], as a whole answer is stored before it is sent: a client
            # that repeats the request once it has read the stream's end finds the entry. The
            # answer is whole, so a client leaving now does not stop it being kept.
            assembler = self._assembler
            body = assembler.completion_body() if assembler is not None else None
            if self._capture and body is not None:
                outcome.captured_output = answer_messages(body)
            await asyncio.shield(self._settle.succeeded(body, outcome))
            yield held + DONE
        except SlorouterError as raised:
            last = outcome.last_token_at
            if last is not None:  # a timeout cut it still writing, or stalled (the runner's)
                self._idle_s = self._clock() - last
            exc = self._error = self._committed.ended_by(raised)
            outcome.status, outcome.error_type = exc.status_code, type(exc).__name__
            outcome.error_code = exc.code
            yield held + error_event(exc)
        except Exception as exc:  # a bug: recorded as one; the response sends an error event
            self._error = exc
            outcome.status, outcome.error_type = 500, type(exc).__name__
            outcome.error_code = "internal_error"
            raise

    def _line(self, event: StreamEvent, include_usage: bool) -> bytes:
        """`event` observed, as the SSE line its client gets (nothing for a usage-only chunk
        the client did not ask for)."""
        self._observe(event)
        data = event.data
        # by the chunk's own `usage`, not the parsed one: a report of no tokens (read as none)
        # reached clients that had not asked for usage, as a `choices: []` chunk
        if event.reports_usage and not include_usage:
            if event.usage_only:
                return b""
            data = _without_usage(data)  # usage on a content or finish chunk
        return b"data: " + data + b"\n\n"

    def _observe(self, event: StreamEvent) -> None:
        outcome = self._outcome
        if event.has_content:
            now = self._clock()
            outcome.first_token_at = outcome.first_token_at or now
            outcome.last_token_at = now
            self._content_events += 1
            if self._per_choice is not None:
                self._per_choice.add(event.content_indexes)
        if event.usage is not None:
            winner = outcome.winner
            if winner is not None:  # the answering attempt's usage, for its span
                winner.usage = event.usage
            outcome.prompt_tokens = event.usage.prompt_tokens
            outcome.completion_tokens = event.usage.completion_tokens
            outcome.cached_tokens = event.usage.cached_tokens
            self._written_tokens = event.usage.cache_write_tokens
            self._written_1h_tokens = event.usage.cache_write_1h_tokens
        if self._assembler is not None:
            self._assembler.add(orjson.loads(event.data))

    async def finish(self, client_gone: bool, ended_by: SlorouterError | None = None) -> None:
        """`ended_by`: the error the router ended the stream with itself (e.g. shutting down)."""
        committed, outcome = self._committed, self._outcome
        try:
            await close_quietly(committed.tail)
        finally:  # also when cancelled while closing: an unreleased attempt stays in flight
            if self._clean_end:
                committed.release()
            elif isinstance(self._error, SlorouterError) and not client_gone:
                # the upstream broke after it had started
                committed.release(self._error, idle_s=self._idle_s)
            else:
                committed.release(abandoned=True)
        outcome.client_disconnected = client_gone
        outcome.ended_at = self._clock()
        if outcome.completion_tokens is None:
            outcome.completion_tokens = self._content_events
            outcome.chunks_counted = True
        if self._per_choice is not None:
            outcome.longest_choice_share = self._per_choice.longest_share()
        # Billed whether or not the usage came: without it, priced from the estimates (the
        # token counts reported stay the provider's: `prompt_tokens` is left unset).
        prompt = outcome.prompt_tokens
        outcome.cost_estimated = prompt is None or outcome.chunks_counted
        outcome.cost_usd = committed.deployment.cost_usd(
            prompt if prompt is not None else self._prompt_estimate, outcome.completion_tokens,
            outcome.cached_tokens or 0, self._written_tokens, self._written_1h_tokens)
        winner = outcome.winner
        if winner is not None:  # the answering attempt's share, for its span and the counter
            winner.cost_usd, winner.cost_estimated = outcome.cost_usd, outcome.cost_estimated
        if client_gone:
            outcome.status = CLIENT_CLOSED
        elif ended_by is not None and not self._clean_end:
            outcome.status, outcome.error_type = ended_by.status_code, type(ended_by).__name__
            outcome.error_code = ended_by.code
        try:  # settled first: it marks a side effect that may have run, for the record
            if not self._clean_end:
                error = self._error
                if error is None and not client_gone:
                    error = ended_by  # the router ended it itself (its shutdown)
                await self._settle.failed(error, outcome, answer_begun=True)
        finally:
            self._record(outcome)


def _without_usage(data: bytes) -> bytes:
    """A chunk without its `usage`: some upstreams put it on the finish chunk instead of a
    `choices: []` chunk of its own, and a client that did not ask for usage gets none."""
    chunk = orjson.loads(data)
    chunk.pop("usage", None)
    return orjson.dumps(chunk)
