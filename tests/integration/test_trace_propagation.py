"""W3C trace context at the running service: what a recording upstream receives, per attempt.

The router runs with span export on (console) and DEBUG logs; the upstream is a hand-written
server that records the headers of every request it gets. A request's server span id is read
from its `request_finished` log line, so each attempt's `traceparent` can be checked against
the id of the CLIENT span telemetry builds for it (`attempt_span_id`), through both adapters.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from router.telemetry.context import TraceContext, attempt_span_id
from tests.support.fake_upstream import (
    QuietHandler,
    ThreadedUpstream,
    send_body,
    stub_deployments,
)
from tests.support.services import Running, finished_requests, start_router

CLIENT_KEY = "sk-trace-propagation-client"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
ADAPTERS = ("pt", "ll")  # openai_passthrough, litellm


def _completion(model: str) -> dict[str, object]:
    return {"id": "c1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def _stream(model: str) -> bytes:
    chunks = [{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
               "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]},
              {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + \
        b"data: [DONE]\n\n"


class RecordingUpstream(ThreadedUpstream):
    """Records (model, trace headers) of every request. Models `broken…` always answer 500;
    `flaky` answers 500 to the first request of each trace id, then answers (a retry)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str | None]] = []
        self._lock = lock = threading.Lock()
        flaky_traces: set[str] = set()
        seen = self.seen

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                model, parent = body["model"], self.headers.get("traceparent")
                trace = parent.split("-")[1] if parent is not None else ""
                with lock:
                    seen.append((model, parent, self.headers.get("tracestate")))
                    first = model == "flaky" and trace not in flaky_traces
                    if first:
                        flaky_traces.add(trace)
                if model.startswith("broken") or first:
                    send_body(self, 500, b'{"error": {"message": "boom", "type": "server_error"}}')
                elif body.get("stream"):
                    send_body(self, 200, _stream(model), "text/event-stream")
                else:
                    send_body(self, 200, json.dumps(_completion(model)).encode())

        super().__init__(Handler)

    def take(self) -> list[tuple[str, str | None, str | None]]:
        with self._lock:
            taken = list(self.seen)
            self.seen.clear()
        return taken


def _config(base_url: str) -> str:
    deployments = stub_deployments(base_url, ["ok", "broken", "broken-streamed", "flaky"])
    models = "".join(f"""
  - name: {prefix}-{model}
    deployments: [{prefix}-{model}]""" for prefix in ADAPTERS for model in ("ok", "flaky"))
    # A chain per case: a replica seen failing goes behind its peer for the requests after, so
    # each case starts on a broken replica nothing has seen fail yet.
    models += "".join(f"""
  - name: {prefix}-chain{case}
    deployments: [{prefix}-broken{case}, {prefix}-ok]""" for prefix in ADAPTERS
                      for case in ("", "-streamed"))
    return f"""version: 1
deployments:{deployments}
models:{models}
routes:
  default_model: pt-ok
api_keys:
  - key: env:CLIENT_KEY
    tenant: tracer
    scopes: [read]
server:
  request_timeout_s: 10
  cache:
    prefix_affinity: false
  reliability:
    max_retries_per_deployment: 1
    backoff_base_s: 0.01
    backoff_cap_s: 0.02
    breaker:
      consecutive_failures: 1000000
      min_volume: 1000000
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Running, RecordingUpstream, Path]]:
    upstream = RecordingUpstream()
    directory = tmp_path_factory.mktemp("traced")
    try:
        router = start_router(directory, _config(upstream.base_url),
                              env={"STUB_KEY": "stub-key-for-tracing", "CLIENT_KEY": CLIENT_KEY,
                                   "SLOROUTER_TELEMETRY_EXPORTER": "console",
                                   "SLOROUTER_TELEMETRY_SAMPLE_RATIO": "1.0"},
                              extra_args=("--log-level", "debug"))
    except BaseException:
        upstream.stop()
        raise
    yield router, upstream, directory / "router.log"
    router.stop()
    upstream.stop()


def _server_span(log: Path, request_id: str) -> tuple[str, str]:
    """(trace id, server span id) from the request's `request_finished` log line."""
    deadline = time.monotonic() + 10.0
    while True:
        for event in finished_requests(log):
            if event.get("request_id") == request_id:
                return event["trace_id"], event["span_id"]
        assert time.monotonic() < deadline, f"no request_finished line for {request_id}"
        time.sleep(0.1)


def _post(router: Running, model: str, headers: list[tuple[str, str]]) -> httpx.Response:
    """A chat completion sent with these exact header lines (repeated names kept)."""
    return httpx.post(f"{router.base_url}/v1/chat/completions", timeout=20,
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                      headers=[("authorization", f"Bearer {CLIENT_KEY}"), *headers])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("model", ["chain", "flaky"], ids=["fallback", "retry"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_attempt_carries_the_client_trace_and_its_own_client_span_id(
        traced: tuple[Running, RecordingUpstream, Path], adapter: str, model: str,
        stream: bool) -> None:
    """With the client's `traceparent` and `tracestate`, each upstream attempt (the failed one
    and the fallback or retry that answered) gets the client's trace id, the `tracestate` as
    sent, and as parent the id of that attempt's CLIENT span: through both adapters."""
    router, upstream, log = traced
    upstream.take()
    request_id = f"trace-{adapter}-{model}-{stream}"
    trace_hex = hashlib.md5(request_id.encode()).hexdigest()  # a trace of its own: `flaky` fails
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=CLIENT_KEY, max_retries=0)
    case = "-streamed" if stream and model == "chain" else ""
    answer = client.chat.completions.create(
        model=f"{adapter}-{model}{case}", stream=stream,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"traceparent": f"00-{trace_hex}-{CLIENT_SPAN}-01",
                       "tracestate": "congo=t61rcWkgMzE", "x-request-id": request_id})
    if stream:
        list(answer)
    trace_id, span_id = _server_span(log, request_id)
    assert trace_id == trace_hex
    server = TraceContext(int(trace_id, 16), int(span_id, 16), int(CLIENT_SPAN, 16), True)
    seen = upstream.take()
    assert [m for m, _, _ in seen] == ([f"broken{case}", "ok"] if model == "chain"
                                       else [model] * 2)
    assert [parent for _, parent, _ in seen] == [
        f"00-{trace_hex}-{attempt_span_id(server, n):016x}-01" for n in (1, 2)]
    assert [state for _, _, state in seen] == ["congo=t61rcWkgMzE"] * 2


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_traceparent_sent_twice_starts_a_new_trace(
        traced: tuple[Running, RecordingUpstream, Path], adapter: str) -> None:
    """Two `traceparent` lines are no trace context (the header is not a list: W3C's test
    suite, `test_traceparent_duplicated`): the request is served in a new trace, continuing
    neither, and the client's `tracestate` is dropped with them."""
    router, upstream, _ = traced
    upstream.take()
    other = "00-12345678901234567890123456789012-1234567890123456-01"
    response = _post(router, f"{adapter}-ok", [("traceparent", TRACEPARENT),
                                                 ("traceparent", other),
                                                 ("tracestate", "congo=t61rcWkgMzE")])
    assert response.status_code == 200
    [(_, parent, state)] = upstream.take()
    assert parent is not None and parent.split("-")[1] not in (TRACE_ID, other.split("-")[1])
    assert state is None


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_tracestate_lines_are_one_list_in_order(
        traced: tuple[Running, RecordingUpstream, Path], adapter: str) -> None:
    """`tracestate` may come as several header lines, which are one list (RFC 9110; W3C's
    `test_tracestate_multiple_headers_different_keys`, `test_tracestate_empty_header`): the
    upstream gets all their members, in order, not only the first line's."""
    router, upstream, _ = traced
    upstream.take()
    response = _post(router, f"{adapter}-ok", [("traceparent", TRACEPARENT),
                                                 ("tracestate", "foo=1,bar=2"),
                                                 ("tracestate", ""),
                                                 ("tracestate", "rojo=1,congo=2"),
                                                 ("tracestate", "baz=3")])
    assert response.status_code == 200
    [(_, parent, state)] = upstream.take()
    assert parent is not None and parent.split("-")[1] == TRACE_ID
    assert state == "foo=1,bar=2,rojo=1,congo=2,baz=3"


@pytest.mark.parametrize("lines", [["foo=1,foo=2"], ["foo=1", "foo=1"]],
                         ids=["one line", "two lines"])
def test_a_tracestate_with_a_key_twice_is_not_forwarded(
        traced: tuple[Running, RecordingUpstream, Path], lines: list[str]) -> None:
    """A key may appear once in a `tracestate` (W3C's `test_tracestate_duplicated_keys`): a
    list repeating one is invalid and is not passed on; the trace itself is continued."""
    router, upstream, _ = traced
    upstream.take()
    response = _post(router, "pt-ok", [("traceparent", TRACEPARENT),
                                       *(("tracestate", line) for line in lines)])
    assert response.status_code == 200
    [(_, parent, state)] = upstream.take()
    assert parent is not None and parent.split("-")[1] == TRACE_ID
    assert state is None
