"""The execution loop: fallback ⊃ retries ⊃ hedging ⊃ one attempt, under one deadline.

Both call styles run as streams of `StreamEvent`s (a whole completion is one content event,
`events.CompletionEvents`), so one loop serves them: try the plan's deployments in order; per
deployment, retry transient failures with jittered backoff while the retry budget, its breaker
and the deadline allow; move on after a rejection or a `Retry-After`; stop at once on an
unknown commit. An attempt is committed when its first content event arrives (role-only chunks
are held back), so failover is invisible to the client. Idempotent requests may hedge a slow
first attempt (`hedging`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from router.errors import (
    ProviderMisconfiguredError,
    ProviderRejectedError,
    ProviderTimeoutError,
    SlorouterError,
    UnknownCommitError,
)
from router.execution import late_timers
from router.execution.attempt import (
    AttemptKind,
    AttemptRecord,
    circuit_open,
    hedge_budget_spent,
    retry_budget_spent,
    saturated,
)
from router.execution.backoff import retry_delay
from router.execution.breaker import Permit
from router.execution.classify_error import AttemptContext, classify, progressing
from router.execution.events import CompletionEvents, EventStream, has_content, peek
from router.execution.failures import (
    as_error,
    deadline_exceeded,
    deadline_passed,
    exhausted,
    failed_alike_before,
)
from router.execution.hedging import RaceFailed, RaceResult, race_first
from router.execution.plan import Clock, CommittedStream, ExecutionState, Plan, Release
from router.providers.base import (
    AdapterName,
    Completion,
    Deployment,
    Provider,
    StreamEvent,
    UpstreamCall,
    output_limited,
    sent_unanswered,
)
from router.steady_clock import steady_time
from router.telemetry.context import propagation_headers


class _Skip(Exception):
    """This deployment cannot take an attempt now (at its `max_in_flight`, or breaker open);
    try the next."""


class _OutOfTime(Exception):
    """The request's deadline passed before the next attempt could start."""


class Runner:
    def __init__(self, providers: Mapping[AdapterName, Provider], state: ExecutionState,
                 clock: Clock = time.perf_counter, wall: Clock = steady_time) -> None:
        self._providers = providers
        self._state = state
        self._clock = clock
        self._wall = wall

    async def complete(self, plan: Plan,
                       attempts: list[AttemptRecord]) -> tuple[Deployment, Completion]:
        committed = await self._execute(plan, attempts, self._completion_stream)
        committed.release()
        event = committed.head[-1]
        return committed.deployment, Completion(body=event.data, usage=event.usage)

    def soonest_probe_s(self, deployments: Iterable[str]) -> float:
        """`Retry-After` for a request whose candidates' circuits are all open."""
        return self._state.breakers.soonest_probe_s(deployments)

    async def open_stream(self, plan: Plan, attempts: list[AttemptRecord]) -> CommittedStream:
        return await self._execute(plan, attempts, self._provider_stream)

    def _provider_stream(self, call: UpstreamCall) -> EventStream:
        return self._providers[call.deployment.adapter].stream(call)

    def _completion_stream(self, call: UpstreamCall) -> EventStream:
        return CompletionEvents(self._providers[call.deployment.adapter], call)

    async def _execute(self, plan: Plan, attempts: list[AttemptRecord],
                       open_: Callable[[UpstreamCall], EventStream]) -> CommittedStream:
        self._state.retries.record_request()
        deployments = list(plan.deployments)
        refused: Counter[tuple[str, str]] = Counter()  # refusals (400/422) by model
        for position, deployment in enumerate(deployments):
            if refused[_model_of(deployment)] >= SERVERS_REFUSING_A_MODEL:
                continue  # the model's other servers would refuse it alike
            alternate = deployments[position + 1] if position + 1 < len(deployments) else None
            committed = await self._on_deployment(plan, attempts, open_, deployment, alternate,
                                                  last=alternate is None)
            if committed is not None:
                return committed
            if _refused(attempts, deployment.name):
                refused[_model_of(deployment)] += 1
                if len(refused) >= MAX_REFUSING_MODELS:
                    break
        raise exhausted(attempts)

    async def _on_deployment(self, plan: Plan, attempts: list[AttemptRecord],
                             open_: Callable[[UpstreamCall], EventStream],
                             deployment: Deployment, alternate: Deployment | None,
                             last: bool) -> CommittedStream | None:
        """Attempts on one deployment (first try and retries); None means move on."""
        paid = False  # a retry's token, spent before its backoff
        for retry in range(self._state.max_retries_per_deployment + 1):
            if plan.first_content_by() - self._clock() <= 0:  # before spending any budget
                raise deadline_passed(attempts)
            after_failure = any(a.outcome == "failed" for a in attempts)
            kind: AttemptKind = "retry" if retry else ("fallback" if after_failure else "first")
            if (after_failure and not paid and _charged(attempts)
                    and not self._state.retries.try_spend(plan.principal)):
                self._not_made(attempts, deployment, kind, retry_budget_spent())
                raise exhausted(attempts, "retry budget exhausted")
            paid = False
            try:
                return await self._attempt(plan, attempts, open_, deployment, alternate, kind)
            except _Skip:
                return None
            except _OutOfTime:
                raise deadline_passed(attempts) from None
            except SlorouterError as err:
                verdict = classify(err, AttemptContext(plan.side_effecting, True, False))
                if verdict.action == "unknown_commit":
                    raise UnknownCommitError(f"{deployment.name}: {err.message}; the request may "
                                             "have taken effect, so it is not retried",
                                             code="unknown_commit") from err
                if verdict.action == "give_up":
                    raise
                # With an alternate left, a transient failure moves on (the alternate is more
                # likely to answer than the deployment that just failed); the last one retries.
                if verdict.action == "next_candidate" or not last:
                    return None
                if (verdict.retry_after_s or 0.0) > self._state.max_retry_wait_s:
                    return None
                # A stream's wait ends at its head deadline (its SDK gives up then), not at
                # the whole answer's: waiting out a Retry-After past it answered the client
                # after its SDK had left and retried on its own.
                delay = retry_delay(self._state.backoff, retry, self._state.rng,
                                    retry_after_s=verdict.retry_after_s,
                                    remaining_s=plan.first_content_by() - self._clock())
                if delay is None or retry == self._state.max_retries_per_deployment:
                    return None
                # The budget before the wait: a retry it refuses is answered at once, not after
                # holding the client (and its slot) through a backoff or a Retry-After.
                if not self._state.retries.try_spend(plan.principal):
                    self._not_made(attempts, deployment, "retry", retry_budget_spent())
                    raise exhausted(attempts, "retry budget exhausted") from err
                paid = True
                await asyncio.sleep(delay)
        return None

    async def _attempt(self, plan: Plan, attempts: list[AttemptRecord],
                       open_: Callable[[UpstreamCall], EventStream], deployment: Deployment,
                       alternate: Deployment | None, kind: AttemptKind) -> CommittedStream:
        try:  # before the breaker admits anything: a half-open probe slot must not leak
            call = self._call(plan, deployment, len(attempts) + 1)
        except ProviderTimeoutError:
            raise _OutOfTime() from None
        record = AttemptRecord(deployment.name, len(attempts) + 1, self._clock(), kind)
        attempts.append(record)
        admitted = self._admit(deployment, plan.principal)
        if isinstance(admitted, SlorouterError):
            record.outcome, record.ended_at, record.error = "skipped", record.started_at, admitted
            raise _Skip()
        record.permit = admitted
        self._started(record, plan, deployment)
        hedged = plan.hedge_delay_s is not None and alternate is not None
        now = self._clock()
        # A race waits for its hedge as long as the hedge may run: each side's own timeout is
        # its adapter's (`UpstreamCall.timeout_s`). The primary's bounded the whole race until
        # 2026-12-07, so a primary that hung cut a hedge about to answer (its alternate billed,
        # charged a failure, then called again from scratch as the fallback).
        horizon_s = call.timeout_s if not hedged else max(
            call.timeout_s, _hedge_horizon_s(plan, alternate, now))
        head_s, by_head = plan.head_timeout(horizon_s, now)
        head_timer = late_timers.timeout(head_s)
        try:
            async with head_timer:
                if hedged:
                    assert alternate is not None and plan.hedge_delay_s is not None
                    return await self._race(plan, attempts, open_, call, record, alternate)
                events = open_(call)
                head = await peek(events)
        except TimeoutError as exc:
            # Cut by the request's own deadline (shorter than the deployment's timeout), the
            # attempt says nothing about the deployment's health: a client asking for 1 ms
            # must not open the breakers of healthy deployments for everyone. Unless it had
            # waited past the plan's stall threshold: a deployment that hangs must lose its
            # traffic even when every client's timeout is shorter than its own.
            by_deadline = by_head or plan.bounded_by_client(call)
            err: SlorouterError = (
                deadline_exceeded("during the upstream attempt") if by_deadline
                else ProviderTimeoutError("no first token before the attempt's timeout",
                                          code="first_token_timeout"))
            _price_pending(plan, attempts, deployment, alternate)  # sent, and cut unanswered
            now = self._clock()
            # Fired late, the process stood still (paused, its loop blocked), not the upstream:
            # no verdict on the deployment (a 25 s pause opened a healthy one's breaker).
            paused = head_timer.fired_late
            self._fail_pending(attempts, err, health=lambda record: not paused and (
                not by_deadline or plan.stalled(now - record.started_at)))
            raise err from exc
        except SlorouterError as err:
            self._failed_on(record, deployment, err, plan, attempts)  # a hedged one: ended
            self._fail_pending(attempts, err)
            raise
        except BaseException:  # the client left (or a bug): the attempts are abandoned
            _price_pending(plan, attempts, deployment, alternate)
            for pending in attempts:
                if pending.outcome == "pending" and pending.started_at:
                    pending.outcome, pending.ended_at = "cancelled", self._clock()
                    self._ended(pending)
                    self._state.breakers.get(pending.deployment).on_abandon(pending.permit)
            raise
        self._won(record)
        bounded = plan.bounded_by_client(call)
        return CommittedStream(deployment, head, events, attempts,
                               self._releaser(record, bounded, plan.stall_after_s), bounded)

    async def _race(self, plan: Plan, attempts: list[AttemptRecord],
                    open_: Callable[[UpstreamCall], EventStream], call: UpstreamCall,
                    record: AttemptRecord, alternate: Deployment) -> CommittedStream:
        alt_breaker = self._state.breakers.get(alternate.name)
        hedge_record = AttemptRecord(alternate.name, 0, 0.0, "hedge")
        calls = [call]

        def start_hedge() -> EventStream:
            hedge_record.number, hedge_record.started_at = len(attempts) + 1, self._clock()
            attempts.append(hedge_record)
            self._started(hedge_record, plan, alternate)
            calls.append(self._call(plan, alternate, hedge_record.number))
            return open_(calls[-1])

        def may_hedge() -> bool:
            """The hedge is due: send it, or record why not (a skipped `hedge` attempt). Not
            when the request has no time left for it: it is not made, and not on the record
            (`_call` would refuse it, and the access log listed the hedge never sent as an
            attempt failed with `deadline_exceeded`)."""
            if self._out_of_time(plan):
                return False
            admitted = self._admit(alternate, plan.principal)
            if not isinstance(admitted, SlorouterError):
                if self._state.hedges.try_spend(plan.principal):
                    hedge_record.permit = admitted
                    return True
                alt_breaker.on_abandon(admitted)  # no hedge after all: a probe slot goes back
                admitted = hedge_budget_spent()
            self._not_made(attempts, alternate, "hedge", admitted)
            return False

        self._state.hedges.record_request()
        try:
            result: RaceResult[StreamEvent] = await race_first(
                lambda: open_(call), start_hedge, delay_s=plan.hedge_delay_s,
                may_hedge=may_hedge, is_content=has_content, clock=self._clock)
        except RaceFailed as failed:
            for side, raced, on in zip((record, hedge_record), failed.attempts,
                                       (call.deployment, alternate), strict=False):
                if side.outcome == "pending" and side.started_at:
                    own = raced.error if raced.error is not None else failed.error
                    self._failed_on(side, on, _unanswered(as_error(own)), plan, attempts)
            raise as_error(failed.error) from failed
        winner, loser = (record, hedge_record) if result.winner == 0 else (hedge_record, record)
        self._won(winner)
        lost = result.attempts[1 - result.winner]
        if result.hedge_started and loser.outcome == "pending" and lost.outcome == "failed":
            assert lost.error is not None  # it failed before the other won
            self._failed_on(loser, calls[1 - result.winner].deployment,
                            _unanswered(as_error(lost.error)), plan, attempts)
        elif result.hedge_started and loser.outcome == "pending":
            loser.outcome, loser.ended_at = "cancelled", self._clock()
            self._state.breakers.get(loser.deployment).on_abandon(loser.permit)
            self._ended(loser)
            _price_sent(loser, calls[1 - result.winner].deployment, plan)
        bounded = plan.bounded_by_client(calls[result.winner])
        return CommittedStream(calls[result.winner].deployment, list(result.prefix),
                               result.rest, attempts,
                               self._releaser(winner, bounded, plan.stall_after_s), bounded)

    def _admit(self, deployment: Deployment, principal: str) -> Permit | SlorouterError:
        """Its breaker's permit for an attempt on `deployment`, or why none is made: it has its
        `max_in_flight` attempts in flight (asked first: the breaker's probe slot stays free),
        or its circuit is open."""
        if not self._has_place(deployment, principal):
            return saturated(f"{deployment.name} has its max_in_flight attempts in flight"
                             " (or its tenant its share of them)")
        breaker = self._state.breakers.get(deployment.name)
        permit = breaker.allow(principal)
        if permit is None:
            return circuit_open(breaker.snapshot(deployment.name).half_open_in_s)
        return permit

    def _not_made(self, attempts: list[AttemptRecord], deployment: Deployment,
                  kind: AttemptKind, why: SlorouterError) -> None:
        """An attempt that was due and is not made (a budget refused it, or a hedge's alternate
        could not take it): on the record, with why, never sent."""
        now = self._clock()
        attempts.append(AttemptRecord(deployment.name, len(attempts) + 1, now, kind, "skipped",
                                      ended_at=now, error=why))

    def _fail_pending(self, attempts: list[AttemptRecord], err: SlorouterError,
                      health: Callable[[AttemptRecord], bool] = lambda _record: True) -> None:
        """Every attempt of this step still pending (the attempt and its hedge) failed;
        `health(record)` False: not for a reason that tells anything about its deployment."""
        for record in attempts:
            if record.outcome == "pending" and record.started_at:
                self._failed(record, err, attempts, health(record))

    def _has_place(self, deployment: Deployment, principal: str) -> bool:
        """The bulkhead: whether `deployment` has fewer than `max_in_flight` attempts begun and
        not ended, and a place `principal` may take (`bulkhead.admits`: the last places go to
        tenants under their equal share). Read and then begun with no await between, so the cap
        holds exactly."""
        cap = deployment.max_in_flight
        return cap is None or self._state.shares.admits(
            deployment.name, principal, cap, self._state.watch.load.get(deployment.name, 0),
            self._clock())

    def _started(self, record: AttemptRecord, plan: Plan, deployment: Deployment) -> None:
        record.ticket = self._state.watch.begin(record.deployment, self._wall(),
                                                plan.prompt_tokens, plan.stream)
        if deployment.max_in_flight is not None:
            record.share_ticket = self._state.shares.begin(deployment.name, plan.principal)

    def _ended(self, record: AttemptRecord) -> None:
        self._state.watch.end(record.ticket)
        self._state.shares.end(record.share_ticket)

    def _releaser(self, record: AttemptRecord, client_deadline: bool,
                  stall_after_s: float | None) -> Release:
        """`client_deadline`: the client's own timeout bounds the answer
        (`Plan.bounded_by_client`), so a timeout after it started says nothing about the
        deployment (as for a first token).
        Nor does a timeout that cut a stream still writing (`progressing`, by the plan's
        `stall_after_s`): the deployment was answering; the answer was longer than the time
        given to it, which the client chooses (prompt, `max_tokens`). Counted, six such
        streams from one tenant opened the breaker for every tenant (the security audit)."""
        released = False

        def release(error: SlorouterError | None = None, abandoned: bool = False,
                    idle_s: float | None = None) -> None:
            nonlocal released
            if released:
                return
            released = True
            self._ended(record)
            breaker = self._state.breakers.get(record.deployment)
            permit = record.permit
            if error is None and not abandoned:
                breaker.on_success(permit)
            elif error is not None and not abandoned:
                # The answer broke after it had started (the client got an error event): the
                # attempt failed after all, for the breaker and the statistics.
                record.error = error
                verdict = classify(error, AttemptContext(False, True, False))
                timed_out = isinstance(error, ProviderTimeoutError)
                record.outlasted = (timed_out and not client_deadline
                                    and progressing(idle_s, stall_after_s))
                if verdict.breaker_failure and not ((timed_out and client_deadline)
                                                    or record.outlasted):
                    breaker.on_failure(permit, verdict.retry_after_s, error.code)
                else:
                    breaker.on_abandon(permit)
            else:  # the client left, or our own bug: nothing said about the deployment
                record.abandoned = abandoned
                breaker.on_abandon(permit)

        return release

    def _won(self, record: AttemptRecord) -> None:
        record.outcome, record.first_content_at = "won", self._clock()
        self._state.watch.first_token(record.ticket)

    def _failed_on(self, record: AttemptRecord, deployment: Deployment, err: SlorouterError,
                   plan: Plan, attempts: list[AttemptRecord]) -> None:
        """`record`, an attempt on `deployment`, failed with `err` (if still pending): priced
        first when `err` says it was sent and never answered (`sent_unanswered`: the upstream
        dropped the connection, or the adapter's own timeout ran out), as an attempt cut by
        the runner's timeout is; an error the upstream answered is not billed."""
        if record.outcome == "pending" and record.started_at and sent_unanswered(err):
            _price_sent(record, deployment, plan)
        self._failed(record, err, attempts)

    def _failed(self, record: AttemptRecord, err: SlorouterError, attempts: list[AttemptRecord],
                health: bool = True) -> None:
        """`record`, one of the request's `attempts`, failed with `err`. Its deployment's breaker
        counts it unless an earlier attempt of the same request failed the same way: a request
        every upstream refuses alike (a prompt that makes providers fail) is one failure, on
        the deployment that first refused it, not one on every deployment it fails over to."""
        if record.outcome != "pending":
            return
        record.outcome, record.error, record.ended_at = "failed", err, self._clock()
        self._ended(record)
        verdict = classify(err, AttemptContext(False, True, False))
        breaker = self._state.breakers.get(record.deployment)
        record.judged = health and verdict.breaker_failure and not failed_alike_before(
            record, attempts)
        if record.judged:
            breaker.on_failure(record.permit, verdict.retry_after_s, err.code)
        else:
            breaker.on_abandon(record.permit)

    def _out_of_time(self, plan: Plan, now: float | None = None) -> bool:
        """Whether the request has no time left for an attempt: its deadline, or the time by
        which its first content must come, has passed."""
        now = self._clock() if now is None else now
        return plan.deadline <= now or plan.first_content_by() <= now

    def _call(self, plan: Plan, deployment: Deployment, number: int) -> UpstreamCall:
        now = self._clock()
        if self._out_of_time(plan, now):
            raise ProviderTimeoutError("request deadline exceeded", code="deadline_exceeded")
        remaining = plan.deadline - now
        body = plan.bodies.get(deployment.body_kind, plan.body)
        if deployment.max_output_tokens is not None:
            body = output_limited(body, deployment.max_output_tokens,
                                  required=deployment.output_limit_required)
        headers = {**plan.headers, **propagation_headers(plan.trace, number)}
        return UpstreamCall(deployment=deployment, body=body,
                            timeout_s=min(remaining, deployment.timeout_s), headers=headers,
                            side_effecting=plan.side_effecting)


# A request refused (400/422: the request's fault, as the upstream read it) by this many models
# is refused: the fallbacks after a refusal are for another model's limits (a field, a context
# length a larger model takes), not a walk through every candidate. Every refusal moved on to
# the next candidate, each drawing on the retry budget all tenants share: one bad request made
# 11 calls on a policy of 17 deployments and left the next tenant's failures no failover (the
# scale audit of 2026-12-07). Three models: a long prompt refused by a small and a middle model
# still reaches a large one. Of one model, two servers are tried (two servers of one model may
# take different lengths, a vLLM `max_model_len`), not its every replica (three replicas of a
# small model kept the large fallback from a long prompt: the re-audits).
MAX_REFUSING_MODELS = 3
SERVERS_REFUSING_A_MODEL = 2


def _unanswered(err: SlorouterError) -> SlorouterError:
    """A race's side that failed (before any content: the first content ends a race) by its
    adapter's timeout is a `first_token_timeout`, as the runner's own timer names the same cut
    of an attempt not raced (the adapter says `upstream_read_timeout`: the re-audit of
    2026-12-07 saw a hedged primary that hung recorded so)."""
    if isinstance(err, ProviderTimeoutError) and err.code == "upstream_read_timeout":
        return ProviderTimeoutError("no first token before the attempt's timeout",
                                    code="first_token_timeout")
    return err


def _hedge_horizon_s(plan: Plan, alternate: Deployment | None, now: float) -> float:
    """How long from `now` a hedge sent to `alternate` after the plan's hedge delay may run:
    the delay and the alternate's timeout, within the request's deadline."""
    assert alternate is not None and plan.hedge_delay_s is not None
    return min(plan.hedge_delay_s + alternate.timeout_s, plan.deadline - now)


def _model_of(deployment: Deployment) -> tuple[str, str]:
    """What a refusal is about: the provider's API and the model it serves."""
    return deployment.provider, deployment.upstream_model


def _refused(attempts: list[AttemptRecord], deployment: str) -> bool:
    return any(a.deployment == deployment and a.outcome == "failed"
               and isinstance(a.error, ProviderRejectedError) for a in attempts)


def _charged(attempts: list[AttemptRecord]) -> bool:
    """Whether the attempt after these draws on the retry budget: after a failure that load
    may cause, not when every failure was a deployment's misconfiguration (a wrong or revoked
    key, an unknown model: 401, 402, 403, 404) or a refusal of the request (400, 422, bounded
    by `MAX_REFUSING_MODELS`), which say nothing of load. The budget guards against retry
    storms; spent on moving past a misconfigured deployment, a burst drained it and its
    requests failed with `upstream_auth` while a healthy fallback stood idle (the ops audit: 12
    of 12 concurrent requests)."""
    return any(a.outcome == "failed"
               and not isinstance(a.error, ProviderMisconfiguredError | ProviderRejectedError)
               for a in attempts)


def _price_sent(record: AttemptRecord, deployment: Deployment, plan: Plan) -> None:
    """An attempt sent and left unanswered (cancelled, cut by a timeout, dropped by its
    upstream, or timed out in its adapter waiting for the answer): the provider may
    bill the prompt it was sent, so it is priced from the router's prompt estimate at the input
    price (no output: none is known), marked estimated."""
    record.cost_usd, record.cost_estimated = deployment.cost_usd(plan.prompt_tokens, 0), True


def _price_pending(plan: Plan, attempts: list[AttemptRecord], deployment: Deployment,
                   alternate: Deployment | None) -> None:
    """Price this step's attempts still pending (the attempt on `deployment`, its hedge on
    `alternate`) as they end unanswered: called on that path only, so an answered request
    pays nothing for it."""
    for record in attempts:
        if record.outcome == "pending" and record.started_at:
            on = alternate if alternate is not None and record.kind == "hedge" else deployment
            _price_sent(record, on, plan)
