"""The one place where third-party exceptions become the project's errors (`router.errors`).

litellm and the openai SDK share exception class names, so they are matched by the names in
their class hierarchy (this module does not import litellm: only the litellm adapter does).
The pass-through adapter's own HTTP client (`router.providers.http1`) and asyncio raise the
transport errors; aiohttp's are mapped too, should a library let one through. An upstream HTTP
status an exception carries is worded and classed as the pass-through's (`from_status` in
`router.providers.upstream_answers`); where in the attempt an exception happened is read from
its cause chain by `router.providers.exception_causes`.

litellm refusing the deployment's own settings before any upstream answered (an unknown
provider prefix or model string, its budget, no key at all) is the deployment's fault too: 502,
codes `deployment_provider_unknown`, `deployment_model_unknown`, `deployment_budget_exceeded`,
`deployment_missing_credentials` (`missing_credentials`). A request field refused by litellm's
own validation before any call is the adapter's limit, not the upstream's refusal: 400
`adapter_rejected` naming the field (`refused_by_litellm`).

The original exception stays chained (`raise ... from exc`) and the outcome records our class
name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TypeVar

import aiohttp

from router import errors as e
from router.providers.error_text import clean_message, message_of, upstream_fields
from router.providers.exception_causes import (
    answered_error_status,
    answered_unreadable,
    build_failure,
    cut_in_transport,
    disconnected_before_head,
    dropped_unanswered,
    failed_building_request,
    failed_reading_answer,
    maybe_received,
    missing_credentials,
    out_of_files,
    raised_before_sending,
    raised_while_connecting,
    refused_by_litellm,
    timed_out_reading,
)
from router.providers.http1 import ResponseBroken, UpstreamDropped, UpstreamUnreachable
from router.providers.upstream_answers import (
    MISCONFIGURED,
    from_status,
    misconfigured,
    not_a_completion,
    retry_after_of,
    retry_delay_in_body,
)

# Most specific names first: the first name found in an exception's MRO wins.
_BY_CLASS_NAME: dict[str, type[e.SlorouterError]] = {
    "ContextWindowExceededError": e.ProviderRejectedError,
    "ContentPolicyViolationError": e.ProviderRejectedError,
    "UnsupportedParamsError": e.ProviderRejectedError,
    "JSONSchemaValidationError": e.ProviderRejectedError,
    "MalformedRequestFieldError": e.ProviderRejectedError,
    "ImageFetchError": e.ProviderRejectedError,
    "PaymentRequiredError": e.ProviderMisconfiguredError,  # a BadRequestError in litellm
    "UnprocessableEntityError": e.ProviderRejectedError,
    "InvalidRequestError": e.ProviderRejectedError,
    "BadRequestError": e.ProviderRejectedError,
    "AuthenticationError": e.ProviderMisconfiguredError,
    "CallerCredentialAuthenticationError": e.ProviderMisconfiguredError,
    "PermissionDeniedError": e.ProviderMisconfiguredError,
    "BudgetExceededError": e.ProviderMisconfiguredError,  # litellm's own budget, not the caller's
    "NotFoundError": e.ProviderMisconfiguredError,
    "ModelNotMappedError": e.ProviderMisconfiguredError,  # the deployment's model string
    "LiteLLMUnknownProvider": e.ProviderMisconfiguredError,  # its provider prefix
    "UnsupportedEndpointError": e.ProviderRejectedError,
    "ZoneInfoNotFoundError": e.ProviderRejectedError,
    "RateLimitError": e.ProviderRateLimitedError,
    "RouterRateLimitError": e.ProviderRateLimitedError,
    "RouterRateLimitErrorBasic": e.ProviderRateLimitedError,
    "ToolLoopMaxRoundsExceeded": e.ProviderError,
    "CallerCredentialRateLimitError": e.ProviderRateLimitedError,
    "Timeout": e.ProviderTimeoutError,
    "APITimeoutError": e.ProviderTimeoutError,
    "ServiceUnavailableError": e.ProviderUnavailableError,
    "BadGatewayError": e.ProviderUnavailableError,
    "InternalServerError": e.ProviderUnavailableError,
    "APIConnectionError": e.ProviderUnavailableError,
    "APIResponseValidationError": e.ProviderError,
    "ErrorEventError": e.ProviderError,
    "VectorStoreSearchError": e.ProviderError,
    "MockException": e.ProviderError,
    "OpenAIError": e.ProviderError,
    "APIError": e.ProviderError,
    "ValidationError": e.ProviderRejectedError,
}

# The `code` a mapped error carries because of its class (first name in the MRO wins); it beats
# the upstream's own code, which beats the generic one.
_CODE_BY_CLASS_NAME: dict[str, str] = {
    "ContextWindowExceededError": "context_length_exceeded",
    "ContentPolicyViolationError": "content_policy_violation",
    "PaymentRequiredError": "upstream_payment_required",
    "CallerCredentialAuthenticationError": "upstream_auth",
    "AuthenticationError": "upstream_auth",
    "PermissionDeniedError": "upstream_permission",
    "NotFoundError": "upstream_not_found",
}

# litellm failing on the deployment's own settings before any upstream answered: code, why.
_MISCONFIGURED_LOCALLY: dict[str, tuple[str, str]] = {
    "LiteLLMUnknownProvider": ("deployment_provider_unknown",
                               "litellm does not know this deployment's provider"),
    "ModelNotMappedError": ("deployment_model_unknown",
                            "litellm cannot map this deployment's model"),
    "BudgetExceededError": ("deployment_budget_exceeded",
                            "litellm's budget for this deployment is spent"),
}
_MISCONFIGURED_BY_CODE = {code: status for status, (code, _) in MISCONFIGURED.items()}
_T = TypeVar("_T")


def map_exception(exc: BaseException) -> e.SlorouterError:
    """Translate any exception raised by an upstream attempt into the project's hierarchy."""
    if isinstance(exc, e.SlorouterError):
        return exc
    if out_of_files(exc):
        # The router's own limit, not the upstream's failure: no breaker or statistics verdict
        # on the deployment (it opened a healthy one's breaker), never `unknown_commit` (nothing
        # was sent), and no local path in the message (litellm's named its install directory).
        return e.OverloadedError("the router has run out of file descriptors; retry shortly",
                                 code="router_out_of_files", retry_after=1.0,
                                 spread_retry_after=True)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # an asyncio.TimeoutError too
        # Never connected, so never sent: nothing to bill (unlike the read timeout below).
        return e.ProviderTimeoutError("upstream timed out connecting", code="upstream_timeout")
    if isinstance(exc, asyncio.TimeoutError) or timed_out_reading(exc):
        # The adapter's own timeout (or its HTTP client's read timeout, aiohttp's
        # `SocketTimeoutError` among them) ran out waiting for an answer to a request it had
        # sent: unlike an answered 408/504, it may be billed.
        return e.ProviderTimeoutError("the upstream's answer did not come, or did not end, "
                                      "within the deployment's timeout",
                                      code="upstream_read_timeout")
    if isinstance(exc, ResponseBroken):
        return e.ProviderError(f"upstream stream broke: {clean_message(str(exc))}",
                               code="upstream_stream_cut")
    if isinstance(exc, UpstreamDropped) or dropped_unanswered(exc):
        # Sent, then dropped unanswered: unlike a refused connection, it may have been acted on.
        return e.ProviderError("upstream closed the connection before answering",
                               code="upstream_dropped")
    if isinstance(exc, UpstreamUnreachable):
        return e.ProviderUnavailableError(f"upstream unreachable: {clean_message(str(exc))}",
                                          code="upstream_unavailable")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return e.ProviderError("upstream stream broke", code="upstream_stream_cut")
    if isinstance(exc, aiohttp.ClientError):
        return e.ProviderUnavailableError(f"upstream unreachable: {type(exc).__name__}",
                                          code="upstream_unavailable")
    missing = missing_credentials(exc)
    if missing is not None:
        return e.ProviderMisconfiguredError(
            f"missing credentials: set this deployment's api_key ({missing})",
            code="deployment_missing_credentials")
    refused = refused_by_litellm(exc)
    if refused is not None:
        return e.ProviderRejectedError(refused[1], param=refused[0], code="adapter_rejected")
    if raised_before_sending(exc) or failed_building_request(exc):
        return e.ProviderRejectedError(
            f"the request could not be prepared for the provider: {build_failure(exc)}",
            code="adapter_rejected")
    if failed_reading_answer(exc):
        return e.ProviderError(
            f"the upstream answered and its answer could not be read: {build_failure(exc)}",
            code="upstream_bad_response")
    if maybe_received(exc):
        return e.ProviderError(
            f"upstream call failed: {message_of(exc) or 'connection error'}",
            code="upstream_connection_error")
    if answered_unreadable(exc):
        return not_a_completion()
    target = _first_in_mro(exc, _BY_CLASS_NAME)
    if target is not None:
        return _from_named(target, exc)
    return e.ProviderError(f"upstream failed: {type(exc).__name__}", code="upstream_error")


def broken_after_head(exc: BaseException, first_read: bool = False) -> e.SlorouterError:
    """`exc`, raised while an answer whose head had come (status 200) was being read, in the
    project's hierarchy. The upstream had the request, so no error may say that it was refused
    before it acted (`ProviderUnavailableError`, `ProviderRateLimitedError`: those are retried
    and failed over even for a side-effecting request). litellm reports a stream that broke or
    ended early (before its finish reason, before any content too) in such classes
    (`MidStreamFallbackError` is a `ServiceUnavailableError`); it is a cut stream, as the
    pass-through adapter reports one, and so is litellm's connection error mid-stream (a
    connection the upstream dropped after content). Some of litellm's providers (Gemini) send
    the request only at the stream's first read, so what happens there (`first_read`) is not
    always after a head: a failure to connect stays what it is, an error status the upstream
    answered is that answer (a 429 with its Retry-After, a 503: refused before acting; litellm
    wraps it in `MidStreamFallbackError`, its own exception in `original_exception`), and a
    connection closed before any head stays `upstream_dropped` (the provider audit of
    2026-12-07: a Gemini 429 read as a cut stream, retried at once, and a side effect's as
    `unknown_commit`, stored under its Idempotency-Key). Only there: a later failure raised
    while an earlier status error was handled is still a cut."""
    if first_read and answered_error_status(exc):
        original = getattr(exc, "original_exception", None)
        return map_exception(original if isinstance(original, BaseException) else exc)
    err = map_exception(exc)
    if first_read and err.code == "upstream_dropped" and disconnected_before_head(exc):
        return err
    refused = isinstance(err, e.ProviderUnavailableError | e.ProviderRateLimitedError)
    # litellm's connection error (or dropped connection) mid-stream, or a transport's own
    # failure reading the body under litellm's error (aiohttp's "Response payload is not
    # completed": an upstream that closed mid-answer)
    dropped = (err.code in ("upstream_connection_error", "upstream_dropped")
               or cut_in_transport(exc))
    if (refused or dropped) and not raised_while_connecting(exc):
        # Its own words, not the dropped mapping's "before answering": the answer had begun.
        said = "the upstream closed the connection mid-answer" if dropped else err.message
        return e.ProviderError(f"upstream stream broke: {said}", code="upstream_stream_cut")
    return err


def _from_named(target: type[e.SlorouterError], exc: BaseException) -> e.SlorouterError:
    status = getattr(exc, "status_code", None)
    message = message_of(exc) or "the provider reported an error"
    retry_after = _retry_after_of(exc)
    named_code = _first_in_mro(exc, _CODE_BY_CLASS_NAME)
    if target is e.ProviderMisconfiguredError:  # the class says which; else the status does
        local = _first_in_mro(exc, _MISCONFIGURED_LOCALLY)
        if local is not None:
            return e.ProviderMisconfiguredError(local[1], code=local[0])
        by_name = _MISCONFIGURED_BY_CODE.get(named_code or "")
        if by_name is None:
            by_name = status if isinstance(status, int) and status in MISCONFIGURED else 404
        return misconfigured(by_name)
    if isinstance(status, int) and target is e.ProviderError and status >= 400:
        code, param = upstream_fields(exc)
        return from_status(status, message, retry_after, code=named_code or code, param=param)
    if target is e.ProviderRejectedError and status in MISCONFIGURED:
        # The status over the class: litellm raises Gemini's and Vertex's 401/403/404 as a
        # `BadRequestError`, which told the client its request was at fault and never counted
        # against the deployment (a suspended key wasted a call on every request).
        return misconfigured(status)
    if target is e.ProviderRejectedError:
        code, param = upstream_fields(exc)
        if isinstance(status, int) and 400 <= status < 500:  # worded as the pass-through does
            message = f"upstream returned {status}: {message}"
        return e.ProviderRejectedError(message, param=param,
                                       code=named_code or code or "upstream_rejected")
    return target(message, code=_GENERIC_CODES.get(target, "upstream_error"),
                  retry_after=retry_after)


# The codes the pass-through adapter gives the same failures (`from_status`), so a client sees
# one code per failure whichever adapter served it.
_GENERIC_CODES: dict[type[e.SlorouterError], str] = {
    e.ProviderRateLimitedError: "rate_limited",
    e.ProviderUnavailableError: "upstream_unavailable",
    e.ProviderTimeoutError: "upstream_timeout",
}


def _first_in_mro(exc: BaseException, table: Mapping[str, _T]) -> _T | None:
    for klass in type(exc).__mro__:
        found = table.get(klass.__name__)
        if found is not None:
            return found
    return None


# litellm's names of the providers whose errors carry Google's `RetryInfo`
RETRY_INFO_PROVIDERS = frozenset({"gemini", "vertex_ai", "vertex_ai_beta"})


def _retry_after_of(exc: BaseException) -> float | None:
    """From the upstream's real headers: litellm keeps them in `litellm_response_headers` (its
    Anthropic errors carry a placeholder `response` without any), else the SDK's response; else
    from the error body litellm quotes (Google's `RetryInfo`, which Gemini sends no header for:
    its 429s were retried within milliseconds and the client got no `retry-after`)."""
    for headers in (getattr(exc, "litellm_response_headers", None),
                    getattr(getattr(exc, "response", None), "headers", None)):
        try:
            found = retry_after_of(headers)
        except (AttributeError, TypeError):
            continue
        if found is not None:
            return found
    # Google's alone send it, and only their bodies are read for it: another provider's
    # message quoting a prompt (litellm's `OpenAIException - <the message>`) read a prompt's
    # RetryInfo as the wait (the re-audit of 2026-12-07)
    if getattr(exc, "llm_provider", None) not in RETRY_INFO_PROVIDERS:
        return None
    return retry_delay_in_body(str(getattr(exc, "message", None) or exc))
