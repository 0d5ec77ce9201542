"""What the runner is given and what it hands back: the plan of one request's attempts, the
committed answer and its release, the process-wide reliability state, and the watch told of
every attempt (`router/stats/inflight.py`). Data and protocols only: the loop is `runner`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from router.errors import ProviderTimeoutError, SlorouterError
from router.execution.attempt import AttemptRecord
from router.execution.backoff import BackoffPolicy
from router.execution.breaker import BreakerPolicy, BreakerRegistry
from router.execution.bulkhead import FairShares
from router.execution.failures import deadline_exceeded
from router.execution.hedging import ChunkStream
from router.execution.retry_budget import Budget, hedge_budget, retry_budget
from router.providers.base import Deployment, StreamEvent, UpstreamCall
from router.stats.inflight import InFlight
from router.telemetry.context import TraceContext

Clock = Callable[[], float]



def first_content_by(deadline: float, head_deadline: float | None) -> float:
    """When a request's first content must have come: a stream's head deadline (its SDK's
    wait for the first chunk) when it comes first, else the deadline."""
    return deadline if head_deadline is None else min(deadline, head_deadline)

@dataclass(frozen=True, slots=True)
class Plan:
    """What to run: deployments in order, the body, the absolute deadline, and the hedge delay
    (None: never hedge; set only for idempotent requests)."""

    deployments: Sequence[Deployment]
    body: Mapping[str, Any]
    deadline: float  # perf_counter() seconds
    headers: Mapping[str, str] = field(default_factory=dict)
    side_effecting: bool = False
    hedge_delay_s: float | None = None
    bodies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per body kind
    trace: TraceContext | None = None  # W3C trace continued to every upstream attempt
    prompt_tokens: int = 0  # told to the attempt watch (waiting is judged by prompt size)
    stream: bool = True  # told to the attempt watch: a non-streamed wait is for a whole answer
    # The client's own timeout header set the deadline (shorter than the operator's): an
    # attempt it cuts short says nothing about the deployment.
    deadline_from_client: bool = False
    # A stream's client waits this long (perf_counter seconds) for the response's head, sent
    # with the first content chunk (the SDKs' timeout, `head_timeout_s`): no attempt waits for
    # its first content past it, nor starts after it. None: the deadline alone.
    head_deadline: float | None = None
    # An attempt still waiting after this long (for a stream's first token, or a whole answer)
    # is a stall, whoever's deadline then cuts it: its breaker counts it even when the client's
    # own timeout did (`stall_after_s`). None: no target to judge by, a client's cut spares it.
    stall_after_s: float | None = None
    # Who sent the request (its tenant): each breaker verdict is attributed to it, so that one
    # principal's failures cannot open a deployment's circuit for everyone
    # (`router/execution/breaker_rules.py`).
    principal: str = ""

    def first_content_by(self) -> float:
        """When the first content must have come (`first_content_by`)."""
        return first_content_by(self.deadline, self.head_deadline)

    def head_timeout(self, timeout_s: float, now: float) -> tuple[float, bool]:
        """How long an attempt may wait for its first content, and whether the client's head
        deadline (not the attempt's timeout) is what bounds it: a cut then is the client's
        deadline passing, as under `bounded_by_client`."""
        if self.head_deadline is not None and self.head_deadline - now < timeout_s:
            return self.head_deadline - now, True
        return timeout_s, False

    def bounded_by_client(self, call: UpstreamCall) -> bool:
        """Whether the client's own deadline, shorter than the deployment's timeout, is what
        bounds `call`: a timeout then says nothing about the deployment's health."""
        return self.deadline_from_client and call.timeout_s < call.deployment.timeout_s

    def stalled(self, waited_s: float) -> bool:
        """Whether an attempt that waited `waited_s` without its first token (a whole answer,
        not streamed) had stalled, by `stall_after_s` (None: nothing to judge by)."""
        return self.stall_after_s is not None and waited_s >= self.stall_after_s


class Release(Protocol):
    """Ends a committed answer: clean by default; `error` when it broke after it had started
    (a failure of the deployment when the error counts against it, unless it was a timeout
    that cut a stream still writing: `idle_s`, the seconds since its last content chunk);
    `abandoned` when the client left or the relay failed (no verdict on the deployment)."""

    def __call__(self, error: SlorouterError | None = None, abandoned: bool = False,
                 idle_s: float | None = None) -> None: ...


@dataclass(slots=True)
class CommittedStream:
    deployment: Deployment
    head: list[StreamEvent]
    tail: ChunkStream[StreamEvent]
    attempts: list[AttemptRecord]
    # Call once at the end: frees the winner's in-flight slot and gives its breaker the verdict
    # (`Release`): a stream is judged when it ends, not at its first token, so a deployment
    # whose answers break after they start is seen failing.
    release: Release = lambda error=None, abandoned=False, idle_s=None: None
    # The client's own deadline, not the deployment's timeout, bounds the rest of the answer:
    # a timeout that ends it is the request's deadline (`deadline_exceeded`).
    client_deadline: bool = False

    def ended_by(self, error: SlorouterError) -> SlorouterError:
        """The error a broken answer ends with: a timeout within the client's own deadline is
        that deadline passing, as it is before the first token (`Runner._attempt`)."""
        if self.client_deadline and isinstance(error, ProviderTimeoutError):
            return deadline_exceeded("while the answer streamed")
        return error


class AttemptWatch(Protocol):
    """Told when each upstream attempt starts, gets its first content and ends: the latency
    statistics read the age of attempts still waiting, so a provider that stalls is noticed
    before any of its slow answers completes (`router/stats/inflight.py`). `load` (attempts
    begun and not yet ended, per deployment) is what the bulkhead reads (`max_in_flight`)."""

    def begin(self, deployment: str, t: float, prompt_tokens: int = 0,
              streamed: bool = True) -> int: ...
    def first_token(self, ticket: int) -> None: ...
    def end(self, ticket: int) -> None: ...
    @property
    def load(self) -> Mapping[str, int]: ...


@dataclass
class ExecutionState:
    """Process-wide reliability state: breakers per deployment, retry and hedge budgets."""

    breakers: BreakerRegistry
    retries: Budget
    hedges: Budget
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    max_retries_per_deployment: int = 1
    max_retry_wait_s: float = 1.0  # a longer Retry-After goes back to the client instead
    rng: random.Random = field(default_factory=random.Random)
    # Wall-clock times (`Runner.wall`). The app hands the statistics store (which keeps its
    # own `InFlight`); without one the runner still counts, since the bulkhead reads the count.
    watch: AttemptWatch = field(default_factory=InFlight)
    # Places each tenant holds on capped deployments (`max_in_flight`), shared fairly
    shares: FairShares = field(default_factory=FairShares)

    @staticmethod
    def create(clock: Clock = time.monotonic) -> ExecutionState:
        return ExecutionState(BreakerRegistry(BreakerPolicy(), clock), retry_budget(clock),
                              hedge_budget(clock))
