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
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from cache.entry import CachedEntry
from router.admission import AdmissionController, parse_priority
from router.api import idempotent
from router.api.body import (
    authorization_header,
    header_values,
    parse_chat,
    read_json,
    received_headers,
)
from router.api.body_budget import BodyBudget
from router.api.errors import (
    SHUTTING_DOWN,
    ClientGone,
    ShuttingDown,
    as_project_error,
    error_response,
)
from router.api.relay import StreamRelay
from router.api.replay import body_response
from router.api.request_ids import new_request_id, request_id_refusal
from router.api.schemas import ChatCompletionRequest
from router.api.settle import Settle, unfinished
from router.api.sse import (
    STALL_GRACE_S,
    InFlight,
    OnFinish,
    WatchedStreamingResponse,
    run_unless_disconnected,
    until_grace_over,
)
from router.auth import authenticate, key_finder
from router.caching import ResultCaching
from router.errors import AuthenticationError, SlorouterError
from router.execution.deadline import head_timeout_s, requested_timeout_s
from router.execution.events import close_quietly
from router.execution.plan import CommittedStream, first_content_by
from router.idempotency import LEASE_S, IdempotencyStore, Replay
from router.media_tokens import whole_decoded_chars
from router.outcomes import (
    CLIENT_CLOSED,
    UNKNOWN_MODEL,
    Outcome,
    OutcomeSink,
    answer_messages,
    choice_messages,
)
from router.pipeline import (
    Caller,
    ChatPipeline,
    Prepared,
    arm_degraded,
    estimate_answer_tokens,
    is_side_effecting,
    session_of,
)
from router.providers.base import Deployment, Usage
from router.telemetry.context import TraceContext, current_request, trace_headers

Tracer = Callable[[str | None, str | None], TraceContext]

# Above this many prompt characters classification runs in a worker thread. Measured with
# `python -m bench.loop_stalls --offload-chars N` (docs/classifier.md, "Event-loop stalls"):
# at 16k characters (0.3-0.4 ms p50 inline) a thread left the count of > 5 ms loop stalls the
# same and doubled the request's own classify p99; at 64k characters it cut them (5 vs 8 per
# 10 s, max 6-11 vs 14-18 ms), so only longer prompts leave the loop.
OFFLOAD_PROMPT_CHARS = 32_000
# An inline file's base64 character costs the prompt estimate about an eighth of what a prompt
# character costs classification (`router.media_tokens.whole_decoded_chars`).
FILE_CHARS_PER_PROMPT_CHAR = 8


class _Remaining:
    """The time left before a perf_counter deadline (what admission waits at most)."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def remaining(self) -> float:
        return self._deadline - time.perf_counter()


async def prepare_off_loop(pipeline: ChatPipeline, chat: ChatCompletionRequest,
                           raw: dict[str, Any], headers: Any, deadline: float, caller: Caller,
                           arrived_at: float | None = None) -> Prepared:
    """Classify and decide. A very long prompt, or a large inline file the prompt estimate
    reads whole, is measured (classified, its tokens estimated) on a worker thread so the
    event loop never stalls; it is routed back on the loop, where the statistics, health and
    experiments it reads are written (read from the thread, they raced those writes)."""
    size = sum(len(m.text()) for m in chat.messages) + sum(
        whole_decoded_chars(part.type, part.file) for m in chat.messages
        if isinstance(m.content, list) for part in m.content) // FILE_CHARS_PER_PROMPT_CHAR
    if size <= OFFLOAD_PROMPT_CHARS:
        return pipeline.prepare(chat, raw, headers, deadline, caller, arrived_at)
    measured = await asyncio.to_thread(pipeline.measure, chat, raw, headers, deadline, caller,
                                       arrived_at)
    return pipeline.route(measured)


class ChatHandler:
    def __init__(self, pipeline: ChatPipeline, sink: OutcomeSink,
                 admission: AdmissionController, idempotency: IdempotencyStore,
                 caching: ResultCaching, tracer: Tracer | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 captures_content: Callable[[str], bool] = lambda _tenant: False,
                 in_flight: InFlight | None = None,
                 idempotency_lease_s: float = LEASE_S) -> None:
        self._pipeline = pipeline
        self.bodies = BodyBudget(pipeline.config.max_body_bytes_in_flight)  # explain's too
        self._sink = sink
        self._admission = admission
        self._idempotency = idempotency
        self._caching = caching
        self._tracer = tracer
        self._clock = clock
        self._captures = captures_content
        self._in_flight = in_flight
        self._lease_s = idempotency_lease_s

    async def handle(self, request: Request) -> Response:
        arrived = self._clock()
        received = received_headers(request)
        given = received.get("x-request-id")
        # The strings a client chooses that every log line and span of the request record must
        # not hold its key (a `key_sha256` key is in no redaction list): an id holding one is
        # refused once the caller is known, a tracestate dropped as an invalid one is. Looked
        # for only in a request that sends either (most send neither).
        def holds_key(text: str) -> bool:
            return key_finder((v.decode("latin-1") for v in header_values(
                request.scope["headers"], b"authorization")),
                self._pipeline.config.principals)(text)

        refused_id = request_id_refusal(given, holds_key)
        request_id = given if given and refused_id is None else new_request_id()
        outcome = Outcome(request_id=request_id, tenant="", requested_model="", stream=False,
                          arrived_at=arrived)
        headers = {"x-request-id": request_id}
        if self._tracer is not None:
            parent, state = trace_headers(request.scope["headers"])
            outcome.trace = self._tracer(parent, None if state and holds_key(state) else state)
        current_request.set(outcome)
        held = contextlib.AsyncExitStack()
        response: Response | None = None
        try:
            response = await until_grace_over(self._in_flight, self._respond(
                request, received, outcome, headers, held, refused_id))
        except ClientGone:
            outcome.client_disconnected, outcome.status = True, CLIENT_CLOSED
            response = Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            err = as_project_error(exc)
            if isinstance(err, ShuttingDown) and outcome.may_have_taken_effect:
                # Not the 503 the SDKs retry: the upstream had the side effect and may act on
                # it, so it must not be sent again (at another replica) without a check.
                err = unfinished(err, keyed=idempotent.HEADER in received)
            outcome.status, outcome.error_type = err.status_code, type(err).__name__
            outcome.error_code = err.code
            outcome.refused_by_admission = err.refused_by_admission
            if isinstance(err, AuthenticationError) and self._tracer is not None:
                # A caller without a valid key does not choose what is traced: its
                # `traceparent`'s sampled flag had anyone who reaches the port export a span of
                # every request (the security audit). Traced as the ratio decides, a new root.
                outcome.trace = self._tracer(None, None)
            response = error_response(err, headers)
        finally:
            if not isinstance(response, WatchedStreamingResponse):  # streams record at their end
                await held.aclose()
                outcome.ended_at = self._clock()
                if response is None:  # cancelled: nothing will be sent
                    self._record_now(outcome)
                else:  # recorded once the answer is on its way, not before
                    after_sending(response, self._record, outcome)
        return response

    async def _record(self, outcome: Outcome) -> None:
        self._record_now(outcome)

    def _record_now(self, outcome: Outcome) -> None:
        """Every outcome of a request that went upstream is recorded here, once: its cost adds
        the attempts sent and left unanswered (`Outcome.add_unanswered_costs`)."""
        outcome.add_unanswered_costs()
        self._sink.record(outcome)

    async def _respond(self, request: Request, received: Mapping[str, str], outcome: Outcome,
                       headers: dict[str, str], held: contextlib.AsyncExitStack,
                       refused_id: SlorouterError | None) -> Response:
        config = self._pipeline.config
        principal = authenticate(authorization_header(request.scope["headers"]),
                                 config.principals)
        outcome.tenant = principal.tenant
        outcome.steps.append(("auth", outcome.arrived_at, self._clock()))
        if refused_id is not None:  # after the key, as before: a caller without one gets a 401
            raise refused_id
        idempotent.check_sent_once(received, request.scope["headers"])
        raw = await read_json(
            request, config.max_body_bytes,
            config.request_timeout_s - (self._clock() - outcome.arrived_at), received,
            read=lambda size: held.enter_context(self.bodies.reserve(size)))
        chat = parse_chat(raw)
        # A name the configuration does not know is a client's free text (a prompt or a key
        # pasted into the wrong field, seen in an audit): it is sent back in the 404's message
        # only, never into a span or a log line.
        known = chat.model in config.models or chat.model in config.aliases
        outcome.requested_model = chat.model if known else UNKNOWN_MODEL
        outcome.stream = chat.stream
        outcome.choices = chat.n or 1
        capture = self._captures(principal.tenant)  # the tenant's explicit opt-in only
        if capture:
            outcome.captured_input = orjson.dumps(raw.get("messages")).decode()
        client_s = requested_timeout_s(received, stream=chat.stream)
        budget = min(config.request_timeout_s, client_s) if client_s else config.request_timeout_s
        deadline = outcome.arrived_at + budget
        # A stream waits in the queue until its SDK's wait for the head ends at most: past it,
        # the SDK has given up (and retries) before the queue's 503 and its Retry-After.
        head_s = head_timeout_s(received) if chat.stream else None
        queue_until = first_content_by(
            deadline, None if head_s is None else outcome.arrived_at + head_s)
        queued_at = self._clock()
        priority = parse_priority(received.get("x-slorouter-priority"))
        admitting = held.enter_async_context(self._admission.admit(
            principal.tenant, priority, _Remaining(queue_until)))
        if self._admission.has_room(priority):
            ticket = await admitting
        else:  # it queues: a client that leaves meanwhile gives its place up at once (it kept
            # it, and was sent upstream once admitted); a slot won as it left goes with `held`
            ticket = await run_unless_disconnected(request.receive, admitting)
        outcome.queue_s = ticket.queue_time_s
        outcome.steps.append(("admission", queued_at, self._clock()))
        metadata = chat.metadata if chat.metadata is not None else {}
        caller = Caller(principal.tenant, outcome.request_id, chat.user,
                        session_of(received, metadata),
                        risk_hints_may_lower=principal.risk_hints_may_lower,
                        scopes=principal.scopes)
        started = self._clock()
        prepared = await self._prepare(chat, raw, received, deadline, caller, outcome.arrived_at)
        deadline = prepared.plan.deadline  # the task policy's timeout may be shorter
        prepared.plan = replace(
            prepared.plan, trace=outcome.trace,
            deadline_from_client=client_s is not None
            and outcome.arrived_at + client_s <= prepared.plan.deadline)
        # ... and, for a stream, the client's wait for its first token (an SDK's read timeout:
        # `Plan.head_deadline`) when it binds: a stream its SDK cut before the first token was
        # the client's choice too, as the same cut of a whole answer is, and burned the SLO's
        # budget and an experiment arm's errors (the frameworks audit of 2026-12-07). On the
        # outcome only: the runner reads the head deadline as the client's already.
        head_deadline = prepared.plan.head_deadline
        outcome.deadline_from_client = prepared.plan.deadline_from_client or (
            head_deadline is not None and head_deadline < prepared.plan.deadline)
        outcome.stall_after_s = prepared.plan.stall_after_s
        outcome.prompt_estimate = prepared.facts.prompt_tokens
        outcome.hedge_delay_s = prepared.plan.hedge_delay_s
        classified = started + prepared.phases.classify
        outcome.steps += [("classify", started, classified),
                          ("decide", classified, classified + prepared.phases.decide)]
        _note_decision(outcome, prepared, headers)
        side_effecting = is_side_effecting(prepared.labels)
        claimed = await idempotent.claim(
            self._idempotency, received, principal, raw,
            prepared.policy_requires_key,
            time_left_s=max(0.0, prepared.plan.first_content_by() - self._clock()),
            renew_for_s=max(0.0, deadline - self._clock()) + STALL_GRACE_S,
            receive=request.receive, lease_s=self._lease_s, acting=side_effecting)
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        if isinstance(claimed, Replay):
            idempotent.note_replay(outcome, claimed.response, config.deployments)
            return idempotent.replayed(claimed.response, chat.stream, include_usage, headers,
                                       self._stored_stream_end(outcome, held),
                                       deadline - self._clock())
        self._pipeline.expose(prepared, caller)
        outcome.routed = True
        looked_up = self._clock()
        try:
            cache_plan = self._caching.plan(prepared, principal, received, raw)
            # an identical request computing the answer is waited for, at most half the time
            # left (`ResultCaching.lookup`)
            found = await self._caching.lookup(
                cache_plan, prepared, held, follow_s=(deadline - self._clock()) / 2,
                unless_gone=functools.partial(run_unless_disconnected, request.receive))
        except BaseException as exc:
            if claimed is not None:
                await claimed.failed(exc)
            raise
        outcome.steps.append(("cache", looked_up, self._clock()))
        outcome.cache = headers["x-slorouter-cache"] = found.status
        if found.entry is not None:
            if capture:
                outcome.captured_output = answer_messages(found.entry.body)
            response = self._from_cache(found.entry, prepared, outcome, headers, include_usage,
                                        self._stored_stream_end(outcome, held))
            if claimed is not None:  # duplicates replay this answer, as after an upstream one
                await claimed.succeeded(found.entry.body, headers)
            return response
        settle = Settle(claimed, self._caching, cache_plan, headers,
                        side_effecting=side_effecting)
        if chat.stream:
            return await self._stream(request, prepared, outcome, headers, held, settle,
                                      include_usage, capture)
        try:
            response = await self._complete(request, prepared, outcome, headers)
        except BaseException as exc:
            await settle.failed(exc, outcome)
            raise
        await settle.succeeded(bytes(response.body), outcome)
        if capture:
            outcome.captured_output = answer_messages(bytes(response.body))
        return response

    def _from_cache(self, entry: CachedEntry, prepared: Prepared, outcome: Outcome,
                    headers: dict[str, str], include_usage: bool,
                    on_finish: OnFinish) -> Response:
        now = self._clock()
        headers["x-slorouter-model"] = entry.deployment or entry.versions.model
        headers["age"] = str(int(self._caching.age_s(entry)))  # RFC 9111's, whole seconds
        # Who answered, for the trace and the log (its model, provider); no upstream call was
        # made, so no attempt, usage or cost is recorded.
        outcome.deployment = entry.deployment or None
        outcome.first_content_at = now
        headers["server-timing"] = prepared.phases.header(None, now - outcome.arrived_at)
        return body_response(entry.body, stream=prepared.request.stream,
                             include_usage=include_usage, headers=headers, on_finish=on_finish,
                             time_limit_s=prepared.plan.deadline - now)

    def _stored_stream_end(self, outcome: Outcome, held: contextlib.AsyncExitStack) -> OnFinish:
        """How a stored answer replayed as a stream (a cache hit, an idempotent replay) ends:
        what `handle` does for every other answer once it is sent, since streams end later."""
        async def finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
            if client_gone:
                outcome.status = CLIENT_CLOSED
            elif ended_by is not None:
                outcome.status, outcome.error_type = ended_by.status_code, type(ended_by).__name__
                outcome.error_code = ended_by.code
            await held.aclose()
            outcome.ended_at = self._clock()
            self._sink.record(outcome)
        return finish

    async def _prepare(self, chat: ChatCompletionRequest, raw: dict[str, Any],
                       headers: Any, deadline: float, caller: Caller,
                       arrived_at: float) -> Prepared:
        return await prepare_off_loop(self._pipeline, chat, raw, headers, deadline, caller,
                                      arrived_at)

    async def _complete(self, request: Request, prepared: Prepared, outcome: Outcome,
                        headers: dict[str, str]) -> Response:
        try:
            deployment, completion = await run_unless_disconnected(
                request.receive, self._pipeline.complete(prepared, outcome))
        except ClientGone:
            _name_abandoned(outcome)
            raise
        now = self._clock()
        outcome.deployment, outcome.first_content_at = deployment.name, now
        if completion.usage is not None:
            outcome.prompt_tokens = completion.usage.prompt_tokens
            outcome.completion_tokens = completion.usage.completion_tokens
            outcome.cached_tokens = completion.usage.cached_tokens
            outcome.cost_usd = deployment.usage_cost_usd(completion.usage)
            _winner_usage(outcome, completion.usage, outcome.cost_usd)
        else:
            _price_without_usage(outcome, deployment, prepared.facts.prompt_tokens,
                                 completion.body)
        headers["x-slorouter-model"] = deployment.name
        winner = outcome.winner  # not the last attempt: a hedge that lost, or was not sent
        headers["server-timing"] = prepared.phases.header(
            winner.ttft_s if winner is not None else None, now - outcome.arrived_at)
        return Response(completion.body, media_type="application/json", headers=headers)

    async def _stream(self, request: Request, prepared: Prepared, outcome: Outcome,
                      headers: dict[str, str], held: contextlib.AsyncExitStack,
                      settle: Settle, include_usage: bool, capture: bool) -> Response:
        try:
            committed = await run_unless_disconnected(
                request.receive, self._pipeline.open_stream(prepared, outcome),
                dropped=_abandon)
        except BaseException as exc:
            await settle.failed(exc, outcome)
            raise
        outcome.deployment = committed.deployment.name
        outcome.first_content_at = self._clock()
        headers["x-slorouter-model"] = committed.deployment.name
        winner = outcome.winner
        headers["server-timing"] = prepared.phases.header(winner.ttft_s if winner else None, None)
        headers["cache-control"] = "no-cache"
        relay = StreamRelay(committed, outcome, settle, self._record_now, self._clock,
                            prepared.facts.prompt_tokens, capture)

        async def finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
            await relay.finish(client_gone, ended_by)
            await held.aclose()

        return WatchedStreamingResponse(relay.chunks(include_usage), headers, on_finish=finish,
                                        in_flight=self._in_flight,
                                        shutdown_error=settle.stream_ended_by(SHUTTING_DOWN),
                                        time_limit_s=prepared.plan.deadline - self._clock())

async def _abandon(committed: CommittedStream) -> None:
    """A stream whose attempt committed as its client left (the cancellation absorbed): its
    upstream is closed and its attempt released with no verdict, else its in-flight count (a
    half-open probe's slot, the breaker then never leaving half-open) stayed taken."""
    try:
        await close_quietly(committed.tail)
    finally:
        committed.release(abandoned=True)


def _name_abandoned(outcome: Outcome) -> None:
    """A completion its client left before the answer: the deployment of the first attempt
    cancelled in flight, for the span (the runner priced each cancelled attempt's prompt,
    `runner._price_sent`, which the outcome's cost sums as it is recorded)."""
    outcome.deployment = next(
        (a.deployment for a in outcome.attempts if a.outcome == "cancelled"), None)


def _winner_usage(outcome: Outcome, usage: Usage, cost_usd: float) -> None:
    """The answering attempt's usage and its price, for its span (`gen_ai.usage.*`,
    `slorouter.cost_usd` on the attempt) and the cost counter."""
    winner = outcome.winner
    if winner is not None:
        winner.usage, winner.cost_usd = usage, cost_usd


def _price_without_usage(outcome: Outcome, deployment: Deployment, prompt_estimate: int,
                         body: bytes) -> None:
    """An answer whose upstream reported no usage is billed all the same: priced from the
    router's prompt estimate and the answer's (`estimate_answer_tokens`), marked estimated, as a
    stream without usage is (it was recorded as free: the cost audit of 2026-12-07). The token
    counts stay unreported."""
    output = estimate_answer_tokens(choice_messages(body) or ())
    outcome.cost_usd = deployment.cost_usd(prompt_estimate, output, 0, 0)
    outcome.cost_estimated = True
    winner = outcome.winner
    if winner is not None:
        winner.cost_usd, winner.cost_estimated = outcome.cost_usd, True


def _note_decision(outcome: Outcome, prepared: Prepared, headers: dict[str, str]) -> None:
    outcome.task, outcome.risk = prepared.labels.task, prepared.labels.risk
    # a decision with nothing to try (refused by the risk rule, over the ceiling) routed
    # nowhere: no model, so no decision of that model is counted or logged
    outcome.model = prepared.decision.model if prepared.decision.deployments else ""
    outcome.policy_version = prepared.decision.policy_version
    outcome.explored = prepared.decision.explored
    if prepared.assignment is not None:
        outcome.experiment, outcome.arm = prepared.assignment.experiment, prepared.assignment.arm
        outcome.arm_degraded = arm_degraded(prepared.assignment, prepared.decision)
        outcome.arm_ineligible = outcome.arm_degraded and prepared.decision.arm_ineligible
        # A degraded arm (its route could not serve; control's did) is named apart, so no
        # answer labelled with an arm comes from another arm's route.
        label = f"{outcome.experiment}/{outcome.arm}"
        headers["x-slorouter-arm-degraded" if outcome.arm_degraded else "x-slorouter-arm"] = label
    headers.update({
        "x-slorouter-task": prepared.labels.task,
        "x-slorouter-risk": prepared.labels.risk,
        "x-slorouter-policy": prepared.decision.policy_version,
    })  # `x-slorouter-cache` once the cache was consulted: a refused key never reached it


def after_sending(response: Response, work: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run `work(*args)` once `response` has been sent (after any work already attached)."""
    before = response.background

    async def run() -> None:
        if before is not None:
            await before()
        await work(*args)

    response.background = _Then(run)


class _Then(BackgroundTask):
    """Starlette's background task for one coroutine function, without the introspection of
    `func` that its constructor does on every request."""

    def __init__(self, run: Callable[[], Awaitable[None]]) -> None:  # no super()
        self._run = run

    async def __call__(self) -> None:
        await self._run()


