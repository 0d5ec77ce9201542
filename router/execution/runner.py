"""Fallback across a decision's deployments, under one deadline for the whole request.

`complete` tries deployments in order until one answers. `open_stream` does the same for
streams but commits to an attempt only once its first content chunk has arrived (role-only
chunks are held back); after that the stream belongs to the client and is never switched.
A rejected request (the provider says the request itself is wrong) is not retried elsewhere.
Retries with backoff, breakers and hedging (the reliability issue) wrap these same steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.errors import (
    AllCandidatesFailedError,
    ProviderError,
    ProviderRejectedError,
    ProviderTimeoutError,
    SlorouterError,
)
from router.execution.attempt import AttemptRecord
from router.providers.base import (
    AdapterName,
    Completion,
    Deployment,
    Provider,
    StreamEvent,
    UpstreamCall,
)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run: the deployments in order, the body, and the absolute deadline."""

    deployments: Sequence[Deployment]
    body: Mapping[str, Any]
    deadline: float  # perf_counter() seconds
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class CommittedStream:
    deployment: Deployment
    head: list[StreamEvent]
    tail: AsyncIterator[StreamEvent]
    attempts: list[AttemptRecord]


class Runner:
    def __init__(self, providers: Mapping[AdapterName, Provider],
                 clock: Clock = time.perf_counter) -> None:
        self._providers = providers
        self._clock = clock

    def _call(self, plan: Plan, deployment: Deployment) -> UpstreamCall:
        remaining = plan.deadline - self._clock()
        if remaining <= 0:
            raise ProviderTimeoutError("request deadline exceeded", code="deadline_exceeded")
        return UpstreamCall(deployment=deployment, body=plan.body,
                            timeout_s=min(remaining, deployment.timeout_s), headers=plan.headers)

    async def complete(self, plan: Plan,
                       attempts: list[AttemptRecord]) -> tuple[Deployment, Completion]:
        for deployment in plan.deployments:
            record = AttemptRecord(deployment.name, len(attempts) + 1, self._clock())
            attempts.append(record)
            try:
                call = self._call(plan, deployment)
                completion = await self._providers[deployment.adapter].complete(call)
            except SlorouterError as err:
                record.error, record.ended_at = err, self._clock()
                if _stop_trying(err):
                    raise
                continue
            record.first_content_at = record.ended_at = self._clock()
            record.usage = completion.usage
            return deployment, completion
        raise _exhausted(attempts)

    async def open_stream(self, plan: Plan, attempts: list[AttemptRecord]) -> CommittedStream:
        for deployment in plan.deployments:
            record = AttemptRecord(deployment.name, len(attempts) + 1, self._clock())
            attempts.append(record)
            events: AsyncIterator[StreamEvent] | None = None
            try:
                call = self._call(plan, deployment)
                events = self._providers[deployment.adapter].stream(call)
                head = await self._peek(events, call.timeout_s)
            except SlorouterError as err:
                record.error, record.ended_at = err, self._clock()
                await close_quietly(events)
                if _stop_trying(err):
                    raise
                continue
            record.first_content_at = self._clock()
            return CommittedStream(deployment, head, events, attempts)
        raise _exhausted(attempts)

    @staticmethod
    async def _peek(events: AsyncIterator[StreamEvent], timeout_s: float) -> list[StreamEvent]:
        """Read up to and including the first content event (or the end of the stream)."""
        head: list[StreamEvent] = []
        try:
            async with asyncio.timeout(timeout_s):
                async for event in events:
                    head.append(event)
                    if event.has_content:
                        break
        except TimeoutError as exc:
            raise ProviderTimeoutError("no first token before the deadline",
                                       code="first_token_timeout") from exc
        return head


def _stop_trying(err: SlorouterError) -> bool:
    """A request the provider rejected as invalid will be rejected elsewhere too."""
    return isinstance(err, ProviderRejectedError) or not isinstance(err, ProviderError)


def _exhausted(attempts: list[AttemptRecord]) -> SlorouterError:
    errors = [a.error for a in attempts if a.error is not None]
    if not errors:
        return AllCandidatesFailedError("no deployment to try", code="no_candidates")
    last = errors[-1]
    summary = "; ".join(f"{a.deployment}: {a.error.message}" for a in attempts if a.error)
    if all(type(err) is type(last) for err in errors):
        return type(last)(f"all {len(errors)} attempts failed: {summary}", code=last.code,
                          retry_after=last.retry_after)
    return AllCandidatesFailedError(f"all {len(errors)} attempts failed: {summary}",
                                    code="all_candidates_failed")


async def close_quietly(events: AsyncIterator[StreamEvent] | None) -> None:
    """Close an abandoned upstream stream; its own failure must not mask the real one."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
