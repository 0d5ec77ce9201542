"""What a request's failed or skipped attempts mean for its client: the one error it gets
(the shared class and the soonest `Retry-After` when every attempt failed alike, `circuit_open`
or `deployment_saturated` when none could start, a 504 when the deadline ran out first), and
the reading of an exception raised by an attempt. Pure functions over `AttemptRecord`s."""

from __future__ import annotations

from collections.abc import Sequence

from router.errors import (
    AllCandidatesFailedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    SlorouterError,
)
from router.execution.attempt import SATURATED, AttemptRecord, saturated
from router.execution.breaker import soonest_whole_seconds


def deadline_exceeded(when: str) -> ProviderTimeoutError:
    """The request's deadline passed `when` (a 504, or a stream's last event)."""
    return ProviderTimeoutError(f"request deadline exceeded {when}", code="deadline_exceeded")


def failed_alike_before(record: AttemptRecord, attempts: list[AttemptRecord]) -> bool:
    """An attempt of the same request before `record` failed with an error of the same class
    and code as `record`'s, and was judged for it (an earlier one left unjudged, a timeout that
    fired late after a pause, hid the retry's real timeout: the second re-audit of
    2026-12-06)."""
    err = record.error
    return err is not None and any(
        other is not record and other.outcome == "failed" and other.judged
        and other.error is not None
        and type(other.error) is type(err) and other.error.code == err.code
        and other.number < record.number for other in attempts)


def as_error(exc: BaseException) -> SlorouterError:
    if isinstance(exc, SlorouterError):
        return exc
    if isinstance(exc, TimeoutError):
        return ProviderTimeoutError("upstream timed out", code="upstream_timeout")
    return AllCandidatesFailedError(f"attempt failed: {type(exc).__name__}",
                                    code="attempt_failed")


def deadline_passed(attempts: list[AttemptRecord]) -> SlorouterError:
    """The deadline ran out before the next attempt: the failures so far if there were any,
    else a 504 like a deadline that runs out during an attempt."""
    if any(a.outcome == "failed" for a in attempts):
        return exhausted(attempts, "request deadline exceeded")
    return ProviderTimeoutError("request deadline exceeded before an upstream attempt could "
                                "start", code="deadline_exceeded")


def exhausted(attempts: list[AttemptRecord], why: str = "") -> SlorouterError:
    errors = [a.error for a in attempts if a.error is not None and a.outcome == "failed"]
    if not errors:
        skipped = [a.error for a in attempts if a.passed_over and a.error is not None]
        full = [err.code == SATURATED for err in skipped]
        if any(full):
            also = "" if all(full) else " or its circuit breaker open"
            return saturated("every deployment that could serve has its max_in_flight "
                             f"attempts in flight{also}")
        if skipped:
            # spread like admission's refusals: every client refused while the breakers are
            # open would come back in the same second, for one probe slot
            return ProviderUnavailableError("every deployment's circuit breaker is open (or "
                                            "half-open, its one recovery probe in flight)",
                                            code="circuit_open",
                                            retry_after=soonest_reopening(skipped),
                                            spread_retry_after=True)
        return AllCandidatesFailedError("no deployment to try", code="no_candidates")
    last = errors[-1]
    summary = "; ".join(f"{a.deployment}: {a.error.message}" for a in attempts
                        if a.error is not None and a.outcome == "failed")
    prefix = f"{why}: " if why else ""
    message = f"{prefix}all {len(errors)} attempts failed: {summary}"
    if last.code == "deadline_exceeded":
        # The deadline ended the trying, whatever failed before: the client is told that (a
        # 504 it may retry with a longer one), not that the attempts failed in different ways.
        return deadline_exceeded(f"after {len(errors)} attempts: {summary}")
    if all(type(err) is type(last) for err in errors):
        # come back when the first of them may answer (429s holding for 30 s and 7 s: 7)
        waits = [err.retry_after for err in errors if err.retry_after is not None]
        return type(last)(message, param=last.param, code=last.code,
                          retry_after=min(waits, default=None))
    return AllCandidatesFailedError(message, code="all_candidates_failed")


def soonest_reopening(skipped: Sequence[SlorouterError]) -> float:
    """Whole seconds until the first skipped deployment admits a probe again (at least 1; a
    half-open breaker whose probe is in flight has no known time and counts as 1)."""
    return soonest_whole_seconds(err.retry_after for err in skipped)
