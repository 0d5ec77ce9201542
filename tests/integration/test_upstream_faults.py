"""Whose fault an upstream error is, as the client and the breakers see it, on real processes.

One simulator (its unknown models answer 404, `small` has a 4096-token context window,
`limited` always answers 429 with a 30 s Retry-After), one stub upstream that refuses every key
(401), one that answers every request 409, and one router in front of them, through both
adapters (`pt-*` pass-through, `ll-*` litellm). Prefix affinity is off, so a model's
deployments are tried in their configured order.
Breaker counts come from the router's `GET /v1/health/deployments`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import QuietHandler, ThreadedUpstream, send_body
from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-upstream-faults"
MESSAGES: Any = [{"role": "user", "content": "hello there"}]
CHAT = {"x-slorouter-task": "chat"}  # the classifier calls "hello there" an action
FAST = {"ttft_p50_ms": 20, "ttft_p99_ms": 40, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 12, "output_tokens_p99": 20}
SIM_MODELS: dict[str, dict[str, Any]] = {
    "fast": FAST,
    "small": {**FAST, "context_window": 4096},
    "limited": {**FAST, "error_rate_429": 1.0, "retry_after_s": 30},
    # 40 tokens 0.1 s apart: a 4 s answer, longer than the deadline test's 1 s
    "slow": {**FAST, "tpot_p50_ms": 100, "tpot_p99_ms": 100, "output_tokens_p50": 40,
             "output_tokens_p99": 40, "output_tokens_max": 40},
}
LEAKED_KEY = "sk-proj-gateway-secret-1234"


class RefusingUpstream(ThreadedUpstream):
    """An OpenAI-compatible upstream that answers every request `status` (by default 401, a
    refused key whose message quotes it) and counts them."""

    def __init__(self, status: int = 401, code: str = "invalid_api_key",
                 message: str = f"Incorrect API key provided: {LEAKED_KEY}.") -> None:
        self.calls = 0
        outer = self
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                     "param": None, "code": code}}).encode()

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.calls += 1
                send_body(self, status, body)

        super().__init__(Handler)


def _deployment(name: str, model: str, adapter: str, api_base: str) -> str:
    key = "\n    api_key: env:SIM_KEY" if adapter == "litellm" else ""
    return (f"\n  - name: {name}\n    model: openai/{model}\n    adapter: {adapter}\n"
            f"    api_base: {api_base}/v1{key}\n    input_price_per_mtok: 1.0\n"
            f"    output_price_per_mtok: 2.0\n    timeout_s: 5")


def router_config(sim: str, refusing: str, conflicting: str) -> str:
    deps = [
        ("pt-conflict", "fast", "openai_passthrough", conflicting),
        ("ll-conflict", "fast", "litellm", conflicting),
        ("pt-missing", "no-such-model", "openai_passthrough", sim),
        ("ll-missing", "no-such-model", "litellm", sim),
        ("pt-badkey", "fast", "openai_passthrough", refusing),
        ("ll-badkey", "fast", "litellm", refusing),
        ("pt-badkey-trip", "fast", "openai_passthrough", refusing),
        ("pt-missing-first", "no-such-model-either", "openai_passthrough", sim),
        ("pt-missing-first-streamed", "no-such-model-either", "openai_passthrough", sim),
        ("pt-fast-second", "fast", "openai_passthrough", sim),
        ("ll-badkey-first", "fast", "litellm", refusing),
        ("ll-badkey-first-streamed", "fast", "litellm", refusing),
        ("ll-fast-second", "fast", "litellm", sim),
        ("pt-small", "small", "openai_passthrough", sim),
        ("ll-small", "small", "litellm", sim),
        ("pt-limited", "limited", "openai_passthrough", sim),
        ("pt-fast", "fast", "openai_passthrough", sim),
        ("pt-slow", "slow", "openai_passthrough", sim),
        ("ll-slow", "slow", "litellm", sim),
    ]
    # A pair per case: once a replica is seen failing it goes behind its peer, so each case
    # starts on a misconfigured replica nothing has seen fail yet.
    pairs = {f"fallback-{adapter}{case}": [f"{first}{case}", second]
             for adapter, first, second in [("pt", "pt-missing-first", "pt-fast-second"),
                                            ("ll", "ll-badkey-first", "ll-fast-second")]
             for case in ("", "-streamed")}
    paired = {name for pair in pairs.values() for name in pair}
    models = {name: [name] for name, *_ in deps if name not in paired}
    models.update(pairs)
    model_yaml = "".join(f"\n  - name: {name}\n    deployments: [{', '.join(order)}]"
                         for name, order in models.items())
    return f"""version: 1
deployments:{''.join(_deployment(*d) for d in deps)}
models:{model_yaml}
routes:
  aliases: [auto]
  default_model: pt-fast
api_keys:
  - key: env:TENANT_KEY
    tenant: tenant-one
    scopes: [read]
policies:
  default:
    candidates: [pt-fast]
  tasks:
    summarization:  # `auto` for a summary can only go to the throttled deployment
      candidates: [pt-limited]
server:
  request_timeout_s: 20
  cache:
    prefix_affinity: false
"""


@pytest.fixture(scope="module")
def refusing() -> Iterator[RefusingUpstream]:
    upstream = RefusingUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def conflicting() -> Iterator[RefusingUpstream]:
    upstream = RefusingUpstream(409, "conflict", "Another request is in progress; try again.")
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("faults-sim"), SIM_MODELS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(sim: Running, refusing: RefusingUpstream, conflicting: RefusingUpstream,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_router(tmp_path_factory.mktemp("faults-router"),
                           router_config(sim.base_url, refusing.base_url, conflicting.base_url),
                           env={"TENANT_KEY": API_KEY, "SIM_KEY": "sim-key"})
    yield running
    running.stop()


@pytest.fixture
def client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=30)


def _health(gateway: Running) -> dict[str, dict[str, Any]]:
    body = httpx.get(f"{gateway.base_url}/v1/health/deployments", timeout=10).json()
    return {d["deployment"]: d for d in body["deployments"]}


def _error_body(caught: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, Any]:
    error: dict[str, Any] = caught.value.response.json()["error"]
    return error


# ------------------------------------------------------------- 401/404: the deployment's fault


@pytest.mark.parametrize(("model", "code"), [
    ("pt-missing", "upstream_not_found"), ("ll-missing", "upstream_not_found"),
    ("pt-badkey", "upstream_auth"), ("ll-badkey", "upstream_auth")])
def test_upstream_404_and_401_are_a_gateway_error_counted_by_the_breaker(
        client: openai.OpenAI, gateway: Running, model: str, code: str) -> None:
    """A deployment whose model does not exist upstream (404) or whose key is refused (401)
    is the gateway's fault: the client gets a 502 `upstream_error` with the specific code (not
    a 400 blaming its request, not the upstream's text that may quote the key), and the
    deployment's breaker records the failure."""
    before = _health(gateway).get(model, {}).get("window_failures", 0)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.status_code == 502
    error = _error_body(caught)
    assert error["type"] == "upstream_error" and error["code"] == code
    assert LEAKED_KEY not in error["message"] and "\n" not in error["message"]
    assert _health(gateway)[model]["window_failures"] == before + 1


def test_refused_key_opens_the_breaker_and_stops_calling_upstream(
        client: openai.OpenAI, gateway: Running, refusing: RefusingUpstream) -> None:
    """Five 401s in a row open the deployment's breaker; the sixth request is answered by the
    router (503 `circuit_open`, Retry-After from the cool-down) without reaching upstream."""
    calls_before = refusing.calls
    for _ in range(5):
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="pt-badkey-trip", messages=MESSAGES)
    assert refusing.calls == calls_before + 5
    assert _health(gateway)["pt-badkey-trip"]["state"] == "open"
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="pt-badkey-trip", messages=MESSAGES)
    assert caught.value.status_code == 503 and _error_body(caught)["code"] == "circuit_open"
    assert refusing.calls == calls_before + 5
    # the 5 s cool-down, spread up to twice it
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 10


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "broken", "healthy"), [
    ("fallback-pt", "pt-missing-first", "pt-fast-second"),
    ("fallback-ll", "ll-badkey-first", "ll-fast-second")])
def test_second_deployment_serves_when_the_first_is_misconfigured(
        client: openai.OpenAI, gateway: Running, model: str, broken: str, healthy: str,
        stream: bool) -> None:
    """The misconfigured first deployment is tried, fails, counts against its breaker, and the
    second deployment of the same model answers the client. (Seen failing, the first goes
    behind the second for what follows: `tests/faults/test_pinned_replica_health.py`.)"""
    if stream:
        model, broken = f"{model}-streamed", f"{broken}-streamed"
    before = _health(gateway).get(broken, {}).get("window_failures", 0)
    if stream:
        with client.chat.completions.with_streaming_response.create(
                model=model, messages=MESSAGES, stream=True) as response:
            served_by = response.headers["x-slorouter-model"]
            chunks = list(response.parse())
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
    else:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=MESSAGES)
        served_by = raw.headers["x-slorouter-model"]
        assert raw.parse().choices[0].message.content
    assert served_by == healthy
    assert _health(gateway)[broken]["window_failures"] == before + 1


# ------------------------------------------------------------- 409: a conflict upstream


@pytest.mark.parametrize("model", ["pt-conflict", "ll-conflict"])
def test_upstream_409_is_retried_and_ends_as_a_retryable_upstream_error(
        client: openai.OpenAI, conflicting: RefusingUpstream, model: str) -> None:
    """An upstream 409 is a conflict on the provider's side, not the caller's fault: the
    router retries the same deployment (the upstream sees a second call), and when no attempt
    succeeds the SDK gets a 503 `upstream_conflict` that it may retry (no x-should-retry:
    false), never a 400 BadRequestError carrying the upstream's code."""
    calls_before = conflicting.calls
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, extra_headers=CHAT)
    assert caught.value.status_code == 503
    error = _error_body(caught)
    assert error["type"] == "service_unavailable" and error["code"] == "upstream_conflict"
    assert "upstream returned 409" in error["message"]
    assert caught.value.response.headers.get("x-should-retry") != "false"
    assert conflicting.calls >= calls_before + 2


# ------------------------------------------------------------- request faults keep their code


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["pt-small", "ll-small"])
def test_context_length_exceeded_reaches_the_client_with_its_code(
        client: openai.OpenAI, gateway: Running, model: str, stream: bool) -> None:
    """The upstream's `context_length_exceeded` is a BadRequestError with that code for the
    SDK, with a clean message, and it does not count against the deployment."""
    before = _health(gateway).get(model, {}).get("window_failures", 0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=1000000,
                                       stream=stream)
    assert caught.value.code == "context_length_exceeded"
    message = _error_body(caught)["message"]
    assert "maximum context length is 4096 tokens" in message
    assert "litellm" not in message and "Exception" not in message and "\n" not in message
    assert _health(gateway).get(model, {}).get("window_failures", 0) == before


# ------------------------------------------------------------- Retry-After and deadlines


def test_circuit_open_during_a_429_hold_says_how_long_the_hold_lasts(
        client: openai.OpenAI, gateway: Running) -> None:
    """Two 429s in a row with Retry-After 30 hold the deployment's breaker open; the next
    request's 503 `circuit_open` says to come back when the hold ends (or somewhat later: the
    wait is spread), not in 1 s."""
    for _ in range(2):  # the breaker's `holds_after`
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="pt-limited", messages=MESSAGES)
        assert limited.value.response.headers["retry-after"] == "30"
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="pt-limited", messages=MESSAGES)
    assert caught.value.status_code == 503 and _error_body(caught)["code"] == "circuit_open"
    assert 20 <= int(caught.value.response.headers["retry-after"]) <= 60  # spread up to 2x


def test_auto_with_every_candidate_held_open_says_how_long_the_hold_lasts(
        client: openai.OpenAI) -> None:
    """`auto` whose only candidate's breaker a 429 with Retry-After 30 holds open: the 503
    `no_eligible_model` says when the hold ends, as a pinned request's `circuit_open` does, not
    1 s (an SDK honouring Retry-After would give up before the deployment could answer)."""
    for _ in range(2):  # holds the breaker open for 30 s (or finds it held still)
        with pytest.raises((openai.RateLimitError, openai.InternalServerError)):
            client.chat.completions.create(model="pt-limited", messages=MESSAGES)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="auto", messages=MESSAGES,
                                       extra_headers={"x-slorouter-task": "summarization"})
    assert caught.value.status_code == 503
    assert _error_body(caught)["code"] == "no_eligible_model"
    assert 20 <= int(caught.value.response.headers["retry-after"]) <= 60  # spread up to 2x


@pytest.mark.parametrize(("model", "code"), [
    ("pt-limited", "circuit_open"), ("auto", "no_eligible_model")])
def test_refusals_while_a_breaker_is_open_spread_their_wait_after_it(
        client: openai.OpenAI, gateway: Running, model: str, code: str) -> None:
    """Clients refused while the deployment's breaker is held open are told to come back at
    different times (`retry-after-ms`), each no sooner than the breaker admits a probe again
    (its `half_open_in_s`), and no later than twice the whole seconds it had left. With one
    `Retry-After` for all of them they came back in the same second, for one probe slot."""
    for _ in range(2):  # holds the breaker open for 30 s (or finds it held still)
        with pytest.raises((openai.RateLimitError, openai.InternalServerError)):
            client.chat.completions.create(model="pt-limited", messages=MESSAGES)
    waits_ms = set()
    for _ in range(8):
        before = _health(gateway)["pt-limited"]["half_open_in_s"]
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model=model, messages=MESSAGES,
                                           extra_headers={"x-slorouter-task": "summarization"})
        after = _health(gateway)["pt-limited"]["half_open_in_s"]
        assert _error_body(caught)["code"] == code
        headers = caught.value.response.headers
        assert "retry-after-ms" in headers, dict(headers)  # the spread wait, the SDKs read it
        waited_ms = int(headers["retry-after-ms"])
        assert after * 1000 <= waited_ms <= 2000 * math.ceil(before), (before, waited_ms)
        assert after <= int(headers["retry-after"]) <= 2 * math.ceil(before)
        waits_ms.add(waited_ms)
    assert len(waits_ms) > 1


def test_deadline_expired_before_the_first_attempt_is_a_504(client: openai.OpenAI) -> None:
    """`x-slorouter-timeout-ms: 1` runs out before (or, rarely, just as) the first upstream
    attempt starts: a 504 `deadline_exceeded`, never a 502 `no_candidates`."""
    for _ in range(5):
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="pt-fast", messages=MESSAGES,
                                           extra_headers={**CHAT, "x-slorouter-timeout-ms": "1"})
        assert caught.value.status_code == 504
        error = _error_body(caught)
        assert error["code"] == "deadline_exceeded" and error["type"] == "timeout"
        assert time.monotonic() - started < 5


def test_short_client_deadlines_do_not_open_a_healthy_deployments_breaker(
        client: openai.OpenAI, gateway: Running) -> None:
    """Attempts cut by the client's own tiny deadline are not the deployment's failures: after
    many of them its breaker is still closed and the next ordinary request is served."""
    for _ in range(8):
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="pt-fast", messages=MESSAGES,
                                           extra_headers={**CHAT, "x-slorouter-timeout-ms": "5"})
        assert caught.value.status_code == 504
    health = _health(gateway)["pt-fast"]
    assert health["state"] == "closed" and health["consecutive_failures"] == 0
    answer = client.chat.completions.create(model="pt-fast", messages=MESSAGES,
                                            extra_headers=CHAT)
    assert answer.choices[0].message.content


@pytest.mark.parametrize("model", ["pt-slow", "ll-slow"])
def test_the_request_deadline_bounds_a_whole_stream_through_either_adapter(
        gateway: Running, model: str) -> None:
    """One deadline over everything: a 4 s stream under a 1 s client deadline ends with an error
    event at about 1 s, through the pass-through and the litellm adapter alike. The event says
    the request's deadline passed (as a 504 before the first token does), not that the upstream
    timed out, and the deployment's breaker does not count it."""
    started = time.monotonic()
    lines: list[str] = []
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", timeout=30,
                      headers={"authorization": f"Bearer {API_KEY}", **CHAT,
                               "x-slorouter-timeout-ms": "1000"},
                      json={"model": model, "messages": MESSAGES, "stream": True}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 2.5, elapsed
    assert len(lines) >= 2 and "data: [DONE]" not in lines
    error = json.loads(lines[-1][6:])["error"]
    assert (error["code"], error["type"]) == ("deadline_exceeded", "timeout")
    assert _health(gateway)[model]["consecutive_failures"] == 0


def test_the_python_sdks_timeout_bounds_a_whole_answer_but_never_cuts_a_stream(
        gateway: Running) -> None:
    """openai-python sends its timeout as `x-stainless-read-timeout`. A whole 4 s answer under
    1 s of it is a 504 `deadline_exceeded` at about 0.9 s (just before the SDK would give up);
    a 4 s stream under it runs to its end, as the SDK reads a stream chunk by chunk."""
    headers = {"authorization": f"Bearer {API_KEY}", **CHAT, "x-stainless-read-timeout": "1"}
    url = f"{gateway.base_url}/v1/chat/completions"
    started = time.monotonic()
    whole = httpx.post(url, headers=headers, timeout=30,
                       json={"model": "pt-slow", "messages": MESSAGES})
    assert 0.8 < time.monotonic() - started < 2.5
    assert whole.status_code == 504 and whole.json()["error"]["code"] == "deadline_exceeded"
    with httpx.stream("POST", url, headers=headers, timeout=30,
                      json={"model": "pt-slow", "messages": MESSAGES, "stream": True}) as streamed:
        assert streamed.status_code == 200
        lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) > 20
