"""Circuit breakers per deployment, and the registry behind `GET /v1/health/deployments`.

    closed ──(N consecutive failures, or error rate >= r over the window with >= min_volume)──▶
    open ──(cool-down elapsed)──▶ half_open ──(probe succeeds `successes_to_close` times)──▶ closed
                                  half_open ──(a probe fails)──▶ open (a fresh cool-down)

`allow()` admits a request with a `Permit` (in half-open, at most `half_open_probes` probes at
a time), or None; every admitted attempt must end in exactly one of `on_success(permit)`,
`on_failure(permit)` or `on_abandon(permit)` (cancelled, or a hedge that lost: frees the probe
slot without a verdict). Only a probe of the current half-open spell frees a probe slot or
closes the circuit: an attempt admitted while the circuit was closed (a long stream) that ends
during half-open updates the window (and a failure still reopens the circuit), no more. Before,
each such ending freed the probe's slot for one more request (six at a recovering deployment
with `half_open_probes: 1`) and their successes closed a circuit whose deployment still failed
every new request (a race audit). A failure with `Retry-After` (a
429) holds the deployment open at least that long (`on_failure(retry_after_s=...)`, at most
`max_hold_s`), so load moves elsewhere, once throttling is the rule rather than the exception:
when it comes on `holds_after` consecutive failures, or the breaker is open (or opens) anyway.
One throttled answer among many served ones moves that request elsewhere, not every request.

Each verdict is attributed to the principal (tenant) of its request (`Permit.principal`): one
principal's failures open nothing while the deployment serves others in the window, and the
principal blamed for an opening is offered the half-open probe last. The rules are pure
functions in `breaker_rules`; here is the state they read (bounded: `max_principals`).

Only failures that say something about the deployment's health should be recorded (see
`classify_error.ErrorVerdict.breaker_failure`): a client's bad request is not the provider's
fault. State is local to one process, read with an injected monotonic clock.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from router.execution.breaker_rules import BreakerPolicy, Counts, blamed, holds, opens
from router.execution.verdict_windows import PrincipalWindows, Window

__all__ = ["REGULAR", "BreakerPolicy", "BreakerRegistry", "BreakerState", "CircuitBreaker",
           "DeploymentHealth", "DeploymentsHealth", "Permit", "soonest_whole_seconds"]

Clock = Callable[[], float]
BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class Permit:
    """What `allow()` gave an attempt: a probe of a half-open spell (its number), or not; and
    the principal (tenant) whose request it is, to whom its verdict is attributed."""

    probe_of: int | None = None
    principal: str = ""


REGULAR = Permit()  # an attempt admitted by a closed circuit (of the anonymous principal)


class CircuitBreaker:
    """The breaker of one deployment."""

    def __init__(self, policy: BreakerPolicy, clock: Clock,
                 on_change: Callable[[BreakerState, float | None, str | None], None] | None
                 = None) -> None:
        """`on_change(state, hold_s, cause)`: told when the circuit opens (with how long it
        holds and the code of the failure that opened it) and when it closes again
        (half-open, an elapsed hold, is not told)."""
        self._policy = policy
        self._clock = clock
        self._on_change = on_change
        self._window = Window(policy.window_s, policy.window_slots, clock())
        self._open_until: float | None = None
        self._half_open = False
        self._probes_in_flight = 0
        self._probe_successes = 0
        self._spell = 0  # half-open spells so far: a probe's permit names its own
        self._consecutive = 0
        self._principals = PrincipalWindows(policy.window_s, policy.window_slots,
                                            policy.max_principals)
        # The principal blamed for the latest opening, and whether anyone else was refused
        # since: a half-open spell then offers its probe to the others first (`allow`).
        self._opened_by: str | None = None
        self._others_refused = False
        self._half_open_at = 0.0
        self._last_failure: str | None = None  # the code of the latest failure recorded
        self._last_change = clock()

    def state(self) -> BreakerState:
        """The current state (an elapsed cool-down reads as half-open)."""
        self._tick()
        if self._open_until is not None:
            return "open"
        return "half_open" if self._half_open else "closed"

    def is_open(self) -> bool:
        """`state() == "open"`, without the clock read while closed."""
        return self._open_until is not None and self.state() == "open"

    def allow(self, principal: str = "") -> Permit | None:
        """The permit of an attempt of `principal` (its tenant) that may go to this deployment
        now (a half-open probe's counts against `half_open_probes`), or None. For the first
        `cool_down_s` of a half-open spell, the principal blamed for the opening gets no probe
        once anyone else was refused: its own failing requests would fail the probe and hold
        the circuit open against everyone (at no cost to it, refused without reaching the
        provider), while another's may find the deployment serving. Alone, it probes as
        before."""
        state = self.state()
        if state == "closed":
            return Permit(None, principal) if principal else REGULAR
        if (state == "open" or self._probes_in_flight >= self._policy.half_open_probes
                or self._kept_off(principal)):
            if principal != self._opened_by:
                self._others_refused = True
            return None
        self._probes_in_flight += 1
        return Permit(self._spell, principal)

    def _kept_off(self, principal: str) -> bool:
        return (principal == self._opened_by and self._others_refused
                and self._clock() < self._half_open_at + self._policy.cool_down_s)

    def on_success(self, permit: Permit) -> None:
        """An admitted attempt succeeded."""
        now = self._clock()
        self._window.add(now, failed=False)
        self._principals.add(permit.principal, now, failed=False)
        self._consecutive = 0
        if self._probing(permit):
            self._release_probe()
            self._probe_successes += 1
            if self._probe_successes >= self._policy.successes_to_close:
                self._close(now)

    def on_failure(self, permit: Permit, retry_after_s: float | None = None,
                   code: str | None = None) -> None:
        """An admitted attempt failed in a way that counts against the deployment; with
        `retry_after_s`, the wait its provider asked for (see the module's docstring); `code`,
        the failure's (an operator reads it in the log line of an opening and in the
        snapshot: a revoked key, `upstream_auth`, from an outage)."""
        now = self._clock()
        if code is not None:
            self._last_failure = code
        self._window.add(now, failed=True)
        self._principals.add(permit.principal, now, failed=True)
        self._consecutive += 1
        state = self.state()
        if state == "half_open":
            if self._probing(permit):
                self._release_probe()
            self._open(now, self._policy.cool_down_s)
        elif state == "closed" and opens(self._policy, self._counts(now),
                                         (own for _, own in self._principals.counts(now))):
            self._open(now, self._policy.cool_down_s)
        if retry_after_s is not None and retry_after_s > 0 and (
                self._open_until is not None or holds(
                    self._policy, self._counts(now),
                    (own for _, own in self._principals.counts(now)))):
            self._open(now, min(retry_after_s, self._policy.max_hold_s))

    def _counts(self, now: float) -> Counts:
        return Counts(self._consecutive, *self._window.counts(now))

    def on_abandon(self, permit: Permit) -> None:
        """An admitted attempt ended without a verdict (cancelled, lost a hedge race)."""
        if self._probing(permit):
            self._release_probe()

    def _probing(self, permit: Permit) -> bool:
        """Whether `permit` is a probe of the half-open spell the circuit is in now."""
        return permit.probe_of == self._spell and self.state() == "half_open"

    def probe_in_s(self) -> float | None:
        """Seconds until an open breaker admits a probe (0 once it would; None when no time
        is known: closed, or half-open with its probe in flight)."""
        if self._open_until is None:
            return None
        return max(0.0, self._open_until - self._clock())

    def snapshot(self, name: str) -> DeploymentHealth:
        """A serialisable view of this breaker."""
        now = self._clock()
        state = self.state()
        requests, failures = self._window.counts(now)
        retry_in = self.probe_in_s()
        return DeploymentHealth(
            deployment=name,
            state=state,
            consecutive_failures=self._consecutive,
            window_requests=requests,
            window_failures=failures,
            error_rate=failures / requests if requests else 0.0,
            half_open_in_s=retry_in,
            probes_in_flight=self._probes_in_flight,
            last_failure_code=self._last_failure,
            seconds_in_state=now - self._last_change,
        )

    def _open(self, now: float, hold_s: float) -> None:
        until = now + hold_s
        if self._open_until is None or until > self._open_until:
            if self._open_until is None:
                self._last_change = now
                self._opened_by = blamed(dict(self._principals.counts(now)))
                if self._on_change is not None:
                    self._on_change("open", hold_s, self._last_failure)
            self._open_until = until
        self._half_open = False
        self._probe_successes = 0

    def _close(self, now: float) -> None:
        if self._on_change is not None:
            self._on_change("closed", None, None)
        self._half_open = False
        self._probes_in_flight = 0
        self._probe_successes = 0
        self._consecutive = 0
        self._window.clear()
        self._principals.clear()
        self._opened_by, self._others_refused = None, False
        self._last_change = now

    def _release_probe(self) -> None:
        self._probes_in_flight = max(0, self._probes_in_flight - 1)

    def _tick(self) -> None:
        """Move open → half-open once the cool-down has elapsed."""
        if self._open_until is not None and self._clock() >= self._open_until:
            self._last_change = self._half_open_at = self._open_until
            self._open_until = None
            self._half_open = True
            self._spell += 1
            self._probes_in_flight = 0
            self._probe_successes = 0


class DeploymentHealth(BaseModel):
    """One deployment's breaker, as served by `GET /v1/health/deployments`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: str
    state: BreakerState
    consecutive_failures: int
    window_requests: int
    window_failures: int
    error_rate: float
    half_open_in_s: float | None
    probes_in_flight: int
    last_failure_code: str | None  # the code of the latest failure it counted (None: none yet)
    seconds_in_state: float


class DeploymentsHealth(BaseModel):
    """The response body of `GET /v1/health/deployments`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployments: list[DeploymentHealth]


class BreakerRegistry:
    """One breaker per deployment name, created on first use with a shared policy."""

    def __init__(self, policy: BreakerPolicy, clock: Clock,
                 on_change: Callable[[str, BreakerState, float | None, str | None], None]
                 | None = None) -> None:
        """`on_change(deployment, state, hold_s, cause)`: each breaker's openings and closings
        (the service logs them: `breaker_opened` with the code that opened it,
        `breaker_closed`)."""
        self._policy = policy
        self._clock = clock
        self._on_change = on_change
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, deployment: str) -> CircuitBreaker:
        """The breaker of `deployment` (names come from configuration, so this is bounded)."""
        breaker = self._breakers.get(deployment)
        if breaker is None:
            told = self._on_change
            breaker = CircuitBreaker(self._policy, self._clock, None if told is None else
                                     functools.partial(told, deployment))
            self._breakers[deployment] = breaker
        return breaker

    def state(self, deployment: str) -> BreakerState:
        """The state of `deployment` without admitting anything."""
        return self.get(deployment).state()

    def is_open(self, deployment: str) -> bool:
        """Whether `deployment`'s circuit is open (read for every candidate of every request:
        a closed circuit answers without a clock read). A deployment read here is known from
        then on (`snapshot` lists it), as one ranked always was."""
        breaker = self._breakers.get(deployment)
        return (breaker if breaker is not None else self.get(deployment)).is_open()

    def soonest_probe_s(self, deployments: Iterable[str]) -> float:
        """The `Retry-After` for a request whose candidates are all held by open circuits:
        when the first of `deployments` admits a probe again (`soonest_whole_seconds`)."""
        return soonest_whole_seconds(self.get(name).probe_in_s() for name in deployments)

    def snapshot(self) -> DeploymentsHealth:
        """All known deployments, sorted by name."""
        return DeploymentsHealth(
            deployments=[self._breakers[name].snapshot(name) for name in sorted(self._breakers)]
        )


def soonest_whole_seconds(waits: Iterable[float | None]) -> float:
    """The shortest of `waits` in whole seconds, rounded up, at least 1 (as `Retry-After` is
    sent); a wait that is not known (None) counts as 1, as does no wait at all."""
    known = [1.0 if wait is None else wait for wait in waits]
    return float(max(1, math.ceil(min(known, default=1.0))))
