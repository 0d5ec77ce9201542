"""The one place where third-party errors become the project's errors (`router.errors`).

litellm and the openai SDK share exception class names, so they are matched by the names in
their class hierarchy (this module does not import litellm: only the litellm adapter does).
The pass-through adapter's own HTTP client (`router.providers.http1`) and asyncio raise the
transport errors; aiohttp's are mapped too, should a library let one through. Upstream HTTP
statuses from either adapter go through `from_status` (`from_body` parses an error body first).

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

litellm refusing the deployment's own settings before any upstream answered (an unknown
provider prefix or model string, its budget, no key at all) is the deployment's fault too: 502,
codes `deployment_provider_unknown`, `deployment_model_unknown`, `deployment_budget_exceeded`,
`deployment_missing_credentials` (`missing_credentials`). A request field refused by litellm's
own validation before any call is the adapter's limit, not the upstream's refusal: 400
`adapter_rejected` naming the field (`refused_by_litellm`).

Messages reach clients, so each is cut to one clean line (`clean_message`): no traceback, no
file path, no library class prefix such as `litellm.BadRequestError: OpenAIException - `, no
secret (an upstream may quote the key it was sent: secret-shaped strings are scrubbed here, and
the adapters take out their deployment's own key, whatever its shape, with `without_key`). The
original exception stays chained (`raise ... from exc`) and the outcome records our class name.
"""

from __future__ import annotations

import ast
import asyncio
import re
import time
import traceback
from collections.abc import Mapping
from typing import TypeVar

import aiohttp
import orjson

from router import errors as e
from router.execution.backoff import retry_after_from_headers
from router.providers.http1 import ResponseBroken, UpstreamDropped, UpstreamUnreachable
from router.telemetry.redact import scrub

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

# Upstream statuses that say the deployment (not the request) is wrong: status → code, why.
_MISCONFIGURED: dict[int, tuple[str, str]] = {
    401: ("upstream_auth", "the provider rejected this deployment's credentials"),
    402: ("upstream_payment_required", "the provider refused this deployment's account"),
    403: ("upstream_permission", "the provider denied this deployment access"),
    404: ("upstream_not_found", "the provider does not know this deployment's model or endpoint"),
}
_MISCONFIGURED_BY_CODE = {code: status for status, (code, _) in _MISCONFIGURED.items()}

MAX_MESSAGE_CHARS = 300
_SCAN_CHARS = 8192  # how much of an upstream's text is looked at (a message comes first)
_T = TypeVar("_T")


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
    if status in _MISCONFIGURED:
        return _misconfigured(status)
    return e.ProviderRejectedError(text, param=_clean_param(param),
                                   code=_clean_code(code) or "upstream_rejected")


def from_body(status: int, raw: bytes, retry_after: float | None = None) -> e.ProviderError:
    """An upstream error response: its status and its body, OpenAI's `{"error": {"message",
    "type", "param", "code"}}` or Anthropic's `{"type": "error", "error": {...}}` (anything else
    is kept, cleaned, as the message)."""
    text = raw[:_SCAN_CHARS].decode("utf-8", "replace")
    message, code, param = _error_fields(text)
    return from_status(status, message if message is not None else text, retry_after,
                       code=code, param=param)


def stream_error_event(payload: bytes) -> e.ProviderError:
    """An `{"error": ...}` event in a stream the upstream had begun (status 200): it had the
    request, so this is a broken stream with the upstream's message, never the refusal an
    error status before the answer is (that one is failed over even for a side effect)."""
    message, _, _ = _error_fields(payload[:_SCAN_CHARS].decode("utf-8", "replace"))
    return e.ProviderError("upstream ended its stream with an error: "
                           f"{clean_message(message or '') or 'no message'}",
                           code="upstream_stream_cut")


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


def map_exception(exc: BaseException) -> e.SlorouterError:
    """Translate any exception raised by an upstream attempt into the project's hierarchy."""
    if isinstance(exc, e.SlorouterError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # an asyncio.TimeoutError too
        # Never connected, so never sent: nothing to bill (unlike the read timeout below).
        return e.ProviderTimeoutError("upstream timed out connecting", code="upstream_timeout")
    if isinstance(exc, asyncio.TimeoutError) or timed_out_reading(exc):
        # The adapter's own timeout (or its HTTP client's read timeout, aiohttp's
        # `SocketTimeoutError` among them) ran out waiting for an answer to a request it had
        # sent: unlike an answered 408/504, it may be billed.
        return e.ProviderTimeoutError("no answer from the upstream within the timeout",
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
    if raised_before_sending(exc):
        return e.ProviderRejectedError(
            "the request could not be prepared for the provider: "
            f"{_message_of(exc) or 'invalid request'}", code="adapter_rejected")
    if maybe_received(exc):
        return e.ProviderError(
            f"upstream call failed: {_message_of(exc) or 'connection error'}",
            code="upstream_connection_error")
    if answered_unreadable(exc):
        return not_a_completion()
    target = _first_in_mro(exc, _BY_CLASS_NAME)
    if target is not None:
        return _from_named(target, exc)
    return e.ProviderError(f"upstream failed: {type(exc).__name__}", code="upstream_error")


# The first words of a client refusing to start without a key: the openai SDK's (its bare
# `OpenAIError`, litellm wraps it in a made-up 500) and litellm's own for its other providers
# (its `AuthenticationError`, "Missing Anthropic API Key - ...").
_MISSING_KEY = re.compile(r"Missing (?:credentials|[\w .-]{0,40}API Key)\b", re.IGNORECASE)


def missing_credentials(exc: BaseException) -> str | None:
    """The client library's own words when `exc` says the deployment has no key (none in its
    config, none in the provider's variable): raised before any request was sent, the same for
    every request, so the deployment's configuration, never the upstream's answer."""
    for link in (exc, *_causes(exc, suppressed=True)):
        kind = type(link)
        library = kind.__module__.partition(".")[0]
        if ((kind.__name__, library) in (("OpenAIError", "openai"),
                                         ("AuthenticationError", "litellm"))):
            message = _message_of(link)
            if _MISSING_KEY.match(message):
                return message
    return None


# litellm's own checks of a request field, run before any call (`completion` in its main.py),
# by function name: the field, and what a client is told (litellm's words blame the client's
# field as not OpenAI's, also for OpenAI's own forms it does not know).
_LITELLM_VALIDATORS: dict[str, tuple[str, str]] = {
    "validate_chat_completion_tool_choice": (
        "tool_choice", "the litellm adapter does not support this tool_choice (it takes a "
        "string, or an object of type function, allowed_tools or a hosted tool); the upstream "
        "was not called"),
}


def refused_by_litellm(exc: BaseException) -> tuple[str, str] | None:
    """(param, message) when litellm's own validation of a request field raised `exc`, before
    any upstream saw the request: the adapter's limit, not the upstream's refusal."""
    if "BadRequestError" not in _class_names(exc):
        return None
    for link in (exc, *_causes(exc)):
        frames = list(traceback.walk_tb(link.__traceback__))
        if frames:
            code = frames[-1][0].f_code
            found = _LITELLM_VALIDATORS.get(code.co_name)
            if found is not None and "/litellm/" in code.co_filename.replace("\\", "/"):
                return found
    return None


def broken_after_head(exc: BaseException) -> e.SlorouterError:
    """`exc`, raised while an answer whose head had come (status 200) was being read, in the
    project's hierarchy. The upstream had the request, so no error may say that it was refused
    before it acted (`ProviderUnavailableError`, `ProviderRateLimitedError`: those are retried
    and failed over even for a side-effecting request). litellm reports a stream that broke or
    ended early (before its finish reason, before any content too) in such classes
    (`MidStreamFallbackError` is a `ServiceUnavailableError`); it is a cut stream, as the
    pass-through adapter reports one, and so is litellm's connection error mid-stream (a
    connection the upstream dropped after content). A failure to connect stays what it is:
    some of litellm's providers open the connection at the first read."""
    err = map_exception(exc)
    refused = isinstance(err, e.ProviderUnavailableError | e.ProviderRateLimitedError)
    # litellm's connection error (or dropped connection) mid-stream
    dropped = err.code in ("upstream_connection_error", "upstream_dropped")
    if (refused or dropped) and not _class_names(exc) & _WHILE_CONNECTING:
        return e.ProviderError(f"upstream stream broke: {err.message}",
                               code="upstream_stream_cut")
    return err


# Transport failures while opening a connection: the request never left.
_WHILE_CONNECTING = frozenset({
    "ConnectError", "ConnectTimeout", "ClientConnectorError", "ClientConnectorDNSError",
    "ClientConnectorCertificateError", "ConnectionRefusedError", "gaierror",
    "ConnectionTimeoutError", "PoolTimeout",
})


def maybe_received(exc: BaseException) -> bool:
    """A connection error (litellm's, or one litellm wraps as another class, such as its
    `InternalServerError` over the SDK's `APIConnectionError` for a dropped connection) that
    did not happen while connecting: the provider may have received the request, so it is a
    `ProviderError` (a side-effecting request is then not retried), not the explicit refusal
    that `ProviderUnavailableError` means."""
    names = _class_names(exc)
    if "APIConnectionError" not in names or names & {"APITimeoutError", "Timeout"}:
        return False
    return not names & _WHILE_CONNECTING


# Transport failures behind litellm's errors that say the request had left and its answer never
# came: a read timeout (httpx's, or aiohttp's under litellm's aiohttp transport), and a connection
# closed or reset while waiting for the answer. A litellm `Timeout` with no read timeout behind it
# (over an answered 408/504, or raised by a provider SDK that hides its cause) is not one of them.
_READ_TIMEOUTS = frozenset({"ReadTimeout", "SocketTimeoutError"})
_DROPS = frozenset({"ReadError", "RemoteProtocolError", "ServerDisconnectedError",
                    "ConnectionResetError"})


def timed_out_reading(exc: BaseException) -> bool:
    """Whether `exc` is (or wraps) an HTTP client's read timeout: the request was sent."""
    names = _class_names(exc)
    return bool(names & _READ_TIMEOUTS) and not names & _WHILE_CONNECTING


def dropped_unanswered(exc: BaseException) -> bool:
    """Whether `exc` is litellm's connection error (`maybe_received`) over a connection the
    upstream closed or reset after the request was sent, before its answer: the pass-through's
    `UpstreamDropped`, through litellm."""
    return maybe_received(exc) and bool(_class_names(exc) & _DROPS)


def answered_unreadable(exc: BaseException) -> bool:
    """Whether litellm's error is its own made-up 500 over a 200 it could not read as a chat
    completion (an HTML page, JSON without `choices`): an `InternalServerError` over litellm's
    own exceptions, with no HTTP error status and no transport error anywhere in its chain (a
    real 5xx always carries the HTTP client's status error). The upstream had the request, so
    this is not the refusal a 5xx is; were a real 5xx ever taken for it, a read would still be
    failed over, and only a side effect would not."""
    # Through suppressed contexts too: litellm hides a real 5xx's status error behind one.
    names = _class_names(exc, suppressed=True)
    return (bool(_causes(exc, suppressed=True)) and "InternalServerError" in names
            and not names & _ANSWER_NOT_READ)


# In a cause chain: the upstream's answer was an error status, or never came.
_ANSWER_NOT_READ = frozenset({
    "HTTPStatusError", "ClientResponseError", "APIConnectionError", "APITimeoutError", "Timeout",
    "TransportError", "ClientError", "OSError", "TimeoutError",
})


def _class_names(exc: BaseException, *, suppressed: bool = False) -> set[str]:
    """The class names of `exc` and of every exception in its cause chain."""
    return {klass.__name__ for link in (exc, *_causes(exc, suppressed=suppressed))
            for klass in type(link).__mro__}


def _from_named(target: type[e.SlorouterError], exc: BaseException) -> e.SlorouterError:
    status = getattr(exc, "status_code", None)
    message = _message_of(exc) or "the provider reported an error"
    retry_after = _retry_after_of(exc)
    named_code = _first_in_mro(exc, _CODE_BY_CLASS_NAME)
    if target is e.ProviderMisconfiguredError:  # the class says which; else the status does
        local = _first_in_mro(exc, _MISCONFIGURED_LOCALLY)
        if local is not None:
            return e.ProviderMisconfiguredError(local[1], code=local[0])
        by_name = _MISCONFIGURED_BY_CODE.get(named_code or "")
        if by_name is None:
            by_name = status if isinstance(status, int) and status in _MISCONFIGURED else 404
        return _misconfigured(by_name)
    if isinstance(status, int) and target is e.ProviderError and status >= 400:
        code, param = _upstream_fields(exc)
        return from_status(status, message, retry_after, code=named_code or code, param=param)
    if target is e.ProviderRejectedError:
        code, param = _upstream_fields(exc)
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


def _misconfigured(status: int) -> e.ProviderMisconfiguredError:
    code, why = _MISCONFIGURED[status]
    return e.ProviderMisconfiguredError(f"{why} (upstream returned {status})", code=code)


def _first_in_mro(exc: BaseException, table: Mapping[str, _T]) -> _T | None:
    for klass in type(exc).__mro__:
        found = table.get(klass.__name__)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------- raised before sending

# Frames that mean the failure happened while talking to the provider or reading its answer.
_IO_PATH_PARTS = ("/httpx/", "/httpcore/", "/aiohttp/", "/openai/_base_client", "/anthropic/")
_IO_FUNCTIONS = ("transform_response", "convert_to_model_response")


def raised_before_sending(exc: BaseException) -> bool:
    """Whether litellm raised `exc` (an `APIConnectionError`) in its own code while building the
    request, before any network call: the request's content, not the deployment's health.

    litellm wraps every exception it does not recognise as `APIConnectionError`, a bad
    parameter type (`response_format="json"`, `messages="hi"`) included. Such a failure is
    recognised by its cause chain, which holds only builtin exceptions (no transport, SSL,
    socket or HTTP error), raised under litellm's synchronous set-up step (`completion` in
    `litellm/main.py`) and in no frame that sends a request or reads an answer. Anything else,
    a future litellm that raises from elsewhere included, stays a transport failure.
    """
    names = {klass.__name__ for klass in type(exc).__mro__}
    if "APIConnectionError" not in names or names & {"APITimeoutError", "Timeout"}:
        return False
    chain = _causes(exc)
    if not chain or not all(_plain_builtin(cause) for cause in chain):
        return False
    frames = [(frame.f_code.co_filename.replace("\\", "/"), frame.f_code.co_name)
              for frame, _ in traceback.walk_tb(chain[-1].__traceback__)]
    in_set_up = any(name == "completion" and path.endswith("litellm/main.py")
                    for path, name in frames)
    did_io = any(part in path for path, _ in frames for part in _IO_PATH_PARTS) or any(
        name.startswith(_IO_FUNCTIONS) for _, name in frames)
    return in_set_up and not did_io


def _causes(exc: BaseException, *, suppressed: bool = False) -> list[BaseException]:
    """The exceptions behind `exc`, nearest first (at most 16); `suppressed`: through the
    contexts a `raise ... from None` hid as well."""
    def behind(link: BaseException) -> BaseException | None:
        if link.__suppress_context__ and not suppressed:
            return link.__cause__
        return link.__cause__ or link.__context__

    chain: list[BaseException] = []
    cause = behind(exc)
    while cause is not None and len(chain) < 16:
        chain.append(cause)
        cause = behind(cause)
    return chain


def _plain_builtin(exc: BaseException) -> bool:
    return type(exc).__module__ == "builtins" and not isinstance(exc, OSError | TimeoutError)


# --------------------------------------------------------------------- messages and fields

_TRACEBACK = "Traceback (most recent call last)"
_PREFIX = re.compile(
    r"^\s*(?:litellm\.\w+\s*:|(?:[A-Z]\w*)?(?:Error|Exception|Timeout)\s*(?::|-)|LiteLLM:"
    r"|Error code:\s*\d{3}\s*-)\s*")
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
# An exception's repr inside a message (aiohttp: `<TransferEncodingError: 400, message='...'>`):
# its words are kept, its class name and brackets are not.
_ERROR_REPR = re.compile(r"<[\w.]*(?:Error|Exception)\b:?\s*([^<>]*)>")
_LITELLM_NOTES = re.compile(
    r"(?:Handle with `?litellm\.\w+`?\.?|LiteLLM (?:Max )?Retri(?:ed|es):.*"
    r"|Received Model Group=.*|This looks like a bug in LiteLLM.*)$")
_FILE_PATH = re.compile(
    r"(?<![\w.\-/\\])(?:[A-Za-z]:)?[\\/](?:[\w.\-]+[\\/])+[\w.\-]+\.pyc?\b(?:\", line \d+|:\d+)?")
_SPACES = re.compile(r"\s+")
_CODE = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


def clean_message(text: str) -> str:
    """`text` as one clean line for a client: no traceback, file path, object repr, library
    class prefix or litellm note; a JSON or dict error body is reduced to its message."""
    text = text[:_SCAN_CHARS]
    cut = text.find(_TRACEBACK)
    if cut >= 0:
        text = text[:cut]
    lines = [line for line in text.splitlines() if line.strip()]
    line = _SPACES.sub(" ", lines[0]).strip() if lines else ""
    for _ in range(8):
        stripped = _PREFIX.sub("", line, count=1)
        if stripped == line:
            break
        line = stripped
    message, _, _ = _error_fields(line)
    if message is not None and message != line:
        return clean_message(message)
    line = line[:4 * MAX_MESSAGE_CHARS]  # what is left of it: at most a message's length
    line = _LITELLM_NOTES.sub("", _ERROR_REPR.sub(r"\1", _OBJECT_REPR.sub("", line)))
    line = _FILE_PATH.sub("<path>", line)
    line = _SPACES.sub(" ", scrub(line)).strip(" ,")
    if len(line) > MAX_MESSAGE_CHARS:
        line = line[:MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return line


def _message_of(exc: BaseException) -> str:
    return clean_message(str(getattr(exc, "message", None) or exc))


def _error_fields(text: str) -> tuple[str | None, str | None, str | None]:
    """(message, code, param) of an error body given as JSON or a Python dict's repr."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None, None, None
    parsed: object = None
    try:
        parsed = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        try:
            parsed = ast.literal_eval(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            # A body cut short (a truncated repr): take what there is of the message.
            match = re.search(r"""['"]message['"]\s*:\s*(['"])(.*?)(?:(?<!\\)\1|$)""", stripped)
            return (match.group(2) if match else None), None, None
    return _fields_of(parsed)


def _fields_of(body: object) -> tuple[str | None, str | None, str | None]:
    if not isinstance(body, dict):
        return None, None, None
    inner = body.get("error")
    if isinstance(inner, dict):
        body = inner
    elif isinstance(inner, str) and "message" not in body:
        return inner, None, None
    message = body.get("message", body.get("detail"))
    code, param = body.get("code"), body.get("param")
    return (message if isinstance(message, str) else None,
            code if isinstance(code, str) else None,
            param if isinstance(param, str) else None)


def _upstream_fields(exc: BaseException) -> tuple[str | None, str | None]:
    """The upstream's own (code, param) for `exc`: from the SDK's parsed body, the exception's
    attributes, or the response it carries."""
    _, code, param = _fields_of(getattr(exc, "body", None))
    code = code if code is not None else _str_attr(exc, "code")
    param = param if param is not None else _str_attr(exc, "param")
    if code is None or param is None:
        _, body_code, body_param = _error_fields(_response_text(exc))
        code = code if code is not None else body_code
        param = param if param is not None else body_param
    return _clean_code(code), _clean_param(param)


def _str_attr(exc: BaseException, name: str) -> str | None:
    value = getattr(exc, name, None)
    return value if isinstance(value, str) else None


def _response_text(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    try:
        text = getattr(response, "text", "")
    except Exception:  # a streamed httpx response that was never read, among others
        return ""
    return text[:_SCAN_CHARS] if isinstance(text, str) else ""


def _clean_code(code: str | None) -> str | None:
    return code if code is not None and _CODE.match(code) and scrub(code) == code else None


def _clean_param(param: str | None) -> str | None:
    if param is None:
        return None
    param = _SPACES.sub(" ", scrub(param)).strip()
    return param[:200] if param else None


def without_key(err: e.SlorouterError, key: str | None) -> e.SlorouterError:
    """`err` with the deployment's own API key taken out of what reaches the client (an
    upstream may quote the key it was sent, in any shape); secret-shaped strings already are
    (`clean_message`). The adapters pass every error through it."""
    if key:
        err.message = scrub(err.message, (key,))
        err.args = (err.message,)
        err.param = err.param and scrub(err.param, (key,))
        if err.code and scrub(err.code, (key,)) != err.code:
            err.code = None
    return err


def _retry_after_of(exc: BaseException) -> float | None:
    """From the upstream's real headers: litellm keeps them in `litellm_response_headers` (its
    Anthropic errors carry a placeholder `response` without any), else the SDK's response."""
    for headers in (getattr(exc, "litellm_response_headers", None),
                    getattr(getattr(exc, "response", None), "headers", None)):
        try:
            found = retry_after_of(headers)
        except (AttributeError, TypeError):
            continue
        if found is not None:
            return found
    return None
