"""Gemini's and Azure OpenAI's answers through litellm, read as what they are.

- Gemini's streams are sent at litellm's first read (its stream wrapper opens the call lazily),
  so a 429 or 503 there is the upstream's refusal, not a stream cut after a 200: a 429 keeps
  its wait (a `retry-after` header, or Google's `RetryInfo` in the body, which Gemini sends
  instead) and is not retried at once; a side-effecting stream refused so is that refusal,
  never `unknown_commit`. A connection closed before any answer stays `upstream_dropped`.
- Gemini's 403 is the deployment's fault (502 `upstream_permission`): litellm raises it as a
  `BadRequestError`, which read as the client's 400 and never counted against the deployment.
- An Azure 200 that is an HTML page (a proxy's, a maintenance page) is `upstream_bad_response`,
  streamed (it was an empty answer, counted as served) or not (it was a retried 503).
- Azure's first stream chunk, the prompt-filter results litellm empties, is not relayed (an
  SDK's stream helper took its empty `id` and `model` for the answer's).
- litellm's `<Provider>Exception <Class> - ` prefixes and quoted bodies are cut from messages.

Served end to end: a hand-written upstream speaking both wires (`http.server`), the router as a
process, the real `openai` client. Found by the provider audit of 2026-12-07.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

import openai
import pytest

from tests.support.fake_upstream import QuietHandler, send_body, serve_in_thread
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

API_KEY = "sk-test-gemini-azure"
SEND_EMAIL: Any = [{"type": "function", "function": {
    "name": "send_email", "description": "Send an e-mail to a recipient.",
    "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}]


def _google_error(code: int, status: str, message: str, details: list[Any] | None = None
                  ) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return {"error": error}


GEMINI_ERRORS: dict[str, tuple[int, dict[str, Any], dict[str, str]]] = {
    "quota": (429, _google_error(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota.", [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}]), {}),
    "limited": (429, _google_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted."),
                {"retry-after": "13"}),
    "overloaded": (503, _google_error(503, "UNAVAILABLE", "The model is overloaded."), {}),
    "suspended": (403, _google_error(403, "PERMISSION_DENIED", "Consumer has been suspended."),
                  {}),
    "invalid": (400, _google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received."),
                {}),
}
GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello."}]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 2,
                                   "totalTokenCount": 9},
                 "modelVersion": "gemini-2.0-flash"}
AZURE_CHUNK = {"id": "chatcmpl-az", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4o-2024-08-06"}
PROMPT_FILTER = {"id": "", "object": "", "created": 0, "model": "", "choices": [],
                 "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}


class TwoWires(QuietHandler):
    """Gemini's `generateContent` / `streamGenerateContent` and Azure's chat completions; the
    scenario is the word after `S:` in the last message. Counts the calls per scenario."""

    calls: ClassVar[Counter[str]] = Counter()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
        found = re.findall(r"S:(\w+)", json.dumps(body))
        scenario = found[-1] if found else "ok"
        TwoWires.calls[scenario] += 1
        if scenario == "drop":
            self.close_connection = True  # closed with no answer
            return
        if "/openai/deployments/" in self.path:
            self._azure(scenario, bool(body.get("stream")))
        else:
            self._gemini(scenario, ":streamGenerateContent" in self.path)

    def _gemini(self, scenario: str, stream: bool) -> None:
        if scenario in GEMINI_ERRORS:
            status, error, headers = GEMINI_ERRORS[scenario]
            raw = json.dumps(error).encode()
            self.send_response(status)
            for name, value in {"content-type": "application/json",
                                "content-length": str(len(raw)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)
        elif stream:
            self._events([GEMINI_ANSWER], done=False)
        else:
            send_body(self, 200, json.dumps(GEMINI_ANSWER).encode())

    def _azure(self, scenario: str, stream: bool) -> None:
        if scenario == "html":
            send_body(self, 200, b"<html><body>Front Door: maintenance</body></html>",
                      content_type="text/html")
        elif stream:
            chunks = [PROMPT_FILTER] + [
                {**AZURE_CHUNK, "choices": [{"index": 0, "delta": delta, "finish_reason": end}]}
                for delta, end in (({"role": "assistant", "content": ""}, None),
                                   ({"content": "Hello."}, None), ({}, "stop"))]
            self._events(chunks, done=True)
        else:
            send_body(self, 200, json.dumps({
                **AZURE_CHUNK, "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Hello."}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
            ).encode())

    def _events(self, events: list[dict[str, Any]], *, done: bool) -> None:
        payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        payload += b"data: [DONE]\n\n" if done else b""
        send_body(self, 200, payload, content_type="text/event-stream")


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, base = serve_in_thread(TwoWires)
    running = start_router(tmp_path_factory.mktemp("gemini-azure"), f"""version: 1
deployments:
  - {{name: gem, model: gemini/gemini-2.0-flash, api_base: '{base}', api_key: env:GEM_KEY,
     input_price_per_mtok: 0.1, output_price_per_mtok: 0.4, timeout_s: 10}}
  - {{name: az, model: azure/my-gpt4o, api_base: '{base}', api_key: env:AZ_KEY,
     api_version: '2024-10-21', input_price_per_mtok: 2.5, output_price_per_mtok: 10,
     timeout_s: 10}}
models: [{{name: gem, deployments: [gem]}}, {{name: az, deployments: [az]}}]
routes: {{default_model: gem}}
api_keys: [{{key: env:TENANT_KEY, tenant: t}}]
server:
  cache: {{backend: none}}
  reliability:
    max_retries_per_deployment: 1
    # never open: each test meets the upstream's own answer (a 429's Retry-After would hold
    # the breaker open after two)
    breaker: {{consecutive_failures: 1000000, min_volume: 1000000, holds_after: 1000000}}
""", env={"TENANT_KEY": API_KEY, "GEM_KEY": "AIzaSy-test-key-0123456789abcdef",
          "AZ_KEY": "az-key-0123456789abcdef"})
    yield running
    running.stop()
    server.shutdown()


def _client(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)


def _refusal(router: Running, model: str, scenario: str, *, stream: bool,
             side_effect: bool = False) -> tuple[openai.APIStatusError, int]:
    """The error a request meets, and how many calls reached the upstream for it."""
    before = TwoWires.calls[scenario]
    extra: dict[str, Any] = {"tools": SEND_EMAIL} if side_effect else {}
    headers = {"x-slorouter-task": "action"} if side_effect else {}
    text = "Send the report to ops" if side_effect else "Translate good morning to French"
    with pytest.raises(openai.APIStatusError) as raised:
        reply: Any = _client(router).chat.completions.create(
            model=model, stream=stream, extra_headers=headers, **extra,
            messages=[{"role": "user", "content": f"{text} S:{scenario}"}])
        if stream:
            for _ in reply:
                pass
    time.sleep(0.05)  # the upstream's thread has counted every call by now
    return raised.value, TwoWires.calls[scenario] - before


def _code(error: openai.APIStatusError) -> Any:
    body: Any = error.body
    return body.get("code") if isinstance(body, dict) else None


@pytest.mark.parametrize(("scenario", "wait"), [("quota", "17"), ("limited", "13")])
@pytest.mark.parametrize("side_effect", [False, True])
def test_a_gemini_stream_refused_with_429_is_that_refusal_with_its_wait(
        router: Running, scenario: str, wait: str, side_effect: bool) -> None:
    error, calls = _refusal(router, "gem", scenario, stream=True, side_effect=side_effect)
    assert (error.status_code, _code(error)) == (429, "rate_limited"), error.body
    assert error.response.headers.get("retry-after") == wait
    assert calls == 1  # its wait is past the 1 s the router waits out: not retried


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_s_retry_info_is_the_wait_of_a_whole_answer_too(router: Running,
                                                                stream: bool) -> None:
    error, _ = _refusal(router, "gem", "quota", stream=stream)
    assert error.response.headers.get("retry-after") == "17"
    assert error.message.endswith("You exceeded your current quota.")


def test_a_gemini_stream_refused_with_503_is_retried_and_a_503(router: Running) -> None:
    error, calls = _refusal(router, "gem", "overloaded", stream=True)
    assert (error.status_code, _code(error)) == (503, "upstream_unavailable"), error.body
    assert calls == 2
    assert "Exception" not in error.message and "{" not in error.message, error.message


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_s_403_is_the_deployment_s_fault(router: Running, stream: bool) -> None:
    error, calls = _refusal(router, "gem", "suspended", stream=stream)
    assert (error.status_code, _code(error)) == (502, "upstream_permission"), error.body
    assert error.response.headers.get("x-should-retry") == "false"
    assert calls == 1


def test_gemini_s_400_is_the_client_s_with_a_clean_message(router: Running) -> None:
    error, _ = _refusal(router, "gem", "invalid", stream=False)
    assert (error.status_code, _code(error)) == (400, "upstream_rejected")
    assert error.message.endswith("upstream returned 400: Invalid JSON payload received."), (
        error.message)


def test_a_gemini_stream_dropped_before_any_answer_is_upstream_dropped(router: Running) -> None:
    error, calls = _refusal(router, "gem", "drop", stream=True)
    assert (error.status_code, _code(error)) == (502, "upstream_dropped"), error.body
    assert calls == 2
    side, side_calls = _refusal(router, "gem", "drop", stream=True, side_effect=True)
    assert (side.status_code, _code(side), side_calls) == (504, "unknown_commit", 1)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("side_effect", [False, True])
def test_an_azure_200_that_is_an_html_page_is_a_bad_response(
        router: Running, stream: bool, side_effect: bool) -> None:
    error, calls = _refusal(router, "az", "html", stream=stream, side_effect=side_effect)
    if side_effect:  # it had the request: it may have acted
        assert (error.status_code, _code(error), calls) == (504, "unknown_commit", 1)
    else:
        assert (error.status_code, _code(error)) == (502, "upstream_bad_response"), error.body


def test_azure_s_prompt_filter_chunk_is_not_relayed(router: Running) -> None:
    client = _client(router)
    chunks = list(client.chat.completions.create(
        model="az", stream=True, messages=[{"role": "user", "content": "Say hello S:ok"}]))
    assert chunks and all(chunk.choices or chunk.usage for chunk in chunks)
    assert {chunk.id for chunk in chunks} == {"chatcmpl-az"}
    with client.chat.completions.stream(
            model="az", messages=[{"role": "user", "content": "Say hello S:ok"}]) as stream:
        final = stream.get_final_completion()
    assert (final.id, final.model, final.choices[0].message.content) == (
        "chatcmpl-az", "gpt-4o-2024-08-06", "Hello.")
