"""`POST /v1/chat/completions`: the HTTP side of one request, streaming or not.

Reads and validates the body, asks the pipeline for a plan, runs it while watching the client
(a disconnect cancels the upstream call), and writes the answer with slorouter's headers. The
outcome is recorded exactly once, in a `finally`, also for errors and disconnects.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from router.api.errors import as_project_error, error_event, error_response
from router.api.schemas import ChatCompletionRequest
from router.api.sse import ClientGone, WatchedStreamingResponse, run_unless_disconnected
from router.auth import authenticate
from router.errors import PayloadTooLargeError, RequestError, SlorouterError
from router.execution.runner import CommittedStream, close_quietly
from router.outcomes import Outcome, OutcomeSink
from router.pipeline import ChatPipeline, Prepared

CLIENT_CLOSED = 499  # nginx's convention for "client closed the request"


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


def parse_chat(raw: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise RequestError(f"invalid request: {param}: {first['msg']}"
                           + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1
                              else ""), param=param, code="invalid_value") from None


def deadline_of(request: Request, arrived: float, default_s: float) -> float:
    """The request's deadline: the policy default, or the client's own timeout if shorter."""
    budget = default_s
    for name, scale in (("x-slorouter-timeout-ms", 1e-3), ("x-stainless-timeout", 1.0)):
        value = request.headers.get(name)
        if value is None:
            continue
        try:
            budget = min(budget, float(value) * scale)
        except ValueError:
            raise RequestError(f"{name} must be a number", param=name,
                               code="invalid_value") from None
    return arrived + budget


class ChatHandler:
    def __init__(self, pipeline: ChatPipeline, sink: OutcomeSink,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._pipeline = pipeline
        self._sink = sink
        self._clock = clock

    async def handle(self, request: Request) -> Response:
        arrived = self._clock()
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        outcome = Outcome(request_id=request_id, tenant="", requested_model="", stream=False,
                          arrived_at=arrived)
        headers = {"x-request-id": request_id}
        handed_to_stream = False
        try:
            config = self._pipeline.config
            outcome.tenant = authenticate(request.headers.get("authorization"),
                                          config.principals).tenant
            raw = await read_json(request, config.max_body_bytes)
            chat = parse_chat(raw)
            outcome.requested_model, outcome.stream = chat.model, chat.stream
            deadline = deadline_of(request, arrived, config.request_timeout_s)
            prepared = self._pipeline.prepare(chat, raw, request.headers, deadline)
            _note_decision(outcome, prepared, headers)
            if chat.stream:
                response = await self._stream(request, prepared, outcome, headers)
                handed_to_stream = True
                return response
            return await self._complete(request, prepared, outcome, headers)
        except ClientGone:
            outcome.client_disconnected, outcome.status = True, CLIENT_CLOSED
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            err = as_project_error(exc)
            outcome.status, outcome.error_type = err.status_code, type(err).__name__
            return error_response(err, headers)
        finally:
            if not handed_to_stream:
                outcome.ended_at = self._clock()
                self._sink.record(outcome)

    async def _complete(self, request: Request, prepared: Prepared, outcome: Outcome,
                        headers: dict[str, str]) -> Response:
        deployment, completion = await run_unless_disconnected(
            request.receive, self._pipeline.complete(prepared, outcome))
        now = self._clock()
        outcome.deployment, outcome.first_content_at = deployment.name, now
        if completion.usage is not None:
            outcome.prompt_tokens = completion.usage.prompt_tokens
            outcome.completion_tokens = completion.usage.completion_tokens
            outcome.cost_usd = deployment.cost_usd(completion.usage.prompt_tokens,
                                                   completion.usage.completion_tokens)
        headers["x-slorouter-model"] = deployment.name
        headers["server-timing"] = prepared.phases.header(
            outcome.attempts[-1].ttft_s, now - outcome.arrived_at)
        return Response(completion.body, media_type="application/json", headers=headers)

    async def _stream(self, request: Request, prepared: Prepared, outcome: Outcome,
                      headers: dict[str, str]) -> Response:
        committed = await run_unless_disconnected(
            request.receive, self._pipeline.open_stream(prepared, outcome))
        outcome.deployment = committed.deployment.name
        outcome.first_content_at = self._clock()
        headers["x-slorouter-model"] = committed.deployment.name
        headers["server-timing"] = prepared.phases.header(outcome.attempts[-1].ttft_s, None)
        headers["cache-control"] = "no-cache"
        options = prepared.request.stream_options
        include_usage = bool(options is not None and options.include_usage)
        counter = _ContentCounter()
        chunks = self._sse(committed, outcome, include_usage, counter)

        async def finish(client_gone: bool) -> None:
            await close_quietly(committed.tail)
            outcome.client_disconnected = client_gone
            self._finish_stream(committed, outcome, counter.events)

        return WatchedStreamingResponse(chunks, headers, on_finish=finish)

    async def _sse(self, committed: CommittedStream, outcome: Outcome, include_usage: bool,
                   counter: _ContentCounter) -> AsyncIterator[bytes]:
        try:
            for stream in (_iterate(committed.head), committed.tail):
                async for event in stream:
                    if event.has_content:
                        now = self._clock()
                        outcome.first_token_at = outcome.first_token_at or now
                        outcome.last_token_at = now
                        counter.events += 1
                    if event.usage is not None:
                        outcome.prompt_tokens = event.usage.prompt_tokens
                        outcome.completion_tokens = event.usage.completion_tokens
                    if event.usage_only and not include_usage:
                        continue
                    yield b"data: " + event.data + b"\n\n"
            yield b"data: [DONE]\n\n"
        except SlorouterError as exc:
            outcome.status, outcome.error_type = exc.status_code, type(exc).__name__
            yield error_event(exc)

    def _finish_stream(self, committed: CommittedStream, outcome: Outcome,
                       content_events: int) -> None:
        outcome.ended_at = self._clock()
        if outcome.completion_tokens is None:
            outcome.completion_tokens = content_events
        if outcome.prompt_tokens is not None:
            outcome.cost_usd = committed.deployment.cost_usd(outcome.prompt_tokens,
                                                             outcome.completion_tokens)
        if outcome.client_disconnected:
            outcome.status = CLIENT_CLOSED
        self._sink.record(outcome)


def _note_decision(outcome: Outcome, prepared: Prepared, headers: dict[str, str]) -> None:
    outcome.task, outcome.risk = prepared.labels.task, prepared.labels.risk
    outcome.model = prepared.decision.model
    outcome.policy_version = prepared.decision.policy_version
    headers.update({
        "x-slorouter-task": prepared.labels.task,
        "x-slorouter-risk": prepared.labels.risk,
        "x-slorouter-policy": prepared.decision.policy_version,
        "x-slorouter-cache": outcome.cache,
    })


class _ContentCounter:
    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events = 0


async def _iterate(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item
