"""Upstream answers that are errors, as the project's errors (`router.errors`): an HTTP error
status and its body, an error event in a stream, a 200 that is not what was asked for.

Upstream HTTP statuses from either adapter go through `from_status` (`from_body` parses an error
body first; the litellm adapter's exceptions reach it through `router.providers.exception_mapping`).
Whose fault, by upstream status:

    400, 413, 422, ...   the request's  → ProviderRejectedError (400), the upstream's own `code`
                                          and `param` kept (`context_length_exceeded`, ...)
    401, 402, 403, 404   the deployment's (its key, account, access or model)
                                        → ProviderMisconfiguredError (502), codes `upstream_auth`,
                                          `upstream_payment_required`, `upstream_permission`,
                                          `upstream_not_found`; counted by the breaker
    408, 504             → ProviderTimeoutError, code `upstream_timeout` (no answer at all
                           within the timeout is `upstream_read_timeout`: sent, and may be
                           billed; a connection dropped unanswered is `upstream_dropped`);
                           429 → ProviderRateLimitedError;
    409                  → ProviderUnavailableError, code `upstream_conflict`: a conflict on the
                           provider's side (the OpenAI SDKs retry it), refused before acting,
                           so retried and failed over like a 503, never the caller's 400
    other 5xx            → ProviderUnavailableError

The messages are cleaned by `router.providers.error_text`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping

import orjson

from router import errors as e
from router.execution.backoff import retry_after_from_headers
from router.providers.error_text import (
    SCAN_CHARS,
    bytes_literal,
    clean_code,
    clean_message,
    clean_param,
    error_fields,
)

# Upstream statuses that say the deployment (not the request) is wrong: status → code, why.
MISCONFIGURED: dict[int, tuple[str, str]] = {
    401: ("upstream_auth", "the provider rejected this deployment's credentials"),
    402: ("upstream_payment_required", "the provider refused this deployment's account"),
    403: ("upstream_permission", "the provider denied this deployment access"),
    404: ("upstream_not_found", "the provider does not know this deployment's model or endpoint"),
}


def from_status(status: int, message: str, retry_after: float | None = None, *,
                code: str | None = None, param: str | None = None) -> e.ProviderError:
    """An upstream HTTP error status as a provider error; `code` and `param` are the upstream's
    own (kept for request faults, which go back to the client)."""
    text = f"upstream returned {status}: {clean_message(message) or 'no message'}"
    if status == 429:
        return e.ProviderRateLimitedError(text, code="rate_limited", retry_after=retry_after)
    if status in (408, 504):
        return e.ProviderTimeoutError(text, code="upstream_timeout")
    if status == 409:  # a conflict upstream, not the request's fault: "try again" (as 503)
        return e.ProviderUnavailableError(text, code="upstream_conflict", retry_after=retry_after)
    if status >= 500:
        return e.ProviderUnavailableError(text, code="upstream_unavailable",
                                          retry_after=retry_after)
    if status in MISCONFIGURED:
        return misconfigured(status)
    return e.ProviderRejectedError(text, param=clean_param(param),
                                   code=clean_code(code) or "upstream_rejected")


def from_body(status: int, raw: bytes, retry_after: float | None = None) -> e.ProviderError:
    """An upstream error response: its status and its body, OpenAI's `{"error": {"message",
    "type", "param", "code"}}` or Anthropic's `{"type": "error", "error": {...}}` (anything else
    is kept, cleaned, as the message)."""
    text = raw[:SCAN_CHARS].decode("utf-8", "replace")
    message, code, param = error_fields(text)
    if retry_after is None:
        retry_after = retry_delay_in_body(text)
    return from_status(status, message if message is not None else text, retry_after,
                       code=code, param=param)


def stream_error_event(payload: bytes, *, before_content: bool = False) -> e.ProviderError:
    """An `{"error": ...}` event in a stream the upstream had begun (status 200): it had the
    request, so this is a broken stream with the upstream's message, never the refusal an
    error status before the answer is (that one is failed over even for a side effect).
    But for one: before any content, an error of OpenAI's `invalid_request_error` type says
    the upstream refused the request unread, as a 400 with that body would, and is that 400's
    error (`from_body`: the next candidate, no retry on the deployment, no verdict on its
    health, a 400 for the client). As a stream cut it was retried by the router and then by
    the client's SDK, six upstream calls for one refusal, and could open the breaker of a
    healthy deployment (the JavaScript SDK audit of 2026-12-07)."""
    if before_content and _refuses_the_request(payload):
        return from_body(400, payload)
    message, _, _ = error_fields(payload[:SCAN_CHARS].decode("utf-8", "replace"))
    return e.ProviderError("upstream ended its stream with an error: "
                           f"{clean_message(message or '') or 'no message'}",
                           code="upstream_stream_cut")


def _refuses_the_request(payload: bytes) -> bool:
    """Whether an error event's data is OpenAI's `invalid_request_error` (in an `error` object,
    or the data itself, as Anthropic's and the Responses API's `event: error` carry it)."""
    try:
        parsed = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(parsed, dict):
        return False
    error = parsed.get("error")
    detail = error if isinstance(error, dict) else parsed
    return detail.get("type") == "invalid_request_error"


def not_a_completion() -> e.ProviderError:
    """A 200 whose body is not a chat.completion: the upstream had the request (not a refusal)."""
    return _bad_response("a chat.completion")


def not_a_stream() -> e.ProviderError:
    """A 200 to a streamed request whose `content-type` is not `text/event-stream` (a proxy's or
    a captive portal's HTML page, a whole JSON answer): the same failure as `not_a_completion`,
    before anything of it was relayed."""
    return _bad_response("an event stream")


def _bad_response(expected: str) -> e.ProviderError:
    return e.ProviderError(f"upstream answered 200 with a body that is not {expected}",
                           code="upstream_bad_response")


def retry_after_of(headers: Mapping[str, str] | None) -> float | None:
    """The wait an upstream asked for in its response headers (any case): `retry-after-ms`
    before `retry-after`, which may be delta-seconds or an HTTP-date."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    return retry_after_from_headers(lowered, time.time())


# Google's `google.rpc.RetryInfo`, an entry of an error body's `error.details`: `"retryDelay":
# "17s"` (a JSON Duration: seconds with up to nine decimals and an `s`).
RETRY_INFO_TYPE = "google.rpc.RetryInfo"
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)s")
_JSON = json.JSONDecoder()
# What may stand before an error body's JSON: nothing (the body itself), or litellm's whole
# prefix (`litellm.RateLimitError: litellm.RateLimitError: GeminiException - `, `b'` when it
# quotes the body as bytes); then a list's `[` (Vertex's). Anchored at the text's start: any
# `Exception - ` let a prompt quoted in a message place a body of its own (the re-audit).
_LITELLM_PREFIX = re.compile(
    r"\s*(?:(?:litellm\.\w+: )+(?:\w+: )?\w+Exception - (?P<quoted>b['\"])?)?")
_OPENING = re.compile(r"\s*(?:\[\s*)?(?=\{)")


def retry_delay_in_body(text: str) -> float | None:
    """The wait an error body asks for in Google's `RetryInfo` (Gemini and Vertex send it there,
    with no `retry-after` header), in seconds: read from the structure of the body's first
    JSON object only (the whole body, or the one litellm quotes in its message), never from
    its text. A pattern searched over the text until 2026-12-07, and a body quoting the
    request (a provider's message naming what it refused) let a prompt set the wait: one
    tenant's `'retryDelay': '60s'` held a circuit open for everyone for 60 s (the security
    audit)."""
    prefix = _LITELLM_PREFIX.match(text)
    assert prefix is not None  # every part of it is optional
    at = prefix.end()
    if prefix.group("quoted"):  # quoted as bytes (litellm's Vertex errors)
        quoted = bytes_literal(text[prefix.start("quoted"):SCAN_CHARS])
        if quoted is None:
            return None
        text, at = quoted, 0
    opening = _OPENING.match(text, at, SCAN_CHARS)
    if opening is None:
        return None  # not a body (a text quoting the request before any JSON of its own)
    start = opening.end()
    try:
        body, _ = _JSON.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith(RETRY_INFO_TYPE):
            delay = detail.get("retryDelay")
            found = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
            return float(found.group(1)) if found is not None else None
    return None


def misconfigured(status: int) -> e.ProviderMisconfiguredError:
    """The deployment's fault that an upstream `status` in `MISCONFIGURED` names."""
    code, why = MISCONFIGURED[status]
    return e.ProviderMisconfiguredError(f"{why} (upstream returned {status})", code=code)
