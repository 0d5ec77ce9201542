"""What to do after an attempt failed: a pure map from (error, attempt context) to a verdict.

    verdict          meaning for the execution loop
    retry            transient: retry this deployment (backoff, retry budget, breaker and
                     deadline permitting), else move to the next candidate
    next_candidate   this deployment will not do: it rejected the request (the request's fault,
                     another model may take it) or the provider refused the deployment itself
                     (its key, access or model: a breaker failure); try the next candidate that
                     fits, never the same one
    unknown_commit   the attempt may have taken effect upstream (a side-effecting request that
                     was sent, then timed out or broke): stop, answer 504 `UnknownCommitError`;
                     never retried blindly
    give_up          nothing else can help: the client's own error, an error after content was
                     already streamed (end the stream with an error event), or an unexpected bug

Errors are our `router.errors` classes (third-party errors were mapped in
`router.providers.exception_mapping` and `router.providers.upstream_answers`); `TimeoutError`
from an `asyncio.timeout` around the attempt counts as a provider timeout.
`asyncio.CancelledError` is never classified: it must propagate. `progressing` says whether a
timeout that cut a committed stream found it still writing (then no breaker failure: its length
was the request's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from router.errors import (
    ProviderError,
    ProviderMisconfiguredError,
    ProviderRateLimitedError,
    ProviderRejectedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    SlorouterError,
    UnknownCommitError,
)

Action = Literal["retry", "next_candidate", "unknown_commit", "give_up"]


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What the execution loop knows about the failed attempt.

    `request_sent`: the request reached the provider (connected and written), so it may have
    been acted on. `content_sent`: a content chunk of this request already went to the client.
    """

    side_effecting: bool
    request_sent: bool
    content_sent: bool


@dataclass(frozen=True, slots=True)
class ErrorVerdict:
    """The decision, whether it counts against the deployment's breaker, and any wait asked."""

    action: Action
    breaker_failure: bool
    retry_after_s: float | None
    reason: str


def classify(error: BaseException, ctx: AttemptContext) -> ErrorVerdict:
    """The verdict for `error` raised by an attempt made in context `ctx`."""
    health = _counts_against_deployment(error)
    retry_after = error.retry_after if isinstance(error, SlorouterError) else None
    if ctx.content_sent:
        return ErrorVerdict("give_up", health, None, "content already sent to the client")
    if isinstance(error, UnknownCommitError):
        return ErrorVerdict("unknown_commit", health, None, "provider reported unknown commit")
    if isinstance(error, ProviderRejectedError):
        return ErrorVerdict("next_candidate", health, None, "deployment rejected the request")
    if isinstance(error, ProviderMisconfiguredError):
        # 401/402/403/404: the provider answered without acting, so even a side effect is safe.
        return ErrorVerdict("next_candidate", health, None, "deployment misconfigured")
    if isinstance(error, ProviderRateLimitedError | ProviderUnavailableError):
        # An explicit 429/503 answer: the provider did not act on it, even if side-effecting.
        return ErrorVerdict("retry", health, retry_after, _transient_reason(error))
    if isinstance(error, ProviderError | TimeoutError):
        if ctx.side_effecting and ctx.request_sent:
            return ErrorVerdict("unknown_commit", health, None, "side effect may have happened")
        return ErrorVerdict("retry", health, retry_after, _transient_reason(error))
    return ErrorVerdict("give_up", health, None, "not a provider error")


def _counts_against_deployment(error: BaseException) -> bool:
    """Whether the failure says the deployment is unhealthy (feeds its circuit breaker)."""
    if isinstance(error, ProviderRejectedError):
        return False  # the request's fault, not the deployment's
    return isinstance(error, ProviderError | TimeoutError)


# A stream whose last content chunk came less than this long before a timeout cut it was still
# writing (`progressing`), when its task sets no stall threshold, or a longer one: gaps between
# a healthy stream's chunks are tens of milliseconds, and a deployment that stops writing
# mid-answer is still counted when the cut finds it silent for longer.
STREAM_STALL_GAP_S = 2.0


def progressing(idle_s: float | None, stall_after_s: float | None) -> bool:
    """Whether a stream cut `idle_s` seconds after its last content chunk was still writing:
    the gap is under its stall threshold (`stall_after_s`, at most `STREAM_STALL_GAP_S`).
    None (not known): not progressing, as before."""
    if idle_s is None:
        return False
    gap = STREAM_STALL_GAP_S if stall_after_s is None else min(stall_after_s,
                                                                STREAM_STALL_GAP_S)
    return idle_s < gap


def _transient_reason(error: BaseException) -> str:
    if isinstance(error, ProviderRateLimitedError):
        return "rate limited"
    if isinstance(error, ProviderTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(error, ProviderUnavailableError):
        return "unavailable"
    return "upstream error"
