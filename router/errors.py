"""The project's error hierarchy: every failure a client can see, with its HTTP status.

    SlorouterError                      500 api_error
    ├── RequestError                    400 invalid_request_error
    │   ├── AuthenticationError         401 authentication_error
    │   ├── PermissionDeniedError       403 permission_error
    │   ├── NotFoundError               404 not_found_error (unknown model)
    │   ├── RequestTimeoutError         408 invalid_request_error (the body stopped arriving)
    │   ├── PayloadTooLargeError        413 invalid_request_error
    │   ├── ConflictError               422 invalid_request_error (idempotency key reuse)
    │   └── TenantRateLimitedError      429 rate_limit_error (tenant over its share)
    ├── ProviderError                   502 upstream_error        retryable by default
    │   ├── ProviderTimeoutError        504 timeout               retryable
    │   ├── ProviderRateLimitedError    429 rate_limit_error      retryable, carries retry_after
    │   ├── ProviderUnavailableError    503 service_unavailable   retryable (5xx, 409 upstream)
    │   ├── ProviderRejectedError       400 invalid_request_error not retryable (the request's
    │   │                                                          fault: 400/413/422 upstream)
    │   ├── ProviderMisconfiguredError  502 upstream_error        not retryable on this deployment
    │   │                                                          (401/402/403/404 upstream)
    │   └── UnknownCommitError          504 timeout               never retried blindly
    ├── AllCandidatesFailedError        502 upstream_error
    ├── NoEligibleModelError            503 no_eligible_model (policy: nothing clears the floor)
    ├── OverloadedError                 503 overloaded_error (admission full), carries retry_after
    ├── ClientStalledError              504 timeout (the client stopped reading a stream)
    └── ConfigError                     (start-up only; never rendered to a client)

Third-party exceptions (litellm, httpx, aiohttp) are translated to these in exactly one module,
`router.providers.exception_mapping`; an upstream's error status and body, in
`router.providers.upstream_answers`. The HTTP layer renders any of them as OpenAI's error JSON.

`refused_by_admission` marks the admission controller's own refusals (`router.admission.pool`):
what counts them in `slorouter.admission.rejections` and jitters their `Retry-After`. Their codes
(`overloaded`, `queue_timeout`, `tenant_over_share`) say why, not who: an upstream's error may carry
the same code, and is never such a refusal. `spread_retry_after` jitters the `Retry-After` of
another refusal of the router's own for want of room that frees at no known time (the bulkhead's
`deployment_saturated`), or until an open circuit breaker admits a probe again (`circuit_open`,
and `no_eligible_model` when open circuits are why), so that clients refused together do not all
come back together; every admission refusal has it too. The spread only lengthens the wait
(between it and twice it), so no client is told to come back before it ends.
"""

from __future__ import annotations

# The most characters of a client's header or `metadata` value a 400 quotes back (`shown`):
# enough to tell which value it was, too few to carry much of whatever else it holds.
ECHOED_CHARS = 32


def shown(value: object, limit: int = ECHOED_CHARS) -> str:
    """What an error message may echo of a client's `value`: its first `limit` characters, and
    an ellipsis when there were more (a long value could hold anything, prompt text
    included, and made every error that quoted it as long)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


class SlorouterError(Exception):
    """Base of every error the service raises on purpose."""

    status_code: int = 500
    error_type: str = "api_error"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        refused_by_admission: bool = False,
        spread_retry_after: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after
        self.refused_by_admission = refused_by_admission
        self.spread_retry_after = spread_retry_after or refused_by_admission

    def to_openai(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI error body: `{"error": {"message", "type", "param", "code"}}`."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class RequestError(SlorouterError):
    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationError(RequestError):
    status_code = 401
    error_type = "authentication_error"


class PermissionDeniedError(RequestError):
    status_code = 403
    error_type = "permission_error"


class NotFoundError(RequestError):
    status_code = 404
    error_type = "not_found_error"


class RequestTimeoutError(RequestError):
    status_code = 408


class PayloadTooLargeError(RequestError):
    status_code = 413


class UnsupportedMediaTypeError(RequestError):
    status_code = 415


class ConflictError(RequestError):
    status_code = 422


class StillRunningError(ConflictError):
    """A request with the same Idempotency-Key is still running: 409, as the IETF
    Idempotency-Key draft asks (the OpenAI SDKs retry a 409 by themselves)."""

    status_code = 409


class TenantRateLimitedError(RequestError):
    status_code = 429
    error_type = "rate_limit_error"


class ProviderError(SlorouterError):
    """An upstream attempt failed. `retryable` says whether another attempt may help."""

    status_code = 502
    error_type = "upstream_error"
    retryable = True


class ProviderTimeoutError(ProviderError):
    status_code = 504
    error_type = "timeout"


class ProviderRateLimitedError(ProviderError):
    status_code = 429
    error_type = "rate_limit_error"


class ProviderUnavailableError(ProviderError):
    status_code = 503
    error_type = "service_unavailable"


class ProviderRejectedError(ProviderError):
    """The provider refused the request itself (validation, content policy, context length)."""

    status_code = 400
    error_type = "invalid_request_error"
    retryable = False


class ProviderMisconfiguredError(ProviderError):
    """The provider refused the deployment, not the request: its key (401), its account (402),
    its access (403) or its model (404). The gateway's fault, never the caller's: a 502 that
    counts against the deployment's breaker, and another deployment may serve the request."""

    status_code = 502
    error_type = "upstream_error"
    retryable = False


class UnknownCommitError(ProviderError):
    """The attempt may have taken effect upstream (side effects): never retried blindly."""

    status_code = 504
    error_type = "timeout"
    retryable = False


class AllCandidatesFailedError(SlorouterError):
    status_code = 502
    error_type = "upstream_error"


class NoEligibleModelError(SlorouterError):
    """The task's policy has no candidate that passes its checks, and says to reject."""

    status_code = 503
    error_type = "no_eligible_model"


class OverloadedError(SlorouterError):
    status_code = 503
    error_type = "overloaded_error"


class ClientStalledError(SlorouterError):
    """A stream whose client stopped reading until past the request's deadline, cut to free its
    slot and upstream call: the client's doing, as a client that left is, so no failure of the
    service's SLO nor of the deployment that was answering (recorded as `deadline_exceeded`)."""

    status_code = 504
    error_type = "timeout"

class ConfigError(SlorouterError):
    """Invalid configuration found at start-up; `problems` lists every one of them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(problems))
        self.problems = problems
