"""`POST /v1/chat/completions`: the HTTP side of one request, streaming or not.

Reads and validates the body, admits the request (priority, tenant share, bounded queue),
honours an `Idempotency-Key`, asks the pipeline for a plan, runs it while watching the client
(a disconnect cancels the upstream call), and writes the answer with slorouter's headers. The
outcome is recorded exactly once, also for errors and disconnects: after the answer is sent
(a background step of the response), so the client never waits for statistics or telemetry.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from cache.assemble import StreamAssembler
from cache.entry import CachedEntry
from router.admission import AdmissionController, parse_priority
from router.api import idempotent
from router.api.errors import as_project_error, error_event, error_response
from router.api.replay import body_response
from router.api.schemas import ChatCompletionRequest
from router.api.sse import ClientGone, WatchedStreamingResponse, run_unless_disconnected
from router.auth import authenticate
from router.caching import CachePlan, ResultCaching
from router.errors import PayloadTooLargeError, RequestError, SlorouterError
from router.execution.deadline import requested_timeout_s
from router.execution.runner import CommittedStream, close_quietly
from router.idempotency import IdempotencyStore, Replay
from router.outcomes import Outcome, OutcomeSink
from router.pipeline import Caller, ChatPipeline, Prepared
from router.telemetry.context import TraceContext, current_trace

Tracer = Callable[[str | None, str | None], TraceContext]

CLIENT_CLOSED = 499  # nginx's convention for "client closed the request"
# Above this many prompt characters classification runs in a worker thread. Measured with
# `python -m bench.loop_stalls --offload-chars N` (docs/classifier.md, "Event-loop stalls"):
# at 16k characters (0.3-0.4 ms p50 inline) a thread left the count of > 5 ms loop stalls the
# same and doubled the request's own classify p99; at 64k characters it cut them (5 vs 8 per
# 10 s, max 6-11 vs 14-18 ms), so only longer prompts leave the loop.
OFFLOAD_PROMPT_CHARS = 32_000


async def read_json(request: Request, max_bytes: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"request body over the {max_bytes}-byte limit",
                                   code="payload_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_bytes:
            raise PayloadTooLargeError(f"request body over the {max_bytes}-byte limit",
                                       code="payload_too_large")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"could not parse the JSON body: {exc.msg} at position {exc.pos}",
                           code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise RequestError("the JSON body must be an object", code="invalid_json")
    return parsed


def received_headers(request: Request) -> dict[str, str]:
    """The request's headers as a plain dict (lower-case names; the first of repeated ones wins):
    a request reads a dozen of them, and each read of Starlette's `Headers` scans the list."""
    return {name.decode("latin-1"): value.decode("latin-1")
            for name, value in reversed(request.scope["headers"])}


def parse_chat(raw: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RequestError(f"invalid request: {param}: {first['msg']}{more}", param=param,
                           code="invalid_value") from None


class _Remaining:
    """The time left before a perf_counter deadline (what admission waits at most)."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def remaining(self) -> float:
        return self._deadline - time.perf_counter()


class RequestIds:
    """Unique request ids without a system call per request: a random prefix per handler (so
    per process) and a counter."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"


class ChatHandler:
    def __init__(self, pipeline: ChatPipeline, sink: OutcomeSink,
                 admission: AdmissionController, idempotency: IdempotencyStore,
                 caching: ResultCaching, tracer: Tracer | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._pipeline = pipeline
        self._sink = sink
        self._admission = admission
        self._idempotency = idempotency
        self._caching = caching
        self._tracer = tracer
        self._clock = clock
        self._ids = RequestIds()

    async def handle(self, request: Request) -> Response:
        arrived = self._clock()
        received = received_headers(request)
        request_id = received.get("x-request-id") or self._ids.next()
        outcome = Outcome(request_id=request_id, tenant="", requested_model="", stream=False,
                          arrived_at=arrived)
        headers = {"x-request-id": request_id}
        if self._tracer is not None:
            outcome.trace = self._tracer(received.get("traceparent"),
                                         received.get("tracestate"))
            current_trace.set(outcome.trace)
        held = contextlib.AsyncExitStack()
        response: Response | None = None
        try:
            response = await self._respond(request, received, outcome, headers, held)
        except ClientGone:
            outcome.client_disconnected, outcome.status = True, CLIENT_CLOSED
            response = Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            err = as_project_error(exc)
            outcome.status, outcome.error_type = err.status_code, type(err).__name__
            response = error_response(err, headers)
        finally:
            if not isinstance(response, WatchedStreamingResponse):  # streams record at their end
                await held.aclose()
                outcome.ended_at = self._clock()
                if response is None:  # cancelled: nothing will be sent
                    self._sink.record(outcome)
                else:  # recorded once the answer is on its way, not before
                    after_sending(response, self._record, outcome)
        return response

    async def _record(self, outcome: Outcome) -> None:
        self._sink.record(outcome)

    async def _respond(self, request: Request, received: Mapping[str, str], outcome: Outcome,
                       headers: dict[str, str], held: contextlib.AsyncExitStack) -> Response:
        config = self._pipeline.config
        principal = authenticate(received.get("authorization"), config.principals)
        outcome.tenant = principal.tenant
        outcome.steps.append(("auth", outcome.arrived_at, self._clock()))
        raw = await read_json(request, config.max_body_bytes)
        chat = parse_chat(raw)
        outcome.requested_model, outcome.stream = chat.model, chat.stream
        client_s = requested_timeout_s(received)
        budget = min(config.request_timeout_s, client_s) if client_s else config.request_timeout_s
        deadline = outcome.arrived_at + budget
        queued_at = self._clock()
        ticket = await held.enter_async_context(self._admission.admit(
            principal.tenant, parse_priority(received.get("x-slorouter-priority")),
            _Remaining(deadline)))
        outcome.queue_s = ticket.queue_time_s
        outcome.steps.append(("admission", queued_at, self._clock()))
        metadata = chat.metadata if chat.metadata is not None else {}
        caller = Caller(principal.tenant, outcome.request_id, chat.user,
                        received.get("x-slorouter-session", metadata.get("session_id")))
        started = self._clock()
        prepared = await self._prepare(chat, raw, received, deadline, caller)
        prepared.plan = replace(prepared.plan, trace=outcome.trace)
        classified = started + prepared.phases.classify
        outcome.steps += [("classify", started, classified),
                          ("decide", classified, classified + prepared.phases.decide)]
        _note_decision(outcome, prepared, headers)
        claimed = await idempotent.claim(
            self._idempotency, received, principal.tenant, raw,
            prepared.policy_requires_key, wait_s=max(0.0, deadline - self._clock()),
            lease_s=budget)
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        if isinstance(claimed, Replay):
            return idempotent.replayed(claimed.response, chat.stream, include_usage, headers)
        looked_up = self._clock()
        cache_plan = self._caching.plan(prepared, principal, received, raw)
        found = await self._caching.lookup(cache_plan, prepared)
        outcome.steps.append(("cache", looked_up, self._clock()))
        outcome.cache = headers["x-slorouter-cache"] = found.status
        if found.entry is not None:
            return self._from_cache(found.entry, prepared, outcome, headers, include_usage)
        finish = _Finish(claimed, self._caching, cache_plan, headers)
        if chat.stream:
            return await self._stream(request, prepared, outcome, headers, held, finish,
                                      include_usage)
        try:
            response = await self._complete(request, prepared, outcome, headers)
        except BaseException as exc:
            await finish.failed(exc)
            raise
        await finish.succeeded(bytes(response.body), outcome)
        return response

    def _from_cache(self, entry: CachedEntry, prepared: Prepared, outcome: Outcome,
                    headers: dict[str, str], include_usage: bool) -> Response:
        now = self._clock()
        headers["x-slorouter-model"] = entry.deployment or entry.versions.model
        outcome.first_content_at = now
        headers["server-timing"] = prepared.phases.header(None, now - outcome.arrived_at)
        return body_response(entry.body, stream=prepared.request.stream,
                             include_usage=include_usage, headers=headers)

    async def _prepare(self, chat: ChatCompletionRequest, raw: dict[str, Any],
                       headers: Any, deadline: float, caller: Caller) -> Prepared:
        """Classify and decide; very long prompts off the event loop so it never stalls."""
        size = sum(len(m.text()) for m in chat.messages)
        if size <= OFFLOAD_PROMPT_CHARS:
            return self._pipeline.prepare(chat, raw, headers, deadline, caller)
        return await asyncio.to_thread(self._pipeline.prepare, chat, raw, headers, deadline,
                                       caller)

    async def _complete(self, request: Request, prepared: Prepared, outcome: Outcome,
                        headers: dict[str, str]) -> Response:
        deployment, completion = await run_unless_disconnected(
            request.receive, self._pipeline.complete(prepared, outcome))
        now = self._clock()
        outcome.deployment, outcome.first_content_at = deployment.name, now
        if completion.usage is not None:
            outcome.prompt_tokens = completion.usage.prompt_tokens
            outcome.completion_tokens = completion.usage.completion_tokens
            outcome.cached_tokens = completion.usage.cached_tokens
            outcome.cost_usd = deployment.cost_usd(completion.usage.prompt_tokens,
                                                   completion.usage.completion_tokens,
                                                   completion.usage.cached_tokens)
        headers["x-slorouter-model"] = deployment.name
        headers["server-timing"] = prepared.phases.header(
            outcome.attempts[-1].ttft_s if outcome.attempts else None, now - outcome.arrived_at)
        return Response(completion.body, media_type="application/json", headers=headers)

    async def _stream(self, request: Request, prepared: Prepared, outcome: Outcome,
                      headers: dict[str, str], held: contextlib.AsyncExitStack,
                      settle: _Finish, include_usage: bool) -> Response:
        try:
            committed = await run_unless_disconnected(
                request.receive, self._pipeline.open_stream(prepared, outcome))
        except BaseException as exc:
            await settle.failed(exc)
            raise
        outcome.deployment = committed.deployment.name
        outcome.first_content_at = self._clock()
        headers["x-slorouter-model"] = committed.deployment.name
        winner = next((a for a in outcome.attempts if a.outcome == "won"), None)
        headers["server-timing"] = prepared.phases.header(winner.ttft_s if winner else None, None)
        headers["cache-control"] = "no-cache"
        state = _StreamState(StreamAssembler() if settle.wants_body else None)
        chunks = self._sse(committed, outcome, include_usage, state, settle)

        async def finish(client_gone: bool) -> None:
            await close_quietly(committed.tail)
            committed.release()
            outcome.client_disconnected = client_gone
            self._finish_stream(committed, outcome, state.content_events)
            if not state.clean_end:
                await settle.failed(state.error)
            await held.aclose()

        return WatchedStreamingResponse(chunks, headers, on_finish=finish)

    async def _sse(self, committed: CommittedStream, outcome: Outcome, include_usage: bool,
                   state: _StreamState, settle: _Finish) -> AsyncIterator[bytes]:
        try:
            for stream in (_iterate(committed.head), committed.tail):
                async for event in stream:
                    self._observe(event, outcome, state)
                    if event.usage_only and not include_usage:
                        continue
                    yield b"data: " + event.data + b"\n\n"
            state.clean_end = True
            # Settled before [DONE], as a whole answer is stored before it is sent: a client
            # that repeats the request once it has read the stream's end finds the entry. The
            # answer is whole, so a client leaving now does not stop it being kept.
            body = state.assembler.completion_body() if state.assembler is not None else None
            await asyncio.shield(settle.succeeded(body, outcome))
            yield b"data: [DONE]\n\n"
        except SlorouterError as exc:
            state.error = exc
            outcome.status, outcome.error_type = exc.status_code, type(exc).__name__
            yield error_event(exc)
        except Exception as exc:  # a bug: recorded as one; the response sends an error event
            state.error = exc
            outcome.status, outcome.error_type = 500, type(exc).__name__
            raise

    def _observe(self, event: Any, outcome: Outcome, state: _StreamState) -> None:
        if event.has_content:
            now = self._clock()
            outcome.first_token_at = outcome.first_token_at or now
            outcome.last_token_at = now
            state.content_events += 1
        if event.usage is not None:
            outcome.prompt_tokens = event.usage.prompt_tokens
            outcome.completion_tokens = event.usage.completion_tokens
            outcome.cached_tokens = event.usage.cached_tokens
        if state.assembler is not None:
            state.assembler.add(orjson.loads(event.data))

    def _finish_stream(self, committed: CommittedStream, outcome: Outcome,
                       content_events: int) -> None:
        outcome.ended_at = self._clock()
        if outcome.completion_tokens is None:
            outcome.completion_tokens = content_events
        if outcome.prompt_tokens is not None:
            outcome.cost_usd = committed.deployment.cost_usd(
                outcome.prompt_tokens, outcome.completion_tokens, outcome.cached_tokens or 0)
        if outcome.client_disconnected:
            outcome.status = CLIENT_CLOSED
        self._sink.record(outcome)


class _Finish:
    """After an upstream answer: store it for idempotent duplicates and in the result cache."""

    def __init__(self, claimed: idempotent.Claimed | None, caching: ResultCaching,
                 plan: CachePlan, headers: dict[str, str]) -> None:
        self._claimed = claimed
        self._caching = caching
        self._plan = plan
        self._headers = headers

    @property
    def wants_body(self) -> bool:
        return self._claimed is not None or self._plan.decision.write

    async def succeeded(self, body: bytes | None, outcome: Outcome) -> None:
        """`body` is None when nothing wants it (no idempotency claim, no cache write)."""
        self._caching.note_prefix(outcome.cached_tokens)
        if body is None:
            return
        if self._claimed is not None:
            await self._claimed.succeeded(body, self._headers)
        generation = (outcome.ended_at if outcome.ended_at is not None
                      else time.perf_counter()) - outcome.arrived_at
        await self._caching.store(self._plan, body, generation, outcome.deployment or "")

    async def failed(self, error: BaseException | None) -> None:
        if self._claimed is not None:
            await self._claimed.failed(error)


class _StreamState:
    __slots__ = ("assembler", "clean_end", "content_events", "error")

    def __init__(self, assembler: StreamAssembler | None) -> None:
        self.assembler = assembler
        self.content_events = 0
        self.clean_end = False
        self.error: BaseException | None = None


def _note_decision(outcome: Outcome, prepared: Prepared, headers: dict[str, str]) -> None:
    outcome.task, outcome.risk = prepared.labels.task, prepared.labels.risk
    outcome.model = prepared.decision.model
    outcome.policy_version = prepared.decision.policy_version
    outcome.explored = prepared.decision.explored
    if prepared.assignment is not None:
        outcome.experiment, outcome.arm = prepared.assignment.experiment, prepared.assignment.arm
        outcome.arm_degraded = (prepared.assignment.route.startswith("model:")
                                and not prepared.decision.restricted)
        # A degraded arm (its route could not serve; control's did) is named apart, so no
        # answer labelled with an arm comes from another arm's route.
        label = f"{outcome.experiment}/{outcome.arm}"
        headers["x-slorouter-arm-degraded" if outcome.arm_degraded else "x-slorouter-arm"] = label
    headers.update({
        "x-slorouter-task": prepared.labels.task,
        "x-slorouter-risk": prepared.labels.risk,
        "x-slorouter-policy": prepared.decision.policy_version,
        "x-slorouter-cache": outcome.cache,
    })


def after_sending(response: Response, work: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run `work(*args)` once `response` has been sent (after any work already attached)."""
    before = response.background

    async def run() -> None:
        if before is not None:
            await before()
        await work(*args)

    response.background = BackgroundTask(run)


async def _iterate(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item
