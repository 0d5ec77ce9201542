"""Fast pass-through adapter for OpenAI-compatible upstreams (vLLM, SGLang, OpenAI, ...).

One pooled HTTP/1.1 client (`router.providers.http1`) for all deployments. Non-streaming bodies
go back to the client as the exact bytes the upstream sent; streamed chunks are forwarded as the
upstream's own JSON payloads, parsed once only to see whether they carry content or usage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from functools import lru_cache
from typing import Any

import orjson

from router.execution import late_timers
from router.providers import lone_surrogates
from router.providers.base import (
    Completion,
    StreamEvent,
    UpstreamCall,
    Usage,
    chunk_event,
    not_an_event_stream,
    with_usage,
)
from router.providers.error_text import without_key
from router.providers.exception_mapping import map_exception
from router.providers.http1 import (
    Http1Client,
    LineSplitter,
    Response,
    ResponseBroken,
    Target,
    request_head,
)
from router.providers.upstream_answers import (
    from_body,
    not_a_completion,
    not_a_stream,
    retry_after_of,
    stream_error_event,
)

_DATA = b"data:"
_EVENT = b"event:"
DEFAULT_API_BASE = "https://api.openai.com/v1"


@lru_cache(maxsize=256)
def _target(api_base: str) -> Target:
    return Target.of(f"{api_base}/chat/completions")


class PassthroughProvider:
    """`Provider` over plain HTTP to `{api_base}/chat/completions`."""

    def __init__(self, max_connections: int = 1000) -> None:
        self._client = Http1Client(max_connections_per_origin=max_connections)

    async def aclose(self) -> None:
        await self._client.aclose()

    @staticmethod
    def _request(call: UpstreamCall, stream: bool) -> tuple[Target, bytes, bytes]:
        deployment = call.deployment
        body: dict[str, Any] = dict(call.body)
        body["model"] = deployment.upstream_model
        if stream:
            body["stream"] = True
            body["stream_options"] = with_usage(body.get("stream_options"))
        else:
            body.pop("stream_options", None)  # OpenAI refuses it without `stream`
        headers = {"content-type": "application/json", **call.headers}
        if deployment.api_key:
            headers["authorization"] = f"Bearer {deployment.api_key}"
        target = _target(deployment.api_base or DEFAULT_API_BASE)
        data = orjson.dumps(body)
        return target, request_head(target, headers, len(data)), data

    async def _post(self, call: UpstreamCall, stream: bool) -> Response:
        target, head, data = self._request(call, stream)
        response = await self._client.post(target, head, data,
                                           call.deployment.connect_timeout_s,
                                           resendable=not call.side_effecting)
        if response.status >= 400:
            raise _status_error(response.status, await response.read(), response.headers)
        return response

    async def complete(self, call: UpstreamCall) -> Completion:
        try:
            async with late_timers.timeout(call.timeout_s):
                raw = await (await self._post(call, stream=False)).read()
        except Exception as exc:
            raise without_key(map_exception(exc), call.deployment.api_key) from exc
        return _completion_of(raw)

    async def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]:
        # The deadline bounds each wait inside this generator, never a span that holds a
        # `yield`: a timeout armed across a yield would fire in the consumer's code instead.
        deadline = asyncio.get_running_loop().time() + call.timeout_s
        try:
            async with late_timers.timeout_at(deadline):
                response = await self._post(call, stream=True)
            chunks = response.chunks(deadline)
            try:
                if not_an_event_stream(response.headers.get("content-type")):
                    raise not_a_stream()  # an HTML page, say: never read as a stream that ended
                async for event in _sse_events(chunks, _choices(call.body.get("n"))):
                    yield event
                response.finish()  # `[DONE]` came: the connection is reused once the body ends
            finally:
                # Closed here, not left suspended at `[DONE]` for the event loop's finaliser
                # (a task of its own, scheduled through the thread-safe wake-up); an answer
                # left before it was finished closes its connection.
                await chunks.aclose()
                response.close()
        except Exception as exc:
            raise without_key(map_exception(exc), call.deployment.api_key) from exc


def _choices(n: object) -> int:
    """How many choices the request asked for (`n`, 1 when absent)."""
    return n if isinstance(n, int) and n > 1 else 1


async def _sse_events(chunks: AsyncIterator[bytes], choices: int = 1
                      ) -> AsyncIterator[StreamEvent]:
    """Upstream SSE body chunks → events; a stream whose body ends before `[DONE]` is an error
    unless each of its `choices` got its finish reason (some OpenAI-compatible servers never send
    `[DONE]`: their answers are whole, and counting each as a broken stream would take the
    deployment out; but with `n > 1` one choice's finish reason says nothing of the others').
    The data of an `event: error` is the upstream's error, whatever its shape. An event's data
    may span several `data:` lines (SSE joins them): a line that is not whole JSON is joined with
    the next one, with a space (JSON's whitespace, so the chunk stays one line to relay).

    Splits the lines itself instead of reading them from `http1.lines`: every event passes one
    generator fewer between the socket and the client, and the blank line that ends each
    event is dropped here instead of yielded."""
    splitter = LineSplitter()
    partial = b""
    ended = error_next = begun = False  # begun: content came (an error after it is a cut)
    finished = 0
    while not ended:
        chunk = await anext(chunks, None)
        if chunk is None:  # the body ended: a last line without its line feed counts too
            ended, done = True, [splitter.rest()]
        else:
            done = splitter.feed(chunk)
        for line in done:
            if partial:
                line, partial = _continued(partial, line), b""
            if error_next and line.startswith(_DATA):
                raise stream_error_event(line[len(_DATA):].strip(), before_content=not begun)
            try:
                event = _event_of(line)
            except _NotWhole as exc:  # its JSON may go on in the event's next `data:` line
                partial = exc.payload
                continue
            except _ErrorEvent as exc:
                raise stream_error_event(exc.payload, before_content=not begun) from None
            if event is _DONE:
                return
            if event is not None:
                finished += event.finished
                begun = begun or event.has_content
                yield event
            elif line.startswith(_EVENT):
                # `event: error`: its data is the upstream's error in whatever shape (OpenAI's
                # Responses API sends `{"type": "error", "message": …}`, no `error` field), never
                # a chunk to relay
                error_next = line[len(_EVENT):].strip() == b"error"
    if partial:  # the body ended inside an event's data
        raise ResponseBroken("malformed chunk from upstream")
    if finished < choices:
        raise ResponseBroken("upstream stream ended before [DONE]")


_DONE = StreamEvent(data=b"[DONE]", has_content=False)  # the end marker, never relayed


class _NotWhole(ResponseBroken):
    """A `data:` line whose payload is not JSON (yet: the event's next data line may end it)."""

    def __init__(self, payload: bytes) -> None:
        super().__init__("malformed chunk from upstream")
        self.payload = payload


class _ErrorEvent(Exception):
    """A `data:` line whose payload is an `{"error": ...}` object: `_sse_events` says what it
    is, knowing whether content came before it (`stream_error_event`)."""

    def __init__(self, payload: bytes) -> None:
        super().__init__("error event")
        self.payload = payload


def _continued(partial: bytes, line: bytes) -> bytes:
    """The data line that continues `partial` (the payload of the data line before it) joined to
    it; any other line (the event's end) leaves `partial` malformed."""
    if not line.startswith(_DATA):
        raise ResponseBroken("malformed chunk from upstream")
    return _DATA + partial + b" " + line[len(_DATA):]


def _event_of(line: bytes) -> StreamEvent | None:
    """One SSE line: its event, `_DONE`, or None for a line that carries no data."""
    if not line.startswith(_DATA):
        return None
    payload = line[len(_DATA):].strip()
    if payload == b"[DONE]":
        return _DONE
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        fixed = lone_surrogates.repaired(payload)  # half an emoji: relayed well-formed
        if fixed is None:
            raise _NotWhole(payload) from exc
        chunk, payload = fixed
    if not isinstance(chunk, dict):
        raise ResponseBroken("upstream chunk is not a JSON object")
    if "error" in chunk and "choices" not in chunk:
        raise _ErrorEvent(payload)
    return chunk_event(payload, chunk)


def _status_error(status: int, raw: bytes, headers: Mapping[str, str]) -> Exception:
    return from_body(status, raw, retry_after_of(headers))


def _completion_of(raw: bytes) -> Completion:
    """A chat.completion body and its usage (relayed as it came, unless it held half an emoji:
    then well-formed); a body that is not one is an upstream error."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        fixed = lone_surrogates.repaired(raw)
        parsed, raw = fixed if fixed is not None else (None, raw)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
        raise not_a_completion()
    return Completion(body=raw, usage=Usage.from_openai(parsed.get("usage")))
