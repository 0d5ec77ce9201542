"""Serving one chat request on the simulator: draw its fate, wait, and write it out.

The order for each request: resolve the model (404 when unknown), check the context window,
answer the failure a `<<fail:KIND>>` marker asks for (`echo`), draw the outcome (429/500/503
with their delay, or a hang that never answers), take a capacity slot (queueing when the model
is full), look up the prefix cache, draw the plan, then answer —
all at once after `ttft + (n-1)·tpot`, or as a stream timed chunk by chunk, possibly cut.
Counting of requests, completions, errors, hangs, cuts and cancellations happens here.
A client that goes away raises `CancelledError` (aiohttp handler cancellation) or a
connection reset; either counts one cancellation.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from aiohttp import web

from router.providers.simulator import sampling
from router.providers.simulator.echo import echo_failure
from router.providers.simulator.plan import Plan, build_answers, build_plan
from router.providers.simulator.request import SimRequest, prefix_chain, prompt_tokens
from router.providers.simulator.state import ModelRuntime, SimulatorState, UnknownModelError
from router.providers.simulator.wire import ErrorKind, ResponseMeta, Wire

JSON = "application/json"
ERROR_MESSAGES = {
    429: "Rate limit reached (simulated).",
    500: "The server had an error while processing your request (simulated).",
    503: "The server is overloaded or not ready yet (simulated).",
}
ERROR_CODES = {429: "rate_limit_exceeded", 500: "server_error", 503: "service_unavailable"}


def error_response(wire: Wire, kind: ErrorKind, headers: dict[str, str] | None = None
                   ) -> web.Response:
    """A JSON error in the wire's shape."""
    return web.Response(status=wire.status(kind), body=wire.error(kind), content_type=JSON,
                        headers=headers)


async def _sleep_until(state: SimulatorState, target: float) -> None:
    delay = target - state.clock()
    if delay > 0:
        await asyncio.sleep(delay)


async def serve(request: web.Request, state: SimulatorState, sim: SimRequest, wire: Wire
                ) -> web.StreamResponse:
    """Answer one parsed chat request, counting it against its model."""
    try:
        runtime = state.resolve(sim.model)
    except UnknownModelError:
        message = f"The model `{sim.model}` does not exist or you do not have access to it."
        return error_response(wire, ErrorKind(404, "model_not_found", message))
    runtime.stats.requests += 1
    runtime.stats.in_flight += 1
    try:
        return await _serve_model(request, state, runtime, sim, wire)
    except (asyncio.CancelledError, ConnectionResetError):
        runtime.stats.cancellations += 1
        raise
    finally:
        runtime.stats.in_flight -= 1


async def _fail(state: SimulatorState, runtime: ModelRuntime, outcome: sampling.Outcome,
                wire: Wire) -> web.Response:
    profile = runtime.profile
    await asyncio.sleep(profile.error_delay_ms / 1000.0)
    status = sampling.ERROR_STATUS[outcome]
    runtime.stats.count_error(str(status))
    headers: dict[str, str] = {}
    if status == 429:
        headers["retry-after"] = str(max(0, math.ceil(profile.retry_after_s)))
        headers["retry-after-ms"] = str(round(profile.retry_after_s * 1000))
    kind = ErrorKind(status, ERROR_CODES[status], ERROR_MESSAGES[status])
    return error_response(wire, kind, headers)


async def _serve_model(request: web.Request, state: SimulatorState, runtime: ModelRuntime,
                       sim: SimRequest, wire: Wire) -> web.StreamResponse:
    arrived = state.clock()
    profile = runtime.profile
    tokens = prompt_tokens(sim)
    window = profile.context_window
    if window is not None and tokens + (sim.max_tokens or 0) > window:
        runtime.stats.count_error("400")
        message = f"This model's maximum context length is {window} tokens; the request has " \
                  f"{tokens} prompt tokens and max_tokens {sim.max_tokens}."
        return error_response(wire, ErrorKind(400, "context_length_exceeded", message))
    most = profile.max_output_tokens
    if most is not None and sim.max_tokens is not None and sim.max_tokens > most:
        runtime.stats.count_error("400")
        message = f"max_tokens is too large: {sim.max_tokens}. This model supports at most " \
                  f"{most} completion tokens, whereas you provided {sim.max_tokens}."
        return error_response(wire, ErrorKind(400, "invalid_value", message))
    echoed = echo_failure(wire, sim)
    if echoed is not None:
        runtime.stats.count_error(str(echoed.status))
        return echoed
    outcome = sampling.draw_outcome(profile, state.rng)
    if outcome is sampling.Outcome.HANG:
        runtime.stats.hangs += 1
        await asyncio.get_running_loop().create_future()  # never resolves: the client gives up
    if outcome is not sampling.Outcome.OK:
        return await _fail(state, runtime, outcome, wire)
    answers = build_answers(sim, profile)
    await runtime.limiter.acquire()
    try:
        admitted = state.clock()
        cached = runtime.prefix_cache.lookup_and_record(
            prefix_chain(sim), profile.prefix_cache_ttl_s, profile.prefix_cache_capacity,
            profile.prefix_cache_min_tokens)
        runtime.stats.count_prefix_lookup(cached, admitted)
        plan = build_plan(answers, profile, state.rng, tokens, cached)
        job = _Job(request, state, runtime, plan, wire, admitted, _meta(state, sim.model),
                   _sim_headers(state, plan, admitted - arrived))
        if sim.stream:
            return await _stream(job, sim.include_usage)
        return await _complete(job)
    finally:
        runtime.limiter.release()


@dataclass(frozen=True)
class _Job:
    """An admitted request with its plan: everything the answer writers need."""

    request: web.Request
    state: SimulatorState
    runtime: ModelRuntime
    plan: Plan
    wire: Wire
    admitted: float
    meta: ResponseMeta
    headers: dict[str, str]


def _sim_headers(state: SimulatorState, plan: Plan, queue_s: float) -> dict[str, str]:
    return {
        "x-request-id": f"sim-{state.rng.getrandbits(64):016x}",
        "x-sim-ttft-ms": f"{plan.ttft_s * 1000:.1f}",
        "x-sim-queue-ms": f"{queue_s * 1000:.1f}",
        "x-sim-prefix-cache": "hit" if plan.cached_tokens > 0 else "miss",
        "x-sim-cached-tokens": str(plan.cached_tokens),
    }


def _meta(state: SimulatorState, model: str) -> ResponseMeta:
    return ResponseMeta(f"{state.rng.getrandbits(96):024x}", int(time.time()), model)


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def _count_done(runtime: ModelRuntime, plan: Plan) -> None:
    runtime.stats.completed += 1
    runtime.stats.prompt_tokens += plan.prompt_tokens
    runtime.stats.completion_tokens += plan.completion_tokens


async def _complete(job: _Job) -> web.StreamResponse:
    plan = job.plan
    await _sleep_until(job.state, job.admitted + plan.total_s)
    if plan.cut_after is not None:
        job.runtime.stats.cut_streams += 1
        _abort(job.request)  # the connection drops with no response at all
        return web.Response(status=499)
    body = job.wire.complete(plan, job.meta)
    _count_done(job.runtime, plan)
    return web.Response(body=body, content_type=JSON, headers=job.headers)


async def _flush(response: web.StreamResponse, pending: list[bytes]) -> None:
    if pending:
        await response.write(b"".join(pending))
        pending.clear()


async def _stream(job: _Job, include_usage: bool) -> web.StreamResponse:
    """Write the stream; chunks already due are sent together in one write (one syscall)."""
    plan, state = job.plan, job.state
    response = web.StreamResponse(headers={**job.headers, "content-type": "text/event-stream",
                                           "cache-control": "no-cache"})
    await response.prepare(job.request)
    renderer = job.wire.stream(plan, job.meta, include_usage)
    pending = [renderer.head()]
    for index, step in enumerate(plan.steps()):
        if plan.cut_after is not None and index >= plan.cut_after:
            break
        due = job.admitted + plan.chunk_time_s(index)
        if due > state.clock():
            await _flush(response, pending)
            await _sleep_until(state, due)
        pending.extend(renderer.chunk(index, text, choice) for choice, text in step)
    if plan.cut_after is not None:
        await _flush(response, pending)
        job.runtime.stats.cut_streams += 1
        if plan.cut_mode == "abort":
            _abort(job.request)
        else:
            await response.write_eof()
        return response
    pending.append(renderer.tail())
    await _flush(response, pending)
    await response.write_eof()
    _count_done(job.runtime, plan)
    return response
