"""Error verdicts: retry transient failures, move past rejections, never blindly repeat effects."""

from __future__ import annotations

import pytest

from router.errors import (
    AllCandidatesFailedError,
    AuthenticationError,
    ProviderError,
    ProviderMisconfiguredError,
    ProviderRateLimitedError,
    ProviderRejectedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    SlorouterError,
    UnknownCommitError,
)
from router.execution.classify_error import AttemptContext, classify

PLAIN = AttemptContext(side_effecting=False, request_sent=True, content_sent=False)
EFFECT_SENT = AttemptContext(side_effecting=True, request_sent=True, content_sent=False)
EFFECT_UNSENT = AttemptContext(side_effecting=True, request_sent=False, content_sent=False)
STREAMED = AttemptContext(side_effecting=False, request_sent=True, content_sent=True)


@pytest.mark.parametrize(
    "error",
    [
        ProviderUnavailableError("503"),
        ProviderTimeoutError("first token timeout"),
        ProviderError("connection reset"),
        TimeoutError(),
    ],
)
def test_transient_failures_are_retried_and_count_against_the_deployment(
    error: BaseException,
) -> None:
    """5xx, timeouts and broken connections are retryable and feed the breaker."""
    verdict = classify(error, PLAIN)
    assert verdict.action == "retry"
    assert verdict.breaker_failure


def test_rate_limit_is_retried_with_its_retry_after_even_for_side_effects() -> None:
    """A 429 was not acted on: retryable even for a side-effecting call, carrying Retry-After."""
    verdict = classify(ProviderRateLimitedError("429", retry_after=3.0), EFFECT_SENT)
    assert verdict.action == "retry"
    assert verdict.retry_after_s == 3.0


def test_explicit_503_is_retried_even_for_side_effects() -> None:
    """An explicit 503 answer means the provider did not act: retryable for any request."""
    assert classify(ProviderUnavailableError("503"), EFFECT_SENT).action == "retry"


def test_rejection_moves_to_next_candidate_without_blaming_the_deployment() -> None:
    """Context length / content policy rejections try another candidate, not the same one."""
    verdict = classify(ProviderRejectedError("too long", code="upstream_rejected"), PLAIN)
    assert verdict.action == "next_candidate"
    assert not verdict.breaker_failure


@pytest.mark.parametrize("code", ["upstream_auth", "upstream_permission", "upstream_not_found",
                                  "upstream_payment_required"])
@pytest.mark.parametrize("ctx", [PLAIN, EFFECT_SENT])
def test_misconfigured_deployment_moves_on_and_counts_against_the_deployment(
    code: str, ctx: AttemptContext
) -> None:
    """Upstream 401/402/403/404: the deployment is wrong, not the request. Try another one (never
    the same), count it against the breaker, and never call it an unknown commit: the provider
    answered without acting."""
    verdict = classify(ProviderMisconfiguredError("refused", code=code), ctx)
    assert verdict.action == "next_candidate"
    assert verdict.breaker_failure


@pytest.mark.parametrize("code", ["upstream_rejected", "context_length_exceeded",
                                  "adapter_rejected", "upstream_not_found"])
def test_request_faults_never_count_against_the_deployment(code: str) -> None:
    """A `ProviderRejectedError` is the request's fault whatever its code."""
    assert not classify(ProviderRejectedError("no", code=code), PLAIN).breaker_failure


@pytest.mark.parametrize(
    "error", [ProviderTimeoutError("t"), ProviderError("reset"), TimeoutError()]
)
def test_side_effecting_timeout_after_sending_is_unknown_commit(error: BaseException) -> None:
    """A side-effecting request that reached the provider and then broke is never retried."""
    assert classify(error, EFFECT_SENT).action == "unknown_commit"


def test_side_effecting_failure_before_sending_is_retried() -> None:
    """If the request never reached the provider, nothing can have happened: retry."""
    assert classify(ProviderTimeoutError("connect"), EFFECT_UNSENT).action == "retry"


def test_explicit_unknown_commit_is_kept() -> None:
    """`UnknownCommitError` from the adapter stays unknown-commit."""
    assert classify(UnknownCommitError("?"), PLAIN).action == "unknown_commit"


@pytest.mark.parametrize(
    "error", [ProviderUnavailableError("503"), ProviderRejectedError("bad"), TimeoutError()]
)
def test_nothing_is_retried_after_content_was_sent(error: BaseException) -> None:
    """Once content reached the client the only option is an error event: give up."""
    assert classify(error, STREAMED).action == "give_up"


@pytest.mark.parametrize(
    "error",
    [AuthenticationError("who?"), AllCandidatesFailedError("none"), SlorouterError("x"),
     ValueError("bug")],
)
def test_client_errors_and_bugs_give_up(error: BaseException) -> None:
    """The client's own errors and unexpected exceptions are not retried."""
    verdict = classify(error, PLAIN)
    assert verdict.action == "give_up"
    assert not verdict.breaker_failure
