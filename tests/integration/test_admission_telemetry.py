"""Admission control as an operator sees it, on the real service: the pools' occupancy gauges
at `/metrics`, and `slorouter.admission.rejections` counting admission's own refusals only.

The router's interactive pool is small (2 slots, a queue of 1); its upstream is a hand-written
OpenAI-compatible server on a loopback port. Model `gated` answers only once the test opens its
gate, so requests can be held running and queued for as long as the test looks at them. Model
`says-overloaded` answers 400 with the error code `overloaded`, the code of admission's "queue
full" refusal: the router relays that code to the client, but did not refuse anything itself.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fake_upstream import QuietHandler, ThreadedUpstream, send_body
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

API_KEY = "sk-admission-tenant-0123456789"
MESSAGES: list[Any] = [{"role": "user", "content": "hold my slot"}]
COMPLETION = {"id": "chatcmpl-gate", "object": "chat.completion", "created": 0, "model": "gated",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "let through"}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
UPSTREAM_OVERLOADED = {"error": {"message": "the model is overloaded, try later",
                                 "type": "invalid_request_error", "param": None,
                                 "code": "overloaded"}}
GATE_LIMIT_S = 30.0  # the upstream answers anyway after this, so no test can hang on it


class GatedUpstream(ThreadedUpstream):
    """`gated` waits for `gate` to open; `says-overloaded` answers 400 code `overloaded`."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        gate = self.gate

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                if body.get("model") == "says-overloaded":
                    send_body(self, 400, json.dumps(UPSTREAM_OVERLOADED).encode())
                    return
                gate.wait(GATE_LIMIT_S)
                send_body(self, 200, json.dumps(COMPLETION).encode())

        super().__init__(Handler)


def _config(base_url: str) -> str:
    deployments = "".join(f"""
  - name: {adapter}-{model}
    model: openai/{model}
    adapter: {adapter}
    api_base: {base_url}/v1
    api_key: env:STUB_KEY
    input_price_per_mtok: 1.0
    output_price_per_mtok: 2.0
    timeout_s: 40""" for adapter in ("openai_passthrough", "litellm")
        for model in ("gated", "says-overloaded"))
    models = "".join(f"""
  - name: {prefix}-{model}
    deployments: [{adapter}-{model}]""" for prefix, adapter in (("pt", "openai_passthrough"),
                                                                ("ll", "litellm"))
        for model in ("gated", "says-overloaded"))
    return f"""version: 1
deployments:{deployments}
models:{models}
routes:
  default_model: pt-gated
api_keys:
  - key: env:TENANT_KEY
    tenant: tenant-one
server:
  request_timeout_s: 50
  reliability:
    max_retries_per_deployment: 0
    interactive:
      max_concurrency: 2
      max_queue: 1
      max_queue_wait_s: 45
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[GatedUpstream]:
    running = GatedUpstream()
    yield running
    running.gate.set()
    running.stop()


@pytest.fixture(scope="module")
def gateway(upstream: GatedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Running]:
    running = start_router(tmp_path_factory.mktemp("admission-telemetry"),
                           _config(upstream.base_url),
                           env={"TENANT_KEY": API_KEY, "STUB_KEY": "sk-stub-upstream"})
    yield running
    running.stop()


def _families(gateway: Running) -> dict[str, Any]:
    text = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def _by_pool(families: dict[str, Any], name: str) -> dict[tuple[str, ...], float]:
    """A gauge's values keyed by (priority, state) (or (priority,) without a state)."""
    return {tuple(s.labels[k] for k in ("slorouter_priority", "state") if k in s.labels): s.value
            for s in families[name].samples}


def _rejections(families: dict[str, Any]) -> dict[str, float]:
    family = families.get("slorouter_admission_rejections")
    samples = family.samples if family is not None else []
    return {s.labels["slorouter_reason"]: s.value for s in samples if s.name.endswith("_total")}


def _served(families: dict[str, Any]) -> float:
    family = families.get("gen_ai_server_request_duration_seconds")
    samples = family.samples if family is not None else []
    return float(sum(s.value for s in samples if s.name.endswith("_count")))


def _scrape_until(gateway: Running, reached: Any) -> dict[str, Any]:
    """`/metrics` once `reached(families)` holds (a request is recorded after its answer left,
    and a queued one enters the pool after its HTTP request arrived); the last scrape else."""
    families = _families(gateway)
    for _ in range(400):
        if reached(families):
            break
        time.sleep(0.025)
        families = _families(gateway)
    return families


def _running_and_queued(families: dict[str, Any]) -> tuple[float, float]:
    occupancy = _by_pool(families, "slorouter_admission_requests")
    return occupancy[("interactive", "running")], occupancy[("interactive", "queued")]


def test_pool_occupancy_is_exported_per_class_while_it_fills_and_drains(
        gateway: Running, upstream: GatedUpstream) -> None:
    """Two requests running and one queued show as such in `slorouter_admission_requests`, beside
    the class's limits, its tenants and the hold-time average; the next request is refused
    (`overloaded`, counted once); once the upstream answers, the pool reads empty again."""
    upstream.gate.clear()
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    idle = _families(gateway)
    assert _running_and_queued(idle) == (0.0, 0.0)
    assert _by_pool(idle, "slorouter_admission_limit") == {
        ("interactive", "running"): 2.0, ("interactive", "queued"): 1.0,
        ("background", "running"): 16.0, ("background", "queued"): 256.0}
    refused_before = _rejections(idle).get("overloaded", 0.0)
    with ThreadPoolExecutor(max_workers=3) as pool:
        held = [pool.submit(client.chat.completions.create, model="pt-gated", messages=MESSAGES)
                for _ in range(3)]
        full = _scrape_until(gateway, lambda f: _running_and_queued(f) == (2.0, 1.0))
        try:
            assert _running_and_queued(full) == (2.0, 1.0)
            assert _by_pool(full, "slorouter_admission_requests")[("background", "running")] == 0
            assert _by_pool(full, "slorouter_admission_tenants") == {
                ("interactive",): 1.0, ("background",): 0.0}
            assert ("interactive",) in _by_pool(full, "slorouter_admission_mean_hold_seconds")
            refused = httpx.post(f"{gateway.base_url}/v1/chat/completions", timeout=10,
                                 headers={"authorization": f"Bearer {API_KEY}"},
                                 json={"model": "pt-gated", "messages": MESSAGES})
        finally:
            upstream.gate.set()
        answers = [future.result(timeout=60) for future in held]
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "overloaded"
    assert "retry-after-ms" in refused.headers  # admission's own refusal: its wait is jittered
    assert [a.choices[0].message.content for a in answers] == ["let through"] * 3
    drained = _scrape_until(gateway, lambda f: _running_and_queued(f) == (0.0, 0.0)
                            and _rejections(f).get("overloaded", 0.0) > refused_before)
    assert _running_and_queued(drained) == (0.0, 0.0)
    assert _rejections(drained).get("overloaded", 0.0) == refused_before + 1


@pytest.mark.parametrize("model", ["pt-says-overloaded", "ll-says-overloaded"])
def test_an_upstream_error_with_an_admission_code_is_not_an_admission_refusal(
        gateway: Running, upstream: GatedUpstream, model: str) -> None:
    """The upstream's 400 `overloaded` reaches the client with its code, through either adapter,
    but the router's admission refused nothing: `slorouter.admission.rejections` does not move
    and the answer carries no admission `retry-after-ms`."""
    before = _families(gateway)
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.code == "overloaded"
    assert "retry-after-ms" not in caught.value.response.headers
    after = _scrape_until(gateway, lambda f: _served(f) > _served(before))
    assert _served(after) == _served(before) + 1  # the request was recorded...
    assert _rejections(after) == _rejections(before)  # ...and not as an admission refusal


def _service_availability(gateway: Running) -> tuple[int, int]:
    """(total, bad) of the whole service's availability (`/v1/slo`'s `all` entry), shortest
    window."""
    body = httpx.get(f"{gateway.base_url}/v1/slo", timeout=10).json()
    entry = next(t for t in body["tasks"] if t["task"] == "all")
    if not entry["windows"]:
        return 0, 0
    window = min(entry["windows"], key=lambda w: w["window_s"])
    sli = next(s for s in window["slis"] if s["sli"] == "availability")
    return sli["total"], sli["bad"]


def test_the_routers_own_refusals_count_against_the_services_availability(
        gateway: Running, upstream: GatedUpstream) -> None:
    """A request admission refuses is refused before it is classified: no task's SLO counts it,
    so a replica shedding most of its traffic reported every task available (the telemetry
    audit: 8 of 12 refused, availability bad +0). The service's own entry in `/v1/slo` (`all`,
    held to the default policy's availability) counts every request: three answered and one
    refused are four, one of them bad."""
    upstream.gate.clear()
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    before = _service_availability(gateway)
    with ThreadPoolExecutor(max_workers=3) as pool:
        held = [pool.submit(client.chat.completions.create, model="pt-gated", messages=MESSAGES)
                for _ in range(3)]
        _scrape_until(gateway, lambda f: _running_and_queued(f) == (2.0, 1.0))
        try:
            refused = httpx.post(f"{gateway.base_url}/v1/chat/completions", timeout=10,
                                 headers={"authorization": f"Bearer {API_KEY}"},
                                 json={"model": "pt-gated", "messages": MESSAGES})
        finally:
            upstream.gate.set()
        assert all(future.result(timeout=60).choices for future in held)
    assert refused.status_code == 503
    after = before
    for _ in range(200):  # an outcome is recorded once its answer has left
        after = _service_availability(gateway)
        if after[0] >= before[0] + 4:
            break
        time.sleep(0.025)
    assert (after[0] - before[0], after[1] - before[1]) == (4, 1), (before, after)
