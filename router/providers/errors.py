"""The one place where third-party errors become the project's errors (`router.errors`).

litellm and the openai SDK share exception class names, so they are matched by the names in
their class hierarchy (this module does not import litellm: only the litellm adapter does).
The pass-through adapter's own HTTP client (`router.providers.http1`) and asyncio raise the
transport errors; aiohttp's are mapped too, should a library let one through. Upstream HTTP
statuses from either adapter go through `from_status`.
"""

from __future__ import annotations

import asyncio

import aiohttp

from router import errors as e
from router.providers.http1 import ResponseBroken, UpstreamUnreachable

# Most specific names first: the first name found in an exception's MRO wins.
_BY_CLASS_NAME: dict[str, type[e.SlorouterError]] = {
    "ContextWindowExceededError": e.ProviderRejectedError,
    "ContentPolicyViolationError": e.ProviderRejectedError,
    "UnsupportedParamsError": e.ProviderRejectedError,
    "JSONSchemaValidationError": e.ProviderRejectedError,
    "MalformedRequestFieldError": e.ProviderRejectedError,
    "ImageFetchError": e.ProviderRejectedError,
    "UnprocessableEntityError": e.ProviderRejectedError,
    "InvalidRequestError": e.ProviderRejectedError,
    "BadRequestError": e.ProviderRejectedError,
    "AuthenticationError": e.ProviderRejectedError,
    "CallerCredentialAuthenticationError": e.ProviderRejectedError,
    "PermissionDeniedError": e.ProviderRejectedError,
    "PaymentRequiredError": e.ProviderRejectedError,
    "BudgetExceededError": e.ProviderRejectedError,
    "NotFoundError": e.ProviderRejectedError,
    "ModelNotMappedError": e.ProviderRejectedError,
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


def from_status(status: int, message: str, retry_after: float | None = None) -> e.ProviderError:
    """An upstream HTTP error status as a provider error."""
    text = f"upstream returned {status}: {message[:300]}"
    if status == 429:
        return e.ProviderRateLimitedError(text, code="rate_limited", retry_after=retry_after)
    if status in (408, 504):
        return e.ProviderTimeoutError(text, code="upstream_timeout")
    if status >= 500:
        return e.ProviderUnavailableError(text, code="upstream_unavailable",
                                          retry_after=retry_after)
    return e.ProviderRejectedError(text, code="upstream_rejected")


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def map_exception(exc: BaseException) -> e.SlorouterError:
    """Translate any exception raised by an upstream attempt into the project's hierarchy."""
    if isinstance(exc, e.SlorouterError):
        return exc
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return e.ProviderTimeoutError("upstream timed out", code="upstream_timeout")
    if isinstance(exc, ResponseBroken):
        return e.ProviderError(f"upstream stream broke: {exc}", code="upstream_stream_cut")
    if isinstance(exc, UpstreamUnreachable):
        return e.ProviderUnavailableError(f"upstream unreachable: {exc}",
                                          code="upstream_unavailable")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return e.ProviderError(f"upstream stream broke: {exc}", code="upstream_stream_cut")
    if isinstance(exc, aiohttp.ClientError):
        return e.ProviderUnavailableError(f"upstream unreachable: {type(exc).__name__}",
                                          code="upstream_unavailable")
    for klass in type(exc).__mro__:
        target = _BY_CLASS_NAME.get(klass.__name__)
        if target is not None:
            return _from_named(target, exc)
    return e.ProviderError(f"upstream failed: {type(exc).__name__}", code="upstream_error")


def _from_named(target: type[e.SlorouterError], exc: BaseException) -> e.SlorouterError:
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "message", None) or exc)[:300]
    retry_after = _retry_after_of(exc)
    if isinstance(status, int) and target is e.ProviderError and status >= 400:
        return from_status(status, message, retry_after)
    code = "upstream_rejected" if target is e.ProviderRejectedError else "upstream_error"
    return target(f"{type(exc).__name__}: {message}", code=code, retry_after=retry_after)


def _retry_after_of(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        return parse_retry_after(headers.get("retry-after"))
    except AttributeError:
        return None
