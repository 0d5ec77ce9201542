"""What a third-party exception's cause chain and traceback say about an upstream attempt: where
it failed (while connecting, after sending, after an unreadable answer, before sending at all)
and whether the client library refused it on its own (no key, a request field it validates).

These are the tests `router.providers.exception_mapping` decides by; they read class names and
frames only (this module imports neither litellm nor an HTTP client).
"""

from __future__ import annotations

import errno
import re
import traceback

from router.providers.error_text import message_of

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
            message = message_of(link)
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


# Transport failures while opening a connection: the request never left.
_WHILE_CONNECTING = frozenset({
    "ConnectError", "ConnectTimeout", "ClientConnectorError", "ClientConnectorDNSError",
    "ClientConnectorCertificateError", "ConnectionRefusedError", "gaierror",
    "ConnectionTimeoutError", "PoolTimeout",
})


def raised_while_connecting(exc: BaseException) -> bool:
    """Whether `exc` is (or wraps) a transport failure while opening a connection."""
    return bool(_class_names(exc) & _WHILE_CONNECTING)


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
# Beside a drop, what makes it something else: an answer's error status, a timeout's own class
# (`timed_out_reading` decides those), a failure while the connection was opening.
_ANSWERED_OR_CONNECTING = frozenset({"HTTPStatusError", "ClientResponseError", "APITimeoutError",
                                     "Timeout"}) | _WHILE_CONNECTING


def timed_out_reading(exc: BaseException) -> bool:
    """Whether `exc` is (or wraps) an HTTP client's read timeout: the request was sent."""
    names = _class_names(exc)
    return bool(names & _READ_TIMEOUTS) and not names & _WHILE_CONNECTING


def dropped_unanswered(exc: BaseException) -> bool:
    """Whether `exc` says the upstream closed or reset the connection after the request was
    sent, before its answer: the pass-through's `UpstreamDropped`, through litellm. litellm's
    connection error over such a transport error (`maybe_received`), or any of its errors over
    one with no HTTP status behind it: its Anthropic path raises `InternalServerError` over
    `AnthropicError` over httpx's `ReadError`, with no `APIConnectionError`, which read as the
    503 a provider answers without acting, so a side-effecting turn was retried and its
    Idempotency-Key given back (the agent tool-loop audit of 2026-12-07)."""
    names = _class_names(exc)
    return bool(names & _DROPS) and not names & _ANSWERED_OR_CONNECTING


def answered_error_status(exc: BaseException) -> bool:
    """Whether an HTTP client's error for an answer's error status (httpx's, aiohttp's) is
    behind `exc`: the upstream answered the request with that status, at its head."""
    return bool(_class_names(exc) & _ERROR_STATUS)


_ERROR_STATUS = frozenset({"HTTPStatusError", "ClientResponseError"})


def disconnected_before_head(exc: BaseException) -> bool:
    """Whether aiohttp (litellm's transport) saw the connection close before an answer's head:
    its `ServerDisconnectedError` with no payload error (a body cut after the head is one)."""
    names = _class_names(exc, suppressed=True)
    return "ServerDisconnectedError" in names and "ClientPayloadError" not in names


# A body whose connection closed or broke while it was read: aiohttp's payload errors (a
# chunked body or a declared length not completed), httpx's read and protocol errors, a reset.
_CUT_IN_TRANSPORT = frozenset({"ClientPayloadError", "ReadError", "RemoteProtocolError",
                               "ServerDisconnectedError", "ConnectionResetError"})


def cut_in_transport(exc: BaseException) -> bool:
    """Whether an HTTP client's failure reading a body is behind `exc` (its context included:
    litellm raises its own errors while handling the transport's)."""
    return bool(_class_names(exc, suppressed=True) & _CUT_IN_TRANSPORT)


def answered_unreadable(exc: BaseException) -> bool:
    """Whether litellm's error is its own made-up 500 over a 200 it could not read as a chat
    completion (an HTML page, JSON without `choices`): an `InternalServerError` over litellm's
    own exceptions, with no HTTP error status and no transport error anywhere in its chain (a
    real 5xx always carries the HTTP client's status error). The upstream had the request, so
    this is not the refusal a 5xx is; were a real 5xx ever taken for it, a read would still be
    failed over, and only a side effect would not."""
    # Through suppressed contexts too: litellm hides a real 5xx's status error behind one.
    names = _class_names(exc, suppressed=True)
    if names & _ANSWER_NOT_READ:
        return False
    # litellm's words for it; when the body it quotes holds `invalid_request_error` (an SSE
    # error event answered to a whole-answer request), its text matching raises them as a
    # `BadRequestError`, which read as the upstream refusing the request (`upstream_rejected`).
    text = str(exc)
    if _NO_COMPLETION in text or _NO_AZURE_COMPLETION in text:
        return True
    return bool(_causes(exc, suppressed=True)) and "InternalServerError" in names


_NO_COMPLETION = "Empty or invalid response from LLM endpoint"
# ... and over an Azure 200 whose body is not JSON (an HTML page): its made-up 500.
_NO_AZURE_COMPLETION = "Unexpected response from Azure"


# In a cause chain: the upstream's answer was an error status, or never came.
_ANSWER_NOT_READ = frozenset({
    "HTTPStatusError", "ClientResponseError", "APIConnectionError", "APITimeoutError", "Timeout",
    "TransportError", "ClientError", "OSError", "TimeoutError",
})


def _class_names(exc: BaseException, *, suppressed: bool = False) -> set[str]:
    """The class names of `exc` and of every exception in its cause chain."""
    return {klass.__name__ for link in (exc, *_causes(exc, suppressed=suppressed))
            for klass in type(link).__mro__}


# --------------------------------------------------------------------- raised before sending

# Frames that mean the failure happened while talking to the provider or reading its answer:
# in these installed packages (by the top-level package a frame's file is in, so litellm's own
# `litellm/llms/anthropic/...`, which builds requests, is not the anthropic SDK), or in these
# functions of litellm's.
_IO_PACKAGES = frozenset({"httpx", "httpcore", "aiohttp", "anthropic"})
_IO_MODULES = ("openai/_base_client",)
_IO_FUNCTIONS = ("transform_response", "convert_to_model_response")
_INSTALLED = re.compile(r"/(?:site|dist)-packages/(.+)$")


def _does_io(path: str) -> bool:
    """Whether a frame's file is one of the packages (or modules) that talk to a provider."""
    installed = _INSTALLED.search(path)
    if installed is None:
        return False
    within = installed.group(1)
    return within.partition("/")[0] in _IO_PACKAGES or within.startswith(_IO_MODULES)


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
    root = _builtin_under_connection_error(exc)
    if root is None:
        return False
    frames = [(frame.f_code.co_filename.replace("\\", "/"), frame.f_code.co_name)
              for frame, _ in traceback.walk_tb(root.__traceback__)]
    in_set_up = any(name == "completion" and path.endswith("litellm/main.py")
                    for path, name in frames)
    did_io = any(_does_io(path) for path, _ in frames) or any(
        name.startswith(_IO_FUNCTIONS) for _, name in frames)
    return in_set_up and not did_io


def failed_reading_answer(exc: BaseException) -> bool:
    """Whether `exc` is litellm's `APIConnectionError` over a plain builtin error raised while
    it translated the upstream's answer (`transform_response`, `convert_to_model_response`):
    the upstream answered, and litellm could not read the answer (a Messages answer without
    `content`; on the simulator, Groq's translation reading a `service_tier` it did not send).
    Not a connection error: nothing about the connection failed."""
    root = _builtin_under_connection_error(exc)
    return root is not None and any(frame.f_code.co_name.startswith(_IO_FUNCTIONS)
                                    for frame, _ in traceback.walk_tb(root.__traceback__))


def _builtin_under_connection_error(exc: BaseException) -> BaseException | None:
    """The root of `exc`'s causes when `exc` is litellm's `APIConnectionError` (no timeout)
    over builtin exceptions only (no transport, SSL, socket or HTTP error): litellm's own code
    failed, before sending or while reading an answer. None otherwise."""
    names = {klass.__name__ for klass in type(exc).__mro__}
    if "APIConnectionError" not in names or names & {"APITimeoutError", "Timeout"}:
        return None
    chain = _causes(exc)
    if not chain or not all(_plain_builtin(cause) for cause in chain):
        return None
    return chain[-1]


def failed_building_request(exc: BaseException) -> bool:
    """Whether `exc` is litellm's `BadRequestError` over a plain builtin error (a `KeyError` on a
    field a provider's format needs, say), or over a `BadRequestError` of litellm's own (its
    refusal of a conversation the provider's format cannot hold: a system message alone, for
    Anthropic), raised in litellm's own code, in no frame that sends a request or reads an
    answer: its transformation of the request for the provider failed, no upstream saw it. (An
    upstream's own 400 has the HTTP client's status error behind it.)"""
    if "BadRequestError" not in _class_names(exc):
        return False
    chain = _causes(exc)
    if not chain or not (_plain_builtin(chain[-1]) or _litellms_own_refusal(chain[-1])):
        return False
    frames = [frame.f_code for frame, _ in traceback.walk_tb(chain[-1].__traceback__)]
    return bool(frames) and all(
        "/litellm/" in code.co_filename.replace("\\", "/") and not _does_io(
            code.co_filename.replace("\\", "/")) and not code.co_name.startswith(_IO_FUNCTIONS)
        for code in frames)


def build_failure(exc: BaseException) -> str:
    """What went wrong building the request, from the builtin error at the root of `exc`'s
    chain: a missing field is named as one (a `KeyError`'s message is the bare key)."""
    chain = _causes(exc)
    root = chain[-1] if chain else exc
    if isinstance(root, KeyError) and root.args:
        return f"a field it needs is missing: {root.args[0]!r}"
    return message_of(root) or message_of(exc) or "invalid request"


_OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})


def out_of_files(exc: BaseException) -> bool:
    """Whether `exc` (or an exception behind it) is this process running out of file
    descriptors (EMFILE, or the system's table: ENFILE): the router's own failure, before any
    byte reached the upstream, whatever the adapter wrapped it in."""
    return any(isinstance(link, OSError) and link.errno in _OUT_OF_FILES
               for link in (exc, *_causes(exc, suppressed=True)))


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


def _litellms_own_refusal(exc: BaseException) -> bool:
    return type(exc).__module__ == "litellm.exceptions" and type(exc).__name__ == "BadRequestError"


def _plain_builtin(exc: BaseException) -> bool:
    return type(exc).__module__ == "builtins" and not isinstance(exc, OSError | TimeoutError)

