"""Every exception class litellm exports maps to a specific error of ours (DESIGN.md §6)."""

from __future__ import annotations

from router import errors
from router.providers import exception_mapping
from router.providers.litellm_adapter import exception_classes
from router.providers.upstream_answers import from_status

# Exceptions litellm re-exports that are not provider errors (stdlib and config classes).
NOT_PROVIDER_ERRORS = {"ZoneInfoNotFoundError"}


def test_every_litellm_exception_class_has_a_mapping() -> None:
    """Each litellm exception name (or a base's) is in the mapping table."""
    unmapped = [cls.__name__ for cls in exception_classes()
                if cls.__name__ not in NOT_PROVIDER_ERRORS
                and issubclass(cls, Exception)
                and not any(k.__name__ in exception_mapping._BY_CLASS_NAME for k in cls.__mro__)
                and cls.__module__.startswith("litellm")]
    assert unmapped == []


def test_rate_limit_and_timeout_names_map_to_retryable_errors() -> None:
    """Throttling and timeouts are retryable; rejections are not."""
    table = exception_mapping._BY_CLASS_NAME
    assert table["RateLimitError"] is errors.ProviderRateLimitedError
    assert table["Timeout"] is errors.ProviderTimeoutError
    assert errors.ProviderRateLimitedError.retryable and errors.ProviderTimeoutError.retryable
    assert not errors.ProviderRejectedError.retryable


def test_upstream_statuses_map_to_the_right_classes() -> None:
    """429 → rate limited (Retry-After kept), 5xx → unavailable, 504 → timeout, 400/422 →
    rejected (the request's fault), 401/402/403/404 → misconfigured (the deployment's)."""
    limited = from_status(429, "slow down", retry_after=3.0)
    assert isinstance(limited, errors.ProviderRateLimitedError) and limited.retry_after == 3.0
    assert isinstance(from_status(503, "x"), errors.ProviderUnavailableError)
    assert isinstance(from_status(504, "x"), errors.ProviderTimeoutError)
    assert isinstance(from_status(400, "x"), errors.ProviderRejectedError)
    assert isinstance(from_status(422, "x"), errors.ProviderRejectedError)
    for status in (401, 402, 403, 404):
        misconfigured = from_status(status, "x")
        assert isinstance(misconfigured, errors.ProviderMisconfiguredError)
        assert misconfigured.status_code == 502


def test_deployment_fault_names_map_to_the_misconfigured_error() -> None:
    """litellm's authentication, permission, not-found and payment errors blame the deployment."""
    table = exception_mapping._BY_CLASS_NAME
    for name in ("AuthenticationError", "PermissionDeniedError", "NotFoundError",
                 "PaymentRequiredError", "CallerCredentialAuthenticationError"):
        assert table[name] is errors.ProviderMisconfiguredError


def test_litellm_exceptions_instantiate_and_map(litellm_errors: list[BaseException]) -> None:
    """Real litellm exception objects map to our classes with their status kept."""
    for exc in litellm_errors:
        mapped = exception_mapping.map_exception(exc)
        assert isinstance(mapped, errors.SlorouterError)
        assert type(mapped) is not errors.SlorouterError
