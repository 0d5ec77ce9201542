"""Request validation end to end: the real `openai` client, the router and its upstreams as
real processes (the simulator, plus a recording upstream for what the simulator does not model).

A request the router rejects must never reach a provider: the simulator's `/control/stats`
counters prove no upstream call was made. Requests OpenAI accepts (custom tools) are forwarded
as sent, which the recording upstream shows.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.integration.conftest import API_KEY, router_config
from tests.support.fake_upstream import QuietHandler, ThreadedUpstream
from tests.support.services import Running, start_router

MESSAGES: list[Any] = [{"role": "user", "content": "hello there"}]
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "code_exec",
                                            "description": "Runs Python and returns stdout",
                                            "format": {"type": "text"}}}
COMPLETION = {"id": "chatcmpl-rec", "object": "chat.completion", "created": 0, "model": "rec",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "recorded"}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


class Recorder(ThreadedUpstream):
    """An OpenAI-compatible upstream on a loopback port that keeps every body it receives."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        recorder = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                recorder.bodies.append(body)
                if body.get("stream"):
                    self._stream()
                    return
                answer = json.dumps(COMPLETION).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def _stream(self) -> None:
                chunk = {"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 0,
                         "model": "rec", "choices": [{"index": 0, "finish_reason": "stop",
                                                      "delta": {"content": "recorded"}}]}
                usage = {**chunk, "choices": [], "usage": COMPLETION["usage"]}
                if "/last/" in self.path:  # usage on the finish chunk, none of its own
                    chunks = [{**chunk, "usage": COMPLETION["usage"]}]
                else:
                    chunks = [chunk, usage]
                answer = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
                answer += b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        super().__init__(Handler)


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    running = Recorder()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(sim: Running, recorder: Recorder,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """The integration router, plus `pt-rec` / `ll-rec` reaching the recording upstream."""
    config = yaml.safe_load(router_config(sim.base_url))
    for prefix, adapter, path in (("pt", "openai_passthrough", "/v1"), ("ll", "litellm", "/v1"),
                                  ("pt-last", "openai_passthrough", "/last/v1")):
        deployment = {"name": f"{prefix}-rec", "model": "openai/rec", "adapter": adapter,
                      "api_base": f"{recorder.base_url}{path}", "input_price_per_mtok": 1.0,
                      "output_price_per_mtok": 2.0, "timeout_s": 3}
        if adapter == "litellm":
            deployment["api_key"] = "env:SIM_KEY"
        config["deployments"].append(deployment)
        config["models"].append({"name": f"{prefix}-rec", "deployments": [f"{prefix}-rec"]})
    running = start_router(tmp_path_factory.mktemp("router"), yaml.safe_dump(config),
                           env={"TENANT_ONE_KEY": API_KEY, "SIM_KEY": "sim-key"})
    yield running
    running.stop()


def _upstream_requests(sim: Running, model: str) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=5).json()["models"]
    return int(stats.get(model, {}).get("requests", 0))


def _breaker(gateway: Running, deployment: str) -> tuple[object, ...] | None:
    """The deployment's breaker state and window counts (not its clock readings); None while
    no request has reached it (a test run on its own, or before the ones that call it)."""
    health = httpx.get(f"{gateway.base_url}/v1/health/deployments", timeout=5).json()
    entry = next((d for d in health["deployments"] if d["deployment"] == deployment), None)
    if entry is None:
        return None
    return tuple(entry[k] for k in ("state", "consecutive_failures", "window_requests",
                                    "window_failures"))


@pytest.mark.parametrize("model", ["pt-fast", "ll-fast"])
def test_string_max_tokens_is_a_bad_request_that_never_reaches_the_provider(
        client: openai.OpenAI, sim: Running, model: str) -> None:
    """`max_tokens: "5"` → BadRequestError naming `max_tokens`; the simulator sees no call,
    and the deployment still answers afterwards (nothing was charged to its breaker)."""
    before = _upstream_requests(sim, "fast")
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(  # type: ignore[call-overload]
            model=model, messages=MESSAGES, max_tokens="5")
    assert caught.value.param == "max_tokens"
    assert caught.value.code == "invalid_type"
    assert _upstream_requests(sim, "fast") == before
    assert client.chat.completions.create(model=model, messages=MESSAGES).choices
    assert _upstream_requests(sim, "fast") == before + 1


@pytest.mark.parametrize(("extra", "param"), [
    ({"max_tokens": 5.0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_completion_tokens": "5"}, "max_completion_tokens"),
    ({"n": "1"}, "n"),
    ({"seed": "7"}, "seed"),
    ({"temperature": "0.5"}, "temperature"),
    ({"stream": "yes"}, "stream"),
    ({"stream": 1}, "stream"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"messages": [{"role": "user", "content": [{"type": "bogus"}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"stop": 5}, "stop"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"cache_salt": 5}, "cache_salt"),
    ({"cache_salt": ""}, "cache_salt"),
])
def test_malformed_fields_are_400_with_an_openai_param_and_no_upstream_call(
        client: openai.OpenAI, sim: Running, extra: dict[str, Any], param: str) -> None:
    """Each audited bad input is refused by the router itself, through the litellm adapter too
    (which used to turn some into a 503 that tripped the deployment's breaker)."""
    before = _upstream_requests(sim, "fast")
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="ll-fast", messages=MESSAGES, extra_body=extra)
    assert caught.value.param == param
    assert caught.value.type == "invalid_request_error"
    assert _upstream_requests(sim, "fast") == before


@pytest.mark.parametrize("model", ["pt-rec", "ll-rec"])
def test_a_custom_tool_is_accepted_and_forwarded(client: openai.OpenAI, recorder: Recorder,
                                                 model: str) -> None:
    """OpenAI's `custom` tools pass validation and reach the upstream as the client sent them."""
    recorder.bodies.clear()
    completion = client.chat.completions.create(model=model, messages=MESSAGES,
                                                tools=[CUSTOM_TOOL])  # type: ignore[list-item]
    assert completion.choices[0].message.content == "recorded"
    assert [body.get("tools") for body in recorder.bodies] == [[CUSTOM_TOOL]]


def test_a_body_nested_300_deep_is_400_before_any_upstream_call(
        client: openai.OpenAI, gateway: Running, sim: Running) -> None:
    """orjson could parse it but not forward it: refused with `too_deeply_nested`."""
    nested: dict[str, Any] = {}
    node = nested
    for _ in range(299):
        node["x"] = {}
        node = node["x"]
    before = _upstream_requests(sim, "fast")
    breaker = _breaker(gateway, "ll-fast")
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="ll-fast", messages=MESSAGES,
                                       extra_body={"x": nested})
    assert caught.value.code == "too_deeply_nested"
    assert _upstream_requests(sim, "fast") == before
    assert _breaker(gateway, "ll-fast") == breaker


def test_a_body_nested_deeper_than_the_parser_reads_is_too_deeply_nested(
        gateway: Running) -> None:
    """2,000 levels (beyond the 1,024 orjson reads at all) is the same 400 as 300 levels."""
    body = b'{"model": "fast", "messages": [], "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    answer = httpx.post(f"{gateway.base_url}/v1/chat/completions", content=body, timeout=10,
                        headers={"authorization": f"Bearer {API_KEY}",
                                 "content-type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "too_deeply_nested"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/route/explain"])
def test_a_client_that_leaves_while_sending_its_body_is_no_error_of_the_router(
        gateway: Running, path: str) -> None:
    """A body cut short by the client (it promised 100 bytes, sent 20, closed): recorded as a
    client that left, not logged as an unhandled error (a 500 `internal_error` before)."""
    port = int(gateway.base_url.rsplit(":", 1)[1])
    head = (f"POST {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {API_KEY}\r\n"
            "content-type: application/json\r\ncontent-length: 100\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head.encode() + b'{"model": "fast", "m')
    time.sleep(0.5)
    assert "\"unhandled_error\"" not in gateway.proc.log_text()
    assert httpx.get(f"{gateway.base_url}/healthz", timeout=5).status_code == 200


def test_models_retrieve_returns_a_routable_name(client: openai.OpenAI) -> None:
    """`client.models.retrieve` works for the alias and for a configured model."""
    for name in ("auto", "pt-fast", "chain"):
        model = client.models.retrieve(name)
        assert (model.id, model.object, model.owned_by) == (name, "model", "slorouter")


def test_models_retrieve_of_an_unknown_name_is_model_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


def test_a_long_unknown_model_name_is_cut_in_the_message(client: openai.OpenAI) -> None:
    """Both the chat route and `models.retrieve` name the model, up to 100 characters of it (the
    chat route refuses names over 256 characters as invalid before looking them up)."""
    with pytest.raises(openai.NotFoundError) as retrieved:
        client.models.retrieve("m" * 5000)
    with pytest.raises(openai.NotFoundError) as chatted:
        client.chat.completions.create(model="m" * 200, messages=MESSAGES)
    for caught in (retrieved, chatted):
        assert caught.value.code == "model_not_found"
        assert "m" * 100 + "…" in caught.value.message and len(caught.value.message) < 300


@pytest.mark.parametrize("model", ["pt-rec", "ll-rec"])
def test_the_clients_stream_options_reach_the_provider_with_usage_added(
        client: openai.OpenAI, recorder: Recorder, model: str) -> None:
    """The router asks every stream for its usage, keeping the client's other stream options
    (`include_obfuscation`); the client, which did not ask for usage, gets no usage chunk."""
    recorder.bodies.clear()
    chunks = list(client.chat.completions.create(
        model=model, messages=MESSAGES, stream=True,
        stream_options={"include_obfuscation": False}))  # type: ignore[typeddict-unknown-key]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "recorded"
    assert all(c.usage is None for c in chunks)
    (sent,) = recorder.bodies
    assert sent["stream_options"] == {"include_obfuscation": False, "include_usage": True}


@pytest.mark.parametrize("include_usage", [False, True])
def test_usage_on_the_finish_chunk_reaches_only_clients_that_asked(
        client: openai.OpenAI, include_usage: bool) -> None:
    """An upstream that puts usage on its finish chunk (no `choices: []` chunk): a client that
    did not ask for usage gets that chunk without it; one that asked gets it."""
    extra: Any = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client.chat.completions.create(model="pt-last-rec", messages=MESSAGES,
                                                 stream=True, **extra))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "recorded"
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == (1 if include_usage else 0)


@pytest.mark.parametrize("model", ["pt-rec", "ll-rec"])
def test_a_self_hosted_upstream_gets_the_tenants_cache_salt_never_its_id(
        client: openai.OpenAI, recorder: Recorder, model: str) -> None:
    """A self-hosted OpenAI-compatible upstream (through litellm too, as a request field) gets
    one `cache_salt` per tenant, a hash that does not name the tenant; a client's own salt
    reaches it hashed within the tenant, unlike the one the client sent or the default."""
    recorder.bodies.clear()
    for extra in (None, None, {"cache_salt": "team-blue"}):
        client.chat.completions.create(model=model, messages=MESSAGES, extra_body=extra)
    default, again, chosen = (body["cache_salt"] for body in recorder.bodies)
    assert default == again and default.startswith("sr-") and len(default) == 43
    assert "tenant-one" not in default
    assert chosen not in (default, "team-blue") and chosen.startswith("sr-")
