"""One deadline per request, and the per-attempt timeouts carved out of it.

A `Deadline` is fixed when the request arrives: the policy's total, shortened (never lengthened)
by the client's `x-slorouter-timeout-ms` header or, for an answer that is not streamed, by the
OpenAI SDKs' own timeout headers (seconds; see `requested_timeout_s`). Every retry, hedge and
fallback draws on the same deadline; `attempt_timeouts` caps each attempt's connect /
first-token / total timeouts by what remains.

Time comes from an injected monotonic clock (`time.monotonic` in production), so everything here
is pure and testable. Awaiting with these numbers (`asyncio.timeout(...)`) is the caller's job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from router.errors import RequestError, shown

Clock = Callable[[], float]
"""A monotonic clock in seconds (`time.monotonic`, or a fake in tests)."""

TIMEOUT_MS_HEADER = "x-slorouter-timeout-ms"
SDK_TIMEOUT_HEADER = "x-stainless-timeout"  # openai-node: its timeout, in seconds
SDK_READ_TIMEOUT_HEADER = "x-stainless-read-timeout"  # openai-python: its read timeout
# The router answers this much before an SDK's own timeout (a share of it, at most the cap), so
# that its answer reaches the SDK before the SDK gives up: an SDK timer started when the request
# left, and a deadline at the same time on arrival lost the race (about 5 ms late on loopback).
SDK_HEADROOM_SHARE = 0.1
SDK_HEADROOM_MAX_S = 0.5


@dataclass(frozen=True, slots=True)
class AttemptTimeoutPolicy:
    """Per-attempt timeouts before capping by the request deadline (seconds)."""

    connect_s: float = 3.0
    first_token_s: float = 15.0
    total_s: float = 120.0


@dataclass(frozen=True, slots=True)
class AttemptTimeouts:
    """The timeouts for one upstream attempt, each already capped by the remaining deadline."""

    connect_s: float
    first_token_s: float
    total_s: float


def requested_timeout_s(headers: Mapping[str, str], *, stream: bool = False) -> float | None:
    """The client's requested total timeout in seconds, the shortest its headers ask for.

    `x-slorouter-timeout-ms` bounds the whole answer. The OpenAI SDKs' headers say how long the
    SDK waits for the response (openai-node's `x-stainless-timeout` until its head,
    openai-python's `x-stainless-read-timeout` for each read): a whole answer's head and body
    come together, so for a request that is not streamed they bound all of it; a stream's head
    comes with its first token and the SDK then waits read by read, so they bound no whole
    stream (cutting it at that time would end answers the SDK still reads), only the wait for
    its head (`head_timeout_s`). An SDK's timeout is shortened by a headroom
    (`sdk_deadline_s`) so that the router's answer arrives before the SDK gives up: the SDK
    retries its own timeouts, even of a side effect, which the router's 504 `unknown_commit`
    (with `x-should-retry: false`) would have stopped.

    `headers` must have lower-case names. Our own header is validated strictly (a bad value is a
    400); the SDKs' headers are advisory, so an unparsable value is ignored.
    """
    candidates: list[float] = []
    raw_ms = headers.get(TIMEOUT_MS_HEADER)
    if raw_ms is not None:
        candidates.append(_parse_ours(raw_ms))
    if not stream and (sdk := head_timeout_s(headers)) is not None:
        candidates.append(sdk)  # a whole answer's head comes with all of it
    return min(candidates) if candidates else None


def head_timeout_s(headers: Mapping[str, str]) -> float | None:
    """How long a stream may take to its head (sent with its first content chunk), by the
    OpenAI SDKs' timeout headers (less the headroom, `sdk_deadline_s`), or None: the SDK waits
    that long for the head and then gives up and retries, a side effect too."""
    bounds = [sdk_deadline_s(value) for name in (SDK_TIMEOUT_HEADER, SDK_READ_TIMEOUT_HEADER)
              if (raw := headers.get(name)) is not None
              and (value := _parse_positive(raw)) is not None]
    return min(bounds) if bounds else None


def sdk_deadline_s(sdk_timeout_s: float) -> float:
    """The router's deadline for an SDK that gives up after `sdk_timeout_s`: a tenth earlier,
    at most half a second, so the answer (a 504 included) is read before the SDK's timer runs
    out."""
    return sdk_timeout_s - min(SDK_HEADROOM_MAX_S, SDK_HEADROOM_SHARE * sdk_timeout_s)


def _parse_ours(raw: str) -> float:
    value = _parse_positive(raw)
    if value is None:
        raise RequestError(
            f"{TIMEOUT_MS_HEADER} must be a positive number of milliseconds, got "
            f"{shown(raw)!r}",
            param=TIMEOUT_MS_HEADER,
            code="invalid_timeout",
        )
    return value / 1000.0


_DECIMAL = re.compile(r"[+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _parse_positive(raw: str) -> float | None:
    """A plain decimal number (`1500`, `2.5`, `1e3`) above 0; `float`'s other spellings
    (`1_000`, `infinity`) are not numbers a header should carry."""
    text = raw.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        return None
    return value


@dataclass(frozen=True, slots=True)
class Deadline:
    """A fixed point on the monotonic clock by which the whole request must finish."""

    started_at: float
    expires_at: float
    clock: Clock

    @classmethod
    def start(cls, clock: Clock, policy_s: float, client_s: float | None = None) -> Deadline:
        """A deadline from now: the policy's total, or the client's if shorter."""
        if policy_s <= 0:
            raise ValueError("policy timeout must be positive")
        total = min(policy_s, client_s) if client_s is not None else policy_s
        now = clock()
        return cls(started_at=now, expires_at=now + total, clock=clock)

    @classmethod
    def from_headers(
        cls, clock: Clock, policy_s: float, headers: Mapping[str, str], *, stream: bool = False
    ) -> Deadline:
        """A deadline from the policy default and the request's lower-cased headers (`stream`:
        the request is streamed, so the SDKs' timeout headers bound only its head)."""
        return cls.start(clock, policy_s, requested_timeout_s(headers, stream=stream))

    @property
    def total_s(self) -> float:
        """The whole budget, from start to expiry."""
        return self.expires_at - self.started_at

    def elapsed(self) -> float:
        """Seconds since the deadline started."""
        return self.clock() - self.started_at

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires_at - self.clock())

    def expired(self) -> bool:
        """Whether no time is left."""
        return self.clock() >= self.expires_at

    def allows(self, seconds: float) -> bool:
        """Whether `seconds` of work started now would finish before the deadline."""
        return seconds < self.remaining()

    def attempt_timeouts(self, policy: AttemptTimeoutPolicy) -> AttemptTimeouts:
        """Connect, first-token and total timeouts for an attempt starting now."""
        left = self.remaining()
        total = min(policy.total_s, left)
        return AttemptTimeouts(
            connect_s=min(policy.connect_s, total),
            first_token_s=min(policy.first_token_s, total),
            total_s=total,
        )
