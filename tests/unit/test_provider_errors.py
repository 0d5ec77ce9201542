"""Upstream failures as the client sees them: whose fault, which code, and a clean message.

`router.providers.upstream_answers` maps upstream statuses and bodies (pass-through adapter),
`router.providers.exception_mapping` litellm's exceptions (litellm adapter). Real litellm
exception objects are used, some raised by litellm itself against a closed port or a small local
upstream that answers badly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from router import errors
from router.execution.classify_error import AttemptContext, classify
from router.providers.base import sent_unanswered
from router.providers.error_text import MAX_MESSAGE_CHARS, clean_message
from router.providers.exception_causes import raised_before_sending
from router.providers.exception_mapping import broken_after_head, map_exception
from router.providers.litellm_adapter import exception_classes
from router.providers.upstream_answers import (
    from_body,
    from_status,
    not_a_completion,
    retry_after_of,
    stream_error_event,
)

CLOSED_PORT_BASE = "http://127.0.0.1:9/v1"  # discard port: nothing listens
MESSAGES = [{"role": "user", "content": "hi"}]


def _litellm() -> Any:
    from router.providers import litellm_adapter  # noqa: F401, I001 - sets litellm's offline env
    import litellm

    return litellm


def _assert_clean(message: str) -> None:
    """One line, no traceback, no file path, no library class prefix."""
    assert message and "\n" not in message
    assert "Traceback" not in message and ".py" not in message
    assert "litellm." not in message and "Exception -" not in message
    assert not message.startswith(("BadRequestError", "APIConnectionError", "NotFoundError"))


# ----------------------------------------------------------------------------- statuses


@pytest.mark.parametrize(("status", "code"), [
    (401, "upstream_auth"), (402, "upstream_payment_required"), (403, "upstream_permission"),
    (404, "upstream_not_found")])
def test_deployment_faults_are_502_with_their_code(status: int, code: str) -> None:
    """401/402/403/404 upstream blame the deployment: a 502 gateway error, never a 400."""
    mapped = from_status(status, "Incorrect API key provided: sk-proj-****abcd")
    assert isinstance(mapped, errors.ProviderMisconfiguredError)
    assert mapped.status_code == 502 and mapped.error_type == "upstream_error"
    assert mapped.code == code
    assert "sk-proj" not in mapped.message  # the upstream's text may quote the gateway's key


def test_request_fault_keeps_the_upstream_code_and_param() -> None:
    """A 400 stays a 400 with the upstream's own code and param."""
    mapped = from_status(400, "too long", code="context_length_exceeded",
                                 param="max_tokens")
    assert isinstance(mapped, errors.ProviderRejectedError)
    assert (mapped.status_code, mapped.code, mapped.param) == (
        400, "context_length_exceeded", "max_tokens")


@pytest.mark.parametrize("code", [None, "", "not a code", "x" * 65, "a\nb"])
def test_request_fault_without_a_usable_code_is_upstream_rejected(code: str | None) -> None:
    """A missing or odd-looking upstream code falls back to `upstream_rejected`."""
    assert from_status(422, "bad", code=code).code == "upstream_rejected"


def test_openai_error_body_is_parsed() -> None:
    """The pass-through adapter's error body keeps message, code and param."""
    raw = (b'{"error": {"message": "This model\'s maximum context length is 4096 tokens.", '
           b'"type": "invalid_request_error", "param": "messages", '
           b'"code": "context_length_exceeded"}}')
    mapped = from_body(400, raw)
    assert mapped.to_openai()["error"] == {
        "message": "upstream returned 400: This model's maximum context length is 4096 tokens.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}


def test_anthropic_error_body_is_parsed() -> None:
    """Anthropic's `{"type": "error", "error": {...}}` gives its message."""
    raw = b'{"type": "error", "error": {"type": "invalid_request_error", "message": "bad tool"}}'
    mapped = from_body(400, raw)
    assert mapped.message == "upstream returned 400: bad tool"
    assert mapped.code == "upstream_rejected"


def test_body_that_is_not_json_becomes_a_clean_message() -> None:
    """An HTML or text error page is kept as one line."""
    mapped = from_body(400, b"<html>\n<body>Bad Request</body>\n</html>")
    assert mapped.message == "upstream returned 400: <html>"


def test_deployment_fault_body_is_a_502_whatever_it_says() -> None:
    """A 404 body naming `model_not_found` is still the deployment's fault."""
    raw = b'{"error": {"message": "The model `x` does not exist", "code": "model_not_found"}}'
    mapped = from_body(404, raw)
    assert isinstance(mapped, errors.ProviderMisconfiguredError)
    assert mapped.code == "upstream_not_found"


def test_an_error_repr_is_reduced_to_its_message() -> None:
    """An error object passed as its Python repr: only its message stays, even when that text
    was cut short."""
    whole = from_status(502, str({"message": "overloaded", "type": "server_error"}))
    assert whole.message == "upstream returned 502: overloaded"
    text = str({"message": "overloaded, try again", "type": "x"})
    cut = from_status(502, text[:text.index("again")])
    assert cut.message == "upstream returned 502: overloaded, try"


def test_an_error_event_in_a_begun_stream_is_a_cut_stream_not_a_refusal() -> None:
    """An upstream that answered 200 and then streams `{"error": ...}` had the request: a cut
    stream with its message (no invented status), never retried blindly for a side effect;
    the same for a 200 whose body is not a chat completion."""
    event = stream_error_event(
        b'{"error": {"message": "model overloaded", "type": "server_error", "code": null}}')
    assert (type(event), event.code) == (errors.ProviderError, "upstream_stream_cut")
    assert event.message == "upstream ended its stream with an error: model overloaded"
    junk = not_a_completion()
    for mapped in (event, junk):
        assert classify(mapped, AttemptContext(True, True, False)).action == "unknown_commit"


# ----------------------------------------------------------------------------- messages


@pytest.mark.parametrize(("raw", "clean"), [
    ("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
     "OpenAIException - This model's maximum context length is 10 tokens.",
     "This model's maximum context length is 10 tokens."),
    ("litellm.APIConnectionError: 'str' object has no attribute 'get'\nTraceback (most recent "
     "call last):\n  File \"/srv/app/.venv/lib/python3.11/site-packages/litellm/main.py\", "
     "line 938, in acompletion\n", "'str' object has no attribute 'get'"),
    ("litellm.InternalServerError: OpenAIException - Invalid response object Traceback (most "
     "recent call last):\n  File \"/x/y.py\", line 3", "Invalid response object"),
    ("litellm.InternalServerError: AnthropicException - Cannot connect to host h:1 "
     "ssl:<ssl.SSLContext object at 0x7f70abcdef00> [Connect call failed]. Handle with "
     "`litellm.InternalServerError`.", "Cannot connect to host h:1 ssl: [Connect call failed]."),
    ("litellm.MidStreamFallbackError: litellm.ServiceUnavailableError: stream broke "
     "LiteLLM Retried: 0 times, LiteLLM Max Retries: 2", "stream broke"),
    ("NotFoundError: OpenAIException - Error code: 404 - {'error': {'message': 'no such model', "
     "'code': 'model_not_found'}}", "no such model"),
    ('AnthropicError - {"type":"error","error":{"type":"invalid_request_error",'
     '"message":"prompt is too long"}}', "prompt is too long"),
    ("cannot open /opt/slorouter/router/providers/http1.py", "cannot open <path>"),
    # litellm quotes a streamed request's error body as bytes
    ("litellm.BadRequestError: AnthropicException - b'{\"type\":\"error\",\"error\":{\"type\":"
     "\"invalid_request_error\",\"message\":\"temperature: must be at most 1\"}}'",
     "temperature: must be at most 1"),
    ("litellm.InternalServerError: AnthropicException - b'{\"type\":\"error\",\"error\":"
     "{\"type\":\"api_error\",\"message\":\"overloaded here\"}}'. Handle with "
     "`litellm.InternalServerError`", "overloaded here"),
    ("b'not json'", "b'not json'"),
    # litellm's Gemini, Vertex and Azure prefixes: provider and class, lower-case provider
    ("Vertex_ai_betaException BadRequestError - b'{\"error\": {\"code\": 400, \"message\": "
     "\"Invalid JSON payload received.\", \"status\": \"INVALID_ARGUMENT\"}}'",
     "Invalid JSON payload received."),
    ('geminiException - {"error": {"code": 503, "message": "The model is overloaded."}}',
     "The model is overloaded."),
    ("AzureException APIError - the deployment is busy", "the deployment is busy"),
    ("terror in the night - and an Error", "terror in the night - and an Error"),
    ("Quota Exception - words of a message", "Quota Exception - words of a message"),
])
def test_clean_message(raw: str, clean: str) -> None:
    """Library prefixes, tracebacks, object reprs, paths and litellm's notes are removed."""
    assert clean_message(raw) == clean


def test_clean_message_is_bounded() -> None:
    """A huge upstream message is cut to a bounded single line."""
    cleaned = clean_message("x" * 5000)
    assert len(cleaned) == MAX_MESSAGE_CHARS


# ----------------------------------------------------------------------------- litellm objects


def test_context_window_exceeded_keeps_its_code_and_a_clean_message() -> None:
    """litellm.ContextWindowExceededError → 400 `context_length_exceeded`, message unprefixed."""
    litellm = _litellm()
    exc = litellm.ContextWindowExceededError("This model's maximum context length is 10",
                                             model="m", llm_provider="openai")
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderRejectedError)
    assert mapped.code == "context_length_exceeded"
    assert mapped.message == "upstream returned 400: This model's maximum context length is 10"


def test_content_policy_violation_has_its_code() -> None:
    """litellm.ContentPolicyViolationError → 400 `content_policy_violation`."""
    litellm = _litellm()
    exc = litellm.ContentPolicyViolationError("flagged", model="m", llm_provider="openai")
    assert map_exception(exc).code == "content_policy_violation"


def test_bad_request_keeps_the_upstream_code_and_param_from_its_body() -> None:
    """The openai SDK's parsed body (on litellm's exception) gives code and param."""
    litellm = _litellm()
    body = {"message": "bad n", "type": "invalid_request_error", "param": "n",
            "code": "invalid_value"}
    exc = litellm.BadRequestError("litellm.BadRequestError: OpenAIException - bad n", model="m",
                                  llm_provider="openai", body=body)
    mapped = map_exception(exc)
    assert (mapped.status_code, mapped.code, mapped.param) == (400, "invalid_value", "n")
    assert mapped.message == "upstream returned 400: bad n"


def test_bad_request_reads_code_from_the_response_when_there_is_no_body() -> None:
    """Without a parsed body, the error JSON of the response litellm carries is read."""
    litellm = _litellm()
    request: Any = httpx.Request("POST", "http://upstream/v1/chat/completions")
    response = httpx.Response(400, request=request, json={"error": {
        "message": "too long", "param": "max_tokens", "code": "context_length_exceeded"}})
    exc = litellm.BadRequestError("too long", model="m", llm_provider="openai",
                                  response=response)
    mapped = map_exception(exc)
    assert (mapped.code, mapped.param) == ("context_length_exceeded", "max_tokens")


@pytest.mark.parametrize(("name", "status", "code"), [
    ("AuthenticationError", 401, "upstream_auth"),
    ("PermissionDeniedError", 403, "upstream_permission"),
    ("NotFoundError", 404, "upstream_not_found"),
    ("PaymentRequiredError", 402, "upstream_payment_required"),
])
def test_litellm_deployment_faults_are_502(name: str, status: int, code: str) -> None:
    """litellm's 401/402/403/404 exceptions blame the deployment: 502 with the code."""
    litellm = _litellm()
    request: Any = httpx.Request("POST", "http://upstream/v1/chat/completions")
    exc = getattr(litellm, name)("Incorrect API key provided: sk-****abcd", model="m",
                                 llm_provider="openai",
                                 response=httpx.Response(status, request=request))
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderMisconfiguredError)
    assert (mapped.status_code, mapped.code) == (502, code)
    assert "sk-" not in mapped.message


def test_a_409_is_a_conflict_upstream_retried_even_for_a_side_effect() -> None:
    """A 409 through either adapter (the pass-through's status and body, litellm's `APIError`
    with its status) is the provider's transient conflict, refused before acting: a 503
    `upstream_conflict` retried like a 5xx, even for a side effect, not the caller's 400."""
    litellm = _litellm()
    request: Any = httpx.Request("POST", "http://upstream/v1/chat/completions")
    body = b'{"error": {"message": "try again", "type": "conflict", "code": "conflict"}}'
    through_litellm = litellm.APIError(409, "try again", llm_provider="openai", model="m",
                                       request=request)
    for mapped in (from_body(409, body), map_exception(through_litellm)):
        assert isinstance(mapped, errors.ProviderUnavailableError)
        assert (mapped.status_code, mapped.code) == (503, "upstream_conflict")
        verdict = classify(mapped, AttemptContext(True, True, False))
        assert verdict.action == "retry" and verdict.breaker_failure


@pytest.mark.parametrize(("name", "kwargs", "code"), [
    ("LiteLLMUnknownProvider", {"model": "acme/m", "custom_llm_provider": "acme"},
     "deployment_provider_unknown"),
    ("ModelNotMappedError", {}, "deployment_model_unknown"),
    ("BudgetExceededError", {"current_cost": 2.0, "max_budget": 1.0},
     "deployment_budget_exceeded"),
])
def test_litellm_configuration_faults_are_the_deployments(name: str, kwargs: dict[str, Any],
                                                          code: str) -> None:
    """litellm failing on the deployment's own settings (an unknown provider prefix or model
    string, its budget) is a 502 counted against that deployment, not the caller's 400."""
    litellm = _litellm()
    cls = getattr(litellm, name, None) or getattr(litellm.exceptions, name)
    exc = cls(**kwargs) if kwargs else cls("model acme/m isn't mapped yet")
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderMisconfiguredError)
    assert (mapped.status_code, mapped.code) == (502, code)
    assert classify(mapped, AttemptContext(False, True, False)).breaker_failure


def test_every_litellm_exception_maps_to_a_clean_message() -> None:
    """Each exported litellm exception class, built with a traceback-laden message, maps to a
    message fit for a client."""
    noisy = ("litellm.X: bad thing\nTraceback (most recent call last):\n  File "
             "\"/srv/site-packages/litellm/main.py\", line 1, in f")
    built = 0
    for cls in exception_classes():
        if not cls.__module__.startswith("litellm"):
            continue
        factory: Any = cls
        try:
            exc = factory(message=noisy, model="m", llm_provider="openai")
        except TypeError:
            continue  # constructors with other signatures (router helpers, budget errors)
        mapped = map_exception(exc)
        _assert_clean(mapped.message)
        built += 1
    assert built >= 15


def test_a_connection_error_not_raised_while_connecting_may_have_been_received() -> None:
    """An APIConnectionError with no sign of a failure while connecting (the request may have
    reached the provider): a `ProviderError`, retried when harmless, never for a side effect."""
    litellm = _litellm()
    exc = litellm.APIConnectionError("no route", llm_provider="openai", model="m")
    mapped = map_exception(exc)
    assert type(mapped) is errors.ProviderError and mapped.code == "upstream_connection_error"
    assert not raised_before_sending(exc)
    assert classify(mapped, AttemptContext(False, True, False)).action == "retry"
    assert classify(mapped, AttemptContext(True, True, False)).action == "unknown_commit"


def _chained(top: BaseException, *causes: BaseException) -> BaseException:
    link = top
    for cause in causes:
        link.__cause__ = cause
        link = cause
    return top


def test_a_dropped_connection_that_litellm_calls_a_server_error_may_have_been_received() -> None:
    """litellm reports a connection the server dropped as its `InternalServerError` over the
    SDK's `APIConnectionError`: not an answer that says the provider did not act."""
    import openai

    litellm = _litellm()
    request: Any = httpx.Request("POST", "http://upstream/v1/chat/completions")
    dropped = _chained(
        litellm.InternalServerError("Connection error.", llm_provider="openai", model="m"),
        openai.APIConnectionError(request=request),
        httpx.ReadError("Server disconnected"))
    mapped = map_exception(dropped)
    assert type(mapped) is errors.ProviderError
    assert classify(mapped, AttemptContext(True, True, False)).action == "unknown_commit"


def test_a_drop_under_litellms_anthropic_error_may_have_been_received() -> None:
    """litellm's Anthropic path reports a connection the server dropped after the request as
    its `InternalServerError` over `AnthropicError` over httpx's `ReadError`, with no SDK
    connection error between: `upstream_dropped` as through its OpenAI path, never the 503
    that says the provider did not act (a side-effecting agent turn was retried, its
    Idempotency-Key given back: the agent tool-loop audit). The same error over an answered
    5xx stays what the status says."""
    from litellm.llms.anthropic.common_utils import AnthropicError

    litellm = _litellm()

    def over(*causes: BaseException) -> BaseException:
        return _chained(litellm.InternalServerError("Server disconnected", llm_provider="anthropic",
                                                    model="claude"),
                        AnthropicError(status_code=500, message="Server disconnected"), *causes)

    dropped = map_exception(over(httpx.ReadError("Server disconnected")))
    assert (type(dropped), dropped.code) == (errors.ProviderError, "upstream_dropped")
    assert classify(dropped, AttemptContext(True, True, False)).action == "unknown_commit"
    answered = httpx.HTTPStatusError("529", request=_request(),
                                     response=httpx.Response(529, request=_request()))
    assert isinstance(map_exception(over(answered, httpx.ReadError("x"))),
                      errors.ProviderUnavailableError)
    refused = map_exception(over(httpx.ConnectError("refused")))
    assert isinstance(refused, errors.ProviderUnavailableError)


def test_a_connection_refused_is_unavailable_and_safe_to_retry_even_for_a_side_effect() -> None:
    """Failing while connecting, the request never left: unavailable, retried."""
    import openai

    litellm = _litellm()
    request: Any = httpx.Request("POST", "http://upstream/v1/chat/completions")
    refused = _chained(
        litellm.APIConnectionError("Connection error.", llm_provider="openai", model="m"),
        openai.APIConnectionError(request=request), httpx.ConnectError("refused"))
    mapped = map_exception(refused)
    assert isinstance(mapped, errors.ProviderUnavailableError)
    assert classify(mapped, AttemptContext(True, True, False)).action == "retry"


def test_a_stream_litellm_calls_unavailable_after_its_head_is_a_cut_stream() -> None:
    """litellm wraps a stream that ended before its finish reason in `MidStreamFallbackError`
    (a `ServiceUnavailableError`): read after the upstream's 200, it is a cut stream, as the
    pass-through reports it, and never "not received" (which a side effect would fail over);
    a rate limit raised then is no refusal either. Failing to connect stays a refusal."""
    litellm = _litellm()
    eof = httpx.RemoteProtocolError("Stream ended before a finish_reason was received")
    from litellm.exceptions import MidStreamFallbackError

    ended = _chained(MidStreamFallbackError(
        "Stream ended before a finish_reason was received", model="m", llm_provider="openai",
        original_exception=eof), eof)
    # The transport's drop behind it says the request was sent: never the refusal litellm's
    # class name would say (it read as one, `ProviderUnavailableError`, until 2026-12-07)
    assert map_exception(ended).code == "upstream_dropped"
    for raised in (ended, litellm.RateLimitError("slow down", llm_provider="openai", model="m")):
        mapped = broken_after_head(raised)
        assert (type(mapped), mapped.code) == (errors.ProviderError, "upstream_stream_cut")
        assert classify(mapped, AttemptContext(True, True, False)).action == "unknown_commit"
    refused = _chained(litellm.APIConnectionError("Connection error.", llm_provider="openai",
                                                  model="m"), httpx.ConnectError("refused"))
    assert isinstance(broken_after_head(refused), errors.ProviderUnavailableError)
    timed_out = broken_after_head(TimeoutError())
    assert isinstance(timed_out, errors.ProviderTimeoutError)


def test_the_pass_through_clients_drop_after_sending_is_not_a_refusal() -> None:
    """`UpstreamDropped` (sent, closed unanswered) against `UpstreamUnreachable` (no
    connection): only the second is safe to retry for a side effect."""
    from router.providers.http1 import UpstreamDropped, UpstreamUnreachable

    dropped = map_exception(UpstreamDropped("closed before answering"))
    refused = map_exception(UpstreamUnreachable("cannot connect"))
    assert (dropped.code, type(dropped)) == ("upstream_dropped", errors.ProviderError)
    assert isinstance(refused, errors.ProviderUnavailableError)
    assert classify(dropped, AttemptContext(True, True, False)).action == "unknown_commit"
    assert classify(refused, AttemptContext(True, True, False)).action == "retry"


async def _raised_by_litellm(**kwargs: Any) -> BaseException:
    litellm = _litellm()
    arguments: dict[str, Any] = {"model": "openai/fast", "messages": MESSAGES,
                                 "api_base": CLOSED_PORT_BASE, "api_key": "k",
                                 "num_retries": 0, "timeout": 5, "drop_params": True}
    arguments.update(kwargs)
    try:
        await litellm.acompletion(**arguments)
    except Exception as exc:
        return exc
    raise AssertionError("litellm did not fail")


@pytest.mark.parametrize("kwargs", [{"messages": "hello"}, {"response_format": "json"}],
                         ids=["messages-not-a-list", "response-format-a-string"])
async def test_litellm_failure_before_sending_is_the_requests_fault(
        kwargs: dict[str, Any]) -> None:
    """litellm failing on a bad parameter before any network call (it raises
    APIConnectionError with a traceback in its message) is a clean 400 `adapter_rejected`,
    which does not count against the deployment's breaker."""
    exc = await _raised_by_litellm(**kwargs)
    assert type(exc).__name__ == "APIConnectionError"
    assert "Traceback" in str(exc) or "Exception -" in str(exc)  # what used to reach clients
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderRejectedError)
    assert mapped.code == "adapter_rejected"
    _assert_clean(mapped.message)


async def test_litellm_connection_refused_counts_against_the_deployment() -> None:
    """A refused connection is a transport failure: retryable, a breaker failure."""
    exc = await _raised_by_litellm()
    assert not raised_before_sending(exc)
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderUnavailableError)
    assert classify(mapped, AttemptContext(False, True, False)).breaker_failure
    assert classify(mapped, AttemptContext(True, True, False)).action == "retry"  # never sent
    _assert_clean(mapped.message)


@pytest.fixture
async def malformed_anthropic() -> AsyncIterator[str]:
    """An upstream whose Messages API answers 200 with a body missing `content`."""
    async def messages(_: web.Request) -> web.Response:
        return web.json_response({"id": "msg_1", "type": "message"})

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


async def test_litellm_failing_on_a_malformed_answer_still_counts(malformed_anthropic: str
                                                                  ) -> None:
    """litellm raises the same APIConnectionError(KeyError) for an answer it cannot parse;
    that one came back from the provider, so it stays a provider failure (counted against the
    deployment, and not a refusal a side effect could be retried after)."""
    exc = await asyncio.wait_for(_raised_by_litellm(model="anthropic/fast",
                                                    api_base=malformed_anthropic), 30)
    assert type(exc).__name__ == "APIConnectionError"
    assert not raised_before_sending(exc)
    mapped = map_exception(exc)
    assert type(mapped) is errors.ProviderError
    # the answer came and could not be read: not a connection error (it was, until 2026-12-05)
    assert mapped.code == "upstream_bad_response", mapped.message
    assert classify(mapped, AttemptContext(False, True, False)).breaker_failure
    _assert_clean(mapped.message)


# ----------------------------------------------------------------------------- Retry-After

def test_retry_after_reads_the_finer_header_and_http_dates_in_any_case() -> None:
    """`retry-after-ms` wins; `Retry-After` may be delta-seconds or an HTTP-date."""
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert retry_after_of({"Retry-After": "2", "retry-after-ms": "1500"}) == 1.5
    assert retry_after_of({"RETRY-AFTER": "3"}) == 3.0
    dated = retry_after_of({"retry-after": later})
    assert dated is not None and 25.0 < dated <= 30.0
    assert retry_after_of({"retry-after": "soon"}) is None
    assert retry_after_of(None) is None


def test_a_retry_info_wait_is_read_from_the_bodys_structure_only() -> None:
    """Google's `RetryInfo` in `error.details`: as the body, as litellm quotes it (as text or
    as bytes); never from a message quoting the request, or from text before the body."""
    import json

    from router.providers.upstream_answers import retry_delay_in_body

    info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17.5s"}
    body = json.dumps({"error": {"code": 429, "message": "You're over quota.",
                                 "details": [{"@type": "x.Help"}, info]}})
    assert retry_delay_in_body(body) == 17.5
    assert retry_delay_in_body(f"litellm.RateLimitError: GeminiException - {body}") == 17.5
    assert retry_delay_in_body(
        f"litellm.RateLimitError: Vertex_ai_betaException - {body.encode()!r}") == 17.5
    listed = json.dumps([json.loads(body)])
    assert retry_delay_in_body(listed) == 17.5
    assert retry_delay_in_body(f"litellm.RateLimitError: GeminiException - {listed}") == 17.5
    assert retry_delay_in_body(
        f"litellm.RateLimitError: Vertex_ai_betaException - {listed.encode()!r}") == 17.5
    # a prompt quoted in a provider's message, placing a body of its own after litellm's words
    assert retry_delay_in_body("litellm.ServiceUnavailableError: OpenAIException - Invalid: '"
                               f"Exception - {body}'") is None
    quoting = {"error": {"code": 503, "message": "Invalid value: \"'retryDelay': '60s' "
                         f"{json.dumps({'error': {'details': [info]}})}\""}}
    assert retry_delay_in_body(json.dumps(quoting)) is None
    assert retry_delay_in_body(f"Refused prompt: {body}") is None
    assert retry_delay_in_body("Refused prompt: 'retryDelay': '60s'") is None
    assert retry_delay_in_body(json.dumps({"error": {"details": [
        {**info, "retryDelay": "soon"}]}})) is None
    assert retry_delay_in_body("{" * 100_000) is None


def test_litellm_rate_limit_keeps_the_providers_retry_after_and_the_common_code() -> None:
    """litellm's Anthropic errors carry a placeholder response with no headers; the real ones
    are in `litellm_response_headers`. The code is the pass-through adapter's, `rate_limited`."""
    litellm = _litellm()
    placeholder = httpx.Response(429, request=httpx.Request("POST", "https://placeholder/"))
    exc = litellm.RateLimitError("overloaded", llm_provider="anthropic", model="m",
                                 response=placeholder)
    exc.litellm_response_headers = httpx.Headers({"retry-after": "2", "retry-after-ms": "2000"})
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderRateLimitedError)
    assert (mapped.retry_after, mapped.code) == (2.0, "rate_limited")
    assert mapped.code == from_status(429, "slow down").code


def test_an_exception_repr_inside_a_message_keeps_its_words_only() -> None:
    """aiohttp puts `<TransferEncodingError: 400, message='...'>` in its messages."""
    cleaned = clean_message(
        "Response payload is not completed: <TransferEncodingError: 400, message='Not enough "
        "data to satisfy transfer length header.'>")
    assert "TransferEncodingError" not in cleaned and "<" not in cleaned
    assert "Not enough data" in cleaned


def _request() -> Any:
    """A request as the HTTP client's errors carry it (typed `Any`: the openai SDK's stubs name
    another httpx's `Request`)."""
    return httpx.Request("POST", "http://upstream.test/v1/chat/completions")


def test_a_timeout_waiting_for_an_answer_is_told_from_an_answered_504() -> None:
    """The adapter's own timeout, and litellm's over its HTTP client's read timeout: the request
    was sent and no answer came (`upstream_read_timeout`, which may be billed). litellm's
    `Timeout` over an answered 504, or over a connect timeout, stays `upstream_timeout`."""
    import openai

    litellm = _litellm()

    def timeout_over(*causes: BaseException) -> BaseException:
        return _chained(litellm.Timeout("timed out", model="m", llm_provider="openai"), *causes)

    answered = httpx.Response(504, request=_request())
    read = timeout_over(openai.APITimeoutError(request=_request()), httpx.ReadTimeout("read"))
    cases = {
        "adapter": (TimeoutError(), "upstream_read_timeout"),
        "read": (read, "upstream_read_timeout"),
        "connect": (timeout_over(httpx.ConnectTimeout("connect")), "upstream_timeout"),
        "answered 504": (timeout_over(httpx.HTTPStatusError(
            "504", request=_request(), response=answered)), "upstream_timeout"),
        "status": (from_status(504, "gateway timeout"), "upstream_timeout"),
    }
    for name, (raised, code) in cases.items():
        mapped = map_exception(raised)
        assert (type(mapped), mapped.code) == (errors.ProviderTimeoutError, code), name
        assert sent_unanswered(mapped) is (code == "upstream_read_timeout"), name


def test_litellms_connection_dropped_before_the_answer_is_upstream_dropped() -> None:
    """litellm's error over a connection the upstream closed or reset after the request was
    sent: `upstream_dropped`, as through the pass-through; mid-stream it is a cut stream. A
    connection error with no such drop behind it stays `upstream_connection_error`, and one
    while connecting a refusal (neither is priced)."""
    import openai

    litellm = _litellm()

    def over(*causes: BaseException) -> BaseException:
        return _chained(litellm.InternalServerError("Connection error.", llm_provider="openai",
                                                    model="m"),
                        openai.APIConnectionError(request=_request()), *causes)

    dropped = map_exception(over(httpx.ReadError("closed"), ConnectionResetError()))
    assert (type(dropped), dropped.code) == (errors.ProviderError, "upstream_dropped")
    assert sent_unanswered(dropped)
    assert classify(dropped, AttemptContext(True, True, False)).action == "unknown_commit"
    cut = broken_after_head(over(httpx.ReadError("closed")))
    # Priced as sent when nothing was relayed yet (the runner's attempt still pending); a cut
    # after content is priced by the relay with its output instead.
    assert (cut.code, sent_unanswered(cut)) == ("upstream_stream_cut", True)
    unknown = map_exception(over())
    assert (unknown.code, sent_unanswered(unknown)) == ("upstream_connection_error", False)
    refused = map_exception(over(httpx.ConnectError("refused")))
    assert isinstance(refused, errors.ProviderUnavailableError) and not sent_unanswered(refused)


@pytest.mark.parametrize(("raised", "code", "sent"), [
    (aiohttp.ConnectionTimeoutError(), "upstream_timeout", False),
    (aiohttp.SocketTimeoutError(), "upstream_read_timeout", True),
])
def test_aiohttp_connect_and_read_timeouts_are_told_apart(raised: BaseException, code: str,
                                                          sent: bool) -> None:
    """aiohttp's connect timeout is an `asyncio.TimeoutError` too: never connected, never sent,
    nothing to bill; its read timeout waited for an answer to a request sent (priced)."""
    err = map_exception(raised)
    assert isinstance(err, errors.ProviderTimeoutError)
    assert (err.code, sent_unanswered(err)) == (code, sent)


@pytest.mark.parametrize("kwargs", [
    {"tools": [{"type": "custom", "custom": {"name": "t"}}]},
    {"messages": [{"role": "tool", "content": "x"}]},
], ids=["custom-tool", "tool-message-without-its-call-id"])
async def test_litellm_failing_to_build_an_anthropic_request_is_the_requests_fault(
        kwargs: dict[str, Any]) -> None:
    """litellm's Anthropic transformation raising a KeyError on a field it needs (a custom
    tool has no `function`; a tool result no `tool_call_id`), before any call: a 400
    `adapter_rejected` naming the field, which no breaker counts. The first used to be a 502
    `upstream_connection_error` (litellm's own `anthropic` package was taken for the anthropic
    SDK's I/O), so five such requests opened a healthy deployment's breaker; the second a 400
    worded "upstream returned 400" though no upstream saw it."""
    exc = await _raised_by_litellm(model="anthropic/fast", max_tokens=3, **kwargs)
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderRejectedError), mapped
    assert mapped.code == "adapter_rejected" and "a field it needs is missing" in mapped.message
    assert not classify(mapped, AttemptContext(False, True, False)).breaker_failure
    _assert_clean(mapped.message)


async def test_litellm_refusing_a_conversation_anthropic_cannot_hold_is_the_requests_fault(
) -> None:
    """A system message alone: litellm's Anthropic transformation refuses it with a
    BadRequestError of its own, before any call. It was a 400 worded "upstream returned 400"
    (`upstream_rejected`), though no upstream saw it; now `adapter_rejected`."""
    exc = await _raised_by_litellm(model="anthropic/fast", max_tokens=3,
                                   messages=[{"role": "system", "content": "Say hi"}])
    mapped = map_exception(exc)
    assert isinstance(mapped, errors.ProviderRejectedError), mapped
    assert mapped.code == "adapter_rejected"
    assert "non-system message" in mapped.message
    assert not classify(mapped, AttemptContext(False, True, False)).breaker_failure


def _raised_from(cause: BaseException, wrapper: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise wrapper from inner
    except BaseException as outer:
        return outer


def test_the_router_out_of_file_descriptors_is_its_own_failure_not_the_upstream_s() -> None:
    """EMFILE, however an adapter wraps it, is a 503 of the router's, with no verdict on the
    deployment: an audit under `prlimit --nofile=128` saw a healthy upstream's breaker open, 10
    `unknown_commit` for requests never sent, and a message naming litellm's install path."""
    import errno

    from router.providers.http1 import UpstreamUnreachable

    emfile = OSError(errno.EMFILE, "Too many open files",
                     "/srv/app/.venv/lib/python3.11/site-packages/litellm/proxy/guardrails")
    litellm = _litellm()
    wrapped = [
        emfile,
        OSError(errno.ENFILE, "Too many open files in system"),
        _raised_from(emfile, UpstreamUnreachable("cannot connect to upstream: OSError")),
        _raised_from(emfile, litellm.APIConnectionError(message="OSError", llm_provider="openai",
                                                        model="m")),
    ]
    for exc in wrapped:
        mapped = map_exception(exc)
        assert isinstance(mapped, errors.OverloadedError), (exc, mapped)
        assert (mapped.status_code, mapped.code) == (503, "router_out_of_files")
        assert "/srv/app" not in mapped.message and mapped.retry_after is not None
        for side_effecting in (False, True):
            verdict = classify(mapped, AttemptContext(side_effecting, True, False))
            assert (verdict.action, verdict.breaker_failure) == ("give_up", False)


def test_a_connection_dropped_mid_stream_is_not_said_to_be_before_the_answer() -> None:
    """Through litellm, a stream cut after three chunks were relayed said "upstream closed the
    connection before answering"."""
    from router.providers.http1 import UpstreamDropped

    err = broken_after_head(UpstreamDropped("upstream closed the connection"))
    assert err.code == "upstream_stream_cut"
    assert "mid-answer" in err.message and "before answering" not in err.message


def test_an_error_status_at_a_stream_s_first_read_is_that_answer_and_later_a_cut() -> None:
    """litellm sends some providers' requests (Gemini's) at a stream's first read and wraps an
    error status there in `MidStreamFallbackError`: at the first read it is the upstream's
    answer (a 429 with its wait, refused before acting), after content it is a cut stream,
    whatever status error an earlier handled exception left in the chain (the re-audit)."""
    litellm = _litellm()
    from litellm.exceptions import MidStreamFallbackError

    request = httpx.Request("POST", "http://upstream/models/m:streamGenerateContent")
    head = httpx.Response(429, headers={"retry-after": "13"}, request=request)
    status_error = httpx.HTTPStatusError("429", request=request, response=head)
    limited = litellm.RateLimitError("slow down", llm_provider="gemini", model="m")
    limited.litellm_response_headers = {"retry-after": "13"}
    wrapped = _chained(MidStreamFallbackError("slow down", model="m", llm_provider="gemini",
                                              original_exception=limited), status_error)
    refused = broken_after_head(wrapped, first_read=True)
    assert (type(refused), refused.code, refused.retry_after) == (
        errors.ProviderRateLimitedError, "rate_limited", 13.0)
    later = broken_after_head(wrapped)
    assert (type(later), later.code) == (errors.ProviderError, "upstream_stream_cut")
